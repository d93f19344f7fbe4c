"""The user a management command acts for, named by its --user option."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError


def existing_user(username: str):
    """The user named `username`; a CommandError when there is none."""
    try:
        return get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise CommandError(f"no user named {username!r}") from None


def load_user(username: str):
    """The user named `username`, created without a usable password when missing; and whether
    it was created."""
    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save()
    return user, created
