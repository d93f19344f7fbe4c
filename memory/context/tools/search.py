"""The tools that search memory: vector_search (ids and snippets), search_and_retrieve (the best
matches read in full) and find (a regular expression over the messages' text)."""

from __future__ import annotations

import json
from typing import Any

from django.db import DatabaseError

from memory.context import compression
from memory.context.tools.arguments import ID, LIMIT, OFFSET, owned_conversation, position_time
from memory.context.tools.registry import ToolError, tool
from memory.context.tools.shapes import MAX_CONTENT_CHARS, compressed_message_dict, message_dict
from memory.finding.candidates import with_local_settings
from memory.models import NOT_REMEMBERED, Message
from memory.storage import sessions
from memory.tokens import snip

FIND_TIMEOUT_MS = 1500
MAX_PATTERN_CHARS = 300


def _searched(args: dict[str, Any]) -> str:
    query = args.get("query")
    return f"searched memory for “{snip(query, 80)}”" if query else ""


def _searched_and_read(args: dict[str, Any]) -> str:
    query = args.get("query")
    return f"searched and read the best matches for “{snip(query, 80)}”" if query else ""


def _search(owner, query, limit, *, conversation=None, conversation_id=None, role=None, start=None, end=None):
    from memory.finding import semantic_cache
    from memory.finding.search import SearchFilters

    conv = owned_conversation(owner, conversation_id)
    filters = SearchFilters(
        conversation_id=conv.pk if conv else None,
        role=role,
        start=position_time(owner, start),
        end=position_time(owner, end, end=True),
    )
    # Near-identical queries of this conversation at an unchanged memory reuse their results.
    return semantic_cache.search(owner, query, limit=limit, filters=filters, conversation=conversation)


SEARCH_FILTERS = {
    "conversation_id": {**ID, "description": "only this conversation"},
    "role": {"type": "string", "enum": ["user", "assistant", "system"]},
    "start": {
        "type": "string",
        "maxLength": 40,
        "description": "from this date (YYYY-MM-DD) or message id",
    },
    "end": {"type": "string", "maxLength": 40, "description": "up to this date or message id"},
}


@tool(
    "vector_search",
    "Search all of memory (meaning and exact words, messages and tool calls); "
    "returns ids with snippets and scores.",
    {"query": {"type": "string", "maxLength": 2000, "shorten": True}, "limit": LIMIT, **SEARCH_FILTERS},
    required=["query"],
    keywords=("search", "find", "remember", "recall", "when", "what"),
    core=True,
    label=_searched,
)
def vector_search(owner, *, query: str, limit: int = 10, conversation=None, **filters):
    results = _search(owner, query, limit, conversation=conversation, **filters)
    out = {"query": query, "results": compression.search_results(owner, query, results.hits)}
    if results.fallbacks:
        out["fallbacks"] = results.fallbacks
    return out, f'searched memory for "{snip(query, 60)}" — {len(results.hits)} hits'


@tool(
    "search_and_retrieve",
    "Search memory and read the best matches in full, each with its session neighbours.",
    {
        "query": {"type": "string", "maxLength": 2000, "shorten": True},
        "auto_limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10,
            "description": "messages (1-10)",
        },
        **SEARCH_FILTERS,
    },
    required=["query"],
    keywords=("search", "remember", "recall", "details", "what", "who"),
    core=True,
    label=_searched_and_read,
)
def search_and_retrieve(owner, *, query: str, auto_limit: int = 5, conversation=None, **filters):
    results = _search(owner, query, auto_limit * 2, conversation=conversation, **filters)
    ids = list(dict.fromkeys(h.message_id for h in results.hits))[:auto_limit]
    found = {m.pk: m for m in Message.objects.visible_to(owner).filter(pk__in=ids)}
    per = max(800, MAX_CONTENT_CHARS // max(1, len(found)))
    read = [found[h_id] for h_id in ids if h_id in found]
    out = []
    for m, near in zip(read, sessions.neighbours_of(owner, read, before=1, after=1), strict=True):
        item = compressed_message_dict(m, query, max_chars=per) or message_dict(m, max_chars=per)
        item["session"] = [{"id": n.pk, "role": n.role, "snippet": snip(n.content)} for n in near]
        out.append(item)
    result = {"query": query, "messages": out}
    if results.fallbacks:
        result["fallbacks"] = results.fallbacks
    return result, f'searched and read memory for "{snip(query, 60)}" — {len(out)} messages'


@tool(
    "find",
    "Find messages whose text matches a regular expression (POSIX style, as in "
    "Postgres), optionally between two positions (message ids or dates).",
    {
        "pattern": {"type": "string", "maxLength": MAX_PATTERN_CHARS},
        "start": {"type": "string", "maxLength": 40},
        "end": {"type": "string", "maxLength": 40},
        "case_sensitive": {"type": "boolean"},
        "conversation_id": ID,
        "limit": LIMIT,
        "offset": OFFSET,
    },
    required=["pattern"],
    keywords=("find", "exact", "regex", "pattern", "grep", "mentioned", "word"),
    label=lambda a: f"looked for the exact words “{snip(a['pattern'], 80)}”" if a.get("pattern") else "",
)
def find(
    owner,
    *,
    pattern: str,
    start: str | None = None,
    end: str | None = None,
    case_sensitive: bool = False,
    conversation_id: str | None = None,
    limit: int = 20,
    offset: int = 0,
    conversation=None,
):
    if not pattern.strip():
        raise ToolError("pattern must not be empty")
    op = "~" if case_sensitive else "~*"
    flags = "" if case_sensitive else "i"
    where = ["owner_id = %s", "NOT deleted", "NOT is_chunk", f"content {op} %s"]
    params: list[Any] = [owner.pk, pattern]
    # What memory does not keep stays out, unless it is this conversation's own.
    where.append("(NOT metadata @> %s::jsonb OR conversation_id = %s)")
    params += [json.dumps({NOT_REMEMBERED: True}), getattr(conversation, "pk", None) or ""]
    lo, hi = position_time(owner, start), position_time(owner, end, end=True)
    if lo:
        where.append("timestamp >= %s")
        params.append(lo)
    if hi:
        where.append("timestamp < %s")
        params.append(hi)
    conv = owned_conversation(owner, conversation_id)
    if conv:
        where.append("conversation_id = %s")
        params.append(conv.pk)
    sql = (
        "SELECT id, role, timestamp, conversation_id, "
        "substr(content, greatest(1, regexp_instr(content, %s, 1, 1, 0, %s) - 80), 240) "
        f"FROM memory_message WHERE {' AND '.join(where)} "
        "ORDER BY timestamp, position LIMIT %s OFFSET %s"
    )
    try:
        # Postgres' regex engine runs under a statement timeout, so a pathological pattern
        # costs at most FIND_TIMEOUT_MS, never a stuck worker.
        # The limit ends with the read, also inside the chat's transaction of the tool call.
        rows = with_local_settings(
            {"statement_timeout": str(FIND_TIMEOUT_MS)}, sql, [pattern, flags, *params, limit + 1, offset]
        )
    except DatabaseError as exc:
        text = str(exc).lower()
        if "timeout" in text or "cancel" in text:
            raise ToolError(
                f"the pattern took longer than {FIND_TIMEOUT_MS} ms; make it more "
                "specific or narrow it with start/end"
            ) from None
        raise ToolError(f"invalid regular expression: {str(exc).splitlines()[0][:160]}") from None
    more = len(rows) > limit
    matches = [
        {
            "id": r[0],
            "role": r[1],
            "timestamp": r[2].isoformat(),
            "conversationId": r[3],
            "excerpt": " ".join((r[4] or "").split()),
        }
        for r in rows[:limit]
    ]
    result = {"pattern": pattern, "offset": offset, "matches": matches}
    if more:
        result["next_offset"] = offset + limit
    return result, f"found /{snip(pattern, 40)}/ in {len(matches)}{'+' if more else ''} messages"
