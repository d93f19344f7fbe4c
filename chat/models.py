"""What the chat keeps besides memory: which branch of a conversation is on screen, the
replies being written, and each user's allowance (rate limit and turns running at once)."""

from __future__ import annotations

import datetime as dt
import math

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import connection, models, transaction
from django.utils import timezone

from chat.processes import PROCESS, is_dead
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


class LimitReached(Exception):
    """An action a user's allowance refuses: `code` is "rate_limited" or "busy"."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ChatAllowance(models.Model):
    """What a user may still do: the actions counted against CHAT_RATE_LIMIT_PER_MINUTE (every
    turn started, and every edit, delete, restore and forget) and, through RunningTurn, the turns
    running now (at most CHAT_MAX_CONCURRENT_TURNS, across tabs and server processes).

    The row is locked (SELECT ... FOR UPDATE) while an action is counted or a turn takes a slot,
    so two tabs or two server processes racing for the last one are served one after the other:
    one gets it, the other is refused.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    # When the counted actions of the last minute happened (older ones are dropped on the way).
    recent_actions = ArrayField(models.DateTimeField(), default=list, blank=True)

    def __str__(self) -> str:
        return f"allowance of {self.user_id}"

    @classmethod
    def count_action(cls, user) -> None:
        """Count one action that changes memory, or raise LimitReached("rate_limited")."""
        with transaction.atomic():
            allowance = cls._locked(user)
            allowance._count(timezone.now())

    @classmethod
    def start_turn(cls, user) -> RunningTurn:
        """Count a turn and take one of the user's turn slots (release it with
        `RunningTurn.release`), or raise LimitReached ("busy" or "rate_limited").

        Two statements on the path of every turn: the allowance locked with the user's slots
        read in the same query, then the count saved and the slot taken in one."""
        with transaction.atomic():
            now = timezone.now()
            recent, held = cls._locked_with_slots(user)
            running, stale = [], []
            for t in held:
                (stale if t.is_stale(now) else running).append(t.pk)
            if stale:
                RunningTurn.objects.filter(pk__in=stale).delete()
            cap = settings.CHAT_MAX_CONCURRENT_TURNS
            if len(running) >= cap:
                already = "A reply is" if cap == 1 else f"{cap} replies are"
                raise LimitReached(
                    "busy",
                    f"{already} already being written for you (in this or another tab); "
                    "wait for it to finish or stop it.",
                )
            recent = cls._with_action(recent, now)
            slot = RunningTurn(user=user, process=PROCESS, started_at=now, renewed_at=now)
            with connection.cursor() as cursor:
                cursor.execute(
                    f"WITH counted AS (UPDATE {cls._meta.db_table} SET recent_actions = %s "
                    f"WHERE user_id = %s) INSERT INTO {RunningTurn._meta.db_table} "
                    "(id, user_id, process, started_at, renewed_at) VALUES (%s, %s, %s, %s, %s)",
                    [recent, user.pk, slot.pk, user.pk, slot.process, now, now],
                )
            _live_turns.add(slot.pk)
            return slot

    @classmethod
    def _locked_with_slots(cls, user) -> tuple[list[dt.datetime], list[RunningTurn]]:
        """The user's counted actions, their allowance locked until the transaction ends
        (created on first use), and the turn slots they hold: one query."""
        sql = (
            f"SELECT a.recent_actions, t.id, t.process, t.renewed_at FROM {cls._meta.db_table} a "
            f"LEFT JOIN {RunningTurn._meta.db_table} t ON t.user_id = a.user_id "
            "WHERE a.user_id = %s FOR UPDATE OF a"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [user.pk])
            rows = cursor.fetchall()
            if not rows:
                cls._locked(user)  # created, then locked
                cursor.execute(sql, [user.pk])
                rows = cursor.fetchall()
        slots = [
            RunningTurn(id=pk, user_id=user.pk, process=process, renewed_at=renewed_at)
            for _, pk, process, renewed_at in rows
            if pk is not None
        ]
        return list(rows[0][0] or []), slots

    @classmethod
    def _locked(cls, user) -> ChatAllowance:
        """The user's allowance, locked until the transaction ends (created on first use)."""
        allowance = cls.objects.select_for_update().filter(user=user).first()
        if allowance is None:
            # ON CONFLICT DO NOTHING: a racing first use waits for the other insert, then locks.
            cls.objects.bulk_create([cls(user=user)], ignore_conflicts=True)
            allowance = cls.objects.select_for_update().get(user=user)
        return allowance

    def _count(self, now) -> None:
        self.recent_actions = self._with_action(self.recent_actions, now)
        self.save(update_fields=["recent_actions"])

    @staticmethod
    def _with_action(actions, now) -> list[dt.datetime]:
        """The last minute's actions with one more at `now`, or LimitReached("rate_limited")."""
        limit = settings.CHAT_RATE_LIMIT_PER_MINUTE
        window = dt.timedelta(minutes=1)
        recent = sorted(t for t in actions if t > now - window)
        if len(recent) >= limit:
            wait = math.ceil((recent[-limit] + window - now).total_seconds())
            raise LimitReached(
                "rate_limited",
                f"That is the limit of {limit} messages and changes a minute (sends, regenerations, "
                f"edits, deletions); try again in {max(wait, 1)} s.",
            )
        return [*recent, now]


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
