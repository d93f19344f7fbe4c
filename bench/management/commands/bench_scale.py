"""manage.py bench_scale: per-turn memory cost as stored history grows (1k … 1M messages).

Bulk history is written straight into Postgres with SYNTHETIC vectors (random vectors,
labelled as such in the output) and synthetic text from a fixed vocabulary, because embedding
a million messages would take days here. Each measured turn is real and does what a chat turn
does before the model is called: embed the message (the configured model, started first and
overlapping the store), store it, prepare_context (hybrid search, plan) within the zones of the
model's window, record what the plan shows (forgetting.read_by) and save the snapshot, as the
chat does. The message's passage gets its vector afterwards, as background work does in the
chat; that write (an HNSW insert) is timed and printed on its own.

Each size also prints what the model is sent per turn, zone by zone, as the chat builds it
(memory/context/budget.py: the same allocation and Prompt, with one search_and_retrieve round of tool
results as a model would call it), against the tokens of the whole stored history.

The bench runs in its own database (--database, created and migrated on first use), so it can
drop the HNSW and GIN indexes during a bulk load and rebuild them once afterwards — far faster
than maintaining them row by row — without touching the development database. With --keep the
loaded history stays and the next run reuses it, adding only the rows a larger size needs.
"""

from __future__ import annotations

import gc
import math
import os
import random
import statistics
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection, transaction

from bench.scratch import add_database_argument, use_database
from config.startup import freeze_long_lived_objects
from memory.models import PASSAGE_HNSW, passage_hnsw_sql
from memory.progress import Progress
from memory.tokens import count_tokens

_VOCAB_TEXT = (
    "redis postgres deploy kubernetes budget retreat garden novel marketing invoice schema "
    "migration latency cache index vector search topic summary meeting design review launch "
    "customer ticket outage backup replica cluster region pricing contract hiring roadmap "
    "sprint release bug feature test coverage api token login password email calendar travel "
    "flight hotel dinner recipe tulip rose python django react css docker terraform grafana"
)
VOCAB = _VOCAB_TEXT.split()
PROBES = [
    "what did we decide about the redis cache latency?",
    "when is the retreat dinner?",
    "summarise the kubernetes outage ticket",
    "which pricing contract did we review?",
    "what was the roadmap for the api release?",
]
BULK_TITLE = "synthetic history"
# The facts memory keeps (memory.knowledge.facts) grow with the history: eval_facts draws about
# 46 per 100 turns of real conversations. The bulk history gets one per FACT_EVERY messages
# (a user message in two), most about the user, the rest about FACT_PEOPLE people, some of them
# exclusive attributes that newer ones supersede, so each turn's FACTS section reads and ranks
# what a long-used memory holds.
FACT_EVERY = 4
_FIRST_NAMES = (
    "Ana Bruno Carla Diego Elena Farid Greta Hugo Ines Jonas Kiri Leo Marta Nuno Olga Pedro Quinn "
    "Rosa Sami Tomas Uma Vera Wim Xenia Yara Zoe Amir Bea Caio Dora Emil Flor Gil Hana Ivo Jana "
    "Kai Lina Milo Nora"
)
FACT_PEOPLE = [
    f"{first} {last}"
    for first in _FIRST_NAMES.split()
    for last in ("Costa", "Moreau", "Okafor", "Silva", "Tanaka")
]
FACT_ATTRIBUTES = ["lives in", "works at", "partner", "favourite colour", "plan: trip"]
# Indexes that are far cheaper to build once than to maintain per row during a bulk load.
BULK_INDEXES = {
    PASSAGE_HNSW: passage_hnsw_sql(settings.EMBEDDING_DIMENSIONS),
    "passage_search_gin": (
        "CREATE INDEX IF NOT EXISTS passage_search_gin ON memory_passage USING gin (search_vector)"
    ),
}


class Command(BaseCommand):
    help = "Per-turn memory cost at 1k/10k/100k/1M stored messages (synthetic vectors)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sizes", default="1000,10000,100000,1000000")
        parser.add_argument("--turns", type=int, default=20)
        parser.add_argument("--user", default="bench_scale")
        add_database_argument(parser, "scale")
        parser.add_argument(
            "--keep", action="store_true", help="keep the loaded history; the next run reuses it"
        )
        parser.add_argument("--profile", action="store_true", help="cProfile the measured turns")
        parser.add_argument(
            "--sequential", action="store_true",
            help="every step of a turn on its own thread, one after another: each step's figure "
            "is its cost alone, with nothing of the turn running beside it",
        )
        parser.add_argument(
            "--typed-ahead", action="store_true",
            help="every other measured turn has its question embedded first, as the composer's "
            "typing frame does while the person types; those turns are printed on a line of "
            "their own, the turn line counting the others",
        )
        parser.add_argument(
            "--alternate-kept", action="store_true",
            help="every other measured turn forgets what earlier turns kept of the facts, the pins "
            "and the overview (memory.context.kept_reads) and reads them again, as before they were "
            "kept; those turns are printed on a line of their own, the turn line counting the others",
        )
        parser.add_argument(
            "--window", type=int, default=0,
            help="the model's context window in tokens (default: CHAT_CONTEXT_TOKENS or CHAT_MODEL's)",
        )

    def handle(self, *args, **opts) -> None:
        try:
            sizes = sorted(int(s) for s in opts["sizes"].split(","))
        except ValueError:
            raise CommandError("--sizes is a comma-separated list of integers") from None
        use_database(opts["database"], self.stdout)
        from memory.embedders import get_embedder
        from memory.models import Conversation

        User = get_user_model()
        user, _ = User.objects.get_or_create(username=opts["user"])
        bulk = Conversation.objects.filter(owner=user, title=BULK_TITLE).first()
        if bulk is None:
            bulk = Conversation.objects.create(owner=user, title=BULK_TITLE)
        # Earlier live turns would skew the sizes; the synthetic history is what is reused.
        Conversation.objects.filter(owner=user).exclude(pk=bulk.pk).delete()
        stored = self._stored(bulk)
        if stored:
            self._same_model(bulk)
            self.stdout.write(f"reusing {stored:,} synthetic messages already loaded")
            self._facts(user, bulk)  # a history loaded before facts were part of it
        get_embedder().embed_one("warm up")  # loading the model is not a per-turn cost
        # As the server does once it has loaded Django and the model (config.asgi, `serve`).
        freeze_long_lived_objects()
        rows = []
        for size in sizes:
            if size < stored:
                # The loaded history cannot shrink: that size needs a database of its own.
                self.stdout.write(
                    f"{size:>9,} msgs  skipped: {stored:,} already loaded in this database"
                )
                continue
            fill_s = self._fill(user, bulk, stored, size) if size > stored else 0.0
            stored = size
            rows.append(self._measured(user, stored, fill_s, opts))
        self.stdout.write("")
        self.stdout.write(
            "vectors of the bulk history are SYNTHETIC (random); its text is "
            f"synthetic from a fixed vocabulary, and so are its facts (one per {FACT_EVERY} "
            "messages); measured turns are real "
            f"({get_embedder().name} query embedding)."
        )
        if len(rows) >= 2:
            self.stdout.write(
                f"prompt at {rows[-1]['size']:,} vs {rows[0]['size']:,}: "
                f"{rows[-1]['prompt'] / rows[0]['prompt']:.2f}x"
            )
        if not opts["keep"]:
            user.delete()
        gc.unfreeze()  # a process that goes on (a test run) collects its objects again

    # --- database -------------------------------------------------------------------------------

    def _stored(self, bulk) -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM memory_message WHERE conversation_id = %s", [bulk.pk]
            )
            return int(cursor.fetchone()[0])

    def _same_model(self, bulk) -> None:
        """A kept history's (random) vectors are labelled with the model that was configured when
        it was loaded; under another model's name vector search leaves them out (never mixed),
        and the turns measured would have no vector list: refused, with what to do."""
        from memory.embedders import get_embedder

        name = get_embedder().name
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT embedding_model FROM memory_passage WHERE conversation_id = %s "
                "AND embedding IS NOT NULL AND embedding_model <> %s LIMIT 1",
                [bulk.pk, name],
            )
            other = cursor.fetchone()
        if other:
            raise CommandError(
                f"the kept history's vectors are labelled {other[0]!r}, not {name!r} (the embedder "
                "configured now): vector search would leave them out. Load a history of its own "
                f"(--database NAME), or run with EMBEDDING_MODEL={other[0]}"
            )

    # --- bulk load ------------------------------------------------------------------------------

    def _fill(self, user, bulk, stored: int, size: int) -> float:
        started = time.perf_counter()
        n = size - stored
        # Dropping the indexes pays off once the load is large against what is already indexed.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE relname = 'memory_passage'"
            )
            indexed = int(cursor.fetchone()[0])
        rebuild = n >= 5000 and n >= indexed // 2
        with connection.cursor() as cursor:
            if rebuild:
                for name in BULK_INDEXES:
                    cursor.execute(f"DROP INDEX IF EXISTS {name}")
        ratio = self._token_ratio()
        with Progress(n, f"synthetic rows {stored:,} → {size:,}") as bar:
            done = stored
            while done < size:
                step = min(50000, size - done)
                self._insert(user, bulk, done, step, ratio)
                done += step
                bar.update(step)
        if rebuild:
            with connection.cursor() as cursor:
                # 1M x 384-dim vectors and their graph need ~2.5 GB to build in memory (much faster).
                cursor.execute("SET maintenance_work_mem = '3GB'")
                cursor.execute("SET max_parallel_maintenance_workers = 2")
                for name, how in BULK_INDEXES.items():
                    t0 = time.perf_counter()
                    self.stderr.write(f"building {name} over {size:,} passages …")
                    cursor.execute(how)
                    self.stderr.write(f"  {name}: {time.perf_counter() - t0:.1f}s")
        self._facts(user, bulk)
        _vacuum()
        from memory.organizing.periods import update_period_summaries

        update_period_summaries(user)
        return time.perf_counter() - started

    @staticmethod
    def _token_ratio() -> float:
        """Real cl100k tokens per character of this synthetic text, measured on a sample."""
        rng = random.Random(7)
        sample = [
            f"message {i} " + " ".join(rng.choice(VOCAB) for _ in range(12 + i % 20)) for i in range(200)
        ]
        return sum(count_tokens(s) for s in sample) / sum(len(s) for s in sample)

    def _insert(self, user, conversation, first: int, n: int, ratio: float) -> None:
        """n synthetic messages and one passage each, written by Postgres itself."""
        from memory.embedders import get_embedder

        dims = settings.EMBEDDING_DIMENSIONS
        model = get_embedder().name
        vocab = "{" + ",".join(VOCAB) + "}"
        with connection.cursor() as cursor:
            # The same rows wherever and whenever they are loaded in the same steps (the HNSW graph
            # built over them still differs from build to build), each step its own seed.
            cursor.execute("SELECT setseed(%s)", [(first * 7919 % 100_003) / 100_003])
            cursor.execute(
                """
                INSERT INTO memory_message (id, owner_id, conversation_id, role, content, snippet,
                    timestamp, token_count, metadata, edited, deleted, edit_history, is_chunk,
                    position)
                SELECT 'S' || lpad(%(owner)s::text, 6, '0') || lpad(g::text, 19, '0'), %(owner)s, %(conv)s,
                       CASE WHEN g %% 2 = 0 THEN 'user' ELSE 'assistant' END,
                       c.text, left(c.text, 100),
                       now() - make_interval(mins => (%(total)s - g)), ceil(length(c.text) * %(ratio)s),
                       '{"synthetic": true}'::jsonb, false, false, '[]'::jsonb, false, g
                FROM generate_series(%(lo)s, %(hi)s) g,
                LATERAL (SELECT 'message ' || g || ' ' || string_agg(
                    (%(vocab)s::text[])[1 + floor(random() * %(nv)s)::int], ' ') AS text
                    FROM generate_series(1, 12 + (g %% 20)) w WHERE g >= 0) c
                """,
                {
                    "owner": user.pk,
                    "conv": conversation.pk,
                    "lo": first,
                    "hi": first + n - 1,
                    "total": 2_000_000,
                    "vocab": vocab,
                    "nv": len(VOCAB),
                    "ratio": ratio,
                },
            )
            cursor.execute(
                f"""
                INSERT INTO memory_passage (owner_id, conversation_id, kind, message_id,
                    logical_message_id, role, timestamp, deleted, index, start_char, end_char,
                    text, context, text_hash, embedding, embedding_model)
                SELECT m.owner_id, m.conversation_id, 'message', m.id, m.id, m.role, m.timestamp,
                       false, 0, 0, length(m.content), m.content,
                       -- the context a real reply carries: the end of the turn before it
                       coalesce((SELECT right(pm.content, 300) FROM memory_message pm
                                 WHERE pm.conversation_id = m.conversation_id
                                   AND pm.position = m.position - 1 AND NOT pm.is_chunk), ''),
                       md5(m.content),
                       (SELECT array_agg(random() - 0.5)::real[] FROM generate_series(1, {dims}) d
                        WHERE m.position >= 0)::vector({dims}),
                       %s
                FROM memory_message m
                WHERE m.conversation_id = %s AND m.position BETWEEN %s AND %s
                """,
                [model, conversation.pk, first, first + n - 1],
            )
            cursor.execute(
                "UPDATE memory_conversation SET next_position = %s WHERE id = %s",
                [first + n, conversation.pk],
            )

    def _facts(self, user, conversation) -> None:
        """Synthetic facts for the bulk messages that have none (one per FACT_EVERY messages):
        four in five about the user, the rest about FACT_PEOPLE; one in seven an exclusive
        attribute, each superseded by the next one on the same subject and attribute."""
        people = "{" + ",".join(f'"{p}"' for p in FACT_PEOPLE) + "}"
        attributes = "{" + ",".join(f'"{a}"' for a in FACT_ATTRIBUTES) + "}"
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO memory_fact (owner_id, message_id, subject, subject_key, attribute,
                    value, statement, wording, kind, corrected, said_at, valid_from, pinned, origin,
                    score, created_at)
                SELECT m.owner_id, m.id, s.subject, lower(s.subject), a.attribute,
                       CASE WHEN a.attribute = 'about' THEN '' ELSE split_part(m.content, ' ', 3) END,
                       CASE WHEN a.attribute = 'about' THEN s.subject || ' said ' || left(m.content, 80)
                            ELSE s.subject || ' ' || a.attribute || ' ' || split_part(m.content, ' ', 3)
                       END,
                       '', '', '', m.timestamp, m.timestamp, false, 'synthetic', 0, now()
                FROM memory_message m,
                LATERAL (SELECT CASE WHEN (m.position / %(every)s) %% 5 = 0
                                     THEN (%(people)s::text[])[1 + (m.position / %(every)s / 5) %% %(np)s]
                                     ELSE 'the user' END AS subject) s,
                LATERAL (SELECT CASE WHEN (m.position / %(every)s) %% 7 = 3
                                     THEN (%(attributes)s::text[])[1 + (m.position / %(every)s / 7) %% %(na)s]
                                     ELSE 'about' END AS attribute) a
                WHERE m.conversation_id = %(conv)s AND m.position %% %(every)s = 0 AND NOT m.is_chunk
                  AND NOT EXISTS (SELECT 1 FROM memory_fact f WHERE f.message_id = m.id)
                """,
                {
                    "conv": conversation.pk,
                    "every": FACT_EVERY,
                    "people": people,
                    "np": len(FACT_PEOPLE),
                    "attributes": attributes,
                    "na": len(FACT_ATTRIBUTES),
                },
            )
            if not cursor.rowcount:
                return
            # Each exclusive fact is superseded by the next one on its subject and attribute.
            cursor.execute(
                """
                UPDATE memory_fact f SET superseded_by_id = n.next_id, valid_to = n.next_from
                FROM (SELECT id, lead(id) OVER w AS next_id, lead(valid_from) OVER w AS next_from
                      FROM memory_fact WHERE owner_id = %s AND attribute <> 'about'
                      WINDOW w AS (PARTITION BY subject_key, attribute ORDER BY valid_from, id)) n
                WHERE f.id = n.id AND n.next_id IS NOT NULL
                  AND f.superseded_by_id IS DISTINCT FROM n.next_id
                """,
                [user.pk],
            )

    # --- measured turns -------------------------------------------------------------------------

    def _measured(self, user, size: int, fill_s: float, opts) -> dict:
        from memory.finding import candidates

        parallel = candidates.PARALLEL_SEARCH
        candidates.PARALLEL_SEARCH = parallel and not opts["sequential"]
        try:
            return self._measure(user, size, fill_s, opts)
        finally:
            candidates.PARALLEL_SEARCH = parallel

    def _measure(self, user, size: int, fill_s: float, opts) -> dict:
        from memory.context.budget import allocate
        from memory.context.index_builder import prepare_context, query_text, snapshot_row
        from memory.embedders import get_embedder
        from memory.lifecycle.forgetting import read_by, write_checked
        from memory.models import Conversation
        from memory.storage.inserts import insert_statement, inserted
        from memory.storage.store import embed_pending, store_message

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(sum(token_count), 0) FROM memory_message "
                "WHERE owner_id = %s AND NOT deleted",
                [user.pk],
            )
            history_tokens = int(cursor.fetchone()[0])
        # Rows loaded by an earlier run may not have been vacuumed yet (nothing is done for
        # pages that already were).
        _vacuum()
        live = Conversation.objects.create(owner=user, title=f"live at {size}")
        costs, plan_tokens, prompt_tokens, over, tools, background = [], [], [], 0, [], []
        # CPU of this process (every thread: the query's embedding, search workers) per turn:
        # less swayed by the machine's other work than the clock.
        cpu: list[float] = []
        tool_calls: list[float] = []  # the model's search_and_retrieve after the turn, as a chat runs it
        # The part of the turn the chat waits for before it asks the model: it writes the
        # snapshot after the first token (chat.turn), so the request waits for the rest only.
        until_request: list[float] = []
        # --typed-ahead: the turns whose question was embedded before they started (cost, CPU,
        # until the model's request), apart from the others.
        ahead: dict[str, list[float]] = {"cost": [], "cpu": [], "until_request": [], "embed_wait": []}
        # --alternate-kept: the turns that read everything again, apart from the others.
        unkept: dict[str, list[float]] = {
            "cost": [], "cpu": [], "until_request": [], "prepare_context": [], "read_ahead": []
        }
        allocation = allocate(opts.get("window") or None)
        sent: dict[str, list[int]] = {}
        strategy = ""
        timings: dict[str, list[float]] = {}
        steps_of_turn: list[dict[str, float]] = []  # each turn's steps, for where a slow turn lost
        by_probe: dict[str, list[float]] = {}
        collector = _Collections()
        server_before: dict[str, int] = {}
        profiler = None
        if opts["profile"]:
            import cProfile

            profiler = cProfile.Profile()
        # One unmeasured turn first: a running server has its tokenizer loaded and its
        # database caches warm; the first turn after a start is not the per-turn cost.
        for turn in range(-1, opts["turns"]):
            # A new text each turn and each size, so the query embedding is computed, never a
            # cache hit (the same turn at an earlier size of the run would be one).
            text = f"{PROBES[turn % len(PROBES)]} (turn {turn + 1} at {size:,})"
            if profiler and turn >= 0:
                profiler.enable()
            typed_ahead = opts.get("typed_ahead") and turn >= 0 and turn % 2 == 1
            if typed_ahead:
                # The person's typing time: the composer's typing frame had the question embedded
                # (chat.consumers.frame_typing) before Enter; waited for, outside the turn.
                pending = get_embedder().prefetch_query([query_text(text)])
                if pending is not None:
                    pending.result()
            collector.counting = turn >= 0
            reread = opts.get("alternate_kept") and turn >= 0 and turn % 2 == 1
            if reread:
                from memory.context import kept_reads

                kept_reads._KEPT.clear()
            if turn == 0:
                server_before = _server_counters()
            t0 = time.perf_counter()
            c0 = time.process_time()
            # As the chat does: the message's vector (the query's) is computed while the
            # message is stored; its passage gets the vector from background work afterwards.
            # prepare_context waits for the vector only when it searches.
            get_embedder().prefetch_query([query_text(text)])
            message = store_message(user, live, "user", text, embed="upkeep")
            t1 = time.perf_counter()
            plan = prepare_context(
                user, live, text, user_message=message, zones=allocation.index_zones()
            )
            t_plan = time.perf_counter()
            # As the chat does (chat.turn): what the plan shows is kept with its texts, so that
            # what the turn writes can lose them if they are forgotten meanwhile; the snapshot is
            # written with a check, in the same round trip, that none of them is gone.
            seen = {m.pk: [m.content] for m in plan.recent}
            seen.update(read_by(user, [[i for i in plan.included_ids if i not in seen], plan.hits]))
            t2 = time.perf_counter()
            # The check and the snapshot's insert in one round trip, as the chat sends them (a
            # transaction that scrubs only when something read was forgotten meanwhile).
            snapshot = snapshot_row(plan, user, live, message)
            write_checked(user, seen, [insert_statement(snapshot)])
            inserted(snapshot)
            t3 = time.perf_counter()
            c3 = time.process_time()
            collector.turn_ended()
            if profiler and turn >= 0:
                profiler.disable()
            # Background work, off the turn's path: the passage's vector (an HNSW insert).
            embed_pending(user, message_ids=[message.pk])
            t4 = time.perf_counter()
            if turn < 0:
                store_message(user, live, "assistant", "warm-up answer", embed=False)
                continue
            if reread:
                for k, v in (("cost", t3 - t0), ("until_request", t2 - t0), ("cpu", c3 - c0),
                             ("prepare_context", t_plan - t1)):
                    unkept[k].append(v * 1000)
                unkept["read_ahead"].append(plan.timings_ms.get("read_ahead", 0.0))
                store_message(user, live, "assistant", f"answer {turn} about {text}", embed=False)
                continue
            if typed_ahead:
                ahead["cost"].append((t3 - t0) * 1000)
                ahead["until_request"].append((t2 - t0) * 1000)
                ahead["cpu"].append((c3 - c0) * 1000)
                ahead["embed_wait"].append(plan.timings_ms.get("search_embed_wait", 0.0))
                store_message(user, live, "assistant", f"answer {turn} about {text}", embed=False)
                continue
            costs.append((t3 - t0) * 1000)
            until_request.append((t2 - t0) * 1000)
            cpu.append((c3 - c0) * 1000)
            timings.setdefault("store_message", []).append((t1 - t0) * 1000)
            timings.setdefault("prepare_context", []).append((t_plan - t1) * 1000)
            timings.setdefault("read_by", []).append((t2 - t_plan) * 1000)
            timings.setdefault("save_snapshot", []).append((t3 - t2) * 1000)
            background.append((t4 - t3) * 1000)
            store_message(user, live, "assistant", f"answer {turn} about {text}", embed=False)
            for k, v in plan.timings_ms.items():
                timings.setdefault(k, []).append(v)
            if "search_vector_query" in plan.timings_ms:
                # The vector list's worker apart from its query and the wait for the query's
                # vector: the thread's start, its connection's check, the GIL.
                t = plan.timings_ms
                timings.setdefault("search_vector_other", []).append(
                    t["search_vector"] - t["search_vector_query"] - t.get("search_embed_wait", 0.0)
                )
            steps_of_turn.append({k: v[-1] for k, v in timings.items()})
            by_probe.setdefault(PROBES[turn % len(PROBES)], []).append(costs[-1])
            strategy = plan.strategy
            plan_tokens.append(plan.total_tokens)
            used, tool_ms = _sent_to_model(user, live, allocation, plan, message)
            tool_calls.append(tool_ms)
            for zone, tokens in used.items():
                sent.setdefault(zone, []).append(tokens)
            prompt_tokens.append(sum(used.values()))
            tools.append(len(plan.tools))
            over += sum(used.values()) + allocation["answer"] > allocation.window
        collector.close()
        server_during = _server_counters()
        server_during = {k: v - server_before.get(k, 0) for k, v in server_during.items()}
        slow = sorted(range(len(costs)), key=costs.__getitem__)[-max(1, len(costs) // 10):]
        costs.sort()
        load = _loadavg()
        row = {
            "size": size,
            "fill_s": fill_s,
            "p50": statistics.median(costs),
            "p95": _percentile(costs, 95),
            "cpu": statistics.median(cpu),
            "until_request_p50": statistics.median(until_request),
            "until_request_p95": _percentile(sorted(until_request), 95),
            "plan": max(plan_tokens),
            "prompt": statistics.median(prompt_tokens),
            "history": history_tokens,
            "over": over,
            "strategy": strategy,
        }
        self.stdout.write(
            f"{size:>9,} msgs  fill {fill_s:6.1f}s  turn p50 {row['p50']:6.1f} ms  "
            f"p95 {row['p95']:6.1f} ms  cpu p50 {row['cpu']:5.1f} ms  "
            f"plan ≤{row['plan']} tok  prompt {row['prompt']:.0f} tok  "
            f"history {history_tokens:,} tok  ({history_tokens / max(1, row['prompt']):,.0f}x)  "
            f"tools {statistics.median(tools):.0f}  over budget {over}  strategy {strategy}  "
            f"load {load}"
        )
        self.stdout.write(
            f"           until the model's request (the turn but its snapshot, which the chat "
            f"writes after the first token): p50 {row['until_request_p50']:.1f} ms, "
            f"p95 {row['until_request_p95']:.1f} ms"
        )
        if ahead["cost"]:
            ahead_costs = sorted(ahead["cost"])
            row["typed_ahead_p50"] = statistics.median(ahead_costs)
            row["typed_ahead_p95"] = _percentile(ahead_costs, 95)
            self.stdout.write(
                f"           typed ahead ({len(ahead_costs)} turns alternated with the "
                f"{len(costs)} above, each question embedded before its turn as while the person "
                f"typed): turn p50 {row['typed_ahead_p50']:.1f} ms, p95 {row['typed_ahead_p95']:.1f} ms, "
                f"cpu p50 {statistics.median(ahead['cpu']):.1f} ms; until the model's request p50 "
                f"{statistics.median(ahead['until_request']):.1f} ms, "
                f"p95 {_percentile(sorted(ahead['until_request']), 95):.1f} ms; the search waited for "
                f"the question's vector p50 {statistics.median(ahead['embed_wait']):.1f} ms, p95 "
                f"{_percentile(sorted(ahead['embed_wait']), 95):.1f} ms (the others: "
                f"{statistics.median(timings.get('search_embed_wait', [0.0])):.1f} / "
                f"{_percentile(sorted(timings.get('search_embed_wait', [0.0])), 95):.1f})"
            )
        if unkept["cost"]:
            m = {k: statistics.median(v) for k, v in unkept.items()}
            others = {k: statistics.median(timings[k]) for k in ("prepare_context", "read_ahead")}
            self.stdout.write(
                f"           read again ({len(unkept['cost'])} turns alternated with the {len(costs)} "
                f"above, nothing kept between turns): turn p50 {m['cost']:.1f} ms, p95 "
                f"{_percentile(sorted(unkept['cost']), 95):.1f} ms, cpu p50 {m['cpu']:.1f} ms; until the "
                f"model's request p50 {m['until_request']:.1f} ms; prepare_context p50 "
                f"{m['prepare_context']:.1f} ms (the others {others['prepare_context']:.1f}); "
                f"read_ahead p50 {m['read_ahead']:.1f} ms (the others {others['read_ahead']:.1f})"
            )
        median = {zone: statistics.median(v) for zone, v in sent.items()}
        self.stdout.write(
            f"           sent to the model per turn (median tokens, window {allocation.window:,}): "
            f"index {median['index']:.0f}  recent turns {median['recent']:.0f}  "
            f"current message {median['current']:.0f}  tool results {median['tool_results']:.0f}  "
            f"(system {median['system']:.0f}, tool schemas {median['tools']:.0f}) = "
            f"{row['prompt']:.0f} + answer {allocation['answer']:,}; full history {history_tokens:,}: "
            f"{history_tokens / max(1, row['prompt']):,.1f}x what is sent"
        )
        self.stdout.write(
            f"           background after the turn (the message's vector): p50 "
            f"{statistics.median(background):.1f} ms, p95 {_percentile(sorted(background), 95):.1f} ms"
        )
        self.stdout.write(
            f"           the model's search_and_retrieve call (a tool round of the turn): p50 "
            f"{statistics.median(tool_calls):.1f} ms, p95 {_percentile(sorted(tool_calls), 95):.1f} ms"
        )
        self.stdout.write(
            "           garbage collector during the turns: " + collector.summary(slow)
        )
        if server_during:
            self.stdout.write(
                "           Postgres from the first measured turn to the last: "
                + "  ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in server_during.items())
            )
        self.stdout.write(
            "           turn p50 by question: "
            + "  ".join(f"{p.split()[1]}… {statistics.median(v):.1f}" for p, v in by_probe.items())
        )
        self.stdout.write(
            f"           the slowest {len(slow)} turns, ms over each step's median: "
            + _over_median(timings, [steps_of_turn[i] for i in slow])
        )
        self.stdout.write(
            "           median ms: "
            + "  ".join(f"{k} {statistics.median(v):.1f}" for k, v in timings.items())
        )
        self.stdout.write(
            "           p95 ms: "
            + "  ".join(f"{k} {_percentile(sorted(v), 95):.1f}" for k, v in timings.items())
        )
        if profiler:
            import io
            import pstats

            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            if os.environ.get("BENCH_PROFILE_DUMP"):
                stats.dump_stats(os.environ["BENCH_PROFILE_DUMP"])
            # Where the time is spent (cumulative), then which functions spend it themselves.
            stats.sort_stats("cumulative").print_stats(30)
            stats.sort_stats("tottime").print_stats(40)
            self.stdout.write(out.getvalue())
        return row


def _sent_to_model(user, conversation, allocation, plan, message) -> tuple[dict[str, int], float]:
    """The tokens of each zone of the request a chat turn sends after one round of tools: the
    turn's own Prompt, with the result of a real search_and_retrieve for the message; and that
    call's milliseconds."""
    import json

    from memory.context.budget import Prompt, ToolResultText
    from memory.context.tools import execute_tool

    prompt = Prompt.for_message(allocation, plan, message)
    arguments = {"query": message.content}
    started = time.perf_counter()
    outcome = execute_tool(
        user, "search_and_retrieve", arguments, conversation=conversation,
        exclude_message_ids=[message.pk],
    )
    tool_ms = (time.perf_counter() - started) * 1000
    result = outcome.result if outcome.ok else {"error": outcome.error}
    call = {
        "id": "call_bench",
        "type": "function",
        "function": {"name": "search_and_retrieve", "arguments": json.dumps(arguments)},
    }
    prompt.add_round(
        "", [call], [ToolResultText("call_bench", json.dumps(result, default=str), outcome.summary or "")]
    )
    prompt.messages(plan.tools)
    return dict(prompt.used), tool_ms


def _over_median(timings: dict[str, list[float]], turns: list[dict[str, float]]) -> str:
    """Where the given turns lost time: each step's mean excess over its median, largest first."""
    excess = {
        step: statistics.fmean(t.get(step, 0.0) for t in turns) - statistics.median(values)
        for step, values in timings.items()
    }
    ordered = sorted(excess.items(), key=lambda kv: -kv[1])
    return "  ".join(f"{step} {ms:+.1f}" for step, ms in ordered[:6])


def _server_counters() -> dict[str, int]:
    """Postgres' work that could land on a turn: checkpoints, (auto)vacuum and analyze runs of
    memory's tables, WAL written and full-page images in it. Empty where the statistics views
    differ (before Postgres 17). This connection's own statistics are flushed first (a backend
    reports them at most once a second when left alone, so a short run could read none of its
    WAL): the flush happens as the backend goes idle after the first statement."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT num_done FROM pg_stat_checkpointer), "
                "(SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_user_tables "
                "WHERE relname LIKE 'memory\\_%'), "
                "(SELECT wal_bytes FROM pg_stat_wal), (SELECT wal_fpi FROM pg_stat_wal)"
            )
            done, auto, wal, fpi = cursor.fetchone()
    except DatabaseError:
        return {}
    return {"checkpoints": int(done), "autovacuum_runs": int(auto), "WAL_bytes": int(wal),
            "full_page_images": int(fpi)}


class _Collections:
    """The garbage collector's passes during the measured turns (gc.callbacks): how many, of
    which generation, and the milliseconds they held the interpreter, per turn."""

    def __init__(self) -> None:
        self.counting = False
        self.by_generation = [0, 0, 0]
        self.per_turn: list[float] = []
        self._ms = 0.0
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if not self.counting:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.by_generation[info["generation"]] += 1
            self._ms += (time.perf_counter() - self._started) * 1000

    def turn_ended(self) -> None:
        if self.counting:
            self.per_turn.append(self._ms)
        self._ms = 0.0
        self.counting = False

    def close(self) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self, slow: list[int]) -> str:
        """`slow`: the indexes of the slowest turns, whose share of the collector is shown."""
        young, middle, old = self.by_generation
        turns = max(1, len(self.per_turn))
        in_slow = [self.per_turn[i] for i in slow if i < len(self.per_turn)]
        return (
            f"{young + middle + old} collections (gen0 {young}, gen1 {middle}, gen2 {old}), "
            f"{sum(self.per_turn):.1f} ms in all, {sum(self.per_turn) / turns:.2f} ms a turn; "
            f"in the slowest {len(in_slow)} turns {sum(in_slow):.1f} ms, "
            f"the most in one turn {max(self.per_turn, default=0.0):.1f} ms; "
            f"freeze {gc.get_freeze_count():,} objects, threshold {gc.get_threshold()[0]}"
        )


def _vacuum() -> None:
    """VACUUM (ANALYZE) the bulk-loaded tables, as autovacuum would in time on a real database.

    Freshly loaded pages have no visibility map bits and no hint bits yet: each read would then
    visit the heap (no index-only scans) and dirty the page it reads, which a live database
    does not pay on every turn."""
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) memory_message")
        cursor.execute("VACUUM (ANALYZE) memory_passage")
        cursor.execute("VACUUM (ANALYZE) memory_fact")


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _percentile(ordered: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list (p95 of 20 values is the 19th)."""
    return ordered[max(0, math.ceil(len(ordered) * pct / 100) - 1)]
