"""manage.py bench_import_store: messages stored per second by an import's storing step (what a
person waits for before keyword search has an import), as passages are sized now (e5 tokens
counted word by word, cl100k cut points from per-token tables) and as they were (the engine
tokenising each span whole, tiktoken decoding every token for its offset), alternating, in one
run.

The export is bench/chatgpt_export.py's (edited prompts, code blocks, long pastes); each run
imports it as a user of its own in the scratch database, deleted afterwards. Storing only: no
embedding, no topics.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from bench.chatgpt_export import generate
from bench.scratch import add_database_argument, use_database
from memory.embedders import e5, get_embedder
from memory.embedders.e5 import E5Embedder
from memory.tokens import encoding
from memory.transfer import import_jobs


def decoded_cut_points(text: str) -> list[int]:
    """e5._cut_points as it was: every token decoded for its offset."""
    enc = encoding()
    _, offsets = enc.decode_with_offsets(enc.encode(text, disallowed_special=()))
    return sorted({0, len(text), *offsets})


MODES = {
    "now": (E5Embedder.token_count, e5._cut_points),
    "before (whole-text counts, decoded cut points)": (E5Embedder._engine_count, decoded_cut_points),
}


class Command(BaseCommand):
    help = "Messages/s of an import's storing step, e5 token counts word by word against whole-text ones."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--messages", type=int, default=2000, help="messages in the generated export")
        parser.add_argument("--runs", type=int, default=3, help="runs of each way (the median is printed)")
        add_database_argument(parser, "import_store")

    def handle(self, *args, **opts) -> None:
        use_database(opts["database"], self.stdout)
        text = json.dumps(generate(opts["messages"]))
        get_embedder().token_count("warm " * 40)  # the engine loads outside the timings
        rates: dict[str, list[float]] = {mode: [] for mode in MODES}
        try:
            for run in range(opts["runs"]):
                for mode, (count, cut_points) in MODES.items():
                    E5Embedder.token_count = count
                    e5._cut_points = cut_points
                    # A fresh embedder's word counts start empty, as in a new process.
                    get_embedder.cache_clear()
                    get_embedder().token_count("warm " * 40)
                    parsed = import_jobs.parse(text)
                    name = f"bench-import-store-{uuid.uuid4().hex[:8]}"
                    user = get_user_model().objects.create(username=name)
                    job = import_jobs.create(user, source=parsed.kind, filename="bench.json",
                                             messages_total=parsed.messages, claimed=True)
                    started = time.perf_counter()
                    import_jobs.store(job, parsed)
                    seconds = time.perf_counter() - started
                    user.delete()
                    rates[mode].append(parsed.messages / seconds)
                    self.stdout.write(f"run {run + 1} {mode}: {parsed.messages} messages in {seconds:.1f} s, "
                                      f"{parsed.messages / seconds:.1f} messages/s")
        finally:
            E5Embedder.token_count, e5._cut_points = MODES["now"]
            get_embedder.cache_clear()
        for mode, values in rates.items():
            median = statistics.median(values)
            self.stdout.write(f"{mode}: median {median:.1f} messages/s over {len(values)} runs")
