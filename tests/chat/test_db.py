"""chat.db: the health check (a `SELECT 1`) is skipped for a connection used moments ago, and
run for one that sat idle; a connection that died meanwhile is replaced by `durable`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from chat import db as chat_db


@pytest.fixture
def one_thread(monkeypatch):
    """The database calls on one thread, so they share one connection."""
    executor = ThreadPoolExecutor(1, thread_name_prefix="chat-db-test")
    monkeypatch.setattr(chat_db, "_executor", executor)
    yield
    async_to_sync(chat_db.db(lambda: connection.close()))()
    executor.shutdown()


def _checked() -> bool:
    """Whether this call's first query runs the health check (then it runs it)."""
    will_check = connection.connection is not None and not connection.health_check_done
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return will_check


@pytest.mark.django_db(transaction=True)
def test_a_connection_used_moments_ago_is_not_health_checked_again(one_thread, monkeypatch):
    call = chat_db.db(_checked)
    async_to_sync(call)()  # opens the thread's connection
    assert async_to_sync(call)() is False
    monkeypatch.setattr(chat_db, "HEALTH_CHECK_IDLE_SECONDS", 0.0)  # every connection counts as idle
    assert async_to_sync(call)() is True


@pytest.mark.django_db(transaction=True)
def test_a_connection_that_died_since_its_last_use_is_replaced_by_durable(one_thread):
    pid = async_to_sync(chat_db.db(lambda: connection.cursor().connection.info.backend_pid))()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

    def backend():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    # No health check (it was used moments ago): the first attempt fails, the retry reconnects.
    assert async_to_sync(chat_db.db(chat_db.durable(backend, atomic=False)))() != pid
