"""manage.py import_history FILE --user NAME: import chat history into memory.

Reads JSON Lines (one message per line), ChatGPT's and Claude's conversations.json (or the
zip they come in) and Recollect's own export, telling them apart by their content. The
messages are stored first (keyword search finds them when the command returns); embedding and
the topic tree follow in background work, or here with --wait.
"""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memory.management.imports import add_import_arguments, check_file, run_import
from memory.management.users import load_user
from memory.transfer import import_jobs
from memory.transfer.portability import InvalidExport


def read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return import_jobs.read_upload(Path(path).read_bytes(), path)
    except import_jobs.InvalidUpload as exc:
        raise CommandError(str(exc)) from None


class Command(BaseCommand):
    help = ("Import chat history into a user's memory: JSON Lines (one message per line), "
            "ChatGPT's or Claude's conversations.json (or their zip), or a Recollect export.")

    def add_arguments(self, parser) -> None:
        add_import_arguments(parser, "JSON Lines, conversations.json or export zip; - for standard input")

    def handle(self, *args, **opts) -> None:
        path = check_file(opts["file"])
        try:
            # Exports are checked whole before anything (or anyone) is created.
            parsed = import_jobs.parse(read_text(path))
        except InvalidExport as exc:
            raise CommandError(f"{path}: {exc}") from None
        user, created = load_user(opts["user"])
        if created:
            self.stderr.write(f"created user {user.username!r} (set a password with "
                              f"`manage.py changepassword {user.username}`)")
        job = run_import(self, user, parsed, path, wait=opts["wait"])
        report = job.report
        if parsed.kind == "recollect":
            self.stdout.write(report["summary"])
        elif parsed.kind == "jsonl":
            self.stdout.write(
                f"imported {report['added']} messages, skipped {report['skipped']} already present, "
                f"{report['bad']} bad lines"
            )
        else:
            hidden = sum(c.skipped for c in parsed.data)
            self.stdout.write(
                f"imported {report['added']} messages, skipped {report['skipped']} already present, "
                f"{report['bad']} bad messages; {report['conversations']} new conversations from "
                f"{parsed.kind} ({len(parsed.data)} in the file; {hidden} hidden or empty entries left out)"
            )
        if parsed.kind != "recollect":  # its summary says it
            for note in report.get("notes", []):
                self.stdout.write(note)
