"""manage.py bench_scale: per-turn memory cost as stored history grows (1k … 1M messages).

Bulk history is written straight into Postgres with SYNTHETIC vectors (random unit-ish
vectors, labelled as such in the output) and synthetic text from a fixed vocabulary, because
embedding a million messages would take days here. Each measured turn is real: store the user
message (embedded by the configured model), prepare_context (query embedding, hybrid search,
plan), save the snapshot.
"""

from __future__ import annotations

import statistics
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from memory.index_builder import prepare_context, save_snapshot
from memory.models import Conversation
from memory.progress import Progress
from memory.store import store_message
from memory.tokens import count_tokens
from memory.topics import update_period_summaries

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


class Command(BaseCommand):
    help = "Per-turn memory cost at 1k/10k/100k/1M stored messages (synthetic vectors)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sizes", default="1000,10000,100000,1000000")
        parser.add_argument("--turns", type=int, default=20)
        parser.add_argument("--user", default="bench_scale")
        parser.add_argument("--keep", action="store_true")

    def handle(self, *args, **opts) -> None:
        try:
            sizes = sorted(int(s) for s in opts["sizes"].split(","))
        except ValueError:
            raise CommandError("--sizes is a comma-separated list of integers") from None
        User = get_user_model()
        User.objects.filter(username=opts["user"]).delete()
        user = User.objects.create_user(opts["user"])
        bulk = Conversation.objects.create(owner=user, title="synthetic history")
        from memory.embeddings import get_embedder

        get_embedder().embed_one("warm up")  # loading the model is not a per-turn cost
        stored = 0
        rows = []
        for size in sizes:
            started = time.perf_counter()
            with Progress(size - stored, f"synthetic rows to {size:,}") as bar:
                while stored < size:
                    n = min(20000, size - stored)
                    self._insert(user, bulk, stored, n)
                    stored += n
                    bar.update(n)
            fill_s = time.perf_counter() - started
            update_period_summaries(user)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE memory_message")
                cursor.execute("ANALYZE memory_passage")
                cursor.execute(
                    "SELECT coalesce(sum(token_count), 0) FROM memory_message "
                    "WHERE owner_id = %s AND NOT deleted",
                    [user.pk],
                )
                history_tokens = int(cursor.fetchone()[0])
            live = Conversation.objects.create(owner=user, title=f"live at {size}")
            costs, plan_tokens, prompt_tokens, over = [], [], [], 0
            strategy = ""
            for turn in range(opts["turns"]):
                text = PROBES[turn % len(PROBES)]
                t0 = time.perf_counter()
                message = store_message(user, live, "user", text)
                plan = prepare_context(user, live, text, user_message=message)
                save_snapshot(plan, user, live, message)
                costs.append((time.perf_counter() - t0) * 1000)
                store_message(user, live, "assistant", f"answer {turn} about {text}", embed=False)
                strategy = plan.strategy
                plan_tokens.append(plan.total_tokens)
                prompt = plan.total_tokens - plan.tokens_by_zone["reserve"] + count_tokens(text)
                prompt_tokens.append(prompt)
                over += plan.total_tokens > plan.budget
            costs.sort()
            row = {
                "size": size,
                "fill_s": fill_s,
                "p50": statistics.median(costs),
                "p95": costs[min(len(costs) - 1, int(len(costs) * 0.95))],
                "plan": max(plan_tokens),
                "prompt": statistics.median(prompt_tokens),
                "history": history_tokens,
                "over": over,
                "strategy": strategy,
            }
            rows.append(row)
            self.stdout.write(
                f"{size:>9,} msgs  fill {fill_s:6.1f}s  turn p50 {row['p50']:6.1f} ms  "
                f"p95 {row['p95']:6.1f} ms  plan ≤{row['plan']} tok  prompt {row['prompt']:.0f} tok  "
                f"history {history_tokens:,} tok  ({history_tokens / max(1, row['prompt']):,.0f}x)  "
                f"over budget {over}  strategy {strategy}"
            )
        self.stdout.write("")
        self.stdout.write(
            "vectors of the bulk history are SYNTHETIC (random); its text is "
            "synthetic from a fixed vocabulary; measured turns are real."
        )
        if len(rows) >= 2:
            self.stdout.write(
                f"prompt at {rows[-1]['size']:,} vs {rows[0]['size']:,}: "
                f"{rows[-1]['prompt'] / rows[0]['prompt']:.2f}x"
            )
        if not opts["keep"]:
            user.delete()

    def _insert(self, user, conversation, first: int, n: int) -> None:
        """n synthetic messages and one passage each, written by Postgres itself."""
        from django.conf import settings

        from memory.embeddings import get_embedder

        dims = settings.EMBEDDING_DIMENSIONS
        model = get_embedder().name
        vocab = "{" + ",".join(VOCAB) + "}"
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO memory_message (id, owner_id, conversation_id, role, content, snippet,
                    timestamp, token_count, metadata, edited, deleted, edit_history, is_chunk,
                    position)
                SELECT 'S' || lpad(g::text, 25, '0'), %(owner)s, %(conv)s,
                       CASE WHEN g %% 2 = 0 THEN 'user' ELSE 'assistant' END,
                       c.text, left(c.text, 100),
                       now() - make_interval(mins => (%(total)s - g)), 0,
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
                },
            )
            # Token counts: the real cl100k count of this vocabulary is close to 1.3/word;
            # measured on a sample rather than guessed.
            cursor.execute(
                "SELECT content FROM memory_message WHERE owner_id = %s AND position >= %s "
                "AND conversation_id = %s LIMIT 200",
                [user.pk, first, conversation.pk],
            )
            sample = [r[0] for r in cursor.fetchall()]
            ratio = sum(count_tokens(s) for s in sample) / max(1, sum(len(s) for s in sample))
            cursor.execute(
                "UPDATE memory_message SET token_count = ceil(length(content) * %s) "
                "WHERE conversation_id = %s AND position BETWEEN %s AND %s",
                [ratio, conversation.pk, first, first + n - 1],
            )
            cursor.execute(
                f"""
                INSERT INTO memory_passage (owner_id, conversation_id, kind, message_id,
                    logical_message_id, role, timestamp, deleted, index, start_char, end_char,
                    text, text_hash, embedding, embedding_model)
                SELECT m.owner_id, m.conversation_id, 'message', m.id, m.id, m.role, m.timestamp,
                       false, 0, 0, length(m.content), m.content, md5(m.content),
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
