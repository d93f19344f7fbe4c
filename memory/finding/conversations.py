"""Which of a person's conversations hold some words: the conversation list's search by content
(Postgres full-text search over passages, the GIN index), the last word as a prefix, so a search
box finds "lasagne" while the person is still typing "lasag"."""

from __future__ import annotations

import re

from django.db import connection

_WORD = re.compile(r"\w+", re.UNICODE)


def query_words(query: str, limit: int = 8) -> list[str]:
    return _WORD.findall((query or "").lower())[:limit]


def _tsquery(words: list[str]) -> str:
    """A to_tsquery text: every word, the last as a prefix (each quoted: no operator gets in)."""
    terms = [f"'{w}'" for w in words]
    terms[-1] += ":*"
    return " & ".join(terms)


def holding(
    owner, words: list[str], *, archived_only: bool = False, limit: int = 50
) -> list[tuple[str, str]]:
    """(conversation id, a passage holding every word) of the owner's conversations whose messages
    hold them all, the most recently said first; never a temporary chat; at most `limit`."""
    if not words:
        return []
    sql = (
        "SELECT conversation_id, text FROM ("
        " SELECT DISTINCT ON (p.conversation_id) p.conversation_id, p.text, p.timestamp"
        " FROM memory_passage p JOIN memory_conversation c ON c.id = p.conversation_id"
        " WHERE p.owner_id = %s AND NOT p.deleted AND p.kind = 'message' AND NOT c.temporary"
        + (" AND c.archived_at IS NOT NULL" if archived_only else "")
        + " AND p.search_vector @@ to_tsquery('english', %s)"
        " ORDER BY p.conversation_id, p.timestamp DESC) m"
        " ORDER BY timestamp DESC LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [owner.pk, _tsquery(words), limit])
        return cursor.fetchall()
