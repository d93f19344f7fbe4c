"""A user's whole memory out: the Recollect export format and a Markdown transcript
(memory.transfer.portability reads the format back in).

The export holds what cannot be derived: conversations, messages (with their edit histories,
parent tree, deleted flag, metadata and external ids), tool calls, the topic tree with its
memberships, period summaries and entities. Chunks and passages are derived, so an import
rebuilds them from the text (and embeds with the target's model, whatever the source used);
the export records the chunk spans so the import can say when they came out differently.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.utils import timezone

from memory import models
from memory.storage.store import make_snippet

FORMAT = "recollect-memory"
VERSION = 1


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _live_parent(parent_of: dict[str, str | None], dropped: set[str], message_id: str) -> str | None:
    """The nearest ancestor not dropped from the export (as forget_message re-links replies)."""
    parent = parent_of.get(message_id)
    seen = set()
    while parent is not None and parent in dropped and parent not in seen:
        seen.add(parent)
        parent = parent_of.get(parent)
    return parent


def export_memory(owner, *, exclude_deleted: bool = False) -> dict[str, Any]:
    """Everything of `owner`'s memory that cannot be derived, as JSON-ready data."""
    conversations = list(models.Conversation.objects.owned_by(owner).order_by("created_at", "id"))
    logical = models.Message.objects.owned_by(owner).logical()
    parent_of = dict(logical.values_list("id", "parent_id"))
    dropped = set(logical.filter(deleted=True).values_list("id", flat=True)) if exclude_deleted else set()
    chunk_spans: dict[str, list[list[int]]] = defaultdict(list)
    chunk_rows = (
        models.Message.objects.owned_by(owner).filter(is_chunk=True)
        .order_by("chunk_parent_id", "chunk_index").values_list("chunk_parent_id", "metadata")
    )
    for parent_id, meta in chunk_rows:
        chunk_spans[parent_id].append([meta.get("char_start"), meta.get("char_end")])
    call_chunks: dict[str, int] = defaultdict(int)
    for parent_id in models.ToolCall.objects.owned_by(owner).filter(is_chunk=True).values_list(
        "chunk_parent_id", flat=True
    ):
        call_chunks[parent_id] += 1
    calls_of: dict[str, list[dict]] = defaultdict(list)
    for call in models.ToolCall.objects.owned_by(owner).logical().order_by("timestamp", "id"):
        calls_of[call.message_id].append({
            "id": call.pk,
            "tool_name": call.tool_name,
            "arguments": call.arguments,
            "result": call.result,
            "timestamp": _iso(call.timestamp),
            "is_error": call.is_error,
            "duration_ms": call.duration_ms,
            "token_count": call.token_count,
            "chunks": call_chunks.get(call.pk, 0),
        })
    messages_of: dict[str, list[dict]] = defaultdict(list)
    for m in logical.exclude(pk__in=dropped).order_by("conversation_id", "position").iterator(2000):
        messages_of[m.conversation_id].append({
            "id": m.pk,
            "role": m.role,
            "content": m.content,
            "timestamp": _iso(m.timestamp),
            "parent_id": _live_parent(parent_of, dropped, m.pk),
            "position": m.position,
            "token_count": m.token_count,
            "external_id": m.external_id,
            "metadata": m.metadata,
            "edited": m.edited,
            "edit_history": m.edit_history,
            "deleted": m.deleted,
            "deleted_at": _iso(m.deleted_at),
            "pinned": m.pinned,
            "pinned_at": _iso(m.pinned_at),
            "chunks": chunk_spans.get(m.pk, []),
            "tool_calls": calls_of.get(m.pk, []),
        })
    exported_ids = {m["id"] for ms in messages_of.values() for m in ms}
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": timezone.now().isoformat(),
        "owner": owner.get_username(),
        "embedding_model": settings.EMBEDDING_MODEL,
        "embedding_dimensions": settings.EMBEDDING_DIMENSIONS,
        "chunk_threshold": settings.INDEX_CHUNK_THRESHOLD,
        "conversations": [
            {
                "id": c.pk,
                "title": c.title,
                "created_at": _iso(c.created_at),
                "updated_at": _iso(c.updated_at),
                "next_position": c.next_position,
                "messages": messages_of.get(c.pk, []),
            }
            for c in conversations
        ],
        "topics": _export_topics(owner, exported_ids),
        "period_summaries": [
            {
                "period": p.period,
                "start": _iso(p.start),
                "end": _iso(p.end),
                "message_count": p.message_count,
                "summary": p.summary,
                "top_topics": p.top_topics,
            }
            for p in models.PeriodSummary.objects.owned_by(owner).order_by("period")
        ],
        **_export_entities(owner, exported_ids),
    }


def _export_topics(owner, exported_ids: set[str]) -> list[dict]:
    topics = list(models.Topic.objects.owned_by(owner))
    children: dict[str | None, list[models.Topic]] = defaultdict(list)
    ids = {t.pk for t in topics}
    for t in topics:
        children[t.parent_id if t.parent_id in ids else None].append(t)
    members: dict[str, list[dict]] = defaultdict(list)
    memberships = (
        models.TopicMembership.objects.owned_by(owner)
        .filter(message_id__in=exported_ids)
        .order_by("message__timestamp", "message__position", "message_id")
        .values_list("topic_id", "message_id", "score")
    )
    for topic_id, message_id, score in memberships:
        members[topic_id].append({"message_id": message_id, "score": score})
    out: list[dict] = []

    def walk(parent_id: str | None) -> None:
        siblings = children.get(parent_id, [])
        for t in sorted(siblings, key=lambda t: (t.order, _iso(t.period_start) or "", t.pk)):
            out.append({
                "id": t.pk,
                "parent_id": t.parent_id,
                "level": t.level,
                "order": t.order,
                "label": t.label,
                "keywords": t.keywords,
                "summary": t.summary,
                "summary_source": t.summary_source,
                "period_start": _iso(t.period_start),
                "period_end": _iso(t.period_end),
                "message_count": t.message_count,
                "token_count": t.token_count,
                "sample_message_ids": [i for i in t.sample_message_ids if i in exported_ids],
                "map_x": t.map_x,
                "map_y": t.map_y,
                "created_at": _iso(t.created_at),
                "updated_at": _iso(t.updated_at),
                "members": members.get(t.pk, []),
            })
            walk(t.pk)

    walk(None)
    return out


def _export_entities(owner, exported_ids: set[str]) -> dict[str, list]:
    entities = list(models.Entity.objects.owned_by(owner).order_by("kind", "normalized"))
    index = {e.pk: i for i, e in enumerate(entities)}
    mentions: dict[int, list[dict]] = defaultdict(list)
    rows = (
        models.EntityMention.objects.owned_by(owner).filter(message_id__in=exported_ids)
        .order_by("message__timestamp", "message__position", "message_id")
        .values_list("entity_id", "message_id", "count")
    )
    for entity_id, message_id, count in rows:
        mentions[entity_id].append({"message_id": message_id, "count": count})
    edges = sorted(
        [index[s], index[t], w]
        for s, t, w in models.EntityEdge.objects.owned_by(owner).values_list(
            "source_id", "target_id", "weight"
        )
        if s in index and t in index
    )
    return {
        "entities": [
            {
                "name": e.name,
                "normalized": e.normalized,
                "kind": e.kind,
                "mention_count": e.mention_count,
                "first_seen": _iso(e.first_seen),
                "last_seen": _iso(e.last_seen),
                "mentions": mentions.get(e.pk, []),
            }
            for e in entities
        ],
        "entity_edges": [{"source": s, "target": t, "weight": w} for s, t, w in edges],
    }


# --- Markdown ----------------------------------------------------------------------------------


def active_path(messages: Sequence[dict]) -> list[dict]:
    """The thread a reader sees: from the newest message (by position), newest replies first
    down to a leaf, then up through its parents to the root."""
    if not messages:
        return []
    by_id = {m["id"]: m for m in messages}
    latest_child: dict[str | None, dict] = {}
    for m in sorted(messages, key=lambda m: m["position"]):
        latest_child[m["parent_id"] if m["parent_id"] in by_id else None] = m
    leaf = max(messages, key=lambda m: m["position"])
    seen = {leaf["id"]}
    while (child := latest_child.get(leaf["id"])) is not None and child["id"] not in seen:
        seen.add(child["id"])
        leaf = child
    path = [leaf]
    while (parent := by_id.get(path[-1]["parent_id"])) is not None and parent["id"] not in seen:
        seen.add(parent["id"])
        path.append(parent)
    return path[::-1]


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.splitlines() or [""])


def _markdown_message(m: dict, lines: list[str]) -> None:
    notes = []
    if m["edited"]:
        n = len(m["edit_history"])
        notes.append(f"edited {n} time{'s' if n != 1 else ''}")
    if m["deleted"]:
        notes.append("deleted")
    head = f"### {m['role']} · {m['timestamp']}"
    lines.append(head + (f" ({', '.join(notes)})" if notes else ""))
    lines.append("")
    lines.append(m["content"])
    lines.append("")
    for call in m["tool_calls"]:
        status = " (error)" if call["is_error"] else ""
        result = call["result"]
        if len(result) > 2000:
            result = result[:2000] + f"… [{len(call['result']) - 2000:,} more characters]"
        lines.append(f"**Tool call `{call['tool_name']}`{status}** with `{call['arguments']}`:")
        lines.append("")
        lines.append(_quote(result))
        lines.append("")
    for i, old in enumerate(m["edit_history"], start=1):
        lines.append(f"*Version {i}, replaced {old.get('timestamp', '')}:*")
        lines.append("")
        lines.append(_quote(str(old.get("previous_content", ""))))
        lines.append("")


def export_markdown(owner, *, exclude_deleted: bool = False) -> str:
    """A readable transcript: each conversation's active thread in order, edits and tool calls
    noted, then any other branches."""
    data = export_memory(owner, exclude_deleted=exclude_deleted)
    lines = [f"# Memory of {data['owner']}", "", f"Exported {data['exported_at']}.", ""]
    for conv in data["conversations"]:
        lines += [f"## {conv['title'] or 'Untitled conversation'}", "",
                  f"Started {conv['created_at']} · {len(conv['messages'])} messages", ""]
        path = active_path(conv["messages"])
        on_path = {m["id"] for m in path}
        for m in path:
            _markdown_message(m, lines)
        others = [m for m in conv["messages"] if m["id"] not in on_path]
        if others:
            lines += ["#### Other branches", ""]
            snippets = {m["id"]: make_snippet(m["content"], 60) for m in conv["messages"]}
            for m in others:
                parent = snippets.get(m["parent_id"])
                lines.append(f"*In reply to: {parent}*" if parent else "*Starts a thread*")
                lines.append("")
                _markdown_message(m, lines)
        lines.append("---")
        lines.append("")
    return "\n".join(lines)
