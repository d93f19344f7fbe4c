"""The two candidate lists of hybrid search (memory.finding.search): the owner's passages
nearest the query's vector (an exact scan of a small memory, the HNSW graph walk of a large
one), and those holding its words, scored by Okapi BM25 with term statistics from the owner's
newest passages. Each list is rows of (message id, tool call id, logical message id, text,
score, timestamp, role, conversation id, the periods its words name, its speaker or None), best
first.

The vector list is read on a search worker thread, with a database connection of its own, while
the calling thread reads the keyword list (in_worker).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.utils import DatabaseError, OperationalError

from memory.embedders import get_embedder

logger = logging.getLogger(__name__)

# BM25's term-frequency saturation and length normalisation.
BM25_K1 = 1.2
BM25_B = 0.4
# Up to this many vectors left by the owner and filters, vector search is an exact scan of them
# (at ~8 µs a vector read from TOAST, about what an HNSW walk for 500 candidates costs).
EXACT_SEARCH_MAX = 4000
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*")


# The passage graph's order (its HNSW index is over half-precision copies of the vectors, see
# Passage.Meta); similarities are still computed from the full vectors, and rows re-sorted by them.
HALFVEC = (
    f"p.embedding::halfvec({settings.EMBEDDING_DIMENSIONS}) <=> "
    f"%s::vector::halfvec({settings.EMBEDDING_DIMENSIONS})"
)


# The columns of a candidate row after its timestamp (fusion reads them).
# The speaker is the one an import recorded, the last line of the passage's context ("Melanie:").
# The regex runs only on a context ending in ':' (most hold no speaker), and only on its last 62
# characters, which hold any last line it can match (a newline, 60 characters, the colon): on a
# whole context it cost ~15 µs a row, a fifth of the vector query at 100k messages.
ROW_TAIL = (
    "p.role, p.conversation_id, p.periods, CASE WHEN right(p.context, 1) = ':' THEN "
    "substring(right(p.context, 62) from '(?:^|\n)([^\n:]{1,60}):$') END"
)


def vector_literal(vector) -> str:
    """pgvector's text of `vector`, each value to 7 significant digits. One `%` formatting of
    all of them: 384 values in ~55 µs instead of ~100 (on the vector list's path)."""
    values = vector.tolist() if hasattr(vector, "tolist") else [float(x) for x in vector]
    return "[" + ",".join(["%.7g"] * len(values)) % tuple(values) + "]"


def query_terms(query: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(query)][:64]


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


# Django checks a kept connection with a `SELECT 1` round trip before its first statement after
# close_old_connections (CONN_HEALTH_CHECKS): on a worker, before every job, on the turn's path
# (bench_scale at 100k: 0.2-0.6 ms median, 3-8 ms at the 90th percentile on a busy machine, the
# idle server process having to be woken for it). As the chat's own database threads do
# (chat.db), a worker's connection that ended a job without an error less than _CHECKED_FOR
# seconds ago is not checked again; one that broke meanwhile (a restarted server) fails the
# job's first statement, and the job (a read) runs again on a new connection (in_worker; the
# vector list, which turns errors into fallbacks, in _vector_candidates).
_CHECKED_FOR = 5.0
_worker = threading.local()


def _use_database(database: str) -> None:
    from django.db import close_old_connections

    close_old_connections()  # expired, or an error since: checked, reconnected if broken
    # Opened before the caller moved to another database (a scratch or test database, whose
    # name every thread's connection settings share): reconnect to it.
    if connection.connection is not None and connection.connection.info.dbname != database:
        connection.close()
    worked_at = getattr(_worker, "worked_at", None) or -_CHECKED_FOR
    if connection.connection is not None and time.monotonic() - worked_at < _CHECKED_FOR:
        connection.health_check_done = True


def in_worker(func, *args):
    """`func(*args)`, a read, started on a search worker thread (its own connection to the
    caller's database), as a Future; None where the caller's transaction would hide rows from another
    connection (the caller then runs it itself)."""
    if not PARALLEL_SEARCH or connection.in_atomic_block:
        return None
    database = connection.settings_dict["NAME"]

    def run():
        _use_database(database)
        _worker.worked_at = None
        try:
            result = func(*args)
        except DatabaseError:
            if connection.is_usable():
                raise
            # The connection broke since its last job (_CHECKED_FOR): the job (a read) again,
            # on a new one.
            connection.close()
            result = func(*args)
        if connection.connection is not None and not connection.errors_occurred:
            _worker.worked_at = time.monotonic()
        return result

    return _SEARCH_THREADS.submit(run)


# Owners with more than EXACT_SEARCH_MAX vectors, when that was counted, and whether vectors of
# another model were stored then: their searches walk the HNSW graph without counting again for
# _LARGE_MEMORY_TTL seconds (a memory that shrank below the bound meanwhile gets the graph walk,
# approximate, instead of the exact scan for that long).
_LARGE_MEMORIES: dict[tuple, tuple[float, Any]] = {}
_LARGE_MEMORY_TTL = 60.0


def _vector_candidates(owner, query, filters, k, results, query_vector=None, *, again=False) -> list[tuple]:
    """query_vector: the query's vector, or a callable that waits for it (asked for once the
    rows it will be compared with are counted), or None to embed the query here. again: the
    read on a new connection after the first one was found broken."""
    embedder = get_embedder()
    where, params = filters.sql(owner.pk)
    searchable = (
        "FROM memory_passage p "
        "WHERE p.owner_id = %s AND NOT p.deleted AND p.embedding_model = %s "
        "AND p.embedding IS NOT NULL" + where
    )
    sql = (
        "SELECT p.message_id, p.tool_call_id, p.logical_message_id, p.text, "
        "1 - (p.embedding <=> %s::vector) AS similarity, p.timestamp, " + ROW_TAIL + " "
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
            if vectors > EXACT_SEARCH_MAX and filters.sql()[0]:
                # What the filters leave (a conversation, a role, a period): read from the
                # rows, not their vectors, so still cheap next to reading the vectors. (The
                # few conversations memory does not keep narrow nothing worth a count.)
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
        if not again and not connection.in_atomic_block and not connection.is_usable():
            # The connection broke since its last use (a restarted server): a new one reads.
            connection.close()
            return _vector_candidates(owner, query, filters, k, results, query_vector, again=True)
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
    transaction, so the settings end with it. Inside the caller's transaction they run in a
    savepoint that is rolled back once the rows are read (`sql` only reads): a released
    savepoint would keep the settings to the end of the caller's transaction, and its later
    statements were planned with them (a tool's search in a chat turn: `enable_sort` off made
    the neighbours' query walk every passage, ~100 ms at 100,000 messages); and a failed query
    (a statement timeout) does not abort the caller's transaction."""
    names = list(values)
    settings_sql = "SELECT " + ", ".join("set_config(%s, %s, true)" for _ in names)
    settings_params = [v for name in names for v in (name, values[name])]
    with local_settings_scope(), connection.cursor() as cursor:
        cursor.execute(f"{settings_sql}; {sql}", [*settings_params, *params])
        cursor.nextset()
        return cursor.fetchall()


@contextlib.contextmanager
def local_settings_scope():
    """Where reads that set transaction-local settings (`set_config(..., true)`) run: inside
    the caller's transaction, a savepoint rolled back when the block ends, so the settings (and
    a cancelled statement's error) end with the reads; outside one, nothing (each message is
    its own implicit transaction)."""
    savepoint = transaction.savepoint() if connection.in_atomic_block else None
    try:
        yield
    finally:
        if savepoint is not None:
            transaction.savepoint_rollback(savepoint)


def _note_model_mismatch(other, model_name: str, results) -> None:
    if other:
        results.fallbacks.append(
            {
                "kind": "embedding_model_mismatch",
                "detail": f"some passages were embedded with {other!r}, not {model_name!r}; they are "
                "left out of vector search (never mixed) until they are re-embedded, which the "
                "server does in the background (or `manage.py reembed`)",
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
    where, params = filters.sql(owner.pk)
    # OR of the terms (a natural question rarely has every word in the answer), each term
    # scored by Okapi BM25 with its IDF among this owner's passages.
    try:
        weights, complete, shares, avgdl = _term_stats(owner, words, lexemes_of_words=True)
    except OperationalError as exc:
        results.fallbacks.append({"kind": "keyword_timeout", "detail": str(exc)[:200]})
        return []
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
        "SELECT p.message_id, p.tool_call_id, p.logical_message_id, p.text, c.score, p.timestamp, "
        + ROW_TAIL + " "
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
    # One pass over the sample, bounded like the lists it weighs.
    rows = with_local_settings(
        {"statement_timeout": str(int(settings.VECTOR_SEARCH_TIMEOUT_MS))},
        "WITH lx AS MATERIALIZED (SELECT array_agg(lex ORDER BY lex COLLATE \"C\") AS lexes "
        f"FROM ({lx}) l) "
        f"SELECT (SELECT lexes FROM lx), count(*), avg(length(s.search_vector)), {counts} FROM "
        "(SELECT search_vector FROM memory_passage WHERE owner_id = %s AND NOT deleted "
        "ORDER BY timestamp DESC LIMIT %s) s",
        [lexemes, owner.pk, DF_SAMPLE],
    )
    row = rows[0] if rows else None
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
