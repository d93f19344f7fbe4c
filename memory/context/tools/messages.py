"""The tools that read messages and tool calls: by id (paged by character or by chunk), by
period, as a thread or a session around one message, and the tool calls a message made."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from memory.context.tools.arguments import (
    CHAR_OFFSET,
    ID,
    LIMIT,
    OFFSET,
    owned_conversation,
    parse_period,
    visible_message,
)
from memory.context.tools.registry import ToolError, tool
from memory.context.tools.shapes import (
    check_offset,
    json_len,
    message_dict,
    messages_page,
    page_of,
    text_room,
    tool_call_dict,
)
from memory.errors import NotFound
from memory.models import Message, ToolCall
from memory.storage import sessions
from memory.tokens import snip


def _opened_messages(ids: Any) -> str:
    if not isinstance(ids, list):
        return ""
    return f"opened {len(ids)} message{'s' if len(ids) != 1 else ''}"


@tool(
    "get_message_by_id",
    "Read one message of memory by its id (from the memory index or a search), page by page: "
    "the result gives total_chars and next_offset; call again with offset=next_offset until "
    "next_offset is null. A chunk id reads that chunk.",
    {"id": {**ID, "description": "message id"}, "offset": CHAR_OFFSET},
    required=["id"],
    keywords=("message", "read", "full", "id"),
    core=True,
    label=lambda a: f"opened message {snip(a['id'], 40)}" if a.get("id") else "",
)
def get_message_by_id(owner, *, id: str, offset: int = 0, conversation=None):
    m = visible_message(owner, id)
    check_offset(offset, len(m.content), f"message {m.pk}")
    item = message_dict(m, offset=offset, max_chars=text_room(message_dict(m, max_chars=0)))
    shown = len(item["content"])
    return item, f"read message {m.pk}" + (
        f" characters {offset}-{offset + shown} of {len(m.content)}"
        if shown < len(m.content)
        else ""
    )


@tool(
    "get_messages_by_ids",
    "Read several messages by their ids, each from character offset (default 0); each says "
    "total_chars and next_offset: read on in one with get_message_by_id(id, offset).",
    {
        "ids": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
        "offset": CHAR_OFFSET,
    },
    required=["ids"],
    keywords=("messages", "read", "ids"),
    label=lambda a: _opened_messages(a.get("ids")),
)
def get_messages_by_ids(owner, *, ids: list[str], offset: int = 0, conversation=None):
    found = {m.pk: m for m in Message.objects.visible_to(owner).filter(pk__in=ids)}
    missing = [i for i in ids if i not in found]
    if not found:
        raise NotFound("message", ", ".join(ids[:5]))
    order = [found[i] for i in dict.fromkeys(ids) if i in found]
    if offset and all(offset >= len(m.content) for m in order):
        longest = max(len(m.content) for m in order)
        raise ToolError(
            f"offset {offset} is past the end of every message asked for "
            f"(the longest has {longest} characters)"
        )
    shell = {"messages": [message_dict(m, max_chars=0) for m in order], "not_found": missing}
    per = text_room(shell, slack=300 + 60 * len(order)) // len(order)
    items = []
    for m in order:
        if offset >= len(m.content) > 0:
            item = message_dict(m, max_chars=0)
            item.update(
                offset=offset,
                next_offset=None,
                remaining_chars=0,
                note=f"offset {offset} is past its end ({len(m.content)} characters)",
            )
            item.pop("truncated", None)
        else:
            item = message_dict(m, max_chars=per, offset=offset)
        items.append(item)
    result: dict[str, Any] = {"messages": items}
    if missing:
        result["not_found"] = missing
    return result, f"read {len(found)} messages" + (
        f" ({len(missing)} not found)" if missing else ""
    )


@tool(
    "get_message_with_chunks",
    "Read a long message chunk by chunk (a chunk id leads to its whole message). offset and "
    "next_offset count chunks here; a chunk too long for one result says its own next_offset: "
    "read on in it with get_message_by_id(chunk id, offset).",
    {
        "id": ID,
        "offset": {**OFFSET, "description": "first chunk (0 = the first)"},
        "limit": {**LIMIT, "maximum": 5, "description": "chunks (1-5), fewer if they are long"},
    },
    required=["id"],
    keywords=("chunk", "chunks", "long", "rest"),
    label=lambda a: f"read message {snip(a['id'], 40)} in full" if a.get("id") else "",
)
def get_message_with_chunks(owner, *, id: str, offset: int = 0, limit: int = 3, conversation=None):
    m = visible_message(owner, id)
    if m.is_chunk:
        m = visible_message(owner, m.chunk_parent_id)
    live = m.chunks.filter(deleted=False).order_by("chunk_index")
    total = live.count()
    if not total:
        if offset:
            raise ToolError(
                f"message {m.pk} has no chunks ({len(m.content)} characters): read it with "
                "get_message_by_id, whose offset counts characters"
            )
        head = message_dict(m, max_chars=text_room({"message": message_dict(m, max_chars=0)}))
        result = {"message": head, "chunk_count": 0, "offset": 0, "chunks": [], "next_offset": None}
        return result, f"read message {m.pk}"
    if offset >= total:
        raise ToolError(
            f"offset {offset} is past the last chunk: message {m.pk} has {total} chunks, "
            f"so offsets run from 0 to {total - 1}"
        )
    head = message_dict(m, max_chars=0)
    for key in ("truncated", "note", "next_offset", "offset", "remaining_chars"):
        head.pop(key, None)
    head["note"] = f"its {len(m.content)} characters are in {total} chunks, below"
    result = {"message": head, "chunk_count": total, "offset": offset, "chunks": []}
    room = text_room(result, slack=400)
    for c in live[offset : offset + limit]:
        shell = json_len(message_dict(c, max_chars=0)) + 60
        item = message_dict(c, max_chars=max(0, room - shell))
        # The first chunk is always shown (a page of it if need be); later ones only whole.
        if result["chunks"] and item["next_offset"] is not None:
            break
        result["chunks"].append(item)
        room -= json_len(item) + 2
        if item["next_offset"] is not None or room <= 0:
            break
    shown = len(result["chunks"])
    result["next_offset"] = offset + shown if offset + shown < total else None
    return result, f"read message {m.pk} chunks {offset}-{offset + shown - 1} of {total}"


@tool(
    "get_period_messages",
    "Read messages of a period: 'today', 'yesterday', 'this_week', "
    "'last_week', 'this_month', 'last_month', a date (YYYY-MM-DD), a month (YYYY-MM) or a range "
    "(YYYY-MM-DD..YYYY-MM-DD).",
    {
        "period": {"type": "string", "maxLength": 60},
        "limit": LIMIT,
        "offset": OFFSET,
        "conversation_id": ID,
    },
    required=["period"],
    keywords=("today", "yesterday", "week", "month", "date", "when", "period", "last", "ago"),
    label=lambda a: f"looked at messages from {snip(a.get('period') or 'a period', 40)}",
)
def get_period_messages(
    owner,
    *,
    period: str,
    limit: int = 20,
    offset: int = 0,
    conversation_id: str | None = None,
    conversation=None,
):
    start, end, label = parse_period(period)
    qs = Message.objects.visible_to(owner).logical().remembered_or_in(getattr(conversation, "pk", None))
    if start:
        qs = qs.filter(timestamp__gte=start)
    if end:
        qs = qs.filter(timestamp__lt=end)
    conv = owned_conversation(owner, conversation_id)
    if conv:
        qs = qs.filter(conversation=conv)
    result, rows = messages_page(
        qs.order_by("timestamp", "position"),
        limit,
        offset,
        period=label,
        start=start.isoformat() if start else None,
        end=end.isoformat() if end else None,
    )
    return result, f"read {len(rows)} messages from {label}"


@tool(
    "get_conversation_thread",
    "Read the thread a message belongs to: the messages before it "
    "(up to depth), the message, and its replies.",
    {"message_id": ID, "depth": {"type": "integer", "minimum": 1, "maximum": 20}},
    required=["message_id"],
    keywords=("thread", "context", "before", "conversation", "reply"),
    label=lambda a: f"followed the thread of {snip(a['message_id'], 40)}" if a.get("message_id") else "",
)
def get_conversation_thread(owner, *, message_id: str, depth: int = 5, conversation=None):
    m = visible_message(owner, message_id)
    if m.is_chunk:
        m = visible_message(owner, m.chunk_parent_id)
    chain: list[Message] = []
    current = m
    visible = Message.objects.visible_to(owner).logical()
    for _ in range(depth):
        if current.parent_id:
            parent = visible.filter(pk=current.parent_id).first()
        else:  # imported history may have no parent links: the previous position stands in
            parent = (
                visible.filter(
                    conversation_id=current.conversation_id, position__lt=current.position
                )
                .order_by("-position")
                .first()
            )
        if parent is None:
            break
        chain.insert(0, parent)
        current = parent
    replies = list(
        visible.filter(
            Q(parent_id=m.pk)
            | Q(conversation_id=m.conversation_id, parent_id=None, position=m.position + 1)
        ).order_by("position")[:5]
    )
    items = [message_dict(x, max_chars=1500) for x in [*chain, m, *replies]]
    return {
        "message_id": m.pk,
        "messages": items,
    }, f"read the thread of {m.pk} ({len(items)} messages)"


@tool(
    "get_tool_call",
    "Read one stored tool call (arguments and result) by id; a long result pages: call again "
    "with offset=next_offset until next_offset is null.",
    {"id": ID, "offset": CHAR_OFFSET},
    required=["id"],
    keywords=("tool", "call", "result"),
    label=lambda a: f"opened tool call {snip(a.get('id') or '?', 40)}",
)
def get_tool_call(owner, *, id: str, offset: int = 0, conversation=None):
    c = ToolCall.objects.owned_by(owner).visible().filter(pk=id).first()
    if c is None:
        raise NotFound("tool call", id)
    check_offset(offset, len(c.result), f"the result of tool call {c.pk}")
    item = tool_call_dict(c, offset=offset, max_chars=text_room(tool_call_dict(c, max_chars=0)))
    return item, f"read tool call {c.pk} ({c.tool_name})"


@tool(
    "get_tool_calls_by_message",
    "List the tool calls an assistant message made.",
    {"message_id": ID, "limit": LIMIT, "offset": OFFSET},
    required=["message_id"],
    keywords=("tool", "calls", "message"),
    label=lambda a: f"opened the tool calls of message {snip(a.get('message_id') or '?', 40)}",
)
def get_tool_calls_by_message(
    owner, *, message_id: str, limit: int = 20, offset: int = 0, conversation=None
):
    m = visible_message(owner, message_id)
    qs = (
        ToolCall.objects.owned_by(owner).visible().logical().filter(message=m).order_by("timestamp")
    )
    rows, next_offset = page_of(qs, limit, offset)
    result = {"message_id": m.pk, "offset": offset, "tool_calls": [tool_call_dict(c) for c in rows]}
    if next_offset is not None:
        result["next_offset"] = next_offset
    return result, f"listed {len(rows)} tool calls of {m.pk}"


@tool(
    "get_session",
    "Read the session around a message: the turns before and after it without an idle gap.",
    {"message_id": ID},
    required=["message_id"],
    keywords=("session", "around", "context", "neighbours"),
)
def get_session(owner, *, message_id: str, conversation=None):
    m = visible_message(owner, message_id)
    if m.is_chunk:
        m = visible_message(owner, m.chunk_parent_id)
    run = sessions.session_of(owner, m, window=10)
    return (
        {"message_id": m.pk, "messages": [message_dict(x, max_chars=1500) for x in run]},
        f"read the session of {m.pk} ({len(run)} messages)",
    )
