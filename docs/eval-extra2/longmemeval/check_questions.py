"""Check this folder's questions against the LongMemEval dev histories they are asked of.

Every expected id must be a user turn of the question's history, dated before the question,
and `expected_sessions` must be exactly the sessions of those turns.

    python docs/eval-extra2/longmemeval/check_questions.py [/work/shared/eval/longmemeval]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def check(folder: Path, histories: Path) -> list[str]:
    problems = []
    for queries in sorted(folder.glob("*.queries.jsonl")):
        qid = queries.name.removesuffix(".queries.jsonl")
        with (histories / f"{qid}.history.jsonl").open() as f:
            turns = {t["external_id"]: t for t in map(json.loads, f)}
        rows = [json.loads(line) for line in queries.open()]
        if len(rows) > 2:
            problems.append(f"{qid}: {len(rows)} questions, at most 2 per history")
        for row in rows:
            found = [turns.get(e) for e in row["expected"]]
            for e, turn in zip(row["expected"], found, strict=True):
                if turn is None:
                    problems.append(f"{qid}: {e} is not in the history")
                elif turn["role"] != "user":
                    problems.append(f"{qid}: {e} is not a user turn")
                elif turn["timestamp"] >= row["question_date"]:
                    problems.append(f"{qid}: {e} is not before the question's date")
            sessions = sorted({t["conversation"] for t in found if t})
            if sessions != sorted(row["expected_sessions"]):
                problems.append(f"{qid}: expected_sessions {row['expected_sessions']} != {sessions}")
            if row["category"] != "single-session-preference":
                problems.append(f"{qid}: category {row['category']}")
    return problems


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    source = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/eval/longmemeval")
    problems = check(here, source)
    print("\n".join(problems) or f"{sum(1 for _ in here.glob('*.queries.jsonl'))} files: every id checks out")
    sys.exit(1 if problems else 0)
