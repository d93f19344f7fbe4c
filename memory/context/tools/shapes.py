"""How rows read in a tool result: a message or a tool call with its text paged by character
(`offset`, `total_chars`, `next_offset`), a topic, a page of a queryset.

Any character stays readable through the tools alone (issue 13 §1): every text a tool returns
(a message's content, a tool call's result) comes with `offset`, `total_chars` and `next_offset`
(null once the end is in hand), and get_message_by_id / get_tool_call read on from any
character `offset` in pages that fit MAX_RESULT_CHARS. In the list tools `offset` keeps
counting items (messages, chunks, matches); in a text it counts characters.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db.models import Count

from memory.context import compression
from memory.context.tools.registry import MAX_RESULT_CHARS, ToolError
from memory.models import Message, ToolCall, Topic

MAX_CONTENT_CHARS = 6000  # per text in a list or search result; page on with get_message_by_id
# One page of a text read by id: a whole 4,000-token chunk (16-20k characters) at once, with
# room in MAX_RESULT_CHARS for the rest of the result and JSON escapes.
PAGE_CHARS = 20000


def json_len(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str))


def _page_text(text: str, offset: int, budget: int) -> str:
    """The longest piece of `text` from `offset` whose JSON string takes at most `budget`
    characters (quotes, newlines and control characters grow when escaped)."""
    hi = max(0, min(budget, len(text) - offset))
    if json_len(text[offset : offset + hi]) <= budget:
        return text[offset : offset + hi]
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if json_len(text[offset : offset + mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[offset : offset + lo]


def check_offset(offset: int, total: int, what: str) -> None:
    if offset and offset >= total:
        raise ToolError(
            f"offset {offset} is past the end of {what}: it has {total} characters, "
            f"so offsets run from 0 to {max(0, total - 1)}"
        )


def _text_page(
    out: dict[str, Any], key: str, text: str, offset: int, budget: int, read_on: str
) -> dict[str, Any]:
    """Put the page of `text` at `offset` under `key` with where it sits in the whole text."""
    piece = _page_text(text, offset, budget) if offset < len(text) else ""
    end = offset + len(piece)
    out[key] = piece
    out["offset"] = offset
    out["total_chars"] = len(text)
    out["next_offset"] = end if end < len(text) else None
    out["remaining_chars"] = len(text) - end
    if end < len(text):
        out["truncated"] = True
        out["note"] = (
            f"characters {offset}-{end} of {len(text)} shown; read on with "
            f"{read_on}(id={out['id']!r}, offset={end})"
        )
    return out


def message_dict(m: Message, *, max_chars: int = MAX_CONTENT_CHARS, offset: int = 0) -> dict[str, Any]:
    """A message for the model: its content from character `offset`, at most `max_chars`
    JSON characters of it, with total_chars and next_offset (null when the rest is shown)."""
    out: dict[str, Any] = {
        "id": m.pk,
        "content": "",
        "role": m.role,
        "timestamp": m.timestamp.isoformat(),
        "parentId": m.parent_id,
        "conversationId": m.conversation_id,
        "isChunk": m.is_chunk,
    }
    if m.is_chunk:
        out["chunkIndex"] = m.chunk_index
        out["chunkParentId"] = m.chunk_parent_id
    if m.edited:
        out["edited"] = True
    return _text_page(out, "content", m.content, offset, max_chars, "get_message_by_id")


def compressed_message_dict(message, query: str, *, max_chars: int) -> dict[str, Any] | None:
    """A long message of a search result as its best sentences for `query`, with their
    offsets (None: the message is short enough, or compression is off, so it is shown as is)."""
    text = message.content
    if not settings.RESULT_COMPRESSION or len(text) <= settings.RESULT_COMPRESSION_MIN_CHARS:
        return None
    cut = compression.compress(text, query, max_chars=min(max_chars, settings.RESULT_COMPRESSION_CHARS))
    if not cut.excerpts:
        return None
    item = message_dict(message, max_chars=0)
    for key in ("offset", "next_offset", "remaining_chars"):
        item.pop(key, None)
    item["content"] = cut.text()
    item["excerpts"] = [{"offset": e.start, "end": e.end} for e in cut.excerpts]
    item["truncated"] = True
    item["compressed"] = True
    item["note"] = (
        f"the sentences best matching the query: {cut.kept_chars} of {cut.total_chars} characters, "
        f"at the offsets in excerpts; read on around any with get_message_by_id(id={message.pk!r}, offset=N)"
    )
    return item


def tool_call_dict(
    c: ToolCall, *, max_chars: int = MAX_CONTENT_CHARS, offset: int = 0
) -> dict[str, Any]:
    """A stored tool call: its result from character `offset` (as message_dict pages content)."""
    out: dict[str, Any] = {
        "id": c.pk,
        "toolName": c.tool_name,
        "arguments": c.arguments[:2000],
        "result": "",
        "timestamp": c.timestamp.isoformat(),
        "messageId": c.message_id,
        "isChunk": c.is_chunk,
        "isError": c.is_error,
    }
    if c.is_chunk:
        out["chunkIndex"] = c.chunk_index
        out["chunkParentId"] = c.chunk_parent_id
    return _text_page(out, "result", c.result, offset, max_chars, "get_tool_call")


def text_room(shell: Any, slack: int = 300) -> int:
    """JSON characters left for text in a result whose other parts take `shell`'s size."""
    return max(0, min(PAGE_CHARS, MAX_RESULT_CHARS - json_len(shell) - slack))


def topic_dict(t: Topic, *, children: int | None = None) -> dict[str, Any]:
    out = {
        "id": t.pk,
        "label": t.label,
        "level": t.level,
        "message_count": t.message_count,
        "period": [
            t.period_start.isoformat() if t.period_start else None,
            t.period_end.isoformat() if t.period_end else None,
        ],
        "summary": t.summary[:600],
        "keywords": t.keywords[:8],
    }
    if children is not None:
        out["children"] = children
    return out


def child_counts(owner, parents) -> dict[str, int]:
    """How many child topics each of `parents` has (those with none are left out)."""
    return dict(
        Topic.objects.owned_by(owner)
        .filter(parent__in=parents)
        .values("parent_id")
        .annotate(n=Count("id"))
        .values_list("parent_id", "n")
    )


def page_of(qs, limit: int, offset: int) -> tuple[list, int | None]:
    rows = list(qs[offset : offset + limit + 1])
    more = len(rows) > limit
    return rows[:limit], (offset + limit if more else None)


def messages_page(qs, limit: int, offset: int, **head: Any) -> tuple[dict[str, Any], list[Message]]:
    """A tool result listing one page of messages: `head`'s keys, then offset, the messages and
    (when there are more) next_offset; with the page's rows."""
    rows, next_offset = page_of(qs, limit, offset)
    result = {**head, "offset": offset, "messages": [message_dict(m, max_chars=1500) for m in rows]}
    if next_offset is not None:
        result["next_offset"] = next_offset
    return result, rows
