"""How the chat's async code reaches the database: `db` runs ORM work on a thread pool of its
own, `durable` retries it when the connection drops."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction

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


def db(func):
    return database_sync_to_async(func, thread_sensitive=False, executor=_db_executor())


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
            except (OperationalError, InterfaceError):
                if attempt == DB_WRITE_ATTEMPTS - 1:
                    raise
                logger.warning("database write failed (attempt %d); retrying", attempt + 1)
                connection.close()
                time.sleep(0.2 * 3**attempt)
        raise AssertionError("unreachable")

    return run
