"""The active branch of a conversation's message tree, and moving between branches."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import Prefetch

from chat.models import BranchSelection
from memory.models import Conversation, Message, ToolCall


def ancestor_ids(leaf_id: str, limit: int = 100_001) -> list[str]:
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


def descend(conversation: Conversation, message: Message) -> Message:
    """Follow the newest reply down to a leaf (one recursive query, however deep)."""
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
                FROM down WHERE down.id IS NOT NULL AND down.depth < 100000
            )
            SELECT id FROM down WHERE id IS NOT NULL ORDER BY depth DESC LIMIT 1
            """,
            [message.pk, conversation.pk],
        )
        leaf_id = cursor.fetchone()[0]
    if leaf_id == message.pk:
        return message
    return Message.objects.get(pk=leaf_id)


def active_leaf(conversation: Conversation) -> Message | None:
    selection = BranchSelection.objects.filter(conversation=conversation).select_related("leaf").first()
    leaf = selection.leaf if selection else None
    if leaf is None or leaf.conversation_id != conversation.pk:
        leaf = Message.objects.filter(conversation=conversation, is_chunk=False).order_by("-position").first()
    if leaf is None:
        return None
    # Another tab (or process) may have continued the thread past the saved leaf.
    return descend(conversation, leaf)


def recent_path(conversation: Conversation, leaf: Message | None, limit: int) -> tuple[list[Message], bool]:
    """The last `limit` messages of the branch ending at `leaf`, root first (deleted ones
    included, as placeholders), and whether earlier ones were left out. Reads only those rows,
    however long the branch; their edit histories are left out (see `message_history`)."""
    if leaf is None:
        return [], False
    ids = ancestor_ids(leaf.pk, limit=limit + 1)
    truncated = len(ids) > limit
    ids = ids[-limit:]
    by_id = (
        Message.objects.filter(conversation=conversation, is_chunk=False)
        .defer("edit_history")
        .prefetch_related(
            Prefetch("tool_calls", queryset=ToolCall.objects.filter(is_chunk=False).order_by("timestamp"))
        )
        .in_bulk(ids)
    )
    return [by_id[i] for i in ids if i in by_id], truncated


def set_leaf(conversation: Conversation, message: Message) -> None:
    # One INSERT … ON CONFLICT DO UPDATE (update_or_create would take a savepoint, a locking
    # SELECT and an UPDATE: four round trips, twice a turn).
    BranchSelection.objects.bulk_create(
        [BranchSelection(conversation=conversation, leaf=message)],
        update_conflicts=True,
        unique_fields=["conversation"],
        update_fields=["leaf", "updated_at"],
    )


def select_branch(conversation: Conversation, message: Message) -> Message:
    """Make the branch through `message` the active one; returns its leaf."""
    leaf = descend(conversation, message)
    set_leaf(conversation, leaf)
    return leaf


@dataclass
class Siblings:
    index: int  # 1-based position of the message among its siblings
    count: int
    previous_id: str | None
    next_id: str | None


def siblings_for(conversation: Conversation, path: list[Message]) -> dict[str, Siblings]:
    """For each message on the path, where it sits among the replies to its parent."""
    parent_ids = {m.parent_id for m in path}
    rows = (
        Message.objects.filter(conversation=conversation, is_chunk=False).filter(
            parent_id__in=[p for p in parent_ids if p]
        )
        if any(parent_ids)
        else Message.objects.none()
    )
    groups: dict[str | None, list[str]] = {}
    for pk, parent_id in rows.order_by("position").values_list("pk", "parent_id"):
        groups.setdefault(parent_id, []).append(pk)
    if None in parent_ids:
        groups[None] = list(
            Message.objects.filter(conversation=conversation, is_chunk=False, parent__isnull=True)
            .order_by("position")
            .values_list("pk", flat=True)
        )
    result = {}
    for m in path:
        group = groups.get(m.parent_id) or [m.pk]
        i = group.index(m.pk) if m.pk in group else 0
        result[m.pk] = Siblings(
            index=i + 1,
            count=len(group),
            previous_id=group[i - 1] if i > 0 else None,
            next_id=group[i + 1] if i + 1 < len(group) else None,
        )
    return result
