"""Two built e5 graphs side by side (issue 37, twelfth pass): the question's embedding, a
passage batch's, and whether the vectors are the same.

    python -m bench.e5_graphs OLD.onnx [NEW.onnx] [--questions 200] [--passages 1800] [--rounds 1]
        [--timed-passages 240] [--profile]

NEW defaults to the graph `build` makes today for the default model (built in a temporary
folder: a cached file of another version in .data/models would be removed by model_file). OLD
is a file built before (copy .data/models/multilingual-e5-small-int8-v4-*-g8.onnx aside before
the new graph replaces it). Both run as the chat runs them (E5Onnx: one thread a call, no
spinning, the same session options), in one process, alternated call by call so the machine's
load falls on both alike. Prints, with the load average before and after the timings:
- the vectors of every real question and passage (eval_recall's datasets: LoCoMo's and
  LongMemEval's questions and turns, shuffled, seed 7, each turn's first 320 tokens, a
  passage as an import cuts it): lowest and median cosine of NEW's to OLD's, and how many
  texts' pooled outputs are bit for bit the same;
- a question's embedding (E5Onnx.query: tokens, inputs, the graph, the norm), one question at a
  time: median and p95 ms of each, and the ratio of the medians (each of --rounds rounds, and
  the median of the rounds' ratios);
- passages in calls of 6 (an import's calls, E5Embedder.BULK_PER_CALL): texts a second by the
  clock and per CPU-second of the process;
- the nodes of each graph as written and as ONNX Runtime runs them, and with --profile its
  profiler's time per operator type on the questions (it adds ~3 us a node, so it overstates
  what many small nodes cost: compare with the clock's figures).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"
NAME = "multilingual-e5-small-int8-v4"


def eval_texts(folder: Path, questions: int, passages: int, seed: int = 7) -> tuple[list[str], list[str]]:
    """Real questions and turns of the eval datasets, shuffled (the same ones every run)."""
    asked, said = [], []
    for path in sorted(folder.rglob("*.queries.jsonl")):
        asked += [json.loads(line)["query"] for line in path.open() if line.strip()]
    for path in sorted(folder.rglob("*.history.jsonl")):
        for line in path.open():
            content = json.loads(line).get("content") if line.strip() else None
            if content and content.strip():
                said.append(content)
    rng = random.Random(seed)
    rng.shuffle(asked)
    rng.shuffle(said)
    return asked[:questions], said[:passages]


def first_passage(model, text: str, tokens: int = 320) -> str:
    """The start of `text` that fits a passage of the default window (EMBEDDING_WINDOW_TOKENS)."""
    while model.token_count(text) > tokens:
        text = text[: int(len(text) * 0.8)]
    return text


def p95(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(0.95 * len(values)))]


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def node_counts(path: Path) -> tuple[int, int]:
    """Nodes of the file, and of ONNX Runtime's optimised graph (saved to a temporary file)."""
    import onnx
    import onnxruntime as ort

    from memory.embedders import e5_onnx

    written = len(onnx.load(str(path), load_external_data=False).graph.node)
    with tempfile.TemporaryDirectory() as folder:
        options = session_options(ort)
        options.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                             disabled_optimizers=e5_onnx.DISABLED_OPTIMIZERS)
        optimised = len(onnx.load(options.optimized_model_filepath).graph.node)
    return written, optimised


def session_options(ort, profile: str = ""):
    """The model's own session options (E5Onnx's), the profiler on if `profile` names its files."""
    from memory.embedders import e5_onnx

    options = e5_onnx.session_options(1)
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return options


def agreement(old, new, questions: list[str], passages: list[str]) -> str:
    cosines, same = [], 0
    for is_query, texts in ((True, questions), (False, passages)):
        for at in range(0, len(texts), 6):
            group = texts[at : at + 6]
            cosines += (old.encode(group, is_query) * new.encode(group, is_query)).sum(axis=1).tolist()
            for text in group:
                feeds = old.feeds([tokens for _, tokens in old.windows([text], is_query)][:1])
                outputs = [model.session.run(["mean"], feeds)[0] for model in (old, new)]
                same += np.array_equal(*outputs)
    values = np.array(cosines)
    return (f"vectors of {len(values)} texts ({len(questions)} questions, {len(passages)} passages): cosine "
            f"of NEW's to OLD's lowest {values.min():.7f}, median {np.median(values):.7f}; the first "
            f"window's pooled output bit for bit the same for {same} of {len(values)}")


def questions_timed(models: dict, questions: list[str]) -> dict[str, list[float]]:
    for model in models.values():
        model.query(questions[:5])  # warm
    times: dict[str, list[float]] = {label: [] for label in models}
    for i, question in enumerate(questions):
        order = list(models.items()) if i % 2 == 0 else list(models.items())[::-1]
        for label, model in order:
            started = time.perf_counter()
            model.query(question)
            times[label].append((time.perf_counter() - started) * 1000)
    return times


def passages_timed(models: dict, passages: list[str]) -> dict[str, tuple[float, float]]:
    clock = dict.fromkeys(models, 0.0)
    cpu = dict.fromkeys(models, 0.0)
    for i, at in enumerate(range(0, len(passages), 6)):
        order = list(models.items()) if i % 2 == 0 else list(models.items())[::-1]
        for label, model in order:
            started, started_cpu = time.perf_counter(), time.process_time()
            model.passage(passages[at : at + 6])
            clock[label] += time.perf_counter() - started
            cpu[label] += time.process_time() - started_cpu
    return {label: (len(passages) / clock[label], len(passages) / cpu[label]) for label in models}


def profile(weights: Path, path: Path, questions: list[str], label: str) -> list[str]:
    """ONNX Runtime's profiler on the questions: ms a question and nodes a question by operator."""
    import onnxruntime as ort

    from memory.embedders import e5_onnx

    with tempfile.TemporaryDirectory() as folder:
        model = e5_onnx.E5Onnx(weights, path, 1)
        options = session_options(ort, str(Path(folder) / "profile"))
        model.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                             disabled_optimizers=e5_onnx.DISABLED_OPTIMIZERS)
        for question in questions:
            model.query(question)
        events = json.loads(Path(model.session.end_profiling()).read_text())
    runs = [e["dur"] for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]
    spent: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            spent[event["args"]["op_name"]] += event["dur"]
            count[event["args"]["op_name"]] += 1
    n = len(runs)
    lines = [f"{label} profiled: a run {statistics.median(runs) / 1000:.2f} ms (median), kernels "
             f"{sum(spent.values()) / n / 1000:.2f} ms, {sum(count.values()) / n:.0f} nodes"]
    for op, total in sorted(spent.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {op:24s} {total / n / 1000:6.3f} ms  {count[op] / n:4.0f} nodes")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="a built graph (.onnx) to compare against")
    parser.add_argument("new", type=Path, nargs="?", help="default: the graph build makes today")
    parser.add_argument("--eval", type=Path, default=EVAL, help="eval datasets' folder (default %(default)s)")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--passages", type=int, default=1800)
    parser.add_argument("--rounds", type=int, default=1, help="times the questions are timed")
    parser.add_argument("--timed-passages", type=int, default=240, help="passages of the throughput figure")
    parser.add_argument("--profile", action="store_true", help="ONNX Runtime's profiler on 60 questions too")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from memory.embedders import e5_onnx

    weights = e5_onnx.weights_path("original")
    with tempfile.TemporaryDirectory() as folder:
        new_path = args.new
        if new_path is None:
            print(f"building today's {NAME} graph ...", flush=True)
            new_path = e5_onnx.model_file(weights, Path(folder), NAME)
        paths = {"OLD": args.old, "NEW": new_path}
        models = {label: e5_onnx.E5Onnx(weights, path, 1) for label, path in paths.items()}
        questions, turns = eval_texts(args.eval, args.questions, args.passages)
        passages = [first_passage(models["OLD"], turn) for turn in turns]  # as an import cuts them
        print(f"load average {load_average()}; OLD {paths['OLD'].name}, NEW {paths['NEW'].name}", flush=True)
        for label, path in paths.items():
            written, optimised = node_counts(path)
            print(f"{label}: {written} nodes written, {optimised} as ONNX Runtime runs them", flush=True)
        ratios = []
        for round_ in range(1, args.rounds + 1):
            print(f"timing {len(questions)} questions one at a time, alternated, round {round_}", flush=True)
            times = questions_timed(models, questions)
            for label, values in times.items():
                print(f"{label}: a question {statistics.median(values):.2f} ms median, {p95(values):.2f} p95")
            ratios.append(statistics.median(times["NEW"]) / statistics.median(times["OLD"]))
            print(f"NEW / OLD, medians: {ratios[-1]:.3f}")
        if len(ratios) > 1:
            print(f"NEW / OLD, the median of {len(ratios)} rounds' ratios: {statistics.median(ratios):.3f}")
        timed = passages[: args.timed_passages]
        if timed:
            print(f"timing {len(timed)} passages in calls of 6, alternated ...", flush=True)
            rates = passages_timed(models, timed)
            for label, (clock, cpu) in rates.items():
                print(f"{label}: {clock:.1f} passages/s, {cpu:.1f} per CPU-second")
            print(f"NEW / OLD, per CPU-second: {rates['NEW'][1] / rates['OLD'][1]:.3f}")
        print(f"load average {load_average()}; comparing vectors ...", flush=True)
        print(agreement(models["OLD"], models["NEW"], questions, passages), flush=True)
        if args.profile:
            for label, path in paths.items():
                print("\n".join(profile(weights, path, questions[:60], label)), flush=True)
        print(f"load average {load_average()}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
