"""The tools that read memory by level (memory.organizing.hierarchy: FULL, SUMMARY, META,
ARCHIVE): browse_hierarchy lists a level, expand_node opens any node of it, and
get_conversation_stats counts memory, the messages per level and the tokens the index saved."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Min, Sum

from memory.context.tools.arguments import ID, LIMIT, OFFSET, owned_conversation
from memory.context.tools.registry import tool
from memory.context.tools.shapes import MAX_CONTENT_CHARS, child_counts, message_dict, page_of, topic_dict
from memory.errors import NotFound
from memory.models import Conversation, Entity, Message, ToolCall, Topic
from memory.organizing import hierarchy
from memory.tokens import snip


def _message_node(owner, b: hierarchy.Boundaries, m: Message) -> dict[str, Any]:
    return {
        "id": m.pk,
        "node_type": "message",
        "role": m.role,
        "timestamp": m.timestamp.isoformat(),
        "level": b.level_of(m.timestamp, m.pk).name,
        "pinned": m.pinned,
        "summary": hierarchy.message_summary(m),
        "tokens": m.token_count,
    }


def _topic_node(b: hierarchy.Boundaries, t: Topic, *, children: int | None = None) -> dict[str, Any]:
    out = topic_dict(t, children=children)
    out["node_type"] = "topic"
    out["level"] = b.topic_level(t).name
    return out


@tool(
    "expand_node",
    "Open any node of the memory hierarchy by id: a message with its components (chunks, tool "
    "calls, errors), summary, level and topic; or a topic with its summary and children (its "
    "sub-topics, or for a leaf topic its messages). Children page with offset and limit.",
    {"id": {**ID, "description": "a message id or a topic id"}, "limit": LIMIT, "offset": OFFSET},
    required=["id"],
    keywords=("expand", "node", "open", "detail", "summary", "level"),
    label=lambda a: f"expanded memory node {snip(a['id'], 40)}" if a.get("id") else "",
)
def expand_node(owner, *, id: str, limit: int = 20, offset: int = 0, conversation=None):
    b = hierarchy.boundaries(owner)
    m = Message.objects.visible_to(owner).filter(pk=id).first()
    if m is not None:
        return _expand_message(owner, b, m, limit, offset)
    t = Topic.objects.owned_by(owner).filter(pk=id).first()
    if t is not None:
        return _expand_topic(owner, b, t, limit, offset)
    raise NotFound("node", id)


def _expand_message(owner, b: hierarchy.Boundaries, m: Message, limit: int, offset: int):
    node = _message_node(owner, b, m)
    node["message"] = message_dict(m, max_chars=MAX_CONTENT_CHARS)
    logical = m.chunk_parent if m.is_chunk else m
    chunks_qs = Message.objects.owned_by(owner).filter(chunk_parent=logical, is_chunk=True)
    chunks, next_offset = page_of(chunks_qs.order_by("chunk_index"), limit, offset)
    calls = list(
        ToolCall.objects.owned_by(owner).logical().filter(message=logical).order_by("timestamp")[:20]
    )
    node["components"] = {
        "chunk_count": chunks_qs.count(),
        "chunks": [
            {"id": c.pk, "chunkIndex": c.chunk_index, "tokens": c.token_count, "snippet": snip(c.content)}
            for c in chunks
        ],
        "tool_calls": [
            {"id": c.pk, "toolName": c.tool_name, "isError": c.is_error, "result": snip(c.result)}
            for c in calls
        ],
        "errors": [logical.metadata["error"]] if (logical.metadata or {}).get("error") else [],
    }
    membership = logical.topic_memberships.select_related("topic").first()
    node["topic"] = (
        {"id": membership.topic_id, "label": membership.topic.label} if membership else None
    )
    node["offset"] = offset
    if next_offset is not None:
        node["next_offset"] = next_offset
        node["note"] = f"more chunks: expand_node(id={m.pk!r}, offset={next_offset})"
    return node, f"expanded message {m.pk} ({node['level']})"


def _expand_topic(owner, b: hierarchy.Boundaries, t: Topic, limit: int, offset: int):
    node = _topic_node(b, t)
    node["parent"] = {"id": t.parent_id, "label": t.parent.label} if t.parent_id else None
    kids = Topic.objects.owned_by(owner).filter(parent=t)
    if kids.exists():
        rows, next_offset = page_of(kids.order_by("order"), limit, offset)
        counts = child_counts(owner, rows)
        node["children"] = [_topic_node(b, k, children=counts.get(k.pk, 0)) for k in rows]
    else:
        members = (
            Message.objects.visible_to(owner)
            .logical()
            .filter(topic_memberships__topic=t)
            .order_by("timestamp", "id")
        )
        rows, next_offset = page_of(members, limit, offset)
        node["children"] = [_message_node(owner, b, m) for m in rows]
    node["offset"] = offset
    if next_offset is not None:
        node["next_offset"] = next_offset
    return node, f'expanded topic "{snip(t.label, 50)}" ({len(rows)} children)'


@tool(
    "browse_hierarchy",
    "List the nodes of one level of memory, oldest first: FULL (the newest messages), SUMMARY "
    "(older messages as one-sentence summaries), META (topic groups of older messages) or "
    "ARCHIVE (the coarsest topics of the oldest memory). Open a node with expand_node.",
    {
        "level": {
            "type": "string",
            "enum": hierarchy.LEVEL_NAMES,
            "description": "FULL, SUMMARY, META or ARCHIVE",
        },
        "limit": LIMIT,
        "offset": OFFSET,
    },
    required=["level"],
    keywords=("browse", "hierarchy", "level", "levels", "archive", "older", "overview"),
    label=lambda a: f"browsed the {snip(a.get('level') or '?', 12)} level of memory",
)
def browse_hierarchy(owner, *, level: str, limit: int = 20, offset: int = 0, conversation=None):
    lvl = hierarchy.Level[level]
    b = hierarchy.boundaries(owner)
    result: dict[str, Any] = {"level": lvl.name, "level_number": int(lvl), "holds": hierarchy.level_ages(lvl)}
    if lvl in (hierarchy.Level.FULL, hierarchy.Level.SUMMARY):
        qs = hierarchy.messages_at(owner, b, lvl).order_by("timestamp", "id")
        rows, next_offset = page_of(qs, limit, offset)
        nodes = [_message_node(owner, b, m) for m in rows]
        if lvl == hierarchy.Level.FULL:
            for node, m in zip(nodes, rows, strict=True):
                node["content"] = snip(m.content, 1500)
    else:
        qs = hierarchy.topics_at(owner, b, lvl).order_by("period_start", "id")
        rows, next_offset = page_of(qs, limit, offset)
        nodes = [_topic_node(b, t) for t in rows]
    result.update({"node_count": qs.count(), "offset": offset, "items": nodes})
    if next_offset is not None:
        result["next_offset"] = next_offset
    if not b.active:
        result["note"] = (
            f"memory holds at most HIERARCHY_SUMMARY_THRESHOLD={settings.HIERARCHY_SUMMARY_THRESHOLD} "
            "messages, so every message is FULL"
        )
    elif not nodes and lvl in (hierarchy.Level.META, hierarchy.Level.ARCHIVE):
        result["note"] = (
            f"no {lvl.name} nodes: memory does not reach that far back, or its topics are not "
            "built yet (background upkeep)"
        )
    return result, f"browsed {lvl.name} ({len(nodes)} of {result['node_count']} nodes)"


@tool(
    "get_conversation_stats",
    "Statistics of memory (or one conversation): messages by role and by level, "
    "tokens, tool calls, topics, entities, first and last dates, and the tokens the memory "
    "index saved on recent turns (measured on what each turn sent).",
    {"conversation_id": ID},
    keywords=("stats", "statistics", "how", "many", "count", "size"),
    label=lambda a: "looked at memory statistics",
)
def get_conversation_stats(owner, *, conversation_id: str | None = None, conversation=None):
    conv = owned_conversation(owner, conversation_id)
    qs = Message.objects.visible_to(owner).logical()
    if conv:
        qs = qs.filter(conversation=conv)
    agg = qs.aggregate(
        n=Count("id"), tokens=Sum("token_count"), first=Min("timestamp"), last=Max("timestamp")
    )
    by_role = dict(qs.values("role").annotate(n=Count("id")).values_list("role", "n"))
    calls = ToolCall.objects.owned_by(owner).visible().logical()
    if conv:
        calls = calls.filter(message__conversation=conv)
    total_tokens = agg["tokens"] or 0
    days = ((agg["last"] - agg["first"]).total_seconds() / 86400) if agg["first"] else 0
    result = {
        "scope": f"conversation {conv.pk}" if conv else "all memory",
        "messages": agg["n"],
        "by_role": by_role,
        "tokens": total_tokens,
        "tool_calls": calls.count(),
        "conversations": 1 if conv else Conversation.objects.owned_by(owner).count(),
        "topics": Topic.objects.owned_by(owner).count(),
        "entities": Entity.objects.owned_by(owner).filter(mention_count__gt=0).count(),
        "first": agg["first"].isoformat() if agg["first"] else None,
        "last": agg["last"].isoformat() if agg["last"] else None,
        "duration_days": round(days, 2),
        "index_budget_tokens": settings.INDEX_MAX_TOKENS,
        # Messages per level, and tokens saved as measured on the turns' snapshots.
        "compression_levels": hierarchy.level_counts(owner, conv),
        **hierarchy.measured_savings(owner, conv),
    }
    return result, f"{agg['n']} messages, {total_tokens:,} tokens"
