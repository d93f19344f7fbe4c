"""manage.py bench_haystack: seed 001 §4's needle-in-a-haystack recall benchmark, rebuilt.

About 2 million characters of real English prose (docstrings of the installed Python code) are
stored as noise turns in ~2,500-character blocks; five sessions of 3-5 facts are injected at
fixed depths, each set apart by an idle gap like the paper's time skip. Then one probe per
fact: does the fact's source turn appear in prepare_context's plan, and in recall's top 10?
"""

from __future__ import annotations

import datetime as dt
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from bench import corpus
from bench.scratch import add_database_argument, use_database
from memory.context.index_builder import prepare_context
from memory.finding.search import search
from memory.knowledge import entities
from memory.models import Conversation
from memory.organizing import topics
from memory.progress import Progress
from memory.storage.store import NewMessage, store_messages

# (session, [(fact turn, probe question)]) — the paper's five sessions, at these depths.
SESSIONS = [
    (
        "Alpha",
        0.10,
        [
            ("Project Vanguard is led by Dr. Elena Rostova.", "Who leads Project Vanguard?"),
            (
                "Project Vanguard is a geothermal energy initiative.",
                "What kind of energy does Project Vanguard use?",
            ),
            (
                "The Project Vanguard budget is 850 million euros.",
                "What is the budget of Project Vanguard?",
            ),
            (
                "The Leviathan drill for Vanguard starts on October 4th.",
                "When does the Leviathan drill start?",
            ),
        ],
    ),
    (
        "Bravo",
        0.30,
        [
            (
                "Ticket INFRA-992 is about the Redis cluster outage.",
                "What is ticket INFRA-992 about?",
            ),
            ("Our Redis cluster listens on port 6379.", "Which port does our Redis cluster use?"),
            (
                "The Redis client timeout is set to 5000ms.",
                "What timeout is the Redis client set to?",
            ),
            (
                "The Redis connection pool has 50 nodes.",
                "How many nodes are in the Redis connection pool?",
            ),
        ],
    ),
    (
        "Charlie",
        0.50,
        [
            (
                "The company retreat will be at Whispering Pines lodge.",
                "Where is the company retreat?",
            ),
            ("Whispering Pines is in Estes Park, Colorado.", "Which town is the retreat lodge in?"),
            (
                "The retreat runs March 15-18 and Mountain Bites BBQ caters dinner.",
                "Who caters dinner at the retreat, and when is it?",
            ),
        ],
    ),
    (
        "Delta",
        0.70,
        [
            (
                "In my sci-fi novel the main character is a smuggler named Jax.",
                "What is the name of the main character in my novel?",
            ),
            (
                "Jax hides the stolen data chips inside his cybernetic arm.",
                "Where does Jax hide the data chips?",
            ),
            (
                "The villain of the novel is known only as The Architect.",
                "Who is the villain of my novel?",
            ),
        ],
    ),
    (
        "Echo",
        0.90,
        [
            (
                "Q3 marketing: customer acquisition cost dropped to $45.",
                "What was the customer acquisition cost in Q3?",
            ),
            (
                "The Q3 email campaign had a 4.2% click rate.",
                "What click rate did the Q3 email campaign get?",
            ),
            (
                "LinkedIn ads were our best Q3 channel.",
                "Which channel performed best in Q3 marketing?",
            ),
            ("Q3 revenue reached $2.1M.", "How much revenue did we make in Q3?"),
        ],
    ),
]


class Command(BaseCommand):
    help = "Seed 001 §4: fact recall under ~2M characters of prose noise (prints figures)."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--scale",
            type=float,
            default=1.0,
            help="fraction of the 2M-character noise (e.g. 0.1 for a quick run)",
        )
        parser.add_argument("--user", default="bench_haystack")
        add_database_argument(parser, "haystack")
        parser.add_argument("--keep", action="store_true", help="keep the user afterwards")
        parser.add_argument(
            "--reuse",
            action="store_true",
            help="probe the haystack a --keep run left (same --user) instead of building it again",
        )

    def handle(self, *args, **opts) -> None:
        use_database(opts["database"], self.stdout)
        User = get_user_model()
        user = User.objects.filter(username=opts["user"]).first() if opts["reuse"] else None
        if user is not None:
            self._probe(user, self._kept_sources(user), opts, noise=None, ingest_s=None, upkeep_s=None)
            return
        User.objects.filter(username=opts["user"]).delete()
        user = User.objects.create_user(opts["user"])
        total_chars = int(2_000_000 * opts["scale"])
        self.stdout.write(f"collecting {total_chars:,} characters of prose noise (docstrings)…")
        noise = corpus.blocks(total_chars)
        self.stdout.write(f"{len(noise)} noise blocks, {sum(map(len, noise)):,} characters")

        conversation = Conversation.objects.create(owner=user, title="haystack")
        depth_at = {int(depth * len(noise)): (name, facts) for name, depth, facts in SESSIONS}
        clock = timezone.now() - dt.timedelta(days=30)
        sources: list[tuple[str, str, str, str]] = []  # (session, fact, probe, message id)
        started = time.perf_counter()
        batch: list[NewMessage] = []
        last_id: str | None = None  # each turn replies to the one before it, as in chat

        def turn(role: str, content: str, when: dt.datetime) -> NewMessage:
            nonlocal last_id
            item = NewMessage(role, content, timestamp=when, parent_id=last_id)
            last_id = item.id
            return item

        with Progress(len(noise), "ingesting") as bar:
            for i, block in enumerate(noise):
                if i in depth_at:
                    store_messages(user, conversation, batch)
                    batch = []
                    name, facts = depth_at[i]
                    clock += dt.timedelta(minutes=6)  # idle gap: a session of its own
                    items = []
                    for fact, _probe in facts:
                        items.append(turn("user", f"Please explicitly commit this to memory: {fact}", clock))
                        clock += dt.timedelta(seconds=20)
                        items.append(turn("assistant", "Noted, I will remember that.", clock))
                        clock += dt.timedelta(seconds=20)
                    stored = store_messages(user, conversation, items)
                    for (fact, probe), msg in zip(facts, stored[::2], strict=True):
                        sources.append((name, fact, probe, msg.pk))
                    clock += dt.timedelta(minutes=6)
                batch.append(turn("user", block, clock))
                clock += dt.timedelta(seconds=30)
                batch.append(turn("assistant", "Acknowledged.", clock))
                clock += dt.timedelta(seconds=30)
                if len(batch) >= 40:
                    store_messages(user, conversation, batch)
                    batch = []
                bar.update()
            if batch:
                store_messages(user, conversation, batch)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        entities.rebuild(user)
        topics.rebuild(user)
        upkeep_s = time.perf_counter() - started

        self._probe(user, sources, opts, noise=noise, ingest_s=ingest_s, upkeep_s=upkeep_s)

    def _kept_sources(self, user) -> list[tuple[str, str, str, str]]:
        """The fact turns of a kept haystack, found by their text."""
        from memory.models import Message

        sources = []
        for name, _depth, facts in SESSIONS:
            for fact, probe in facts:
                message = (
                    Message.objects.owned_by(user)
                    .filter(content=f"Please explicitly commit this to memory: {fact}")
                    .first()
                )
                if message is None:
                    raise CommandError(f"{user.username} holds no kept haystack: run once with --keep")
                sources.append((name, fact, probe, message.pk))
        return sources

    def _probe(self, user, sources, opts, *, noise, ingest_s, upkeep_s) -> None:
        probe_conv = Conversation.objects.create(owner=user, title="probes")
        per_session: dict[str, list[tuple[bool, bool]]] = {}
        plan_ms = []
        for name, _fact, probe, source in sources:
            plan = prepare_context(user, probe_conv, probe)
            plan_ms.append(plan.build_ms)
            in_plan = source in plan.included_ids
            in_top10 = source in [h.message_id for h in search(user, probe, limit=10).hits]
            per_session.setdefault(name, []).append((in_plan, in_top10))
            mark = lambda ok: "yes" if ok else "NO "  # noqa: E731
            self.stdout.write(f"  {name:<7} plan {mark(in_plan)} top10 {mark(in_top10)}  {probe}")
        facts = len(sources)
        plan_hits = sum(p for v in per_session.values() for p, _ in v)
        top_hits = sum(t for v in per_session.values() for _, t in v)
        # The paper's grading: a session passes if it recalls all but at most one fact.
        passed_plan = sum(1 for v in per_session.values() if sum(not p for p, _ in v) <= 1)
        passed_top = sum(1 for v in per_session.values() if sum(not t for _, t in v) <= 1)
        plan_ms.sort()
        self.stdout.write("")
        if noise is None:
            self.stdout.write(f"kept haystack of {user.username}; strategy for probes: {plan.strategy}")
        else:
            self.stdout.write(
                f"noise: {sum(map(len, noise)):,} characters in {len(noise)} blocks "
                f"(scale {opts['scale']}); strategy for probes: {plan.strategy}"
            )
            self.stdout.write(
                f"ingestion: {ingest_s:.1f} s (store + chunk + embed); "
                f"background upkeep (entities + topic tree): {upkeep_s:.1f} s"
            )
        self.stdout.write(
            f"fact recall in prepare_context plan: {plan_hits}/{facts} "
            f"({plan_hits / facts:.0%}); sessions passing {passed_plan}/5"
        )
        self.stdout.write(
            f"fact recall in recall top 10:        {top_hits}/{facts} "
            f"({top_hits / facts:.0%}); sessions passing {passed_top}/5"
        )
        self.stdout.write(
            f"prepare_context p50 {plan_ms[len(plan_ms) // 2]:.0f} ms, max {plan_ms[-1]:.0f} ms"
        )
        probe_conv.delete()
        if not opts["keep"]:
            user.delete()
