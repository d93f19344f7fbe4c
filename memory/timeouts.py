"""No database statement on a person's path runs for long: a page, a search, a chat turn's reads.

A planner misled by stale statistics (right after a large import, before ANALYZE) once ran a
search's query for over three minutes while the page waited. Within `statement_limit()` every
statement of this thread's connection is cancelled by Postgres after QUERY_TIMEOUT_MS, and the
caller tells a cancelled statement (`cancelled`) from other failures: the explorer's page says
it took too long, a chat turn goes on without that leg. Background work sets no limit.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from django.conf import settings
from django.db import DatabaseError, connection

_LIMITED: contextvars.ContextVar[bool] = contextvars.ContextVar("statement_limited", default=False)


def cancelled(exc: BaseException | None) -> bool:
    """Whether `exc` is (or was caused by) a statement Postgres cancelled: its statement_timeout
    ran out, or someone asked it to stop."""
    from psycopg import errors

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, errors.QueryCanceled):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def seconds(ms: int | None = None) -> str:
    """A limit as a person reads it: "10 s"."""
    value = (settings.QUERY_TIMEOUT_MS if ms is None else ms) / 1000
    return f"{value:g} s"


@contextlib.contextmanager
def statement_limit(ms: int | None = None) -> Iterator[None]:
    """Every statement of this thread's connection within the block is cancelled after `ms`
    (default QUERY_TIMEOUT_MS; 0: no limit). Nested blocks keep the outermost limit."""
    ms = settings.QUERY_TIMEOUT_MS if ms is None else int(ms)
    if not ms or _LIMITED.get():
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('statement_timeout', %s, false)", [f"{ms}ms"])
    token = _LIMITED.set(True)
    try:
        yield
    finally:
        _LIMITED.reset(token)
        # In a transaction a cancelled statement aborted, the setting goes when it rolls back.
        with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
            cursor.execute("RESET statement_timeout")
