"""manage.py recall QUERY --user NAME: search a user's memory from the command line."""

from __future__ import annotations

import datetime as dt
import json
import sys

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from memory.finding.search import search
from memory.management.users import existing_user


class Command(BaseCommand):
    help = "Search a user's memory (hybrid vector + keyword search)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("query", nargs="?", help="what to look for")
        parser.add_argument("--user", required=True)
        parser.add_argument("--limit", type=int, default=10)
        parser.add_argument("--json", action="store_true", help="one JSON object per query")
        parser.add_argument("--queries", help='JSON Lines file of {"query": ...}, run in one process')
        parser.add_argument(
            "--as-of", metavar="DATE",
            help='when the question is asked (ISO 8601, e.g. 2023-05-30 or 2023-05-30T15:40): "last week" '
            "and \"this month\" are read from it (default now)",
        )

    def handle(self, *args, **opts) -> None:
        user = existing_user(opts["user"])
        if opts["limit"] < 1 or opts["limit"] > 200:
            raise CommandError("--limit must be between 1 and 200")
        queries: list[str] = []
        if opts["queries"]:
            try:
                with open(opts["queries"], encoding="utf-8") as fh:
                    for lineno, line in enumerate(fh, start=1):
                        if not line.strip():
                            continue
                        try:
                            q = json.loads(line)["query"]
                        except (json.JSONDecodeError, KeyError, TypeError):
                            self.stderr.write(f"line {lineno}: expected {{\"query\": ...}}")
                            continue
                        queries.append(str(q))
            except OSError as exc:
                raise CommandError(f"{opts['queries']}: {exc.strerror}") from None
        if opts["query"]:
            queries.insert(0, opts["query"])
        if not queries:
            raise CommandError("give a QUERY or --queries FILE")
        as_of = None
        if opts["as_of"]:
            try:
                as_of = dt.datetime.fromisoformat(opts["as_of"].replace("Z", "+00:00"))
            except ValueError:
                raise CommandError(f"--as-of {opts['as_of']!r} is not an ISO 8601 date") from None
            if timezone.is_naive(as_of):
                as_of = timezone.make_aware(as_of)
        for query in queries:
            results = search(user, query, limit=opts["limit"], as_of=as_of)
            if opts["json"]:
                out = {"query": query, "results": [h.as_result() for h in results.hits]}
                if results.fallbacks:
                    out["fallbacks"] = results.fallbacks
                sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
                continue
            self.stdout.write(self.style.MIGRATE_HEADING(f"» {query}"))
            for f in results.fallbacks:
                self.stderr.write(f"  note: {f['detail']}")
            if not results.hits:
                self.stdout.write("  (nothing found)")
            for i, h in enumerate(results.hits, start=1):
                kind = "tool call" if h.type == "tool_call" else ("chunk" if h.is_chunk else h.role)
                self.stdout.write(
                    f"{i:>3}. {h.id} [{h.timestamp:%Y-%m-%d %H:%M}] {kind:<9} {h.score:.4f}  {h.snippet}"
                )
