"""manage.py bench_explorer: render every explorer page (and the conversation list, its
searches and Settings) against a 100,000-message memory.

The memory (messages, chunks, edits, deletions, tool calls, passages with vectors, a topic tree,
entities, context snapshots) is inserted in bulk with synthetic vectors for a dedicated bench
user, once; later runs reuse it. Each page is then requested through Django's test client
(the full view + template path) and p50 / p95 are printed. Goal: p95 < 300 ms per page.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import random
import statistics
import time

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from bench.scratch import add_database_argument, use_database
from memory import models

BENCH_USER = "bench-explorer"
TOP_WORDS = [
    ["postgres", "index", "vacuum", "replica", "query", "schema"],
    ["kubernetes", "deploy", "helm", "pod", "ingress", "rollout"],
    ["invoice", "billing", "stripe", "refund", "tax", "ledger"],
    ["garden", "tomato", "compost", "seedling", "harvest", "soil"],
    ["python", "asyncio", "typing", "pytest", "packaging", "wheel"],
    ["travel", "lisbon", "flight", "hotel", "itinerary", "train"],
    ["recipe", "sourdough", "oven", "starter", "flour", "crust"],
    ["security", "password", "rotation", "vault", "token", "audit"],
]
FILLER = [
    "we",
    "should",
    "then",
    "also",
    "check",
    "how",
    "the",
    "next",
    "step",
    "works",
    "when",
    "it",
    "is",
    "done",
    "again",
]
TOOLS = ["search_memory", "get_message", "get_topic_messages", "get_period_messages", "get_cluster"]


class Command(BaseCommand):
    help = "Benchmark every explorer page against a 100,000-message memory (p50/p95)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--messages", type=int, default=100_000)
        parser.add_argument("--runs", type=int, default=15, help="timed requests per page")
        parser.add_argument("--rebuild", action="store_true", help="drop and rebuild the memory")
        add_database_argument(parser, "explorer")
        parser.add_argument(
            "--vector-every",
            type=int,
            default=10,
            help="give every Nth passage a vector (HNSW inserts dominate the build on 2 cores); "
            "the others are stored unembedded, as a backlog would be",
        )

    def handle(self, *args, **opts) -> None:
        use_database(opts["database"], self.stdout)
        user, _ = get_user_model().objects.get_or_create(username=BENCH_USER)
        have = models.Message.objects.owned_by(user).logical().count()
        if opts["rebuild"] or have < opts["messages"]:
            if have:
                self.stdout.write(f"dropping the old bench memory ({have:,} messages)…")
                models.Conversation.objects.owned_by(user).delete()
                models.Topic.objects.owned_by(user).delete()
                models.Entity.objects.owned_by(user).delete()
                models.UpkeepRun.objects.owned_by(user).delete()
            self._build(user, opts["messages"], opts["vector_every"])
        else:
            self.stdout.write(f"reusing the bench memory of {have:,} messages")
        self.stdout.write("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        self._bench(user, opts["runs"])
        self._private_clause(user, opts["runs"])
        self.stdout.write("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))

    # --- building ----------------------------------------------------------------------------

    def _progress(self, label: str, done: int, total: int, started: float) -> None:
        self.stdout.write(
            f"\r  {label}: {done:,}/{total:,} ({time.perf_counter() - started:.0f}s)", ending=""
        )
        self.stdout.flush()

    def _build(self, user, n: int, vector_every: int = 1) -> None:
        rng = random.Random(7)
        np_rng = np.random.default_rng(7)
        dims = settings.EMBEDDING_DIMENSIONS
        model = settings.EMBEDDING_MODEL
        now = timezone.now()
        start = now - dt.timedelta(days=730)
        n_conv, n_leaf = 20, 512
        self.stdout.write(f"building a {n:,}-message memory for {BENCH_USER}…")
        t0 = time.perf_counter()

        top_c = np_rng.normal(size=(8, dims))
        mid_c = top_c.repeat(8, axis=0) + 0.6 * np_rng.normal(size=(64, dims))
        leaf_c = mid_c.repeat(8, axis=0) + 0.4 * np_rng.normal(size=(512, dims))

        convs = models.Conversation.objects.bulk_create(
            [models.Conversation(owner=user, title=f"Bench conversation {i + 1}") for i in range(n_conv)]
        )
        stamps = sorted(start + dt.timedelta(seconds=rng.uniform(0, 730 * 86400)) for _ in range(n))
        positions = [0] * n_conv
        last_in_conv: list[str | None] = [None] * n_conv
        leaf_of: list[int] = []
        batch: list[models.Message] = []
        passages: list[models.Passage] = []
        ids: list[str] = []
        started = time.perf_counter()
        for i, ts in enumerate(stamps):
            c = (i * 7 + i // 500) % n_conv
            leaf = i * n_leaf // n
            words = TOP_WORDS[leaf // 64]
            role = "user" if positions[c] % 2 == 0 else "assistant"
            text = (
                " ".join(
                    rng.choice(words) if rng.random() < 0.4 else rng.choice(FILLER)
                    for _ in range(rng.randint(12, 40))
                )
                + f" leaf{leaf} item {i}"
            )
            m = models.Message(
                owner=user,
                conversation=convs[c],
                role=role,
                content=text,
                snippet=text[:100],
                timestamp=ts,
                parent_id=last_in_conv[c],
                token_count=len(text) // 4,
                position=positions[c],
            )
            if i % 200 == 0:
                m.edited = True
                m.edit_history = [
                    {
                        "timestamp": ts.isoformat(),
                        "previous_content": text[:-3] + "old",
                        "previous_token_count": len(text) // 4,
                    }
                ]
            if i % 500 == 7:
                m.deleted, m.deleted_at = True, now
            positions[c] += 1
            last_in_conv[c] = m.pk
            leaf_of.append(leaf)
            ids.append(m.pk)
            batch.append(m)
            embedded = i % max(1, vector_every) == 0
            vec = leaf_c[leaf] + 0.5 * np_rng.normal(size=dims) if embedded else None
            passages.append(
                models.Passage(
                    owner=user,
                    conversation=convs[c],
                    kind="message",
                    message_id=m.pk,
                    logical_message_id=m.pk,
                    role=role,
                    timestamp=ts,
                    deleted=m.deleted,
                    text=text,
                    end_char=len(text),
                    text_hash=hashlib.sha1(text.encode()).hexdigest(),
                    embedding=(vec / np.linalg.norm(vec)).astype(np.float32) if embedded else None,
                    embedding_model=model if embedded else "",
                )
            )
            if len(batch) == 5000:
                with transaction.atomic():
                    models.Message.objects.bulk_create(batch, batch_size=1000)
                    models.Passage.objects.bulk_create(passages, batch_size=1000)
                batch, passages = [], []
                self._progress("messages + passages", i + 1, n, started)
        if batch:
            models.Message.objects.bulk_create(batch, batch_size=1000)
            models.Passage.objects.bulk_create(passages, batch_size=1000)
        for c, conv in enumerate(convs):
            models.Conversation.objects.filter(pk=conv.pk).update(next_position=positions[c])
        self.stdout.write("")

        # Long messages with chunks, tool calls (some chunked), snapshots.
        chunks = []
        for i in range(50, n, n // 50):
            for k in range(3):
                chunks.append(
                    models.Message(
                        owner=user,
                        conversation_id=None,
                        role="user",
                        content=f"chunk {k} of {ids[i]} " * 40,
                        timestamp=stamps[i],
                        is_chunk=True,
                        chunk_index=k,
                        chunk_parent_id=ids[i],
                        position=0,
                        token_count=300,
                    )
                )
        conv_of = dict(
            models.Message.objects.owned_by(user)
            .filter(pk__in=[c.chunk_parent_id for c in chunks])
            .values_list("pk", "conversation_id")
        )
        pos_of = dict(
            models.Message.objects.owned_by(user).filter(pk__in=list(conv_of)).values_list("pk", "position")
        )
        for ch in chunks:
            ch.conversation_id = conv_of[ch.chunk_parent_id]
            ch.position = pos_of[ch.chunk_parent_id]
        models.Message.objects.bulk_create(chunks, batch_size=1000)

        assistant = list(
            models.Message.objects.owned_by(user)
            .filter(role="assistant", is_chunk=False)
            .order_by("timestamp")
            .values_list("pk", "timestamp", "conversation_id")[: n // 2]
        )
        calls, started = [], time.perf_counter()
        for j, (mid, ts, _conv) in enumerate(assistant[::10]):
            tool = TOOLS[j % len(TOOLS)]
            calls.append(
                models.ToolCall(
                    owner=user,
                    message_id=mid,
                    tool_name=tool,
                    arguments=f'{{"query": "topic {j}"}}',
                    result=f'{{"results": ["hit {j}"]}}' * 5,
                    timestamp=ts,
                    token_count=50,
                    duration_ms=rng.randint(3, 90),
                )
            )
        models.ToolCall.objects.bulk_create(calls, batch_size=2000)
        big = calls[:20]
        models.ToolCall.objects.bulk_create(
            [
                models.ToolCall(
                    owner=user,
                    message_id=c.message_id,
                    tool_name=c.tool_name,
                    arguments=c.arguments,
                    result=f"part {k} " * 400,
                    timestamp=c.timestamp,
                    token_count=800,
                    is_chunk=True,
                    chunk_index=k,
                    chunk_parent=c,
                )
                for c in big
                for k in range(4)
            ]
        )
        models.ToolCall.objects.filter(pk__in=[c.pk for c in big]).update(token_count=5000)
        self.stdout.write(f"  {len(calls):,} tool calls, {len(chunks):,} chunks")

        snaps = []
        for j, (mid, _ts, conv_id) in enumerate(assistant[::25]):
            snaps.append(
                models.ContextSnapshot(
                    owner=user,
                    conversation_id=conv_id,
                    message_id=mid,
                    query=f"question {j}",
                    strategy="hierarchy",
                    reason=f"{n:,} messages > INDEX_CLUSTER_MAX",
                    budget=10000,
                    text="Temporal Overview:\n" + "  topic line\n" * 200,
                    tokens_by_zone={"recent": 2000, "temporal": 300, "topics": 3500, "hits": 2500},
                    hits=[
                        {
                            "id": ids[(j * 37 + h) % n],
                            "message_id": ids[(j * 37 + h) % n],
                            "type": "message",
                            "score": 0.03 - h * 0.001,
                            "vector_rank": h + 1,
                            "keyword_rank": None,
                            "snippet": f"hit {h}",
                        }
                        for h in range(20)
                    ],
                    fallbacks=[],
                    tools_offered=[{"name": t} for t in TOOLS],
                    build_ms=42.0,
                )
            )
        models.ContextSnapshot.objects.bulk_create(snaps, batch_size=1000)
        self.stdout.write(f"  {len(snaps):,} context snapshots")

        # The topic tree: 8 → 64 → 512 leaves, temporally ordered, each leaf a stretch of time.
        def make(level: int, k: int, parent: models.Topic | None, lo: int, hi: int) -> models.Topic:
            words = TOP_WORDS[k * 8 // (8 ** (level + 1)) if level else k]
            centroid = [top_c, mid_c, leaf_c][level][k]
            return models.Topic(
                owner=user,
                parent=parent,
                level=level,
                order=k,
                label=f"{words[k % 6].title()} {level}.{k}",
                keywords=words[:4],
                summary=f"Messages about {', '.join(words[:3])} (level {level}).",
                period_start=stamps[lo],
                period_end=stamps[hi - 1],
                message_count=hi - lo,
                centroid=(centroid / np.linalg.norm(centroid)).astype(np.float32),
                map_x=float(centroid[0]),
                map_y=float(centroid[1]),
            )

        tops = models.Topic.objects.bulk_create(
            [make(0, k, None, k * n // 8, (k + 1) * n // 8) for k in range(8)]
        )
        mids = models.Topic.objects.bulk_create(
            [make(1, k, tops[k // 8], k * n // 64, (k + 1) * n // 64) for k in range(64)]
        )
        leaves = models.Topic.objects.bulk_create(
            [make(2, k, mids[k // 8], k * n // 512, (k + 1) * n // 512) for k in range(512)]
        )
        memberships = [
            models.TopicMembership(owner=user, topic=leaves[leaf_of[i]], message_id=ids[i], score=0.8)
            for i in range(n)
        ]
        models.TopicMembership.objects.bulk_create(memberships, batch_size=5000)
        self.stdout.write("  topic tree 8/64/512 with memberships")

        ents = models.Entity.objects.bulk_create(
            [
                models.Entity(
                    owner=user,
                    name=f"{TOP_WORDS[k % 8][k % 6]}-{k}",
                    normalized=f"e{k}",
                    kind=["name", "number", "url", "identifier"][k % 4],
                    mention_count=0,
                    first_seen=start,
                    last_seen=now,
                )
                for k in range(2000)
            ]
        )
        mentions = [
            models.EntityMention(owner=user, entity=ents[(i * 13) % 2000], message_id=ids[i])
            for i in range(0, n, 2)
        ]
        models.EntityMention.objects.bulk_create(mentions, batch_size=5000)
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE memory_entity e SET mention_count = s.c FROM (SELECT entity_id, count(*) c "
                "FROM memory_entitymention WHERE owner_id = %s GROUP BY 1) s WHERE e.id = s.entity_id",
                [user.pk],
            )
        models.EntityEdge.objects.bulk_create(
            [
                models.EntityEdge(
                    owner=user, source=ents[k], target=ents[(k * 7 + 1) % 2000], weight=rng.randint(1, 30)
                )
                for k in range(2000)
                if (k * 7 + 1) % 2000 > k
            ],
            ignore_conflicts=True,
        )
        models.UpkeepRun.objects.create(owner=user, kind="topic_upkeep", finished_at=now, ok=True)
        with connection.cursor() as cur:
            for table in (
                "memory_message",
                "memory_passage",
                "memory_toolcall",
                "memory_topicmembership",
                "memory_entitymention",
                "memory_contextsnapshot",
                "memory_topic",
            ):
                cur.execute(f"ANALYZE {table}")
        self.stdout.write(f"built in {time.perf_counter() - t0:.0f}s")

    # --- timing ------------------------------------------------------------------------------

    def _two_hundred_conversations(self, user) -> None:
        """The conversation list is timed at 200 conversations (issue 36): the memory's 20 long
        ones and short ones up to 200, spread over the two years (added once, kept)."""
        have = models.Conversation.objects.owned_by(user).count()
        if have >= 200:
            return
        rng = random.Random(11)
        now = timezone.now()
        made = models.Conversation.objects.bulk_create(
            [models.Conversation(owner=user, title=f"Short chat {i + 1}") for i in range(200 - have)]
        )
        for conv in made:
            conv.updated_at = now - dt.timedelta(seconds=rng.uniform(0, 730 * 86400))
        models.Conversation.objects.bulk_update(made, ["updated_at"])
        self.stdout.write(f"added {len(made)} short conversations: 200 in the list")

    def _bench(self, user, runs: int) -> None:
        self._two_hundred_conversations(user)
        client = Client()
        client.force_login(user)
        owned = models.Message.objects.owned_by(user)
        edited = owned.filter(edited=True, is_chunk=False).values_list("pk", flat=True).first()
        deleted = owned.filter(deleted=True, is_chunk=False).values_list("pk", flat=True).first()
        chunked = owned.filter(is_chunk=True).values_list("chunk_parent_id", flat=True).first()
        middle = (
            owned.logical()
            .order_by("timestamp")
            .values_list("timestamp", flat=True)[owned.logical().count() // 2]
        )
        top = models.Topic.objects.owned_by(user).filter(level=0).first()
        leaf = models.Topic.objects.owned_by(user).filter(level=2).first()
        call = models.ToolCall.objects.owned_by(user).filter(is_chunk=False).order_by("-timestamp").first()
        big = models.ToolCall.objects.owned_by(user).filter(chunks__isnull=False).distinct().first()
        snap = models.ContextSnapshot.objects.owned_by(user).first()
        entity = models.Entity.objects.owned_by(user).order_by("-mention_count").first()
        conv = models.Conversation.objects.owned_by(user).first()
        day = timezone.localtime(middle).date().isoformat()
        pages = {
            "overview": reverse("explorer:overview"),
            "topics (level 0)": reverse("explorer:topics"),
            "topics (level 2)": reverse("explorer:topics") + "?level=2&page=7",
            "topic (top level)": reverse("explorer:topic", args=[top.pk]),
            "topic (leaf)": reverse("explorer:topic", args=[leaf.pk]),
            "timeline (day)": reverse("explorer:timeline"),
            "timeline (week, period)": reverse("explorer:timeline") + f"?granularity=week&period={day}",
            "timeline (month, filtered)": reverse("explorer:timeline")
            + f"?granularity=month&role=user&conversation={conv.pk}&topic={top.pk}",
            "message (edited)": reverse("explorer:message", args=[edited]),
            "message (chunked)": reverse("explorer:message", args=[chunked]),
            "message (deleted)": reverse("explorer:message", args=[deleted]),
            "edit diff": reverse("explorer:diff", args=[edited, 0]),
            "tool calls": reverse("explorer:tool_calls"),
            "tool calls (filtered, page 50)": reverse("explorer:tool_calls") + "?tool=get_message&page=50",
            "tool call": reverse("explorer:tool_call", args=[call.pk]),
            "tool call (chunked)": reverse("explorer:tool_call", args=[big.pk]) + "?chunk=3",
            "context list": reverse("explorer:contexts"),
            "context inspector": reverse("explorer:context", args=[snap.pk]),
            "search": reverse("explorer:search") + "?q=postgres+vacuum+replica",
            "search (filtered)": reverse("explorer:search") + f"?q=sourdough+starter&role=user&start={day}",
            "entities": reverse("explorer:entities"),
            "entity": reverse("explorer:entity", args=[entity.pk]),
            # The forget dialog (asks only): rare words, echoing messages, what holds the words.
            "forget dialog": reverse("explorer:forget", args=[edited]),
            "facts (manage memory)": reverse("explorer:facts"),
            "facts (searched)": reverse("explorer:facts") + "?q=garden",
            # The person's own pages (issue 36): the conversation list and its searches.
            "chats (list)": reverse("chat:home"),
            "chats (search, title)": reverse("chat:home") + "?q=conversation+7",
            "chats (search, content)": reverse("chat:home") + "?q=sourdough+starter",
            "chats (search, prefix)": reverse("chat:home") + "?q=compo",
            "settings": reverse("chat:settings"),
        }
        self.stdout.write(f"\n{'page':34} {'p50 ms':>8} {'p95 ms':>8}  status")
        worst = 0.0
        for name, url in pages.items():
            first = client.get(url)  # warm-up (loads the embedder for search once)
            timings = []
            for _ in range(runs):
                t = time.perf_counter()
                response = client.get(url)
                timings.append((time.perf_counter() - t) * 1000)
            timings.sort()
            p50 = statistics.median(timings)
            p95 = timings[min(len(timings) - 1, int(round(0.95 * (len(timings) - 1))))]
            worst = max(worst, p95)
            flag = "" if p95 < 300 else "  > 300 ms"
            self.stdout.write(
                f"{name:34} {p50:8.1f} {p95:8.1f}  {response.status_code}/{first.status_code}{flag}"
            )
        self.stdout.write(f"\nworst p95: {worst:.1f} ms (goal < 300 ms)")

    def _private_clause(self, user, runs: int) -> None:
        """What leaving out the conversations memory does not keep costs search: its two
        candidate queries as search() runs them (the ids of those conversations read once,
        memory.finding.search.SearchFilters.private) and with nothing to leave out and nothing
        read, alternating, on the same queries."""
        from dataclasses import replace

        from memory.finding import search as hybrid
        from memory.finding.candidates import _keyword_candidates, _vector_candidates

        queries = [" ".join(words[:3]) for words in TOP_WORDS]

        def with_lookup() -> hybrid.SearchFilters:
            return replace(hybrid.SearchFilters(), private=hybrid._private_conversations(user.pk, None))

        variants = {"with the lookup": with_lookup, "without it": lambda: hybrid.SearchFilters(private=())}
        timings: dict[str, list[float]] = {name: [] for name in variants}
        for i in range(max(4, runs)):
            names = list(variants) if i % 2 == 0 else list(reversed(variants))
            for name in names:
                for query in queries:
                    t = time.perf_counter()
                    filters = variants[name]()
                    _keyword_candidates(user, query, filters, 100, hybrid.SearchResults(query))
                    _vector_candidates(user, query, filters, 100, hybrid.SearchResults(query))
                    timings[name].append((time.perf_counter() - t) * 1000)
        self.stdout.write("\nsearch's two candidate queries, per query (none of the memory is private):")
        for name, values in timings.items():
            self.stdout.write(f"  {name:16} p50 {statistics.median(values):7.1f} ms  (n={len(values)})")
