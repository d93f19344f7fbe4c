"""What the site keeps about accounts beyond Django's own tables."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


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
