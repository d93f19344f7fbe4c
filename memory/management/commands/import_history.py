"""manage.py import_history FILE --user NAME: import chat history into memory.

Reads JSON Lines (one message per line), ChatGPT's and Claude's conversations.json (or the
zip they come in) and Recollect's own export, telling them apart by their content. The
messages are stored first (keyword search finds them when the command returns); embedding and
the topic tree follow in background work, or here with --wait.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile

from django.core.management.base import BaseCommand, CommandError

from memory.management.imports import add_import_arguments, check_file, run_import
from memory.management.users import load_user
from memory.transfer import import_jobs, sources
from memory.transfer.portability import InvalidExport


def open_source(path: str, stack: contextlib.ExitStack) -> sources.Source:
    """The file (standard input for -) as a Source: read as a stream, never whole; standard
    input is copied to a temporary file first (it is read more than once)."""
    if path == "-":
        copy = stack.enter_context(tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024))  # noqa: SIM115
        shutil.copyfileobj(sys.stdin.buffer, copy)
        file = copy
    else:
        file = stack.enter_context(open(path, "rb"))  # noqa: SIM115
    try:
        return sources.open_file(file, path)
    except sources.InvalidUpload as exc:
        raise CommandError(str(exc)) from None


class Command(BaseCommand):
    help = ("Import chat history into a user's memory: JSON Lines (one message per line), "
            "ChatGPT's or Claude's conversations.json (or their zip), or a Recollect export.")

    def add_arguments(self, parser) -> None:
        add_import_arguments(parser, "JSON Lines, conversations.json or export zip; - for standard input")

    def handle(self, *args, **opts) -> None:
        with contextlib.ExitStack() as stack:
            self.import_file(check_file(opts["file"]), stack, opts)

    def import_file(self, path: str, stack: contextlib.ExitStack, opts) -> None:
        try:
            # Exports are checked whole (a conversation or a line at a time) before anything
            # (or anyone) is created.
            parsed = import_jobs.parse(open_source(path, stack))
        except sources.InvalidUpload as exc:
            raise CommandError(str(exc)) from None
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
            self.stdout.write(
                f"imported {report['added']} messages, skipped {report['skipped']} already present, "
                f"{report['bad']} bad messages; {report['conversations']} new conversations from "
                f"{parsed.kind} ({parsed.conversations} in the file; {parsed.hidden} hidden or empty entries "
                "left out)"
            )
        if parsed.kind != "recollect":  # its summary says it
            for note in report.get("notes", []):
                self.stdout.write(note)
