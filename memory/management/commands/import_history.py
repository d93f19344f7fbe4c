"""manage.py import_history FILE --user NAME: import chat history into memory.

Reads JSON Lines (one message per line), ChatGPT's and Claude's conversations.json (or the
zip they come in) and Recollect's own export, telling them apart by their content.
"""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memory.importers import (
    ParsedConversation,
    detect_text_kind,
    import_conversations,
    import_json_lines,
    parse_chatgpt,
    parse_claude,
)
from memory.management.commands.import_memory import StagedProgress
from memory.management.users import load_user
from memory.portability import InvalidExport, import_memory, validate_export
from memory.progress import Progress


def read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "conversations.json"]
            if not names:
                raise CommandError(f"{path}: a zip file without conversations.json")
            return archive.read(min(names, key=len)).decode("utf-8", errors="replace")
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


class Command(BaseCommand):
    help = ("Import chat history into a user's memory: JSON Lines (one message per line), "
            "ChatGPT's or Claude's conversations.json (or their zip), or a Recollect export.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="JSON Lines, conversations.json or export zip; - for standard input")
        parser.add_argument("--user", required=True, help="username (created if missing)")
        parser.add_argument("--no-embed", action="store_true",
                            help="store now, embed later (manage.py reembed --pending)")

    def handle(self, *args, **opts) -> None:
        path = opts["file"]
        if path != "-" and not Path(path).is_file():
            raise CommandError(f"{path}: no such file")
        text = read_text(path)
        try:
            kind, data = detect_text_kind(text)
            # Exports are checked whole before anything (or anyone) is created.
            if kind == "recollect":
                validate_export(data)
            elif kind in ("chatgpt", "claude"):
                data = (parse_chatgpt if kind == "chatgpt" else parse_claude)(data)
        except (CommandError, InvalidExport) as exc:
            raise CommandError(f"{path}: {exc}") from None
        user, created = load_user(opts["user"])
        if created:
            self.stderr.write(f"created user {user.username!r} (set a password with "
                              f"`manage.py changepassword {user.username}`)")
        self.user = user
        self.embed = not opts["no_embed"]
        if kind == "recollect":
            self._import_export(path, data)
            return
        if kind in ("chatgpt", "claude"):
            self._import_conversations(kind, data)
            return
        with Progress(text.count("\n") + (0 if text.endswith("\n") else 1), "import") as progress:
            report = import_json_lines(
                user,
                io.StringIO(text),
                embed=self.embed,
                progress=progress.update,
                on_error=self.stderr.write,
            )
        self.stdout.write(
            f"imported {report.added} messages, skipped {report.skipped} already present, "
            f"{report.bad} bad lines"
        )

    def _import_conversations(self, kind: str, conversations: list[ParsedConversation]) -> None:
        total = sum(len(c.messages) for c in conversations)
        with Progress(total, f"import {kind}", stream=getattr(self.stderr, "_out", sys.stderr)) as progress:
            report = import_conversations(self.user, conversations, embed=self.embed,
                                          progress=progress.update)
        for error in report.errors:
            self.stderr.write(error)
        hidden = sum(c.skipped for c in conversations)
        self.stdout.write(
            f"imported {report.added} messages, skipped {report.skipped} already present, "
            f"{report.bad} bad messages; {report.conversations} new conversations from {kind} "
            f"({len(conversations)} in the file; {hidden} hidden or empty entries left out)"
        )

    def _import_export(self, path: str, data: dict) -> None:
        progress = StagedProgress(getattr(self.stderr, "_out", sys.stderr))
        try:
            report = import_memory(self.user, data, embed=self.embed, progress=progress)
        except InvalidExport as exc:
            raise CommandError(f"{path}: {exc}") from None
        finally:
            progress.close()
        for warning in report.warnings:
            self.stderr.write(f"warning: {warning}")
        self.stdout.write(report.summary())
