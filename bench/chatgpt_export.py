"""A generated ChatGPT export (conversations.json) for benchmarks and tests: two years of
conversations with edited prompts (branches), code blocks and long pastes, in the shape
ChatGPT's "Export data" writes (a tree of nodes per conversation, `current_node` on the branch
that was shown last, hidden system nodes). Deterministic for a seed; the prose comes from
bench.corpus (real English, offline).
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from typing import Any

from bench import corpus

SUBJECTS = [
    ("the Postgres migration", "postgres", "SELECT count(*) FROM orders WHERE shipped_at IS NULL;"),
    ("our Kubernetes cluster", "yaml", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: 3"),
    ("the sourdough starter", "text", "day 1: 50 g flour + 50 g water\nday 2: discard half, feed again"),
    ("the trip to Lisbon", "text", "flight TP 1351 dep 09:40, hotel in Alfama, 3 nights"),
    ("the React dashboard", "tsx", "export function Chart({ data }: Props) {\n  return <svg/>;\n}"),
    ("my marathon training", "text", "week 6: 3 x 8 km tempo, long run 26 km"),
    ("the invoice parser", "python", "def parse(line: str) -> Invoice:\n    n, total = line.split(';')\n"),
    ("the garden plan", "text", "tomatoes by the south wall, basil between them"),
    ("the Rust CLI", "rust", "fn main() {\n    let args: Vec<String> = std::env::args().collect();\n}"),
    ("the thesis chapter", "latex", "\\section{Related work}\nWe build on \\cite{lewis2020}."),
]
# A fact only one message states, for a benchmark to search by keyword.
PROBE = "ZEPHYR-4411"


def _text(rng: random.Random, prose: list[str], low: int, high: int) -> str:
    size = rng.randint(low, high)
    out, total = [], 0
    while total < size:
        block = prose[rng.randrange(len(prose))]
        start = rng.randrange(max(1, len(block) - 200))
        piece = block[start : start + size - total]
        out.append(piece)
        total += len(piece)
    return " ".join(out)


def generate(messages: int = 10_000, *, seed: int = 7, end: dt.datetime | None = None,
             years: float = 2.0) -> list[dict[str, Any]]:
    """About `messages` visible messages (user and assistant turns, every branch counted) as
    ChatGPT's conversations.json, spread over `years` up to `end`."""
    rng = random.Random(seed)
    prose = corpus.blocks(600_000)
    end = end or dt.datetime.now(dt.UTC)
    start = end - dt.timedelta(days=365 * years)
    conversations: list[dict[str, Any]] = []
    made = 0
    n_convs = max(1, messages // 20)
    for c in range(n_convs):
        remaining = messages - made
        if remaining <= 0:
            break
        left_convs = n_convs - c
        typical = int(rng.gauss(remaining / left_convs, 6))
        size = remaining if left_convs == 1 else max(2, min(remaining, typical))
        subject, lang, code = SUBJECTS[c % len(SUBJECTS)]
        when = start + (end - start) * (c / n_convs) + dt.timedelta(minutes=rng.randint(0, 600))
        mapping: dict[str, dict[str, Any]] = {}
        root = str(uuid.UUID(int=rng.getrandbits(128)))
        mapping[root] = {"id": root, "message": None, "parent": None, "children": []}
        system = str(uuid.UUID(int=rng.getrandbits(128)))
        mapping[system] = {
            "id": system, "parent": root, "children": [],
            "message": {"id": system, "author": {"role": "system"}, "create_time": when.timestamp(),
                        "content": {"content_type": "text", "parts": [""]},
                        "metadata": {"is_visually_hidden_from_conversation": True}},
        }
        mapping[root]["children"].append(system)
        parent, current, count = system, system, 0

        def node(role: str, text: str, parent_id: str, stamp: dt.datetime, mapping=mapping) -> str:
            nid = str(uuid.UUID(int=rng.getrandbits(128)))
            message = {"id": nid, "author": {"role": role}, "create_time": stamp.timestamp(),
                       "content": {"content_type": "text", "parts": [text]}, "metadata": {}}
            if role == "assistant":
                message["metadata"]["model_slug"] = rng.choice(["gpt-4o", "gpt-4o-mini", "o3"])
            mapping[nid] = {"id": nid, "message": message, "parent": parent_id, "children": []}
            mapping[parent_id]["children"].append(nid)
            return nid

        while count < size:
            when += dt.timedelta(seconds=rng.randint(20, 400))
            roll = rng.random()
            if roll < 0.05:  # a long paste: a log, a document
                question = f"Here is the full text about {subject}, what stands out?\n\n"
                question += _text(rng, prose, 3000, 20000)
            else:
                question = f"About {subject}: " + _text(rng, prose, 30, 400)
            if c == n_convs - 1 and count == 0:
                question += f" The ticket for this is {PROBE}."
            user = node("user", question, parent, when)
            count += 1
            if count >= size:
                current = user
                break
            when += dt.timedelta(seconds=rng.randint(5, 60))
            answer = _text(rng, prose, 200, 2000)
            if rng.random() < 0.3:
                answer += f"\n\n```{lang}\n{code}\n```\n\n" + _text(rng, prose, 50, 300)
            reply = node("assistant", answer, user, when)
            count += 1
            parent = current = reply
            if count + 2 <= size and rng.random() < 0.08:  # the prompt edited: a sibling branch
                when += dt.timedelta(seconds=rng.randint(20, 200))
                edited = node("user", question[:200] + " (edited) " + _text(rng, prose, 20, 120),
                              mapping[user]["parent"], when)
                later = when + dt.timedelta(seconds=9)
                again = node("assistant", _text(rng, prose, 200, 1500), edited, later)
                count += 2
                parent = current = again
        conversations.append({
            "title": f"{subject.capitalize()} ({c + 1})",
            "create_time": mapping[system]["message"]["create_time"],
            "update_time": when.timestamp(),
            "mapping": mapping,
            "current_node": current,
            "conversation_id": str(uuid.UUID(int=rng.getrandbits(128))),
        })
        made += count
    return conversations
