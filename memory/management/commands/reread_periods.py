"""manage.py reread_periods: read the periods every stored message names again with today's
rules (memory.dates.mentioned_periods), after an upgrade that reads more of them. A new message
and an edited one are read when stored; this catches up what was stored before (migration 0019
runs the same reading once, on upgrade)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from memory.dates import mentioned_periods
from memory.models import Passage
from memory.progress import Progress

BATCH = 500


def reread(passages, progress=None) -> int:
    """Store the periods each of `passages` (a queryset of message passages, this version's
    model or a migration's) names by today's rules, as the store step reads them (as of the
    message's time in the server's zone); returns how many changed."""
    changed, batch = 0, []
    rows = passages.only("id", "text", "timestamp", "periods").order_by("id")
    for passage in rows.iterator(chunk_size=2000):
        periods = mentioned_periods(passage.text, timezone.localtime(passage.timestamp))
        if periods != passage.periods:
            passage.periods = periods
            batch.append(passage)
        if len(batch) >= BATCH:
            changed += len(batch)
            type(passage).objects.bulk_update(batch, ["periods"])
            batch = []
        if progress is not None:
            progress.update()
    if batch:
        changed += len(batch)
        type(batch[0]).objects.bulk_update(batch, ["periods"])
    return changed


class Command(BaseCommand):
    help = "Read again the periods each stored message names (\"last Fri\", \"in 2013\"), after an upgrade."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", metavar="USERNAME", help="only this person's memory")

    def handle(self, *args, **opts) -> None:
        passages = Passage.objects.filter(kind=Passage.Kind.MESSAGE, deleted=False)
        if opts["user"]:
            from django.contrib.auth import get_user_model

            owner = get_user_model().objects.filter(username=opts["user"]).first()
            if owner is None:
                raise CommandError(f"no user {opts['user']!r}")
            passages = passages.filter(owner=owner)
        with Progress(passages.count(), "reread periods", stream=self.stderr) as progress:
            changed = reread(passages, progress)
        self.stdout.write(f"{changed:,} passages name other periods now")
