"""No statement on a person's path runs for long (memory/timeouts.py): a limit Postgres enforces,
told apart from other failures, and the search's every step bounded, going on without a step that
took too long.

A slow statement is made real, not simulated: another connection holds an ACCESS EXCLUSIVE lock
on the table the statement reads, so it waits until its time limit cancels it."""

from __future__ import annotations

import contextlib
import threading

import pytest
from django.db import OperationalError, connection, connections, transaction

from memory.finding.candidates import _keyword_candidates
from memory.finding.fusion import fuse
from memory.finding.search import SearchFilters, SearchResults
from memory.storage.store import store_message
from memory.timeouts import cancelled, statement_limit


@contextlib.contextmanager
def locked(table: str):
    """`table` locked against every read by another connection, until the block ends."""
    taken, release = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def hold() -> None:
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                cursor.execute("BEGIN")
                cursor.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                taken.set()
                release.wait(60)
                cursor.execute("ROLLBACK")
        except BaseException as exc:  # noqa: BLE001 - told to the test
            failure.append(exc)
            taken.set()
        finally:
            other.close()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert taken.wait(30) and not failure, failure
    try:
        yield
    finally:
        release.set()
        holder.join(30)


@pytest.mark.django_db
def test_a_statement_past_the_limit_is_cancelled_and_the_limit_goes_with_the_block():
    with pytest.raises(OperationalError) as err, statement_limit(100), transaction.atomic(), \
            connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(5)")
    assert cancelled(err.value)
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"


@pytest.mark.django_db
def test_other_failures_are_not_taken_for_a_timeout():
    with pytest.raises(Exception) as err, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1/0")
    assert not cancelled(err.value)


@pytest.mark.django_db(transaction=True)
def test_search_ranks_without_the_turns_around_its_best_results_when_reading_them_takes_too_long(
    owner, conversation, settings
):
    first = store_message(owner, conversation, "user", "The retreat is at Whispering Pines.", embed=False)
    store_message(owner, conversation, "assistant", "The retreat has a tea room.", embed=False)
    settings.VECTOR_SEARCH_TIMEOUT_MS = 300
    results = SearchResults(query="whispering pines retreat")
    keyword = _keyword_candidates(owner, "whispering pines retreat", SearchFilters(), 50, results)
    fallbacks: list[dict] = []
    with locked("memory_message"):  # the turns around the best hit are read from here
        ranked, _ = fuse(owner, [], keyword, 10, expand=(SearchFilters(), set()), fallbacks=fallbacks)
    assert [key for key, _ in ranked][0] == ("message", first.pk)
    assert [f["kind"] for f in fallbacks] == ["neighbours_timeout"]
