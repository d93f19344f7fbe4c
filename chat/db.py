"""How the chat's async code reaches the database: `db` runs ORM work on a thread pool of its
own, `durable` retries it when the connection drops."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import SyncToAsync
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection, transaction

from memory.timeouts import cancelled

logger = logging.getLogger(__name__)

# Database work runs in a thread pool of its own, not the single "thread-sensitive" thread (nor
# the loop's default pool of cpu_count + 4 threads), so a hundred turns at once do not queue
# behind each other. Each worker keeps its own database connection (DB_CONN_MAX_AGE), which
# database_sync_to_async checks and closes when stale before and after each call; most of a
# worker's time is spent waiting on Postgres or on the embedding thread, not on the CPU.
DB_THREADS = settings.CHAT_DB_THREADS
_executor: ThreadPoolExecutor | None = None


def _db_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=DB_THREADS, thread_name_prefix="chat-db")
    return _executor


# A connection used this recently is taken as alive: Django's health check (a `SELECT 1` before
# the first query of every call, CONN_HEALTH_CHECKS) is skipped for it. A chat turn makes about
# ten calls, so under load that was ten extra round trips a turn. One that died meanwhile (a
# database restart) fails its query, and `durable` reconnects and tries again.
HEALTH_CHECK_IDLE_SECONDS = 5.0
_last_used = threading.local()


class _DatabaseCall(SyncToAsync):
    """channels' database_sync_to_async (stale connections closed before and after each call),
    with the health check only for a connection idle longer than HEALTH_CHECK_IDLE_SECONDS."""

    def thread_handler(self, loop, *args, **kwargs):
        close_old_connections()
        if (
            connection.connection is not None
            and time.monotonic() - getattr(_last_used, "at", float("-inf")) < HEALTH_CHECK_IDLE_SECONDS
        ):
            connection.health_check_done = True
        try:
            return super().thread_handler(loop, *args, **kwargs)
        finally:
            close_old_connections()
            _last_used.at = time.monotonic()


def db(func):
    return _DatabaseCall(func, thread_sensitive=False, executor=_db_executor())


DB_WRITE_ATTEMPTS = 4


def durable(func, *, atomic: bool = True):
    """`func` in one transaction, tried again when the database connection drops (a restart,
    a failover, a killed backend): the message a person sent and the reply must not be lost
    to a blip. One transaction makes a retry safe: a failed attempt leaves nothing behind.
    atomic=False is for reads, which need the retries but not a transaction's two round trips,
    and for steps that open their own transaction around their writes."""

    def run(*args, **kwargs):
        for attempt in range(DB_WRITE_ATTEMPTS):
            try:
                if not atomic:
                    return func(*args, **kwargs)
                with transaction.atomic():
                    return func(*args, **kwargs)
            except (OperationalError, InterfaceError) as exc:
                # A statement cancelled by its time limit would only run as long again.
                if attempt == DB_WRITE_ATTEMPTS - 1 or cancelled(exc):
                    raise
                logger.warning("database write failed (attempt %d); retrying", attempt + 1)
                connection.close()
                time.sleep(0.2 * 3**attempt)
        raise AssertionError("unreachable")

    return run
