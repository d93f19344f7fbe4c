from __future__ import annotations

import contextlib
import datetime as dt

import pytest
from django.db import connection, connections

from memory.context.index_builder import prepare_context
from memory.finding.search import search
from tests.memory.conftest import add_turns

pytestmark = pytest.mark.django_db


def slow_vector_search(execute, sql, params, many, context):
    # A real statement timeout: the vector query sleeps in Postgres past the limit.
    if "<=>" in sql and "memory_passage" in sql:
        sql = sql.replace("FROM memory_passage p", "FROM memory_passage p, pg_sleep(0.2) z", 1)
    return execute(sql, params, many, context)


def test_a_timed_out_vector_search_falls_back_and_says_so(owner, conversation, settings):
    settings.VECTOR_SEARCH_TIMEOUT_MS = 50
    settings.INDEX_FULL_MAX = 0  # the plan searches (a memory it can list whole is not searched)
    add_turns(owner, conversation, ["the heron nests by the lake", "herons eat fish"])
    with connection.execute_wrapper(slow_vector_search):
        results = search(owner, "heron nests")
        plan = prepare_context(owner, conversation, "heron nests")
    assert [f["kind"] for f in results.fallbacks] == ["vector_timeout"]
    assert results.hits, "keyword matches still come back"
    assert any(f["kind"] == "vector_timeout" for f in plan.fallbacks)
    assert "timed out" in plan.reason


def test_filters_by_role_and_conversation(owner, conversation, settings):
    from memory.finding.search import SearchFilters
    from memory.models import Conversation

    other = Conversation.objects.create(owner=owner)
    add_turns(owner, conversation, ["pelicans fly in lines", "pelicans indeed"])
    add_turns(owner, other, ["pelicans in another chat"])
    hits = search(owner, "pelicans", filters=SearchFilters(role="assistant")).hits
    assert hits and all(h.role == "assistant" for h in hits)
    hits = search(owner, "pelicans", filters=SearchFilters(conversation_id=other.pk)).hits
    assert hits and all(h.conversation == other.pk for h in hits)


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_vector_search_runs_beside_the_keyword_search(
    owner, conversation, monkeypatch
):
    """The vector list is read on a worker thread's own connection while this thread reads the
    keyword list; the ranking is the same as reading them one after the other."""
    import threading

    from memory.finding import candidates
    from memory.finding import search as search_module
    from tests.memory.conftest import EVERYDAY_TEXTS

    add_turns(owner, conversation, EVERYDAY_TEXTS)
    threads = []
    real = candidates._vector_candidates

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(candidates, "_vector_candidates", spy)
    assert not connection.in_atomic_block
    together = search_module.search(owner, "when does the train to Lisbon leave?")
    monkeypatch.setattr(candidates, "PARALLEL_SEARCH", False)
    in_turn = search_module.search(owner, "when does the train to Lisbon leave?")
    assert threads[0].startswith("vector-search") and threads[1] == threading.current_thread().name
    assert [h.message_id for h in together.hits] == [h.message_id for h in in_turn.hits]
    assert "Lisbon" in together.hits[0].passage_text
    assert together.timings_ms["vector"] > 0 and "vector_after_keyword" in together.timings_ms


def test_a_vector_literal_is_the_same_text_as_one_value_at_a_time():
    import numpy as np

    from memory.finding.candidates import vector_literal

    rng = np.random.default_rng(37)
    vectors = [rng.standard_normal(384).astype(np.float32) / s for s in (1, 20, 1e6, 1e-6)]
    vectors += [np.array([0.0, -0.0, 1e-45, 3.4e38, -1.5, 123456789.0], dtype=np.float32)]
    for vector in vectors:
        expected = "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"
        assert vector_literal(vector) == expected == vector_literal([float(x) for x in vector])
    assert vector_literal([]) == "[]"


def _on_every_search_worker(func) -> list:
    """`func()` run once on each search worker thread, through in_worker, all at once."""
    import threading

    from memory.finding import candidates

    barrier = threading.Barrier(candidates.SEARCH_THREADS)

    def job():
        barrier.wait(timeout=30)
        return func()

    jobs = [candidates.in_worker(job) for _ in range(candidates.SEARCH_THREADS)]
    return [j.result(timeout=60) for j in jobs]


def _ping_counter(monkeypatch) -> list[int]:
    """The threads whose connection Django checked with a round trip (is_usable), in order."""
    import threading

    from django.db.backends.postgresql.base import DatabaseWrapper

    pinged: list[int] = []
    real = DatabaseWrapper.is_usable

    def counted(self):
        pinged.append(threading.get_ident())
        return real(self)

    monkeypatch.setattr(DatabaseWrapper, "is_usable", counted)
    return pinged


def _select_on_worker() -> int:
    import threading

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return threading.get_ident()


@pytest.mark.django_db(transaction=True)
def test_a_search_worker_does_not_check_a_connection_it_used_a_moment_ago(monkeypatch):
    """Django's health check (a round trip before a kept connection's first statement) was made
    before every job of a worker, on the turn's path; a connection that ended a job without an
    error moments ago is used as it is."""
    from memory.finding import candidates

    _on_every_search_worker(_select_on_worker)  # every worker's connection open and just used
    pinged = _ping_counter(monkeypatch)
    threads = [candidates.in_worker(_select_on_worker).result(timeout=60) for _ in range(12)]
    assert len(set(threads)) >= 1 and pinged == []
    # One not used for _CHECKED_FOR seconds is checked first, as Django does.
    monkeypatch.setattr(candidates, "_CHECKED_FOR", 0.0)
    candidates.in_worker(_select_on_worker).result(timeout=60)
    assert len(pinged) == 1


@pytest.mark.django_db(transaction=True)
def test_a_search_whose_worker_connection_broke_reconnects_and_reads_again(owner, conversation, settings):
    """A worker's connection that broke since its last job (a restarted server: here each one's
    server process is ended) is not found out by a check first any more; the vector list sees
    its statement fail, reconnects and reads again: the search is whole."""
    add_turns(owner, conversation, ["the heron nests by the lake", "herons eat fish", "the train is at nine"])
    search(owner, "heron nests")

    def backend_pid() -> int:
        connection.ensure_connection()
        return connection.connection.info.backend_pid

    def break_every_worker_connection() -> None:
        pids = _on_every_search_worker(backend_pid)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(p)) FROM unnest(%s) p", [pids])
            assert cursor.fetchone()[0] >= 1  # (some may be ended already, not yet found out)

    break_every_worker_connection()
    results = search(owner, "heron nests")
    assert results.fallbacks == []
    assert results.hits and results.hits[0].vector_similarity is not None
    assert "heron" in results.hits[0].passage_text
    # The turn's read-ahead (the levels, the summaries) runs on a worker too.
    settings.INDEX_FULL_MAX = 0
    break_every_worker_connection()
    plan = prepare_context(owner, conversation, "heron nests")
    assert plan.fallbacks == [] and {"search_vector", "read_ahead"} <= set(plan.timings_ms)


def test_a_hit_in_a_chunk_is_its_messages_with_the_messages_external_id(owner, conversation, settings):
    from memory.models import Message
    from memory.storage.store import store_message

    settings.INDEX_CHUNK_THRESHOLD = 100
    words = " ".join(f"filler{i}" for i in range(60))
    long = store_message(
        owner, conversation, "user", f"{words} the kingfisher dives at dawn. {words}",
        metadata={"external_id": "import-7"},
    )
    plain = store_message(
        owner, conversation, "user", "a kingfisher on the fence", metadata={"external_id": 12}
    )
    assert Message.objects.filter(chunk_parent=long).exists()
    hits = {h.message_id: h for h in search(owner, "kingfisher dives").hits}
    chunk = hits[long.pk]
    assert chunk.is_chunk and chunk.id != long.pk and chunk.type == "message"
    assert chunk.external_id == "import-7" and chunk.conversation == conversation.pk
    assert hits[plain.pk].external_id == 12 and not hits[plain.pk].is_chunk
    assert hits[plain.pk].role == "user" and hits[plain.pk].timestamp == plain.timestamp


def _rows(sql, *, fast):
    """The rows of `sql` read with the fast loader, or with Django's own."""
    from psycopg.postgres import types
    from psycopg.pq import Format

    from memory.pgvalues import fast_timestamps

    with connection.cursor() as cursor:
        oid = types["timestamptz"].oid
        loader = cursor.adapters.get_loader(oid, Format.TEXT)
        if fast:
            fast_timestamps(cursor)
        else:
            cursor.adapters.register_loader(oid, getattr(loader, "django", loader))
        try:
            cursor.execute(sql)
            return cursor.fetchall()
        except Exception as exc:  # noqa: BLE001 (the same failure either way is what is asserted)
            return type(exc)


@contextlib.contextmanager
def _djangos_loader():
    """Every connection (a search worker's too) reads timestamps with Django's loader again."""
    from memory import pgvalues

    with pytest.MonkeyPatch.context() as patch:
        for fast in pgvalues._FAST_LOADERS.values():
            patch.setattr(fast, "load", fast.django.load)
        yield


def test_every_connection_reads_timestamps_fast(owner, conversation):
    """A new connection's loader is the fast one, and what the ORM reads through it (messages,
    passages) is what Django's loader reads, tzinfo and all."""
    from psycopg.postgres import types
    from psycopg.pq import Format

    from memory.models import Message, Passage

    add_turns(owner, conversation, ["the heron nests by the lake", "herons eat fish"])
    new = connections.create_connection("default")
    try:
        new.ensure_connection()
        loader = new.connection.adapters.get_loader(types["timestamptz"].oid, Format.TEXT)
    finally:
        new.close()
    assert getattr(loader, "django", None) is not None and loader.timezone is dt.UTC

    def read():
        return (
            list(Message.objects.filter(owner=owner).order_by("pk").values_list("pk", "timestamp")),
            [(p.pk, p.timestamp) for p in Passage.objects.filter(owner=owner).order_by("pk")],
        )

    fast = read()
    with _djangos_loader():
        slow = read()
    # _djangos_loader does reach Django's (Python) parser, and the fast loader does not.
    from psycopg.types.datetime import TimestamptzLoader

    def parsed_in_python(self, data):
        raise AssertionError("parsed in Python")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TimestamptzLoader, "load", parsed_in_python)
        assert read() == fast
        with _djangos_loader(), pytest.raises(AssertionError, match="parsed in Python"):
            read()
    assert fast == slow and len(fast[0]) == 2 and len(fast[1]) >= 2
    assert all(when.tzinfo is dt.UTC for rows in (*fast, *slow) for _, when in rows)


def test_fast_timestamps_reads_the_datetimes_djangos_loader_reads(owner, conversation):
    add_turns(owner, conversation, ["the heron nests by the lake", "herons eat fish"])
    stored = "SELECT timestamp, id FROM memory_passage ORDER BY id"
    literals = (
        "SELECT '2024-02-29 23:59:59.999999+00'::timestamptz, '2024-03-01 00:00:00+00'::timestamptz, "
        "'0001-01-01 00:00:00+00'::timestamptz, '2024-05-01 12:00:00.5+02'::timestamptz, "
        "'1999-12-31 23:59:59.1234+00'::timestamptz, NULL::timestamptz"
    )
    for sql in (stored, literals):
        slow, fast = _rows(sql, fast=False), _rows(sql, fast=True)
        assert fast == slow and len(fast) >= 1
        for a, b in zip(slow, fast, strict=True):
            for x, y in zip(a, b, strict=True):
                assert type(x) is type(y)
                if isinstance(x, dt.datetime):
                    assert x.tzinfo is y.tzinfo is dt.UTC and x.utcoffset() == y.utcoffset()
    # UTC values never reach Django's (Python) parser.
    from psycopg.types.datetime import TimestamptzLoader

    def no_python_parsing(self, data):
        raise AssertionError("parsed in Python")

    expected = _rows(stored, fast=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TimestamptzLoader, "load", no_python_parsing)
        assert _rows(stored, fast=False) is AssertionError
        assert _rows(stored, fast=True) == expected
    # What fromisoformat cannot read goes to Django's loader, which answers as before.
    for text in ("infinity", "-infinity", "0044-03-15 12:00:00+00 BC"):
        sql = f"SELECT '{text}'::timestamptz"
        assert _rows(sql, fast=True) == _rows(sql, fast=False)


def test_a_search_reads_the_same_hits_with_fast_timestamps(owner, conversation, settings):
    settings.INDEX_FULL_MAX = 0
    add_turns(owner, conversation, [f"note {i}: the heron nests by the lake in spring" for i in range(12)])
    fast = search(owner, "heron nests in spring", limit=10).hits
    with _djangos_loader():
        slow = search(owner, "heron nests in spring", limit=10).hits
    assert [(h.id, h.timestamp, h.score) for h in fast] == [(h.id, h.timestamp, h.score) for h in slow]
    assert len(fast) == 10 and all(h.timestamp.tzinfo is slow[0].timestamp.tzinfo for h in fast)


def _planner_settings():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('enable_sort'), current_setting('enable_seqscan'), "
            "current_setting('hnsw.ef_search', true), current_setting('hnsw.iterative_scan', true), "
            "current_setting('statement_timeout')"
        )
        return cursor.fetchone()


def test_a_search_in_a_transaction_leaves_its_planner_settings_behind(owner, conversation, settings):
    from django.db import transaction

    settings.INDEX_FULL_MAX = 0
    add_turns(owner, conversation, [f"note {i}: the heron nests by the lake" for i in range(6)])
    before = _planner_settings()
    with transaction.atomic():
        hits = search(owner, "heron nests", limit=5).hits
        # The rest of the caller's transaction is planned as before: a tool's search in a chat
        # turn had left enable_sort off, and the neighbours' query then walked every passage;
        # the neighbours' own bound had left a statement timeout on the rest of the turn.
        assert _planner_settings() == before
    assert hits and _planner_settings() == before


def test_a_timed_out_read_in_a_transaction_leaves_the_transaction_usable(owner):
    from django.db import OperationalError, transaction

    from memory.finding.candidates import with_local_settings

    with transaction.atomic():
        with pytest.raises(OperationalError):
            with_local_settings({"statement_timeout": "20"}, "SELECT pg_sleep(0.5)", [])
        assert with_local_settings({"enable_sort": "off"}, "SELECT current_setting('enable_sort')", []) == [
            ("off",)
        ]
        assert _planner_settings()[0] == "on"
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)


@pytest.mark.parametrize(
    "values",
    [[], ["01HZX3"], ["a,b", 'say "hi"', "back\\slash", "{brace}", "", " spaced ", "NULL", "é ü 中"]],
)
def test_a_text_array_literal_is_the_array_of_its_strings(values):
    from memory.pgvalues import text_array

    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::varchar[], %s::varchar[]", [text_array(values), values])
        literal, bound = cursor.fetchone()
    assert literal == bound == values
