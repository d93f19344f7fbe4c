"""manage.py ensure_account: on a first run, make an account and say how to sign in."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from config.private_files import write_private_file


class Command(BaseCommand):
    help = "Create a first account when there is none, and print how to sign in."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    def handle(self, *args, **opts) -> None:
        users = get_user_model().objects
        credentials_file = settings.DATA_DIR / "first-account.txt"
        if not users.exists():
            password = secrets.token_urlsafe(9)
            users.create_superuser(opts["username"], email="", password=password)
            write_private_file(credentials_file, f"username: {opts['username']}\npassword: {password}\n")
            self.stdout.write(
                self.style.SUCCESS(
                    f"Created your first account: username {opts['username']!r}, password {password!r} "
                    f"(also saved in {credentials_file})."
                )
            )
        elif credentials_file.exists():
            self.stdout.write(f"Your first account's sign-in details are in {credentials_file}.")
        signup = f" or create an account at {opts['url']}/signup/" if settings.ALLOW_SIGNUP else ""
        self.stdout.write(f"Recollect: sign in at {opts['url']}/login/{signup}.")
