"""manage.py recall QUERY --user NAME: search a user's memory from the command line."""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

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
        for query in queries:
            results = search(user, query, limit=opts["limit"])
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
