"""manage.py export_memory --user NAME: a user's whole memory as JSON or a Markdown transcript."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand

from memory.management.users import existing_user
from memory.transfer.export import export_markdown, export_memory


class Command(BaseCommand):
    help = ("Export a user's memory: JSON that import_memory reads back losslessly, or a readable "
            "Markdown transcript.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", required=True, help="username")
        parser.add_argument("--format", choices=["json", "markdown"], default="json")
        parser.add_argument("--output", "-o", help="file to write (default: standard output)")
        parser.add_argument("--exclude-deleted", action="store_true",
                            help="leave out soft-deleted messages (replies re-link to their ancestors)")

    def handle(self, *args, **opts) -> None:
        user = existing_user(opts["user"])
        if opts["format"] == "json":
            data = export_memory(user, exclude_deleted=opts["exclude_deleted"])
            text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
            count = sum(len(c["messages"]) for c in data["conversations"])
            summary = (f"exported {len(data['conversations'])} conversations, {count} messages, "
                       f"{len(data['topics'])} topics")
        else:
            text = export_markdown(user, exclude_deleted=opts["exclude_deleted"])
            summary = "exported a Markdown transcript"
        if opts["output"] and opts["output"] != "-":
            Path(opts["output"]).write_text(text, encoding="utf-8")
            self.stderr.write(f"{summary} to {opts['output']}")
        else:
            self.stdout.write(text, ending="")
