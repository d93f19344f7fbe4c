"""What the chat keeps besides memory: which branch of a conversation is on screen, the
replies being written, and the turns running for each user (at most CHAT_MAX_CONCURRENT_TURNS;
the rate limit they count against is config.models.ActionAllowance)."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from chat.processes import PROCESS, is_dead
from config.limits import LimitReached
from config.models import ActionAllowance
from memory.models import ContextSnapshot, Conversation, Message, new_ulid


class BranchSelection(models.Model):
    """The leaf of the active branch of a conversation.

    Messages form a tree (edits and regenerations branch); the active branch is the path from
    this leaf up to the root. Only it counts as recent conversation for the model; the other
    branches stay in memory and in the explorer.
    """

    conversation = models.OneToOneField(
        Conversation, primary_key=True, on_delete=models.CASCADE, related_name="branch_selection"
    )
    leaf = models.ForeignKey(Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.conversation_id} → {self.leaf_id}"


class ReplyDraft(models.Model):
    """A reply while it is being written, saved every REPLY_DRAFT_SAVE_SECONDS as it streams.

    The finished reply replaces it in the same transaction. A draft left behind belongs to a
    server that died mid-stream: `chat.drafts.recover` stores what it holds as an incomplete
    reply, so a crash loses at most the last moments of a reply, never the whole of it.
    """

    # The id the stored reply will have.
    id = models.CharField(primary_key=True, max_length=26)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="reply_drafts")
    # The user message being answered.
    parent = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    snapshot = models.ForeignKey(
        ContextSnapshot, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    text = models.TextField(blank=True, default="")
    mode = models.CharField(max_length=20, default="llm")
    # Which server process writes it: "host:pid:process start time".
    process = models.CharField(max_length=300)
    started_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"draft {self.id} ({len(self.text)} characters)"


_live_turns: set[str] = set()  # slots this process holds for turns it is running


class RunningTurn(models.Model):
    """A turn being answered for a user: it holds one of their CHAT_MAX_CONCURRENT_TURNS slots
    from before its message is stored until its reply is done.

    The turn gives its slot back however it ends. A slot whose server died cannot be given back,
    so it lapses: at once when that process ran on this host (its pid is gone, or this process
    holds no such turn), else CHAT_TURN_HOLD_SECONDS after it was last renewed (a running turn
    renews it every third of that).
    """

    id = models.CharField(primary_key=True, max_length=26, default=new_ulid)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    # Which server process runs it: "host:pid:process start time" (as ReplyDraft.process).
    process = models.CharField(max_length=300)
    started_at = models.DateTimeField(default=timezone.now)
    renewed_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"turn slot {self.id} of {self.user_id}"

    @classmethod
    def start(cls, user) -> RunningTurn:
        """Count a turn against the user's ActionAllowance and take one of their turn slots
        (release it with `release`), or raise LimitReached ("busy" or "rate_limited").

        Three statements on the path of every turn: the allowance locked, the user's slots read,
        then the count saved and the slot taken in one."""
        with transaction.atomic():
            now = timezone.now()
            recent, held = cls._locked_with_slots(user)
            running, stale = [], []
            for t in held:
                (stale if t.is_stale(now) else running).append(t.pk)
            if stale:
                cls.objects.filter(pk__in=stale).delete()
            cap = settings.CHAT_MAX_CONCURRENT_TURNS
            if len(running) >= cap:
                already = "A reply is" if cap == 1 else f"{cap} replies are"
                raise LimitReached(
                    "busy",
                    f"{already} already being written for you (in this or another tab); "
                    "wait for it to finish or stop it.",
                )
            recent = ActionAllowance.with_action(recent, now)
            slot = cls(user=user, process=PROCESS, started_at=now, renewed_at=now)
            with connection.cursor() as cursor:
                cursor.execute(
                    f"WITH counted AS (UPDATE {ActionAllowance._meta.db_table} SET recent_actions = %s "
                    f"WHERE user_id = %s) INSERT INTO {cls._meta.db_table} "
                    "(id, user_id, process, started_at, renewed_at) VALUES (%s, %s, %s, %s, %s)",
                    [recent, user.pk, slot.pk, user.pk, slot.process, now, now],
                )
            _live_turns.add(slot.pk)
            return slot

    @classmethod
    def _locked_with_slots(cls, user) -> tuple[list[dt.datetime], list[RunningTurn]]:
        """The user's counted actions, their allowance locked until the transaction ends
        (created on first use), then the turn slots they hold.

        Two statements, not one joined SELECT ... FOR UPDATE: under READ COMMITTED a query that
        waited for the lock re-reads the locked row but not the joined ones, so a tab that waited
        for another's turn to take its slot would read the slots as they were before, miss that
        one, and run past the cap. Read after the lock is held, the slots include every turn
        that took one before."""
        table = ActionAllowance._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT recent_actions FROM {table} WHERE user_id = %s FOR UPDATE", [user.pk])
            row = cursor.fetchone()
            recent = list(row[0] or []) if row else ActionAllowance.locked(user).recent_actions
            cursor.execute(
                f"SELECT id, process, renewed_at FROM {cls._meta.db_table} WHERE user_id = %s", [user.pk]
            )
            slots = [
                cls(id=pk, user_id=user.pk, process=process, renewed_at=renewed_at)
                for pk, process, renewed_at in cursor.fetchall()
            ]
        return recent, slots

    def is_stale(self, now) -> bool:
        if self.renewed_at < now - dt.timedelta(seconds=settings.CHAT_TURN_HOLD_SECONDS):
            return True
        if self.process == PROCESS:
            return self.pk not in _live_turns
        return is_dead(self.process)

    @classmethod
    def renew(cls, pk: str) -> None:
        cls.objects.filter(pk=pk).update(renewed_at=timezone.now())

    @classmethod
    def release(cls, pk: str) -> None:
        # Forgotten here first: should the delete fail, the slot already counts as stale.
        _live_turns.discard(pk)
        # One statement (QuerySet.delete wraps even a fast delete in a transaction of its own).
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {cls._meta.db_table} WHERE id = %s", [pk])
