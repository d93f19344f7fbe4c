"""manage.py import_history FILE --user NAME: import chat history into memory.

Reads JSON Lines (one message per line), ChatGPT's and Claude's conversations.json (or the
zip they come in) and Recollect's own export, telling them apart by their content.
"""

from __future__ import annotations

import io
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from memory.importers import (
    LineError,
    ParsedConversation,
    detect_text_kind,
    import_conversations,
    import_key,
    parse_chatgpt,
    parse_claude,
    parse_line,
)
from memory.management.commands.import_memory import StagedProgress
from memory.models import Conversation, Message
from memory.portability import InvalidExport, import_memory, validate_export
from memory.progress import Progress
from memory.store import NewMessage, store_messages

BATCH = 200


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
        user, created = get_user_model().objects.get_or_create(username=opts["user"])
        if created:
            user.set_unusable_password()
            user.save()
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
        stream = io.StringIO(text)
        total = text.count("\n") + (0 if text.endswith("\n") else 1)
        self.conversations: dict[str, Conversation] = {}
        self.last_id: dict[str, str | None] = {}
        self.seen: set[str] = set()
        self.added = self.skipped = self.bad = 0
        pending: list[tuple[int, dict]] = []
        with Progress(total, "import") as progress:
            try:
                for lineno, raw in enumerate(stream, start=1):
                    progress.update()
                    if not raw.strip():
                        continue
                    try:
                        item = parse_line(raw)
                    except LineError as exc:
                        self.bad += 1
                        self.stderr.write(f"line {lineno}: {exc}")
                        continue
                    pending.append((lineno, item))
                    if len(pending) >= BATCH:
                        self._flush(pending)
                        pending = []
                if pending:
                    self._flush(pending)
            finally:
                stream.close()
        summary = (f"imported {self.added} messages, skipped {self.skipped} already present, "
                   f"{self.bad} bad lines")
        self.stdout.write(summary)

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

    def _conversation(self, title: str) -> Conversation:
        conv = self.conversations.get(title)
        if conv is None:
            conv = Conversation.objects.owned_by(self.user).filter(title=title).order_by("created_at").first()
            if conv is None:
                conv = Conversation.objects.create(owner=self.user, title=title)
            self.conversations[title] = conv
            last = (
                Message.objects.owned_by(self.user).logical().filter(conversation=conv)
                .order_by("-position").values_list("pk", flat=True).first()
            )
            self.last_id[title] = last
        return conv

    def _flush(self, pending: list[tuple[int, dict]]) -> None:
        keys = {import_key(item) for _, item in pending}
        existing = set(
            Message.objects.owned_by(self.user).filter(external_id__in=keys, is_chunk=False)
            .values_list("external_id", flat=True)
        )
        by_conv: OrderedDict[str, list[tuple[int, NewMessage]]] = OrderedDict()
        for lineno, item in pending:
            key = import_key(item)
            if key in existing or key in self.seen:
                self.skipped += 1
                continue
            self.seen.add(key)
            title = item["conversation"]
            self._conversation(title)
            metadata = {"imported": True}
            if item["external_id"]:
                metadata["external_id"] = item["external_id"]
            if item["speaker"]:
                metadata["speaker"] = item["speaker"]
            new = NewMessage(
                role=item["role"], content=item["content"], timestamp=item["timestamp"],
                parent_id=self.last_id[title], metadata=metadata, external_id=key,
            )
            self.last_id[title] = new.id
            by_conv.setdefault(title, []).append((lineno, new))
        for title, rows in by_conv.items():
            conv = self.conversations[title]
            try:
                store_messages(self.user, conv, [m for _, m in rows], embed=self.embed)
                self.added += len(rows)
            except Exception:
                # Store one by one so one bad row costs only itself; the thread skips it.
                stored = {m.id for m in Message.objects.filter(pk__in=[m.id for _, m in rows])}
                last_ok = rows[0][1].parent_id
                for lineno, m in rows:
                    if m.parent_id not in stored and m.parent_id != last_ok:
                        m.parent_id = last_ok
                    try:
                        store_messages(self.user, conv, [m], embed=self.embed)
                        self.added += 1
                        stored.add(m.id)
                        last_ok = m.id
                    except Exception as exc:  # noqa: BLE001 - reported with its line number
                        self.bad += 1
                        self.stderr.write(f"line {lineno}: could not store: {exc}")
                self.last_id[title] = last_ok
