"""manage.py import_memory FILE --user NAME: read back what export_memory wrote."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memory.importers import detect_kind
from memory.management.users import load_user
from memory.portability import InvalidExport, import_memory, validate_export
from memory.progress import Progress


class StagedProgress:
    """One progress bar per stage of the import (messages, then embedding)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.bars: dict[str, Progress] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        bar = self.bars.get(stage)
        if bar is None:
            for other in self.bars.values():
                other.close()
            bar = self.bars[stage] = Progress(total, stage, stream=self.stream)
        bar.update(done - bar.done)

    def close(self) -> None:
        if self.bars:
            list(self.bars.values())[-1].close()


class Command(BaseCommand):
    help = "Import a memory exported by `manage.py export_memory` into a user's memory."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="the JSON export, or - for standard input")
        parser.add_argument("--user", required=True, help="username (created if missing)")
        parser.add_argument("--no-embed", action="store_true",
                            help="store now, embed later (background work or manage.py reembed)")

    def handle(self, *args, **opts) -> None:
        path = opts["file"]
        if path != "-" and not Path(path).is_file():
            raise CommandError(f"{path}: no such file")
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
            data = json.loads(text)
        except UnicodeDecodeError:
            raise CommandError(f"{path}: not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno} column {exc.colno}"
            raise CommandError(f"{path}: not valid JSON ({exc.msg} at {where})") from None
        try:
            kind = detect_kind(data)
        except InvalidExport as exc:
            raise CommandError(f"{path}: {exc}") from None
        if kind != "recollect":
            raise CommandError(f"{path}: this is a {kind} export; import it with "
                               f"`manage.py import_history {path} --user {opts['user']}`")
        try:
            validate_export(data)  # before creating anyone
        except InvalidExport as exc:
            raise CommandError(f"{path}: {exc}") from None
        user, created = load_user(opts["user"])
        progress = StagedProgress(getattr(self.stderr, "_out", sys.stderr))
        try:
            report = import_memory(user, data, embed=not opts["no_embed"], progress=progress)
        finally:
            progress.close()
        if created:
            self.stderr.write(f"created user {user.username!r} (set a password with "
                              f"`manage.py changepassword {user.username}`)")
        for warning in report.warnings[:50]:
            self.stderr.write(f"warning: {warning}")
        if len(report.warnings) > 50:
            self.stderr.write(f"... and {len(report.warnings) - 50} more warnings")
        self.stdout.write(report.summary())
