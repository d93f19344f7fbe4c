"""manage.py build_topics [--user NAME]: rebuild entities and the topic tree, with progress."""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from memory.knowledge import entities, facts
from memory.models import Message, UpkeepRun
from memory.organizing import topics
from memory.progress import Progress


class Command(BaseCommand):
    help = "Rebuild entities, the topic tree and period summaries (all users, or one)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", help="only this user")
        parser.add_argument(
            "--summaries",
            action="store_true",
            help="then have the configured model rewrite every extractive topic summary (otherwise "
            "the background worker does it, a few at a time)",
        )

    def handle(self, *args, **opts) -> None:
        users = get_user_model().objects.order_by("pk")
        if opts["user"]:
            users = users.filter(username=opts["user"])
            if not users.exists():
                raise CommandError(f"no user named {opts['user']!r}")
        for user in users:
            total = Message.objects.visible_to(user).logical().count()
            if not total:
                continue
            run = UpkeepRun.objects.create(owner=user, kind="build_topics")
            started = time.perf_counter()
            with Progress(total, f"{user.username}: entities") as bar:
                entities.rebuild(user, progress=bar.update)
            with Progress(total, f"{user.username}: topics") as bar:
                detail = topics.rebuild(user, progress=bar.update)
            # Facts of the messages that have none yet (an import queues no upkeep).
            detail["facts"] = facts.extract_messages(user)
            run.detail = {**detail, "seconds": round(time.perf_counter() - started, 2)}
            from django.utils import timezone

            run.finished_at = timezone.now()
            run.save()
            self.stdout.write(
                f"{user.username}: {detail['messages']:,} messages -> {detail['leaves']:,} leaf "
                f"topics, {detail['topics']:,} topics in all, {detail['facts']:,} new facts "
                f"({run.detail['seconds']} s)"
            )
            if opts["summaries"]:
                self._summaries(user)

    def _summaries(self, user) -> None:
        from memory.models import Topic
        from memory.organizing import summaries

        if not summaries.is_configured():
            raise CommandError("--summaries needs a model: set OPENAI_API_KEY or OPENAI_BASE_URL")
        todo = Topic.objects.owned_by(user).filter(summary_source="extractive", message_count__gt=0).count()
        written = failed = 0
        with Progress(todo, f"{user.username}: summaries") as bar:
            while True:
                result = summaries.summarize_topics(user, limit=10)
                written += result["summarized"]
                failed += result["failed"]
                bar.update(result["summarized"] + result["failed"])
                if result["failed"] >= summaries.GIVE_UP_AFTER or not result["remaining"]:
                    break
                if not result["summarized"]:
                    break
        self.stdout.write(
            f"{user.username}: {written} summaries written by {settings.SUMMARY_MODEL}, {failed} failed"
        )
