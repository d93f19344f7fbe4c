"""What the site keeps about accounts beyond Django's own tables: failed sign-ins, and each
user's allowance of actions that change memory."""

from __future__ import annotations

import datetime as dt
import math

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models, transaction
from django.utils import timezone

from config.limits import LimitReached


class SignInAttempt(models.Model):
    """A sign-in that failed (or is being checked), kept for a while to throttle guessing.

    In the database, so the limit holds across server processes."""

    username = models.CharField(max_length=150)  # as typed, lower-cased
    address = models.CharField(max_length=45)  # the client's IP address
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["username", "address", "at"], name="signin_attempt_key"),
            models.Index(fields=["at"], name="signin_attempt_at"),
        ]

    def __str__(self) -> str:
        return f"{self.username} from {self.address} at {self.at:%Y-%m-%d %H:%M:%S}"


class ActionAllowance(models.Model):
    """What a user may still do: the actions counted against CHAT_RATE_LIMIT_PER_MINUTE (every
    turn started in the chat, and every edit, delete, restore and forget, in the chat or the
    explorer). The turns running at once are counted by chat's RunningTurn, which locks this row
    to take a slot (`RunningTurn.start`).

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
            allowance = cls.locked(user)
            allowance.recent_actions = cls.with_action(allowance.recent_actions, timezone.now())
            allowance.save(update_fields=["recent_actions"])

    @classmethod
    def locked(cls, user) -> ActionAllowance:
        """The user's allowance, locked until the transaction ends (created on first use)."""
        allowance = cls.objects.select_for_update().filter(user=user).first()
        if allowance is None:
            # ON CONFLICT DO NOTHING: a racing first use waits for the other insert, then locks.
            cls.objects.bulk_create([cls(user=user)], ignore_conflicts=True)
            allowance = cls.objects.select_for_update().get(user=user)
        return allowance

    @staticmethod
    def with_action(actions, now) -> list[dt.datetime]:
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
