"""Hybrid search over one owner's memory: vector (HNSW, cosine) and Okapi BM25 over Postgres
full-text search, fused by their standardised scores. Results are SearchResults.

This is the one ranking of Recollect: the memory tools, the index builder's plan, offline
recall, the explorer's search and `manage.py recall` all call `search()`. Its choices are
measured by `manage.py eval_recall` on real multi-session conversations
(../shared/eval/long-conversations), with BM25, keyword-only and dense-only beside it:

- a passage is searched and embedded with its context (the speaker, and the end of the turn it
  replies to: memory.storage.store.passage_context), so a short reply is found by its subject;
- keyword scores are BM25 (term saturation, length normalisation), not ts_rank_cd;
- the two ranked lists are fused by z-scores over their candidates, not by reciprocal rank: a
  list that is sure of its first hit says so;
- a turn whose reply matches gets a share of the reply's score (the question before an answer),
  and turns two replies apart share some of each other's (a subject named, then its fact);
- a period the question names (a day, a month, a year) lifts what was said then.

The two lists are read at once when the caller holds no transaction: the vector search on a
connection of its own, in a worker thread, while this thread reads the keyword candidates.

Search runs over passages (windows that fit the embedder), then groups them by the unit a
person would open: a message, a chunk of a long message, or a tool call. Deleted content is
filtered out at the passage level, so it can never surface.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import logging
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.utils import OperationalError

from memory.embedders import get_embedder
from memory.knowledge import graph
from memory.models import Message, Passage, ToolCall

logger = logging.getLogger(__name__)

# Fusion weights of the two lists' z-scores, and boosts in z units (tuned on the dev split of
# eval_recall; see that command).
KEYWORD_WEIGHT = 1.0
VECTOR_WEIGHT = 1.0
PERIOD_BOOST = 1.0
REPLY_SHARE = 0.2
NEIGHBOR_SHARE = 0.4
# How many of the best messages have their turns two replies away join the candidates (see
# _neighbours_and_chains): the best one. More seeds cost recall on the dev split (5: -1 point).
NEIGHBOR_SEEDS = 1
# BM25's term-frequency saturation and length normalisation.
BM25_K1 = 1.2
BM25_B = 0.4
# Up to this many vectors left by the owner and filters, vector search is an exact scan of them
# (at ~8 µs a vector read from TOAST, about what an HNSW walk for 500 candidates costs).
EXACT_SEARCH_MAX = 4000
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*")


@dataclass
class SearchHit:
    id: str
    type: str  # "message" | "tool_call"
    is_chunk: bool
    message_id: str  # the logical message (a chunk's parent; the message that made a tool call)
    conversation: str
    role: str
    timestamp: dt.datetime
    score: float
    snippet: str
    external_id: str | None = None
    vector_rank: int | None = None
    keyword_rank: int | None = None
    vector_similarity: float | None = None
    passage_text: str = ""

    def as_result(self) -> dict[str, Any]:
        """One search result (type, ids, score, snippet, timestamp), plus external_id, conversation
        and role."""
        return {
            "id": self.id,
            "external_id": self.external_id,
            "conversation": self.conversation,
            "role": self.role,
            "timestamp": self.timestamp.isoformat(),
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "type": self.type,
            "is_chunk": self.is_chunk,
            "message_id": self.message_id,
        }


@dataclass
class SearchResults:
    query: str
    hits: list[SearchHit] = field(default_factory=list)
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "results": [h.as_result() for h in self.hits],
            "fallbacks": self.fallbacks,
            "timings_ms": self.timings_ms,
        }


@dataclass
class SearchFilters:
    conversation_id: str | None = None
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    role: str | None = None
    include_tool_calls: bool | None = None
    exclude_message_id: str | None = None  # a message and its chunks and tool calls left out

    def sql(self) -> tuple[str, list[Any]]:
        clauses, params = [], []
        for clause, value in (
            ("p.logical_message_id <> %s", self.exclude_message_id),
            ("p.conversation_id = %s", self.conversation_id),
            ("p.timestamp >= %s", self.start),
            ("p.timestamp < %s", self.end),
            ("p.role = %s", self.role),
        ):
            if value:
                clauses.append(clause)
                params.append(value)
        include_tools = (
            settings.INDEX_INCLUDE_TOOL_CALLS if self.include_tool_calls is None else self.include_tool_calls
        )
        if not include_tools:
            clauses.append("p.kind = 'message'")
        return "".join(f" AND {c}" for c in clauses), params


# The passage graph's order (its HNSW index is over half-precision copies of the vectors, see
# Passage.Meta); similarities are still computed from the full vectors, and rows re-sorted by them.
HALFVEC = (
    f"p.embedding::halfvec({settings.EMBEDDING_DIMENSIONS}) <=> "
    f"%s::vector::halfvec({settings.EMBEDDING_DIMENSIONS})"
)


def vector_literal(vector) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


def query_terms(query: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(query)][:64]


_EXCLUDED: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "search_excluded", default=frozenset()
)


@contextlib.contextmanager
def excluding(message_ids: Iterable[str]) -> Iterator[None]:
    """Within this block, no search returns these messages (a turn's tool calls never find the
    turn's own message)."""
    token = _EXCLUDED.set(_EXCLUDED.get() | {str(m) for m in message_ids if m})
    try:
        yield
    finally:
        _EXCLUDED.reset(token)


def excluded_ids() -> frozenset[str]:
    """The message ids `excluding()` leaves out of searches in this context (a turn's own)."""
    return _EXCLUDED.get()


def search(
    owner,
    query: str,
    *,
    limit: int = 10,
    filters: SearchFilters | None = None,
    candidates: int | None = None,
    query_vector=None,
    exclude_message_ids: tuple[str, ...] | list[str] = (),
) -> SearchResults:
    """Hybrid search of `owner`'s memory. Never returns deleted content or other users' rows,
    nor the messages of `exclude_message_ids` (a turn's own message, searched for itself)."""
    results = SearchResults(query=query)
    query = (query or "").strip()
    limit = max(1, min(int(limit), 200))
    if not query or owner is None or not getattr(owner, "pk", None):
        return results
    filters = filters or SearchFilters()
    exclude = {str(m) for m in exclude_message_ids if m} | _EXCLUDED.get()
    k = (candidates or max(100, limit * 5)) + len(exclude)

    # Both lists at once where the caller's transaction does not hide rows from another
    # connection; else keyword candidates first, so a query vector still being embedded
    # (query_vector may be a callable that waits for it) is ready when the vector search needs it.
    parallel = PARALLEL_SEARCH and not connection.in_atomic_block
    vector_job = (
        _SEARCH_THREADS.submit(
            _vector_in_thread,
            connection.settings_dict["NAME"],
            owner,
            query,
            filters,
            k,
            results,
            query_vector,
        )
        if parallel
        else None
    )
    started = time.perf_counter()
    keyword_rows = _keyword_candidates(owner, query, filters, k, results)
    results.timings_ms["keyword"] = round((time.perf_counter() - started) * 1000, 2)
    boosts = QueryBoosts.of(query)
    if vector_job is not None:
        # The graph's part needs only the query: looked up while the vector search runs.
        boosts.graph = graph.related_or_none(owner, query)
        vector_rows = vector_job.result()
        results.timings_ms["vector_after_keyword"] = round((time.perf_counter() - started) * 1000, 2)
    else:
        vector_rows = _timed_vector_candidates(owner, query, filters, k, results, query_vector)
    if exclude:
        vector_rows = [r for r in vector_rows if r[2] not in exclude]
        keyword_rows = [r for r in keyword_rows if r[2] not in exclude]

    results.hits = _fuse(
        owner, vector_rows, keyword_rows, limit, boosts=boosts, expand=(filters, exclude)
    )
    return results


# Vector searches run here while the calling thread reads keyword candidates (each thread has
# its own database connection, kept like a server thread's: CONN_MAX_AGE).
PARALLEL_SEARCH = True
SEARCH_THREADS = 4
_SEARCH_THREADS = ThreadPoolExecutor(max_workers=SEARCH_THREADS, thread_name_prefix="vector-search")


def release_connections() -> None:
    """Close the vector-search threads' database connections: before a database they may hold
    open (a scratch database) is dropped. One closing job per thread, held at a barrier so
    each runs on a thread of its own."""
    barrier = threading.Barrier(SEARCH_THREADS)

    def close() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=30)
        connection.close()

    for job in [_SEARCH_THREADS.submit(close) for _ in range(SEARCH_THREADS)]:
        job.result()


def _timed_vector_candidates(owner, query, filters, k, results, query_vector) -> list[tuple]:
    started = time.perf_counter()
    rows = _vector_candidates(owner, query, filters, k, results, query_vector)
    results.timings_ms["vector"] = round((time.perf_counter() - started) * 1000, 2)
    return rows


def _vector_in_thread(database: str, owner, query, filters, k, results, query_vector) -> list[tuple]:
    """The vector search on this worker thread's connection, to the caller's database."""
    _use_database(database)
    return _timed_vector_candidates(owner, query, filters, k, results, query_vector)


def _use_database(database: str) -> None:
    from django.db import close_old_connections

    close_old_connections()  # expired or broken: reconnect
    # Opened before the caller moved to another database (a scratch or test database, whose
    # name every thread's connection settings share): reconnect to it.
    if connection.connection is not None and connection.connection.info.dbname != database:
        connection.close()


def in_worker(func, *args):
    """`func(*args)` started on a search worker thread (its own connection to the caller's
    database), as a Future; None where the caller's transaction would hide rows from another
    connection (the caller then runs it itself)."""
    if not PARALLEL_SEARCH or connection.in_atomic_block:
        return None
    database = connection.settings_dict["NAME"]

    def run():
        _use_database(database)
        return func(*args)

    return _SEARCH_THREADS.submit(run)


# Owners with more than EXACT_SEARCH_MAX vectors, when that was counted, and whether vectors of
# another model were stored then: their searches walk the HNSW graph without counting again for
# _LARGE_MEMORY_TTL seconds (a memory that shrank below the bound meanwhile gets the graph walk,
# approximate, instead of the exact scan for that long).
_LARGE_MEMORIES: dict[tuple, tuple[float, Any]] = {}
_LARGE_MEMORY_TTL = 60.0


def _vector_candidates(owner, query, filters, k, results, query_vector=None) -> list[tuple]:
    """query_vector: the query's vector, or a callable that waits for it (asked for once the
    rows it will be compared with are counted), or None to embed the query here."""
    embedder = get_embedder()
    where, params = filters.sql()
    searchable = (
        "FROM memory_passage p "
        "WHERE p.owner_id = %s AND NOT p.deleted AND p.embedding_model = %s "
        "AND p.embedding IS NOT NULL" + where
    )
    sql = (
        "SELECT p.message_id, p.tool_call_id, p.logical_message_id, p.text, "
        "1 - (p.embedding <=> %s::vector) AS similarity, p.timestamp "
        + searchable
        + f" ORDER BY {HALFVEC} LIMIT %s"
    )
    try:
        with connection.cursor() as cursor:
            # One round trip for the number of the owner's vectors (counted up to
            # EXACT_SEARCH_MAX + 1 from the partial index alone; deleted ones included, so it is
            # an upper bound) and whether vectors of another model are stored. A large memory
            # stays large: its answer is kept for _LARGE_MEMORY_TTL, keyed by the owner's join
            # time too (a test database gives the same id to other people).
            joined = getattr(owner, "date_joined", None)
            key = (connection.settings_dict["NAME"], owner.pk, joined, embedder.name)
            known = _LARGE_MEMORIES.get(key)
            if known is not None and time.monotonic() - known[0] < _LARGE_MEMORY_TTL:
                vectors, other_model = EXACT_SEARCH_MAX + 1, known[1]
            else:
                cursor.execute(
                    "SELECT (SELECT count(*) FROM (SELECT 1 FROM memory_passage WHERE owner_id = %s "
                    "AND embedding_model = %s AND embedding IS NOT NULL LIMIT %s) s), "
                    + _OTHER_MODEL,
                    [owner.pk, embedder.name, EXACT_SEARCH_MAX + 1, *[owner.pk, embedder.name] * 2],
                )
                vectors, other_model = cursor.fetchone()
                if vectors > EXACT_SEARCH_MAX:
                    _LARGE_MEMORIES[key] = (time.monotonic(), other_model)
                else:
                    _LARGE_MEMORIES.pop(key, None)
            if vectors > EXACT_SEARCH_MAX and where:
                # What the filters leave (a conversation, a role, a period): read from the
                # rows, not their vectors, so still cheap next to reading the vectors.
                cursor.execute(
                    f"SELECT count(*) FROM (SELECT 1 {searchable} LIMIT %s) s",
                    [owner.pk, embedder.name, *params, EXACT_SEARCH_MAX + 1],
                )
                vectors = cursor.fetchone()[0]
        # The vector last: the counts above need none, so they are read while it is computed.
        waited = time.perf_counter()
        try:
            if callable(query_vector):
                query_vector = query_vector()
                results.timings_ms["embed_wait"] = round((time.perf_counter() - waited) * 1000, 2)
            vector = query_vector if query_vector is not None else embedder.embed_query(query[:2000])
        except Exception as exc:  # the embedder is down (remote) or broken: keyword search works
            logger.warning("query embedding failed: %s", exc)
            results.fallbacks.append({"kind": "embedding_failed", "detail": str(exc)[:200]})
            return []
        vec = vector_literal(vector)
        if vectors <= EXACT_SEARCH_MAX:
            # Few vectors pass the filters (a small memory, or a narrow filter): the HNSW
            # graph is mostly rows the filters drop, and a filtered graph walk visits many
            # of them. Scanning the rows that pass is cheaper, and exact. `+ 0` keeps the
            # planner off the HNSW index.
            sql = sql.replace(f"ORDER BY {HALFVEC}", "ORDER BY (p.embedding <=> %s::vector) + 0")
        # Many vectors: the graph walk. The planner underrates the rows the owner's partial
        # btree index yields (embedding_model and `embedding IS NOT NULL` are one condition to
        # us, two independent ones to it) and would otherwise pick an exact scan that reads
        # every vector out of TOAST; with sorting off, the only way to the ORDER BY is the
        # HNSW index. Filtered HNSW scans keep going until enough rows pass the filters
        # (iterative scan).
        queried = time.perf_counter()
        rows = with_local_settings(
            {
                "statement_timeout": str(int(settings.VECTOR_SEARCH_TIMEOUT_MS)),
                "hnsw.iterative_scan": "relaxed_order",
                # A walk that keeps twice the candidates it returns: its first k stay close to
                # an exact scan's (at k = 500 the graph walk costs about the same either way).
                "hnsw.ef_search": str(max(40, min(2 * k, 1000))),
                "enable_sort": "on" if vectors <= EXACT_SEARCH_MAX else "off",
            },
            sql,
            [vec, owner.pk, embedder.name, *params, vec, k],
        )
        results.timings_ms["vector_query"] = round((time.perf_counter() - queried) * 1000, 2)
    except OperationalError as exc:  # statement_timeout (QueryCanceled) and friends
        logger.warning("vector search fell back: %s", exc)
        results.fallbacks.append(
            {
                "kind": "vector_timeout",
                "detail": f"vector search exceeded "
                f"{settings.VECTOR_SEARCH_TIMEOUT_MS} ms; keyword results only",
            }
        )
        return []
    _note_model_mismatch(other_model, embedder.name, results)
    # pgvector's relaxed_order may return slightly out of order: sort by similarity.
    rows.sort(key=lambda r: -r[4])
    return rows


def similar_messages(owner, message: Message, limit: int = 5) -> list[dict[str, Any]] | None:
    """The owner's messages nearest `message` by embedding, best first, as {"message",
    "similarity"}: the vector search of search(), from the message's first passage, never
    deleted content nor the message itself. None when the message has no vector of the
    current model (not embedded yet, or not the owner's)."""
    embedder = get_embedder()
    vector = (
        Passage.objects.owned_by(owner)
        .filter(logical_message_id=message.pk, embedding_model=embedder.name, embedding__isnull=False)
        .order_by("kind", "index")
        .values_list("embedding", flat=True)
        .first()
    )
    if vector is None:
        return None
    filters = SearchFilters(include_tool_calls=True, exclude_message_id=message.pk)
    # Several passages a message: read enough of them to rank `limit` messages.
    rows = _vector_candidates(owner, "", filters, limit * 6, SearchResults(query=""), vector)
    best: dict[str, float] = {}
    for _message_id, _call_id, logical_id, _text, similarity, _when in rows:
        best[logical_id] = max(best.get(logical_id, -1.0), float(similarity))
    ranked = sorted(best.items(), key=lambda kv: -kv[1])[:limit]
    found = Message.objects.visible_to(owner).in_bulk([k for k, _ in ranked])
    return [{"message": found[k], "similarity": s} for k, s in ranked if k in found]


# Two range probes on (owner, embedding_model) instead of `<>`, so each is one index descent
# however large the memory (a `<>` filter would walk every row of the owner).
_OTHER_MODEL = (
    "((SELECT embedding_model FROM memory_passage WHERE owner_id = %s "
    "AND embedding_model > '' AND embedding_model < %s LIMIT 1) UNION ALL "
    "(SELECT embedding_model FROM memory_passage WHERE owner_id = %s "
    "AND embedding_model > %s LIMIT 1) LIMIT 1)"
)


def with_local_settings(values: dict[str, str], sql: str, params: list[Any]) -> list[tuple]:
    """The rows of `sql` run with `values` as transaction-local settings, in one round trip:
    outside a transaction the two statements of one message are Postgres' implicit
    transaction, so the settings end with it; inside one, a savepoint keeps a failed query
    (a statement timeout) from aborting the caller's transaction."""
    names = list(values)
    settings_sql = "SELECT " + ", ".join("set_config(%s, %s, true)" for _ in names)
    settings_params = [v for name in names for v in (name, values[name])]
    scope = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    with scope, connection.cursor() as cursor:
        cursor.execute(f"{settings_sql}; {sql}", [*settings_params, *params])
        cursor.nextset()
        return cursor.fetchall()


def _note_model_mismatch(other, model_name: str, results: SearchResults) -> None:
    if other:
        results.fallbacks.append(
            {
                "kind": "embedding_model_mismatch",
                "detail": f"some passages were embedded with {other!r}, not {model_name!r}; they are "
                "left out of vector search (never mixed) until `manage.py reembed` runs",
            }
        )


# Question phrasing that says nothing about the answer (Postgres' English stop words already
# drop "what", "did", "the", ...).
QUERY_STOP_WORDS = frozenset(
    [
        "remember",
        "recall",
        "tell",
        "mention",
        "mentioned",
        "said",
        "say",
        "talk",
        "talked",
        "discuss",
        "discussed",
        "ask",
        "asked",
        "know",
        "think",
        "again",
        "earlier",
        "previously",
        "ever",
        "please",
    ]
)
# Document frequencies are estimated on the owner's most recent passages: exact for a small
# history, a sample for a large one. Counting every match of a common word at 1M rows would
# cost more than the whole turn may.
DF_SAMPLE = 4000
# A term is "rare" when it occurs in at most this share of the sample. Rare terms retrieve from
# the whole history (their newest RARE_CAP matches: a term rare lately may have been common
# once); the other terms retrieve their newest RECENT_WINDOW matches. Every term scores.
RARE_SHARE = 0.005
RECENT_WINDOW = 1000
RARE_CAP = 5000


def _query_words(query: str) -> str:
    return " ".join(w for w in query_terms(query) if w not in QUERY_STOP_WORDS)


# The lexemes of the words in the first parameter: stemmed, Postgres' English stop words
# dropped, at most 24, in code-point order.
_LEXEMES = (
    "SELECT lex FROM (SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', %s))) AS lex) d "
    "WHERE lex ~ '^[a-z0-9_]+$' ORDER BY lex COLLATE \"C\" LIMIT 24"
)


def query_lexemes(query: str) -> list[str]:
    """The query's English lexemes (stemmed, stop words and question phrasing dropped)."""
    words = _query_words(query)
    if not words:
        return []
    with connection.cursor() as cursor:
        cursor.execute(_LEXEMES, [words])
        return [r[0] for r in cursor.fetchall()]


def _keyword_candidates(owner, query, filters, k, results) -> list[tuple]:
    words = _query_words(query)
    if not words:
        return []
    where, params = filters.sql()
    # OR of the terms (a natural question rarely has every word in the answer), each term
    # scored by Okapi BM25 with its IDF among this owner's passages.
    weights, complete, shares, avgdl = _term_stats(owner, words, lexemes_of_words=True)
    if not weights:
        return []
    rare = [t for t in weights if complete or shares[t] <= RARE_SHARE]
    common = [t for t in weights if t not in rare]
    # A row holds few of the terms: the @@ test first skips the rank of a term the row lacks.
    # ts_rank with unit weights and no normalisation gives, for one term, sum(1/j^2, j = 1..tf)
    # / (pi^2/6), from which tf is recovered (1/(tail) - 1/2 is within 5% of it); the length is
    # the row's number of distinct lexemes.
    tf_of = (
        "greatest(1.0, 1.0 / greatest(1e-6, 1.64493406685 - 1.64493406685 * "
        "ts_rank('{1,1,1,1}'::float4[], b.search_vector, to_tsquery('english', %s), 0)) - 0.5)"
    )
    # idf * tf * (k1 + 1) / (tf + k1 * L), written with tf once: idf * (k1 + 1) / (1 + k1 * L / tf).
    bm25 = (
        "CASE WHEN b.search_vector @@ to_tsquery('english', %s) THEN %s / "
        "(1 + %s * (1 - %s + %s * length(b.search_vector) / %s) / " + tf_of + ") ELSE 0 END"
    )
    weighted = " + ".join([bm25] * len(weights))
    weight_params: list[Any] = []
    for term, w in weights.items():
        weight_params.extend([f"'{term}'", w * (BM25_K1 + 1), BM25_K1, BM25_B, BM25_B, avgdl, f"'{term}'"])

    # Each branch scores only the rows it keeps, while they are at hand (a sort under the LIMIT
    # would otherwise score every match); only the best k are read again for their text.
    def branch(terms: list[str], order: str, cap: int) -> tuple[str, list[Any]]:
        sql = (
            f"SELECT b.id, ({weighted}) AS score FROM (SELECT p.id, p.search_vector "
            "FROM memory_passage p WHERE p.owner_id = %s AND NOT p.deleted "
            f"AND p.search_vector @@ to_tsquery('english', %s){where} ORDER BY {order} LIMIT {cap}) b"
        )
        return sql, [*weight_params, owner.pk, " | ".join(f"'{t}'" for t in terms), *params]

    parts = []
    if rare:
        # A rare term is rare among the newest passages (that is what the sample saw), so walking
        # the timestamp index back from now would read mostly rows without it; the planner,
        # estimating from the whole table, may pick that walk for a word common long ago.
        # `+ interval '0 s'` keeps it on the GIN index: every match, then the newest.
        parts.append(branch(rare, "p.timestamp + interval '0 s' DESC", RARE_CAP))
    if common:
        # Rare terms are left out: the branch above already holds their newest matches.
        parts.append(branch(common, "p.timestamp DESC", RECENT_WINDOW))
    sql = (
        "SELECT p.message_id, p.tool_call_id, p.logical_message_id, p.text, c.score, p.timestamp "
        "FROM (SELECT u.id, max(u.score) AS score FROM ("
        + " UNION ALL ".join(f"({part})" for part, _ in parts)
        + ") u GROUP BY u.id ORDER BY score DESC LIMIT %s) c "
        "JOIN memory_passage p ON p.id = c.id ORDER BY c.score DESC"
    )
    part_params = [param for _, branch_params in parts for param in branch_params]
    try:
        # Every way to the rows goes through an index (GIN for the terms, the owner's timestamp
        # index for the newest); a sequential scan reads every owner's passages, and the
        # planner picks one when a word was common once (its estimate is table-wide).
        return with_local_settings(
            {"statement_timeout": str(int(settings.VECTOR_SEARCH_TIMEOUT_MS)), "enable_seqscan": "off"},
            sql,
            [*part_params, k],
        )
    except OperationalError as exc:
        results.fallbacks.append({"kind": "keyword_timeout", "detail": str(exc)[:200]})
        return []


def _term_weights(owner, lexemes: list[str]) -> tuple[dict[str, float], bool, dict[str, float]]:
    """BM25 IDF of each lexeme, from one query over the owner's newest DF_SAMPLE passages.

    Returns (weights, complete, share): complete is True when the sample is the whole history
    (so the counts are exact), share the fraction of sampled passages holding each lexeme.
    Lexemes absent from the sample get the highest weight (they are rare, or absent: an absent
    one simply matches nothing)."""
    weights, complete, shares, _ = _term_stats(owner, lexemes)
    return weights, complete, shares


def _term_stats(
    owner, lexemes: list[str] | str, *, lexemes_of_words: bool = False
) -> tuple[dict[str, float], bool, dict[str, float], float]:
    """_term_weights, plus the sample's mean passage length in distinct lexemes (BM25's avgdl).
    lexemes_of_words: `lexemes` is the query's words, turned into lexemes in the same query."""
    if not lexemes:
        return {}, True, {}, 1.0
    lx = _LEXEMES if lexemes_of_words else "SELECT unnest(%s::text[]) AS lex"
    # At most as many lexemes as words (or the 24 _LEXEMES keeps); a position past the end of
    # the array is a NULL tsquery, which matches nothing.
    slots = min(24, len(lexemes.split()) if lexemes_of_words else len(lexemes))
    # Each lexeme's tsquery is an uncorrelated subquery: built once, not once per sampled row.
    counts = ", ".join(
        f"count(*) FILTER (WHERE s.search_vector @@ (SELECT to_tsquery('english', quote_literal(lexes[{i}])) "
        "FROM lx))"
        for i in range(1, slots + 1)
    )
    with connection.cursor() as cursor:
        # One pass over the sample.
        cursor.execute(
            "WITH lx AS MATERIALIZED (SELECT array_agg(lex ORDER BY lex COLLATE \"C\") AS lexes "
            f"FROM ({lx}) l) "
            f"SELECT (SELECT lexes FROM lx), count(*), avg(length(s.search_vector)), {counts} FROM "
            "(SELECT search_vector FROM memory_passage WHERE owner_id = %s AND NOT deleted "
            "ORDER BY timestamp DESC LIMIT %s) s",
            [lexemes, owner.pk, DF_SAMPLE],
        )
        row = cursor.fetchone()
    if row is None or not row[0] or not row[1]:
        return {}, True, {}, 1.0
    n = int(row[1])
    avgdl = max(1.0, float(row[2] or 1.0))
    complete = n < DF_SAMPLE
    weights, shares = {}, {}
    for lex, df in zip(row[0], row[3:], strict=False):
        df = int(df)
        if complete and df == 0:
            continue  # exact: the term is nowhere in this owner's memory
        weights[lex] = math.log(1 + (n - df + 0.5) / (df + 0.5))
        shares[lex] = df / n
    return weights, complete, shares, avgdl


_MONTH_NAMES = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTHS = "|".join(_MONTH_NAMES)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# "1 February, 2023", "on the 3rd of June 2023", "February 1, 2023", "Oct 13 2023" (full names).
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTHS}),?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTHS})\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_IN_MONTH = re.compile(
    rf"\b(?:in|during|from|since|of)\s+(?:early\s+|late\s+|mid-?)?({_MONTHS})\b(?:,?\s+(\d{{4}}))?", re.I
)
_MONTH_YEAR = re.compile(rf"\b({_MONTHS}),?\s+(\d{{4}})\b", re.I)
_IN_YEAR = re.compile(r"\b(?:in|during)\s+((?:19|20)\d{2})\b", re.I)


def query_period(query: str, now: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime] | None:
    """The time range a question names, if any: '2024-05-03', '1 February, 2023', 'May 3, 2023',
    'in March [2024]', 'December 2023', 'in 2023', 'yesterday', 'today', 'last week',
    'this week', 'last month', 'this month', 'last year'.

    A month without a year is its latest occurrence not after `now`. A date no calendar holds
    (2023-02-30, a year past 9998) names no period."""
    try:
        return _query_period(query, now)
    except (ValueError, OverflowError):
        return None


def _query_period(query: str, now: dt.datetime | None) -> tuple[dt.datetime, dt.datetime] | None:
    from django.utils import timezone

    now = timezone.localtime(now or timezone.now())
    day0 = now.replace(hour=0, minute=0, second=0, microsecond=0)
    text = (query or "").lower()

    def day(year: int, month: int, d: int) -> tuple[dt.datetime, dt.datetime]:
        start = day0.replace(year=year, month=month, day=d)
        return start, start + dt.timedelta(days=1)

    def month_span(year: int, month: int) -> tuple[dt.datetime, dt.datetime]:
        start = day0.replace(year=year, month=month, day=1)
        return start, start.replace(year=year + (month == 12), month=month % 12 + 1)

    if m := _ISO_DATE.search(text):
        return day(int(m[1]), int(m[2]), int(m[3]))
    if m := _DAY_MONTH_YEAR.search(text):
        return day(int(m[3]), _MONTH_NAMES.index(m[2]) + 1, int(m[1]))
    if m := _MONTH_DAY_YEAR.search(text):
        return day(int(m[3]), _MONTH_NAMES.index(m[1]) + 1, int(m[2]))
    if m := _IN_MONTH.search(text):
        month = _MONTH_NAMES.index(m[1]) + 1
        year = int(m[2]) if m[2] else (now.year if month <= now.month else now.year - 1)
        return month_span(year, month)
    if m := _MONTH_YEAR.search(text):
        return month_span(int(m[2]), _MONTH_NAMES.index(m[1]) + 1)
    if m := _IN_YEAR.search(text):
        start = day0.replace(year=int(m[1]), month=1, day=1)
        return start, start.replace(year=start.year + 1)
    week0 = day0 - dt.timedelta(days=day0.weekday())
    month0 = day0.replace(day=1)
    relative = {
        "yesterday": (day0 - dt.timedelta(days=1), day0),
        "today": (day0, day0 + dt.timedelta(days=1)),
        "last week": (week0 - dt.timedelta(days=7), week0),
        "this week": (week0, week0 + dt.timedelta(days=7)),
        "last month": ((month0 - dt.timedelta(days=1)).replace(day=1), month0),
        "this month": (month0, (month0 + dt.timedelta(days=32)).replace(day=1)),
        "last year": (day0.replace(year=now.year - 1, month=1, day=1), day0.replace(month=1, day=1)),
    }
    for phrase, span in relative.items():
        if re.search(rf"\b{phrase}\b", text):
            return span
    return None


@dataclass
class QueryBoosts:
    """What a query names beyond its words: a period.

    Names, numbers and identifiers need no boost of their own: BM25 weighs each term by its
    rarity in the owner's memory. A flat boost for every entity the question names lifted every
    greeting of a participant ("Hey Melanie!") over the answer (eval_recall: 33% -> 49% recall@10
    without it)."""

    period: tuple[dt.datetime, dt.datetime] | None = None
    text: str = ""  # for the graph boost (memory.knowledge.graph), which weighs entities by rarity
    graph: dict[int, float] | None = None  # memory.knowledge.graph.related(owner, text), if looked up already

    @classmethod
    def of(cls, query: str) -> QueryBoosts:
        return cls(period=query_period(query), text=query)

    def bonus(self, timestamp: dt.datetime | None) -> float:
        if self.period and timestamp is not None and self.period[0] <= timestamp < self.period[1]:
            return PERIOD_BOOST
        return 0.0


def _standardised(values: dict[Any, float]) -> tuple[dict[Any, float], float]:
    """z-scores of one list's scores over its candidates, and the z of its lowest score (what a
    candidate this list did not return gets)."""
    if not values:
        return {}, 0.0
    n = len(values)
    mean = sum(values.values()) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values.values()) / n) or 1.0
    z = {key: (v - mean) / sd for key, v in values.items()}
    return z, min(z.values())


def _fuse(
    owner, vector_rows, keyword_rows, limit, boosts: QueryBoosts | None = None, expand=None
) -> list[SearchHit]:
    """Fuse per unit (message, chunk or tool call): each list's best score per unit, as z-scores
    over that list's candidates, weighted and summed; then the period boost; then the turns two
    replies away from the best ones join the candidates (`expand`: the search's filters and
    excluded ids), and scores are shared between nearby turns."""
    info: dict[tuple[str, str], dict[str, Any]] = {}

    def unit_key(row) -> tuple[str, str]:
        message_id, tool_call_id = row[0], row[1]
        return ("tool_call", tool_call_id) if tool_call_id else ("message", message_id)

    raw: dict[str, dict[tuple[str, str], float]] = {"vector": {}, "keyword": {}}
    for source, rows in (("vector", vector_rows), ("keyword", keyword_rows)):
        rank = 0
        for row in rows:
            key = unit_key(row)
            if key in raw[source]:
                continue
            rank += 1
            raw[source][key] = float(row[4])
            entry = info.setdefault(key, {"logical": row[2], "text": row[3]})
            entry[f"{source}_rank"] = rank
            if source == "vector":
                entry["similarity"] = float(row[4])
            elif "vector_rank" not in entry:
                entry["text"] = row[3]
            if len(row) > 5:
                entry["timestamp"] = row[5]
    z_vector, floor_vector = _standardised(raw["vector"])
    z_keyword, floor_keyword = _standardised(raw["keyword"])
    scores: dict[tuple[str, str], float] = {}
    for key, entry in info.items():
        scores[key] = VECTOR_WEIGHT * z_vector.get(key, floor_vector) + KEYWORD_WEIGHT * z_keyword.get(
            key, floor_keyword
        )
        if boosts is not None:
            scores[key] += boosts.bonus(entry.get("timestamp"))
    if boosts is not None and boosts.text:
        # Graph-aware search (memory.knowledge.graph); GRAPH_SEARCH turns it off.
        graph.boost_scores(owner, boosts.text, scores, info, relevance=boosts.graph)
    neighbours, chains = _neighbours_and_chains(owner, scores, expand)
    floor = VECTOR_WEIGHT * floor_vector + KEYWORD_WEIGHT * floor_keyword
    for key, entry in neighbours.items():
        info[key] = entry
        scores[key] = floor + (boosts.bonus(entry.get("timestamp")) if boosts is not None else 0.0)
    _share_neighbour_scores(scores, chains)
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])[:limit]
    message_ids = [key[1] for key, _ in ranked if key[0] == "message"]
    call_ids = [key[1] for key, _ in ranked if key[0] == "tool_call"]
    # Only the columns a hit shows: a message's content and edit history, a tool call's
    # arguments and result can be long, and up to `limit` of them are read here. Unordered:
    # the hits follow `ranked` (Message's default ordering would join the conversations).
    messages = {
        m.pk: m
        for m in Message.objects.owned_by(owner)
        .filter(pk__in=message_ids)
        .order_by()
        .select_related("chunk_parent")
        .only(
            "conversation_id",
            "role",
            "timestamp",
            "snippet",
            "metadata",
            "is_chunk",
            "chunk_parent__metadata",
        )
    }
    calls = {
        c.pk: c
        for c in ToolCall.objects.owned_by(owner)
        .filter(pk__in=call_ids)
        .only("message_id", "timestamp", "is_chunk")
    }
    hits = []
    for key, score in ranked:
        entry = info[key]
        # What the ranking knew of the hit's passage, alike for messages and tool calls.
        ranking = {
            "score": score,
            "vector_rank": entry.get("vector_rank"),
            "keyword_rank": entry.get("keyword_rank"),
            "vector_similarity": entry.get("similarity"),
            "passage_text": entry["text"],
        }
        if key[0] == "message":
            m = messages.get(key[1])
            if m is None:
                continue
            logical = m.chunk_parent if m.is_chunk else m
            hits.append(
                SearchHit(
                    id=m.pk,
                    type="message",
                    is_chunk=m.is_chunk,
                    message_id=logical.pk,
                    conversation=m.conversation_id,
                    role=m.role,
                    timestamp=m.timestamp,
                    snippet=_snippet(entry["text"]) or m.snippet,
                    external_id=(logical.metadata or {}).get("external_id"),
                    **ranking,
                )
            )
        else:
            c = calls.get(key[1])
            if c is None:
                continue
            hits.append(
                SearchHit(
                    id=c.pk,
                    type="tool_call",
                    is_chunk=c.is_chunk,
                    message_id=c.message_id,
                    conversation=entry.get("conversation") or "",
                    role="tool",
                    timestamp=c.timestamp,
                    snippet=_snippet(entry["text"]),
                    **ranking,
                )
            )
    # Tool-call hits carry their message's conversation.
    missing = [h for h in hits if h.type == "tool_call"]
    if missing:
        conv = dict(
            Message.objects.owned_by(owner)
            .filter(pk__in=[h.message_id for h in missing])
            .values_list("pk", "conversation_id")
        )
        for h in missing:
            h.conversation = conv.get(h.message_id, "")
    return hits


def _neighbours_and_chains(owner, scores, expand) -> tuple[dict, list[tuple]]:
    """One round trip for what the scores share: the turns two replies before or after the
    NEIGHBOR_SEEDS best messages that neither list returned (their first passage each, within
    the filters; `expand` is the search's (filters, excluded ids), None for no neighbours), and
    each candidate's parent and grandparent. A fact stated a turn after its subject can share no
    word and little meaning with a question about that subject."""
    messages = [key[1] for key in scores if key[0] == "message"]
    seeds = [
        key[1]
        for key, score in sorted(scores.items(), key=lambda kv: -kv[1])
        if key[0] == "message" and score > 0
    ][:NEIGHBOR_SEEDS]
    near_sql, near_params, exclude = "", [], set()
    if expand is not None and seeds and NEIGHBOR_SHARE:
        filters, exclude = expand
        where, params = filters.sql()
        near_sql = (
            "WITH seeds AS (SELECT id, parent_id FROM memory_message WHERE owner_id = %s AND id = ANY(%s)), "
            "near AS ("
            " SELECT g.id FROM memory_message c JOIN memory_message g ON g.parent_id = c.id"
            " WHERE c.parent_id IN (SELECT id FROM seeds) AND c.owner_id = %s AND g.owner_id = %s"
            " UNION SELECT m.parent_id FROM memory_message m"
            " WHERE m.id IN (SELECT parent_id FROM seeds) AND m.owner_id = %s AND m.parent_id IS NOT NULL), "
            "nearp AS (SELECT DISTINCT ON (p.logical_message_id) "
            "p.message_id, p.logical_message_id, p.text, p.timestamp "
            "FROM memory_passage p WHERE p.owner_id = %s AND NOT p.deleted AND p.kind = 'message' "
            "AND p.logical_message_id IN (SELECT id FROM near)" + where + " "
            "ORDER BY p.logical_message_id, p.id LIMIT 100) "
        )
        near_params = [owner.pk, seeds, *[owner.pk] * 4, *params]
    if not ((REPLY_SHARE or NEIGHBOR_SHARE) and (near_sql or len(messages) >= 2)):
        return {}, []
    chains_sql = (
        "SELECT m.id, m.parent_id, p.parent_id FROM memory_message m "
        "JOIN memory_message p ON p.id = m.parent_id "
        "WHERE m.owner_id = %s AND p.owner_id = %s AND m.parent_id IS NOT NULL AND (m.id = ANY(%s)"
        + (" OR m.id IN (SELECT message_id FROM nearp))" if near_sql else ")")
    )
    chains_params = [owner.pk, owner.pk, messages]
    with connection.cursor() as cursor:
        if near_sql:
            cursor.execute(
                f"{near_sql} SELECT * FROM nearp; {near_sql} {chains_sql}",
                [*near_params, *near_params, *chains_params],
            )
            near_rows = cursor.fetchall()
            cursor.nextset()
        else:
            cursor.execute(chains_sql, chains_params)
            near_rows = []
        chains = cursor.fetchall()
    neighbours = {
        ("message", message_id): {"logical": logical, "text": text, "timestamp": timestamp}
        for message_id, logical, text, timestamp in near_rows
        if ("message", message_id) not in scores and logical not in exclude
    }
    return neighbours, chains


def _share_neighbour_scores(scores: dict[tuple[str, str], float], chains: list[tuple]) -> None:
    """Scores flow between nearby turns when both are candidates (`chains`: each candidate's
    id, parent and grandparent). A message gets REPLY_SHARE of the score of its reply (the reply
    carries the message's end as context, and a question before a matching answer is often
    where the subject was named); turns two replies apart get NEIGHBOR_SHARE of each other's
    (a fact is often stated a turn after the one that named its subject: "The retreat is at
    Whispering Pines." ... "Whispering Pines is in Estes Park.")."""
    base = dict(scores)

    def share(to: str, source: str, fraction: float) -> None:
        if fraction and ("message", source) in base and ("message", to) in base:
            scores[("message", to)] += fraction * base[("message", source)]

    for reply, parent, grandparent in chains:
        share(parent, reply, REPLY_SHARE)
        if grandparent:
            share(grandparent, reply, NEIGHBOR_SHARE)
            share(reply, grandparent, NEIGHBOR_SHARE)


def _snippet(text: str) -> str:
    length = settings.INDEX_SNIPPET_LENGTH * 2
    flat = " ".join((text or "").split())
    return flat if len(flat) <= length else flat[: length - 1] + "…"


def hit_dicts(hits: list[SearchHit]) -> list[dict[str, Any]]:
    return [asdict(h) | {"timestamp": h.timestamp.isoformat()} for h in hits]
