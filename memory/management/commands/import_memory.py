"""manage.py import_memory FILE --user NAME: read back what export_memory wrote."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memory.management.imports import add_import_arguments, check_file, run_import
from memory.management.users import load_user
from memory.transfer import import_jobs, sources
from memory.transfer.importers import detect_kind
from memory.transfer.portability import InvalidExport


class Command(BaseCommand):
    help = "Import a memory exported by `manage.py export_memory` into a user's memory."

    def add_arguments(self, parser) -> None:
        add_import_arguments(parser, "the JSON export, or - for standard input")

    def handle(self, *args, **opts) -> None:
        path = check_file(opts["file"])
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
            data = sources.loads(text)
        except InvalidExport as exc:  # nested too deeply to read
            raise CommandError(f"{path}: {exc}") from None
        except UnicodeDecodeError:
            raise CommandError(f"{path}: not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno} column {exc.colno}"
            raise CommandError(f"{path}: not valid JSON ({exc.msg} at {where})") from None
        try:
            kind = detect_kind(data)
            if kind != "recollect":
                raise CommandError(f"{path}: this is a {kind} export; import it with "
                                   f"`manage.py import_history {path} --user {opts['user']}`")
            parsed = import_jobs.recollect_export(text, data)  # checked whole, before creating anyone
        except InvalidExport as exc:
            raise CommandError(f"{path}: {exc}") from None
        user, created = load_user(opts["user"])
        job = run_import(self, user, parsed, path, wait=opts["wait"])
        if created:
            self.stderr.write(f"created user {user.username!r} (set a password with "
                              f"`manage.py changepassword {user.username}`)")
        self.stdout.write(job.report["summary"])
