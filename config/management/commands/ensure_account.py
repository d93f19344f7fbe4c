"""manage.py ensure_account: on a first run, make an account and say how to sign in."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from config.private_files import write_private_file


def sign_in_lines(url: str, username: str = "admin") -> list[str]:
    """How to sign in, as lines to print: on a first run (no account yet) an account is made
    and its password told (and kept in DATA_DIR/first-account.txt, readable by its owner only)."""
    users = get_user_model().objects
    credentials_file = settings.DATA_DIR / "first-account.txt"
    lines = [f"Recollect is ready: {url}/"]
    if not users.exists():
        password = secrets.token_urlsafe(9)
        users.create_superuser(username, email="", password=password)
        write_private_file(credentials_file, f"username: {username}\npassword: {password}\n")
        lines.append(f"Sign in as {username!r} with the password {password!r} "
                     f"(also kept in {credentials_file}).")
    elif credentials_file.exists():
        lines.append(f"Sign in with your account (the first account's details are in {credentials_file}).")
    else:
        lines.append("Sign in with your account.")
    if settings.ALLOW_SIGNUP:
        lines.append(f"Anyone else can make an account at {url}/signup/")
    return lines


class Command(BaseCommand):
    help = "Create a first account when there is none, and print how to sign in."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    def handle(self, *args, **opts) -> None:
        for line in sign_in_lines(opts["url"], opts["username"]):
            self.stdout.write(line)
