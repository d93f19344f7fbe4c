"""Whole conversations and whole memories going for good: a temporary chat when the person leaves
it (or when it expires), and "Forget everything".

A temporary chat never reached memory (no topic, entity, fact, summary or cache was drawn from
it, no other conversation read it: memory.models.Conversation.temporary), so deleting it with
everything in it leaves nothing: memory.lifecycle.deleting.delete_conversation. Forget
everything deletes every row of the person's memory in every app (every table with an `owner`,
and the rows that hang on their conversations and messages), in one transaction; their
settings (memory.models.Preferences) and their account stay.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from memory.lifecycle import turn_lock
from memory.lifecycle.deleting import delete_conversation
from memory.models import Conversation, MemoryVersion, Message, Preferences
from memory.storage import versions

# What forgetting everything leaves: the person's settings, and the counter that tells every
# cache that memory changed (bumped instead).
KEPT = (Preferences, MemoryVersion)


def end_temporary_chat(owner, conversation_id: str) -> bool:
    """Delete a temporary chat with everything in it (the person left it); False when there is
    no such temporary chat of theirs (a remembered one is never deleted here)."""
    with transaction.atomic():
        # Before the conversation's row lock: a turn writing into it holds the turn lock and
        # then needs that row (its foreign keys), so the other order could deadlock.
        turn_lock.hold_off_turns(owner)
        conversation = (
            Conversation.objects.owned_by(owner).filter(pk=conversation_id, temporary=True)
            .select_for_update().first()
        )
        if conversation is None:
            return False
        delete_conversation(owner, conversation.pk)
    return True


def end_expired_temporary_chats(now: dt.datetime | None = None) -> int:
    """Delete every temporary chat started more than TEMPORARY_CHAT_HOURS ago (of any person);
    how many went."""
    cutoff = (now or timezone.now()) - dt.timedelta(hours=settings.TEMPORARY_CHAT_HOURS)
    ended = 0
    expired = Conversation.objects.filter(temporary=True, created_at__lt=cutoff)
    for pk, owner_id in expired.values_list("pk", "owner_id")[:500]:
        owner = apps.get_model(settings.AUTH_USER_MODEL)(pk=owner_id)
        ended += end_temporary_chat(owner, pk)
    return ended


def _owned_tables() -> list[tuple[type[models.Model], str]]:
    """(model, SQL condition on its rows) of every table holding a person's memory: those with an
    `owner`, and those hanging on a conversation or message without one (chat's branch choice)."""
    user = apps.get_model(settings.AUTH_USER_MODEL)
    owned, hanging = [], []
    for model in apps.get_models():
        if model in KEPT or model._meta.proxy or not model._meta.managed:
            continue
        fields = {f.name: f for f in model._meta.concrete_fields}
        owner = fields.get("owner")
        if owner is not None and owner.is_relation and owner.related_model is user:
            owned.append((model, f"{owner.column} = %s"))
            continue
        for field in fields.values():
            if field.is_relation and field.related_model in (Conversation, Message):
                parent = field.related_model._meta.db_table
                hanging.append((model, f"{field.column} IN (SELECT id FROM {parent} WHERE owner_id = %s)"))
                break
    # Rows that hang on others first: their condition reads the rows they hang on.
    return hanging + owned


def forget_everything(owner) -> dict[str, Any]:
    """Every message, conversation, tool call, passage, topic, entity, fact, summary, snapshot,
    cache and import of `owner` is deleted, for good. Returns how many messages, conversations,
    facts and topics there were."""
    from memory.models import Fact, Topic

    counted = {
        "messages": Message.objects.owned_by(owner).logical().count(),
        "conversations": Conversation.objects.owned_by(owner).count(),
        "facts": Fact.objects.owned_by(owner).count(),
        "topics": Topic.objects.owned_by(owner).count(),
    }
    with transaction.atomic(), connection.cursor() as cursor:
        turn_lock.hold_off_turns(owner)  # the turns writing now are deleted with the rest
        for model, condition in _owned_tables():
            cursor.execute(f"DELETE FROM {model._meta.db_table} WHERE {condition}", [owner.pk])
        # Every cache keyed by the memory version now misses.
        versions.bump(owner.pk)
    return counted
