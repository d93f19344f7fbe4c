"""manage.py bench_store: how fast memory stores messages with their embeddings."""

from __future__ import annotations

import inspect
import pkgutil
import resource
import statistics
import sys
import time
import uuid

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from bench.scratch import add_database_argument, use_database
from memory.embedders import get_embedder
from memory.models import Conversation
from memory.progress import Progress
from memory.storage.store import NewMessage, store_message, store_messages

HAYSTACK_CHARS = 2_050_000  # seed 001 §4.1: 820 blocks x 2,500 characters
PAPER_SECONDS = 147.0


def prose_paragraphs(limit_chars: int) -> list[str]:
    """Real English prose available offline: docstrings of the standard library."""
    paragraphs: list[str] = []
    seen: set[str] = set()
    total = 0
    for info in sorted(pkgutil.iter_modules(), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in {"antigravity", "this", "idlelib", "tkinter", "turtle"}:
            continue
        try:
            module = __import__(info.name)
        except Exception:  # noqa: BLE001 - some modules refuse to import here; skip them
            continue
        for obj in [module, *[getattr(module, n, None) for n in dir(module)[:200]]]:
            doc = inspect.getdoc(obj) if obj is not None else None
            if not doc:
                continue
            for para in doc.split("\n\n"):
                para = " ".join(para.split())
                if len(para) < 80 or para in seen or ">>>" in para:
                    continue
                seen.add(para)
                paragraphs.append(para)
                total += len(para)
                if total >= limit_chars:
                    return paragraphs
    return paragraphs


def blocks(paragraphs: list[str], size: int, count: int) -> list[str]:
    out, current, i = [], "", 0
    while len(out) < count and paragraphs:
        para = paragraphs[i % len(paragraphs)]
        i += 1
        current = f"{current} {para}".strip()
        if len(current) >= size:
            out.append(current[:size])
            current = ""
    return out


class Command(BaseCommand):
    help = "Benchmark storing messages with embeddings (short and 2,500-character messages)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--short", type=int, default=1000, help="short messages per run")
        parser.add_argument("--long", type=int, default=100, help="2,500-character messages per run")
        parser.add_argument("--turns", type=int, default=50, help="single-message turns to time")
        parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median reported)")
        parser.add_argument("--batch", type=int, default=200, help="messages per store call (import path)")
        add_database_argument(parser, "store")

    def handle(self, *args, **opts) -> None:
        out = self.stdout
        use_database(opts["database"], out)
        user = get_user_model().objects.create_user(f"bench-store-{uuid.uuid4().hex[:8]}")
        try:
            self._run(user, opts, out)
        finally:
            user.delete()

    def _run(self, user, opts, out) -> None:
        started = time.perf_counter()
        embedder = get_embedder()
        embedder.embed_one("warm up")
        load = time.perf_counter() - started
        out.write(f"embedder: {embedder.name} ({embedder.dimensions} dims), load {load:.1f} s")

        paragraphs = prose_paragraphs(600_000)
        sentences = [s.strip() + "." for p in paragraphs for s in p.split(". ") if 30 <= len(s) <= 160]
        long_texts = blocks(paragraphs, 2500, opts["long"] * opts["repeat"])
        if len(sentences) < opts["short"] * opts["repeat"]:
            sentences = sentences * (opts["short"] * opts["repeat"] // max(1, len(sentences)) + 1)

        def run_bulk(texts: list[str], label: str) -> float:
            conv = Conversation.objects.create(owner=user, title=label)
            t0 = time.perf_counter()
            with Progress(len(texts), label, stream=sys.stderr) as progress:
                for i in range(0, len(texts), opts["batch"]):
                    batch = texts[i : i + opts["batch"]]
                    store_messages(user, conv, [NewMessage(role="user", content=t) for t in batch])
                    progress.update(len(batch))
            return len(texts) / (time.perf_counter() - t0)

        short_rates, long_rates = [], []
        for r in range(opts["repeat"]):
            n = opts["short"]
            short_rates.append(run_bulk(sentences[r * n : (r + 1) * n], f"short run {r + 1}"))
        for r in range(opts["repeat"]):
            n = opts["long"]
            long_rates.append(run_bulk(long_texts[r * n : (r + 1) * n], f"2500-char run {r + 1}"))

        conv = Conversation.objects.create(owner=user, title="turns")
        turn_ms = []
        for i in range(opts["turns"]):
            t0 = time.perf_counter()
            store_message(user, conv, "user", f"turn {i}: {sentences[-(i + 1)]}")
            turn_ms.append((time.perf_counter() - t0) * 1000)

        short_rate = statistics.median(short_rates)
        long_rate = statistics.median(long_rates)
        haystack_s = HAYSTACK_CHARS / (long_rate * 2500)
        turn_ms.sort()
        p95 = turn_ms[min(len(turn_ms) - 1, int(len(turn_ms) * 0.95))]
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        avg_short = statistics.mean(len(s) for s in sentences[: opts["short"]])
        out.write(f"short messages (~{avg_short:.0f} chars), batches of {opts['batch']}: "
                  f"median {short_rate:,.0f} msg/s over {opts['repeat']} runs "
                  f"{[round(x) for x in short_rates]}"
                  f"  (goal >= 300)")
        out.write(f"2,500-char messages: median {long_rate:,.1f} msg/s = {long_rate * 2500:,.0f} chars/s "
                  f"{[round(x, 1) for x in long_rates]}")
        out.write(f"projected seed-001 haystack ({HAYSTACK_CHARS:,} chars): {haystack_s:,.0f} s "
                  f"= {haystack_s / PAPER_SECONDS:.2f}x the paper's {PAPER_SECONDS:.0f} s (goal < 1.00x)")
        out.write(f"single-message store (chat turn path): p50 {statistics.median(turn_ms):.1f} ms, "
                  f"p95 {p95:.1f} ms over {len(turn_ms)} turns")
        out.write(f"peak RSS: {peak_mb:,.0f} MB")
