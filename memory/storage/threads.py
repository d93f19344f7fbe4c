"""Walks of a conversation's message tree: up to the root, and down the newest replies."""

from __future__ import annotations

from django.db import connection

MAX_DEPTH = 100_000  # how deep a walk goes before it stops (a cycle would otherwise never end)


def ancestor_ids(leaf_id: str, limit: int = MAX_DEPTH + 1) -> list[str]:
    """Ids from the root down to `leaf_id` (one recursive query, however deep the thread); with
    `limit`, only the last `limit` of them (the ones nearest the leaf)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE up(id, parent_id, depth) AS (
                SELECT id, parent_id, 0 FROM memory_message WHERE id = %s
                UNION ALL
                SELECT m.id, m.parent_id, up.depth + 1
                FROM memory_message m JOIN up ON m.id = up.parent_id
                WHERE up.depth < %s
            )
            SELECT id FROM up ORDER BY depth DESC
            """,
            [leaf_id, limit - 1],
        )
        return [row[0] for row in cursor.fetchall()]


def newest_leaf_id(conversation_id: str, message_id: str) -> str:
    """The id of the newest message down the thread from `message_id`, following the newest
    reply each time (one recursive query, however deep)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE down(id, depth) AS (
                SELECT %s::varchar, 0
                UNION ALL
                SELECT (
                    SELECT c.id FROM memory_message c
                    WHERE c.parent_id = down.id AND c.conversation_id = %s AND NOT c.is_chunk
                    ORDER BY c.position DESC LIMIT 1
                ), down.depth + 1
                FROM down WHERE down.id IS NOT NULL AND down.depth < %s
            )
            SELECT id FROM down WHERE id IS NOT NULL ORDER BY depth DESC LIMIT 1
            """,
            [message_id, conversation_id, MAX_DEPTH],
        )
        return cursor.fetchone()[0]
