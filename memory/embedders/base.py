"""The Embedder every backend builds on: the vector cache, prefetching, and the micro-batcher
that runs a local model on threads of its own.

A local model is run by threads of its own (a micro-batcher): callers on any thread queue
their texts and wait; a model thread runs at once when idle, and otherwise takes everything
that arrived during its last call (up to BATCH_EMBEDDING_SIZE texts) into the next one. A lone
query waits for nothing, and a hundred chat turns embedding at once make a handful of batched
calls instead of a hundred concurrent ones fighting over the cores.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from concurrent.futures import Future

import numpy as np


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
    # Cosine of a query and a passage from which the explorer's search shows the passage as
    # "near in meaning" when it holds none of the query's words (memory.finding.search.split_matches).
    near_similarity: float = 0.5
    load_seconds: float = 0.0
    # Run the model on one thread of its own, batching concurrent callers' texts together.
    micro_batch: bool = False
    # Texts of background (bulk) requests per model call: a query arriving meanwhile waits for
    # one such call at most (_MicroBatcher._piece: more short texts, as long as they come to
    # as much, padded, as `bulk_per_call` texts of `bulk_text_size`, in `text_size`'s units).
    bulk_per_call: int = 16
    bulk_text_size: int = 1500
    # Model calls run at once, each on a thread of its own (_MicroBatcher).
    parallel_calls: int = 1

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

    def text_size(self, text: str) -> int:
        """How much of the model's work a text is, to batch alike texts together: its
        characters, or its tokens where the model counts them cheaply."""
        return len(text)

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
    """The threads that run every model call of an embedder, batching what callers queue.

    Requests are served in arrival order, but a big request (background re-embedding) is cut
    into pieces of about `embedder.bulk_per_call` texts and small ones (a chat message, a query)
    that arrive meanwhile go first, so an interactive turn never waits behind a whole bulk job.
    A big request's texts are taken shortest first, so the texts of one call are of alike
    length: a model pads every text of a call to the longest, and an import's texts in their
    own order (a long passage, then a short reply) were half padding.

    `embedder.parallel_calls` threads take calls (one, unless the model runs each call on one
    thread of its own and is safe to call from several at once): two one-thread calls side by
    side waste less than one call split over two threads, which wait for each other at every
    step. The calls are the ones a single thread makes (the same texts together: the same
    vectors); a query arriving meanwhile waits for the first of them to finish.
    """

    SMALL = 8  # texts: requests up to this size count as interactive

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._ready = threading.Condition()
        self.small: deque[_Request] = deque()  # requests with texts no call has taken yet
        self.bulk: deque[_Request] = deque()
        self.threads = [
            threading.Thread(target=self._run, name=f"embedding-batcher-{i}", daemon=True)
            for i in range(max(1, embedder.parallel_calls))
        ]
        for thread in self.threads:
            thread.start()

    def embed(self, texts: list[str]) -> np.ndarray:
        if threading.current_thread() in self.threads:  # re-entrant use: just run it
            return self.embedder._embed_checked(texts)
        return self.submit(texts).result()

    def submit(self, texts: list[str]) -> Future:
        request = _Request(texts, self.embedder.dimensions)
        if len(texts) > self.SMALL:  # measured on the caller's thread, not a model thread's
            request.sizes = [self.embedder.text_size(t) for t in texts]
            request.order = sorted(range(len(texts)), key=request.sizes.__getitem__)
        with self._ready:
            (self.small if len(texts) <= self.SMALL else self.bulk).append(request)
            self._ready.notify()
        return request.future

    def _take(self) -> list[tuple[_Request, int, int]]:
        """The next call (under the lock): the request, from, to (in its order) of each part,
        interactive requests, or else a piece of the oldest bulk request left."""
        batch: list[tuple[_Request, int, int]] = []
        room = self.embedder.batch_size
        while self.small and room > 0:
            request = self.small[0]
            n = min(room, len(request.texts) - request.taken)
            batch.append((request, request.taken, request.taken + n))
            request.taken += n
            room -= n
            if request.taken == len(request.texts):
                self.small.popleft()
        # A query arriving meanwhile waits for a call under way to finish, then runs without
        # bulk texts beside it (with a piece of 6 passages it took 0.7 s, alone 7 ms); so a bulk
        # text's call-mates are never a query's either.
        if self.bulk and not batch:
            request = self.bulk[0]
            n = self._piece(request, room)
            batch.append((request, request.taken, request.taken + n))
            request.taken += n
            if request.taken == len(request.texts):
                self.bulk.popleft()
        return batch

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self.small and not self.bulk:
                    self._ready.wait()
                batch = self._take()
                if self.small or self.bulk:
                    self._ready.notify()  # more for another thread
            texts = [r.texts[i] for r, a, b in batch for i in r.order[a:b]]
            try:
                vectors = self.embedder._embed_checked(texts)
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller
                with self._ready:
                    for request, _, _ in batch:
                        for pending in (self.small, self.bulk):
                            if request in pending:
                                pending.remove(request)
                        if not request.future.done():
                            request.future.set_exception(exc)
                continue
            at = 0
            finished = []
            with self._ready:
                for request, a, b in batch:
                    request.vectors[request.order[a:b]] = vectors[at : at + (b - a)]
                    at += b - a
                    request.done += b - a
                    if request.done == len(request.texts) and not request.future.done():
                        finished.append(request)
            for request in finished:
                request.future.set_result(request.vectors)

    def _piece(self, request: _Request, room: int) -> int:
        """How many of a bulk request's next texts (shortest first) go to one call: as many
        as take, padded to the longest of them, no more than `bulk_per_call` texts of
        `bulk_text_size` (so more short texts than long ones), and no text half again as long
        as the first (beside it, the first would be mostly padding)."""
        per_call = self.embedder.bulk_per_call
        budget = per_call * self.embedder.bulk_text_size
        sizes, order, start = request.sizes, request.order, request.taken
        first = sizes[order[start]]
        end = start + 1
        while end < len(sizes) and end - start < min(room, 4 * per_call):
            longest = sizes[order[end]]
            if (end - start + 1) * longest > budget or longest > 1.5 * first + 16:
                break
            end += 1
        return end - start


class _InFlight:
    __slots__ = ("future", "index")

    def __init__(self, future: Future, index: int) -> None:
        self.future = future
        self.index = index

    def vector(self) -> np.ndarray:
        return self.future.result()[self.index]


class _Request:
    __slots__ = ("texts", "sizes", "order", "taken", "done", "vectors", "future")

    def __init__(self, texts: list[str], dimensions: int) -> None:
        self.texts = texts
        self.sizes: list[int] = []  # text_size of each (a bulk request's)
        self.order: list[int] = list(range(len(texts)))  # the order its texts are embedded in
        self.taken = 0  # texts (in its order) a call has taken
        self.done = 0  # texts embedded
        self.vectors = np.zeros((len(texts), dimensions), dtype=np.float32)
        self.future: Future = Future()


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
