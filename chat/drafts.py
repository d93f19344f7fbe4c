"""Replies in progress, saved as they stream, so a server that dies mid-reply loses at most
the last moments of it.

A turn creates its ReplyDraft together with the context snapshot, and deletes it in the
transaction that stores the finished reply. Meanwhile the text is saved every
REPLY_DRAFT_SAVE_SECONDS off the token path: one task per server process saves the text of
every reply it is streaming in one UPDATE (`save_many`), so a hundred replies streaming cost
one database call a second, not a hundred; the stream never waits for it.

A draft still there when nobody is writing it is an orphan: its process is gone (same host,
and that pid is dead or now belongs to another process), or it has not been saved for
REPLY_DRAFT_ORPHAN_SECONDS (another host's process). `recover` stores an orphan's text as the
reply, marked incomplete with the reason, exactly where the reply would have been. It runs
when the conversation's page or websocket is opened and when `manage.py serve` starts.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import weakref

from django.conf import settings
from django.db import connection
from django.utils import timezone

from chat import replies
from chat.db import db, durable
from chat.models import ReplyDraft
from chat.processes import PROCESS, is_dead
from memory import tasks
from memory.models import Conversation, Message

logger = logging.getLogger(__name__)

INTERRUPTED = "The server stopped while this reply was being written; what had arrived is kept."


_live: set[str] = set()  # drafts this process is writing


def draft_row(
    owner, conversation: Conversation, reply_id: str, parent: Message, snapshot, mode: str
) -> ReplyDraft:
    """A reply's draft, not yet written: the turn writes it with its snapshot, in one round trip
    (memory.storage.inserts), and then calls `begun`."""
    return ReplyDraft(
        id=reply_id,
        owner=owner,
        conversation=conversation,
        parent=parent,
        snapshot=snapshot,
        mode=mode,
        process=PROCESS,
    )


def begun(draft: ReplyDraft) -> None:
    """The draft is written: this process saves its text from now on."""
    _live.add(draft.pk)


def save_many(texts: dict[str, str]) -> None:
    """The text so far of several drafts, by reply id, in one statement (a draft whose reply is
    stored meanwhile is gone: nothing is saved for it)."""
    if not texts:
        return
    rows = ", ".join(["(%s, %s)"] * len(texts))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {ReplyDraft._meta.db_table} AS d SET text = v.text, updated_at = now() "
            f"FROM (VALUES {rows}) AS v(id, text) WHERE d.id = v.id",
            [value for pair in texts.items() for value in pair],
        )


class Saver:
    """The replies one event loop is streaming, saved every REPLY_DRAFT_SAVE_SECONDS in one
    call: those whose draft row is written and whose text grew since their last save."""

    def __init__(self) -> None:
        self.replies: dict[str, replies.Reply] = {}
        self.saved: dict[str, int] = {}  # characters saved so far, by reply id
        self.task: asyncio.Task | None = None

    def track(self, reply: replies.Reply) -> None:
        self.replies[reply.id] = reply
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())

    def forget(self, reply_id: str) -> None:
        self.replies.pop(reply_id, None)
        self.saved.pop(reply_id, None)

    def due(self) -> dict[str, str]:
        texts = {}
        for reply in list(self.replies.values()):
            begun = reply.draft_begun
            if begun is None or not begun.done() or begun.cancelled() or begun.exception():
                continue  # no draft row yet (or none will be: the reply is stored without)
            if len(reply.text) > self.saved.get(reply.id, 0):
                texts[reply.id] = reply.text
        return texts

    async def _run(self) -> None:
        while self.replies:
            await asyncio.sleep(settings.REPLY_DRAFT_SAVE_SECONDS)
            texts = self.due()
            if not texts:
                continue
            try:
                await db(durable(save_many, atomic=False))(texts)
            except Exception:  # noqa: BLE001 - the next save, or the stored reply, catches up
                logger.warning("could not save %d reply drafts", len(texts))
                continue
            for reply_id, text in texts.items():
                if reply_id in self.replies:
                    self.saved[reply_id] = len(text)


_savers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Saver] = weakref.WeakKeyDictionary()


def saver() -> Saver:
    """The running event loop's saver (daphne runs one loop; tests, one per test)."""
    loop = asyncio.get_running_loop()
    found = _savers.get(loop)
    if found is None:
        found = _savers[loop] = Saver()
    return found


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
