"""The memory version of an owner: a counter that every transaction writing memory
(a stored message or tool call, an edit, a delete or restore, a forget, an import) bumps once.

Cached search results and replies (memory.finding.semantic_cache) carry the version they were made at
and are reused only at that version, so what was deleted or edited away never comes back from a
cache. The bump is an UPDATE of the owner's row inside the writing transaction: the row stays
locked until that transaction commits, so versions follow commit order and a reader that sees
version V sees every write up to V. Derived data (vectors, topics, entities, summaries) is made
from these writes and does not bump it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from memory.storage.inserts import joined

_BUMP = """
INSERT INTO memory_memoryversion (owner_id, version, txid) VALUES (%s, 1, txid_current())
ON CONFLICT (owner_id) DO UPDATE SET
    version = memory_memoryversion.version
        + CASE WHEN memory_memoryversion.txid = txid_current() THEN 0 ELSE 1 END,
    txid = txid_current()
RETURNING version
"""


def bump(owner_id: int, *, after: Sequence[tuple[str, list[Any]]] = ()) -> int:
    """Count a write to `owner_id`'s memory (once per transaction); returns the version the
    transaction commits. Call it inside the writing transaction.
    after: the writes (sql, params) to send before it, in the same round trip."""
    statements = [*after, (_BUMP, [owner_id])]
    with connection.cursor() as cursor:
        cursor.execute(*joined(statements))
        for _ in after:
            cursor.nextset()
        return int(cursor.fetchone()[0])


def current(owner_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT version FROM memory_memoryversion WHERE owner_id = %s", [owner_id])
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def settled(owner_id: int) -> int | None:
    """The version, or None while the calling transaction has itself written memory it has not
    committed yet (a cache must then neither answer nor keep anything: the version it would
    be filed under is not final, and one transaction bumps only once)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT version, txid = txid_current_if_assigned() FROM memory_memoryversion WHERE owner_id = %s",
            [owner_id],
        )
        row = cursor.fetchone()
    if row is None:
        return 0
    return None if row[1] else int(row[0])


def locked(owner_id: int) -> int:
    """The version, its row locked FOR SHARE until the calling transaction ends: a write to
    memory (its bump) waits until then, and one that committed first is seen."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT version FROM memory_memoryversion WHERE owner_id = %s FOR SHARE", [owner_id])
        row = cursor.fetchone()
    return int(row[0]) if row else 0
