"""The active branch of a conversation's message tree, and moving between branches."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Prefetch

from chat.models import BranchSelection
from memory.models import Conversation, Message, ToolCall
from memory.storage import threads
from memory.storage.threads import ancestor_ids  # chat.turn walks the active branch with it too


def descend(conversation: Conversation, message: Message) -> Message:
    """Follow the newest reply down to a leaf (one recursive query, however deep)."""
    leaf_id = threads.newest_leaf_id(conversation.pk, message.pk)
    if leaf_id == message.pk:
        return message
    return Message.objects.get(pk=leaf_id)


def active_leaf(conversation: Conversation) -> Message | None:
    """The end of the active branch: a message with no replies (None: an empty conversation)."""
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
