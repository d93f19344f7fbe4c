"""What the forget dialog offers on real conversations, and how long it takes to open.

Each `<id>.history.jsonl` (default: the LoCoMo conversations in /work/shared/eval/long-conversations)
is imported as its own user into a scratch database. For every Nth message the dialog is opened
as the explorer opens it (memory.lifecycle.echoes.dialog: its rare words, the messages that echo
it, what memory made that holds a rare word), timed, and what it offers is counted.

The baseline, in the same run, is the rule before issue 32: any other message that shares a run
of 5 words in a row with it (common phrases included) was offered. `--show N` prints N offers of
each rule, with the shared run or the rare words, to judge them by eye.
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from bench.management.commands.eval_recall import history_files
from bench.scratch import add_database_argument, use_database
from memory.lifecycle import echoes
from memory.models import Message

DEFAULT_HISTORIES = "/work/shared/eval/long-conversations"
OLD_RUN = 5  # words in a row: the rule before issue 32
_WORD = re.compile(r"\w+")


def runs(text: str, n: int = OLD_RUN) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))] if values else 0.0


class Command(BaseCommand):
    help = "The forget dialog on real conversations: what it offers (and the old 5-word rule's) and its time."

    def add_arguments(self, parser) -> None:
        parser.add_argument("histories", nargs="*", default=[DEFAULT_HISTORIES])
        parser.add_argument("--every", type=int, default=10, help="open the dialog for every Nth message")
        parser.add_argument("--show", type=int, default=0, help="print this many offers of each rule")
        add_database_argument(parser, "forget")

    def handle(self, *args, **opts) -> None:
        use_database(opts["database"], self.stdout)
        totals = {"forgets": 0, "new": 0, "new_ticked": 0, "old": 0, "new_any": 0, "old_any": 0, "echoes": 0}
        seconds: list[float] = []
        shown_new: list[str] = []
        shown_old: list[str] = []
        for cid, path in history_files(opts["histories"]):
            user = self._import(cid, path)
            messages = list(Message.objects.owned_by(user).logical().order_by("timestamp", "pk"))
            shingles = {m.pk: runs(m.content) for m in messages}
            for message in messages[:: opts["every"]]:
                started = time.perf_counter()
                dialog = echoes.dialog(user, message)
                seconds.append(time.perf_counter() - started)
                old = [m for m in messages if m.pk != message.pk and shingles[m.pk] & shingles[message.pk]]
                totals["forgets"] += 1
                totals["new"] += len(dialog.copies)
                totals["new_ticked"] += sum(c.ticked for c in dialog.copies)
                totals["echoes"] += len(dialog.echoes)
                totals["old"] += len(old)
                totals["new_any"] += bool(dialog.copies)
                totals["old_any"] += bool(old)
                for c in dialog.copies[:1]:
                    shown_new.append(f"  {message.content[:70]!r}\n    -> {c.message.content[:70]!r} "
                                     f"(rare words: {', '.join(c.words) or 'none'}; {c.percent}% copied)")
                for m in old[:1]:
                    run = " ".join(sorted(shingles[m.pk] & shingles[message.pk])[0])
                    shown_old.append(f"  {message.content[:70]!r}\n    -> {m.content[:70]!r} shares {run!r}")
        n = totals["forgets"] or 1
        self.stdout.write(f"\ndialogs opened: {totals['forgets']} (every {opts['every']}th message)")
        self.stdout.write(f"{'rule':34} {'offered':>8} {'per forget':>11} {'forgets offering any':>21}")
        for name, key in (("old: any shared 5-word run", "old"), ("new: rare words and rare runs", "new")):
            self.stdout.write(
                f"{name:34} {totals[key]:>8} {totals[key] / n:>11.2f} "
                f"{totals[key + '_any']:>10} ({totals[key + '_any'] / n:.0%})"
            )
        self.stdout.write(f"new: ticked {totals['new_ticked']}; titles, tool calls, topics, names, facts "
                          f"offered: {totals['echoes']}")
        self.stdout.write(f"dialog time: p50 {percentile(seconds, 50) * 1000:.0f} ms, "
                          f"p95 {percentile(seconds, 95) * 1000:.0f} ms")
        if opts["show"]:
            rng = random.Random(32)
            for name, shown in (("new rule", shown_new), ("old rule", shown_old)):
                self.stdout.write(f"\n{name}, {min(opts['show'], len(shown))} of {len(shown)} offers:")
                for line in rng.sample(shown, min(opts["show"], len(shown))):
                    self.stdout.write(line)

    def _import(self, cid: str, path: Path):
        username = f"bench-forget-{cid}"
        user = get_user_model().objects.filter(username=username).first()
        if user is None or not Message.objects.owned_by(user).exists():
            self.stderr.write(f"importing {path.name} as {username}…")
            call_command("import_history", str(path), user=username, stdout=self.stderr, stderr=self.stderr)
            user = get_user_model().objects.get(username=username)
        self.stderr.write(f"{username}: {Message.objects.owned_by(user).logical().count()} messages")
        return user
