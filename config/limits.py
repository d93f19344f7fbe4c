"""The per-user limits on what a person does: an action one of them refuses raises LimitReached.

The limits themselves are held in the database (config.models.ActionAllowance, and chat's
RunningTurn for the turns running at once), so they hold across tabs and server processes."""

from __future__ import annotations


class LimitReached(Exception):
    """An action a user's allowance refuses: `code` is "rate_limited" or "busy"."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
