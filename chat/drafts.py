"""Replies in progress, saved as they stream, so a server that dies mid-reply loses at most
the last moments of it.

A turn creates its ReplyDraft together with the context snapshot, saves the text every
REPLY_DRAFT_SAVE_SECONDS while tokens arrive (off the token path: one UPDATE at a time, never
awaited by the stream), and deletes it in the transaction that stores the finished reply.

A draft still there when nobody is writing it is an orphan: its process is gone (same host,
and that pid is dead or now belongs to another process), or it has not been saved for
REPLY_DRAFT_ORPHAN_SECONDS (another host's process). `recover` stores an orphan's text as the
reply, marked incomplete with the reason, exactly where the reply would have been. It runs
when the conversation's page or websocket is opened and when `manage.py serve` starts.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.utils import timezone

from chat import replies
from chat.db import durable
from chat.models import ReplyDraft
from chat.processes import PROCESS, is_dead
from memory import tasks
from memory.models import Conversation, Message

logger = logging.getLogger(__name__)

INTERRUPTED = "The server stopped while this reply was being written; what had arrived is kept."


_live: set[str] = set()  # drafts this process is writing


def begin(owner, conversation: Conversation, reply_id: str, parent: Message, snapshot, mode: str) -> None:
    ReplyDraft.objects.create(
        id=reply_id,
        owner=owner,
        conversation=conversation,
        parent=parent,
        snapshot=snapshot,
        mode=mode,
        process=PROCESS,
    )
    _live.add(reply_id)


def save(reply_id: str, text: str) -> None:
    """The text so far (a no-op once the reply is stored)."""
    ReplyDraft.objects.filter(pk=reply_id).update(text=text, updated_at=timezone.now())


def finish(reply_id: str) -> None:
    """Called in the transaction that stores the reply."""
    ReplyDraft.objects.filter(pk=reply_id).delete()
    _live.discard(reply_id)


def _orphans(queryset):
    stale_before = timezone.now() - dt.timedelta(seconds=settings.REPLY_DRAFT_ORPHAN_SECONDS)
    for draft in queryset:
        if draft.process == PROCESS:
            if draft.pk not in _live:  # this process's turn ended without storing it
                yield draft
        elif is_dead(draft.process) or draft.updated_at < stale_before:
            yield draft


def recover(conversation: Conversation | None = None) -> list[Message]:
    """Store orphaned drafts (of one conversation, or all) as incomplete replies."""
    drafts = ReplyDraft.objects.all() if conversation is None else conversation.reply_drafts.all()
    stored: list[Message] = []
    for candidate in _orphans(drafts.only("pk", "process", "updated_at")):

        def store_one(draft_id: str = candidate.pk) -> Message | None:
            # Locked, and skipped when another process is storing it right now.
            draft = (
                ReplyDraft.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("owner", "conversation", "parent", "snapshot")
                .filter(pk=draft_id)
                .first()
            )
            if draft is None:
                return None
            reply = replies.Reply(
                id=draft.pk, text=draft.text, status="failed", error=INTERRUPTED, mode=draft.mode
            )
            message = replies.store_reply(
                draft.owner, draft.conversation, draft.parent, reply, draft.snapshot
            )
            finish(draft.pk)
            return message

        try:
            message = durable(store_one)()
        except Exception:
            logger.exception("could not recover the reply draft %s", candidate.pk)
            continue
        if message is not None:
            logger.warning("stored interrupted reply %s (%d characters)", message.pk, len(message.content))
            tasks.queue_upkeep(message.owner_id, [message.pk])
            stored.append(message)
    return stored


def recover_quietly(conversation: Conversation | None = None) -> list[Message]:
    """`recover` for page and socket openings: a failure there must not stop the page."""
    try:
        return recover(conversation)
    except Exception:
        logger.exception("reply draft recovery failed")
        return []
