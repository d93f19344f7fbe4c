"""Deleting and restoring a message, and deleting a conversation with everything in it.

A deleted message is kept for undo but leaves memory at once: its passages leave search, its
mentions leave the entity graph (no edge it made may lift another message), its words leave its
replies' context, and the memory version moves on so no cache answers from before. Restoring
brings it back through upkeep. Forgetting, which leaves nothing, is memory.lifecycle.forgetting.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from memory.knowledge.entities import remove_mentions
from memory.lifecycle import turn_lock
from memory.models import Message, Passage, SemanticCacheEntry, Topic, TopicMembership
from memory.organizing.topic_updates import refresh
from memory.storage import store, versions


def _set_deleted(owner, message_id: str, deleted: bool) -> Message:
    with transaction.atomic():
        message = store.lock_whole_message(owner, message_id)
        message.deleted = deleted
        message.deleted_at = timezone.now() if deleted else None
        message.save(update_fields=["deleted", "deleted_at"])
        store.memory_changed(owner, message)
        message.chunks.update(deleted=deleted, deleted_at=message.deleted_at)
        Passage.objects.filter(logical_message_id=message.pk).update(deleted=deleted)
        if deleted:
            # Out of the entity graph now, not at upkeep: no edge it made may lift another
            # message in search (restoring re-indexes it through upkeep).
            remove_mentions(owner, [message.pk])
        # A deleted message's words leave its replies' context too (and come back on restore).
        store.refresh_reply_context(owner, message.pk)
        store.queue_upkeep_on_commit(owner.pk, [message.pk])
    return message


def delete_message(owner, message_id: str) -> Message:
    """Soft delete: kept for undo, never returned by search, index or tools."""
    return _set_deleted(owner, message_id, True)


def restore_message(owner, message_id: str) -> Message:
    return _set_deleted(owner, message_id, False)


def delete_conversation(owner, conversation_id: str) -> None:
    """Delete a conversation with everything in it. Topics that held its messages are re-derived
    at once (their labels and summaries lose its words; empty ones go), and upkeep is queued for
    the rest (entities only it mentioned)."""
    with transaction.atomic():
        turn_lock.hold_off_turns(owner)  # no turn keeps what it read here (turn_lock)
        conversation = store.get_conversation(owner, conversation_id)
        ids = list(
            Message.objects.owned_by(owner).filter(conversation=conversation, is_chunk=False)
            .values_list("pk", flat=True)
        )
        members = TopicMembership.objects.owned_by(owner).filter(message__conversation=conversation)
        topic_ids = set(members.values_list("topic_id", flat=True))
        for start in range(0, len(ids), 500):  # their mentions, edges and the names only they held
            remove_mentions(owner, ids[start : start + 500])
        conversation.delete()
        # Cached results of other conversations may quote it: reused no more, and kept no more.
        versions.bump(owner.pk)
        SemanticCacheEntry.objects.filter(owner_id=owner.pk).delete()
        # A topic that only showed one of them as a sample is re-derived too.
        topic_ids |= {
            pk for pk, samples in Topic.objects.owned_by(owner).values_list("pk", "sample_message_ids")
            if set(samples or ()) & set(ids)
        }
        if topic_ids:
            refresh(owner, topic_ids)
        for start in range(0, len(ids), 500):
            store.queue_upkeep_on_commit(owner.pk, ids[start : start + 500])
