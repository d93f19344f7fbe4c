"""manage.py build_topics [--user NAME]: rebuild entities and the topic tree, with progress."""

from __future__ import annotations

import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from memory import entities, topics
from memory.models import Message, UpkeepRun
from memory.progress import Progress


class Command(BaseCommand):
    help = "Rebuild entities, the topic tree and period summaries (all users, or one)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", help="only this user")

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
            run.detail = {**detail, "seconds": round(time.perf_counter() - started, 2)}
            from django.utils import timezone

            run.finished_at = timezone.now()
            run.save()
            self.stdout.write(
                f"{user.username}: {detail['messages']:,} messages -> {detail['leaves']:,} leaf "
                f"topics, {detail['topics']:,} topics in all ({run.detail['seconds']} s)"
            )
