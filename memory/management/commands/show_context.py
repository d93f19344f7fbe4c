"""manage.py show_context QUERY --user NAME: print the context plan a turn would get."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from memory.context.index_builder import prepare_context
from memory.management.users import existing_user
from memory.models import Conversation


class Command(BaseCommand):
    help = "Show the memory index (context plan) prepare_context builds for a query."

    def add_arguments(self, parser) -> None:
        parser.add_argument("query")
        parser.add_argument("--user", required=True)
        parser.add_argument("--conversation", help="conversation id (default: the latest)")
        parser.add_argument("--max-index-tokens", type=int, default=None)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **opts) -> None:
        user = existing_user(opts["user"])
        conversations = Conversation.objects.owned_by(user)
        if opts["conversation"]:
            conversation = conversations.filter(pk=opts["conversation"]).first()
            if conversation is None:
                raise CommandError(f"{opts['user']} has no conversation {opts['conversation']}")
        else:
            conversation = conversations.order_by("-updated_at").first()
        budget = opts["max_index_tokens"]
        if budget is not None and budget < 0:
            raise CommandError("--max-index-tokens must not be negative")
        plan = prepare_context(user, conversation, opts["query"], max_index_tokens=budget)
        if opts["json"]:
            self.stdout.write(json.dumps(plan.as_json(), ensure_ascii=False, default=str, indent=2))
            return
        zones = ", ".join(f"{k} {v}" for k, v in plan.tokens_by_zone.items())
        self.stdout.write(self.style.MIGRATE_HEADING(f"strategy: {plan.strategy}"))
        self.stdout.write(f"reason:   {plan.reason}")
        self.stdout.write(f"tokens:   {plan.total_tokens} of {plan.budget} ({zones})")
        self.stdout.write(f"tools:    {', '.join(plan.tool_names)}")
        self.stdout.write(f"built in: {plan.build_ms} ms {plan.timings_ms}")
        for f in plan.fallbacks:
            self.stdout.write(self.style.WARNING(f"fallback: {f['kind']}: {f['detail']}"))
        self.stdout.write("")
        self.stdout.write(plan.system_prompt())
        if plan.recent:
            self.stdout.write("")
            self.stdout.write(self.style.MIGRATE_HEADING("recent messages (sent as chat history):"))
            for m in plan.recent:
                self.stdout.write(f"[{m.role}] {m.pk}: {m.snippet or m.content[:100]}")
