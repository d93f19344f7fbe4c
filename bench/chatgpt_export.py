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


class _Tree:
    """One conversation's nodes as ChatGPT writes them: a root, a hidden system node, then the
    turns, each a child of the one it answers."""

    def __init__(self, rng: random.Random, when: dt.datetime) -> None:
        self.rng = rng
        self.mapping: dict[str, dict[str, Any]] = {}
        root = self._id()
        self.mapping[root] = {"id": root, "message": None, "parent": None, "children": []}
        self.system = self._id()
        self.mapping[self.system] = {
            "id": self.system, "parent": root, "children": [],
            "message": {"id": self.system, "author": {"role": "system"}, "create_time": when.timestamp(),
                        "content": {"content_type": "text", "parts": [""]},
                        "metadata": {"is_visually_hidden_from_conversation": True}},
        }
        self.mapping[root]["children"].append(self.system)

    def _id(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128)))

    def node(self, role: str, text: str, parent_id: str, stamp: dt.datetime) -> str:
        nid = self._id()
        message = {"id": nid, "author": {"role": role}, "create_time": stamp.timestamp(),
                   "content": {"content_type": "text", "parts": [text]}, "metadata": {}}
        if role == "assistant":
            message["metadata"]["model_slug"] = self.rng.choice(["gpt-4o", "gpt-4o-mini", "o3"])
        self.mapping[nid] = {"id": nid, "message": message, "parent": parent_id, "children": []}
        self.mapping[parent_id]["children"].append(nid)
        return nid

    def conversation(self, title: str, current: str, updated: dt.datetime) -> dict[str, Any]:
        return {
            "title": title,
            "create_time": self.mapping[self.system]["message"]["create_time"],
            "update_time": updated.timestamp(),
            "mapping": self.mapping,
            "current_node": current,
            "conversation_id": self._id(),
        }


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
        tree = _Tree(rng, when)
        mapping, parent, current, count = tree.mapping, tree.system, tree.system, 0
        node = tree.node

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
        conversations.append(tree.conversation(f"{subject.capitalize()} ({c + 1})", current, when))
        made += count
    return conversations


# --- A person's history: what they tell about themselves among requests, pastes and code ---------

_PEOPLE = ["Ana", "Tom", "Inês", "Marco", "Priya", "Jonas", "Lena", "Sam", "Rui", "Chloe", "Omar", "Mei"]
_CITIES = ["Porto", "Lisbon", "Valencia", "Leeds", "Ghent", "Utrecht", "Bologna", "Brno", "Aarhus", "Cork"]
_EMPLOYERS = ["the Porto city council", "Hospital São João", "Globex", "Initech", "a small design studio",
              "the university library", "Acme Logistics", "a bakery downtown"]
_REQUESTS = [
    "Help me write a short Spanish note to my landlord about the broken heater.",
    "Give me a 5-year-old answer: why is the sky blue?",
    "Explain how HTTP caching headers work.",
    "Write a haiku about autumn rain.",
    "Can you summarize the main arguments for and against remote work?",
    "What's the difference between a list and a tuple in Python?",
    "Suggest three names for a book club.",
    "Translate 'see you next week' into Portuguese.",
    "Please rewrite this sentence to sound more formal: we need the numbers by Friday.",
    "How do I convert a CSV file to JSON on the command line?",
    "Could you draft an email declining a meeting politely?",
    "List some easy vegetarian dinners for a weeknight.",
]
_LETTER = ("Dear hiring team,\n\nI am writing to apply for the analyst position. I have five years of "
           "experience in logistics and I led a team of four at my last job. I am confident that my skills "
           "match what you are looking for.\n\nKind regards")


def _statements(rng: random.Random) -> list[dict[str, Any]]:
    """The person's life, as the things they say about it, in the order they say them. Each has
    its kind, the words a fact of it must hold (`holds`), and for updates and repeats the id of
    what it updates or repeats."""
    sister, partner, friend, boss = rng.sample(_PEOPLE, 4)
    home, new_home, trip = rng.sample(_CITIES, 3)
    job, new_job = rng.sample(_EMPLOYERS, 2)
    team, new_team = rng.randint(3, 6), rng.randint(7, 9)
    pet = rng.choice(["Luna", "Pepper", "Miso", "Biscuit"])
    said = [
        ("identity", "I'm a data analyst, mostly working with supply chain numbers.", ["analyst"]),
        ("family", f"My sister {sister} lives in {home} with her two kids.", [sister]),
        ("home", f"I live in {home}, in a flat near the river.", [home]),
        ("work", f"I work at {job} as an analyst.", [job.split()[-1]]),
        ("pet", f"My cat {pet} is nine years old and hates the vacuum cleaner.", [pet]),
        ("health", "I'm lactose intolerant, so I skip most desserts.", ["lactose"]),
        ("family", f"My partner {partner} and I have been together for six years.", [partner]),
        ("diet", f"{partner} doesn't eat mushrooms, so I leave them out when I cook.", ["mushrooms"]),
        ("count", f"I lead a team of {team} engineers.", [str(team)]),
        ("education", "I graduated with a degree in economics from the University of Porto.", ["economics"]),
        ("routine", "I have choir practice every Tuesday at 7 pm.", ["Tuesday"]),
        ("possession", "I bought a used cargo bike last spring.", ["cargo"]),
        ("preference", "I prefer tea to coffee, especially green tea.", ["tea"]),
        ("plan", f"I'm going to {trip} in April for a long weekend.", [trip]),
        ("plan", "I'm running the city half marathon at the end of June.", ["marathon"]),
        ("family", f"My friend {friend} is getting married in September.", [friend]),
        ("work", f"My manager {boss} wants the quarterly report by the end of the month.", [boss]),
        ("health", "I see a physiotherapist every two weeks for my knee.", ["physiotherapist"]),
    ]
    items = [{"label": "statement", "kind": k, "text": t, "holds": h} for k, t, h in said]
    items.insert(9, {"label": "statement", "kind": "count", "text": f"By the way, I've been leading {team} "
                     "engineers for a year now.", "holds": [str(team)], "repeats": "count"})
    items.insert(14, {"label": "statement", "kind": "health", "text": "As I said, I'm lactose intolerant.",
                      "holds": ["lactose"], "repeats": "health"})
    items += [
        {"label": "remember", "kind": "remember",
         "text": "Please remember that my passport expires in March 2027.",
         "holds": ["passport"]},
        {"label": "remember", "kind": "remember", "text": "I'm allergic to peanuts, please remember that.",
         "holds": ["peanuts"]},
        {"label": "update", "kind": "count",
         "text": f"Quick update: I now lead a team of {new_team} engineers.",
         "holds": [str(new_team)], "updates": f"I lead a team of {team} engineers."},
        {"label": "update", "kind": "home", "text": f"I moved to {new_home} last month.", "holds": [new_home],
         "updates": f"I live in {home}, in a flat near the river."},
        {"label": "update", "kind": "work", "text": f"I just started a new job at {new_job}.",
         "holds": [new_job.split()[-1]], "updates": f"I work at {job} as an analyst."},
        {"label": "remember", "kind": "remember", "text": "For future reference, I take my coffee black.",
         "holds": ["coffee"]},
    ]
    return items


def life(messages: int = 440, *, seed: int = 7, end: dt.datetime | None = None,
         years: float = 2.0) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """About `messages` messages of one person's ChatGPT history: their requests, questions
    about pasted documentation and code, a pasted letter, and, said in passing, the things a
    person would want kept (each kind of statement, explicit "remember that…" requests, updates
    and repeats). Returns (conversations.json, truth): truth maps each user message's text to
    what it is (label statement / remember / update / request / paste / clarification / prose)."""
    rng = random.Random(seed)
    prose = corpus.blocks(300_000)
    end = end or dt.datetime.now(dt.UTC)
    start = end - dt.timedelta(days=365 * years)
    planted = _statements(rng)
    truth: dict[str, dict[str, Any]] = {}
    users: list[tuple[str, dict[str, Any]]] = []
    target_users = messages // 2
    slots = sorted(rng.sample(range(target_users), min(len(planted), target_users)))
    planted_at = dict(zip(slots, planted, strict=False))
    for i in range(target_users):
        if i in planted_at:
            item = planted_at[i]
            text = item["text"]
            if rng.random() < 0.5:  # said in passing, before or after a request
                request = rng.choice(_REQUESTS)
                text = f"{request} {text}" if rng.random() < 0.5 else f"{text} {request}"
            users.append((text, item))
            continue
        roll = rng.random()
        if roll < 0.25:
            text = rng.choice(_REQUESTS)
            users.append((text, {"label": "request"}))
        elif roll < 0.32:
            subject, lang, code = rng.choice(SUBJECTS)
            text = f"Why does this fail?\n\n```{lang}\n{code}\n```"
            users.append((text, {"label": "paste"}))
        elif roll < 0.36:
            users.append((f"Can you proofread this cover letter?\n\n{_LETTER}", {"label": "paste"}))
        elif roll < 0.40:
            text = f"Here is the full text, what stands out?\n\n{_text(rng, prose, 1500, 4000)}"
            users.append((text, {"label": "paste"}))
        elif roll < 0.43:
            users.append(("(Sorry, to be clear: I mean for this week.)", {"label": "clarification"}))
        else:
            subject = rng.choice(SUBJECTS)[0]
            users.append((f"About {subject}: {_text(rng, prose, 30, 400)}", {"label": "prose"}))
    conversations: list[dict[str, Any]] = []
    per = max(1, len(users) // max(1, messages // 20))
    for c in range(0, len(users), per):
        when = start + (end - start) * (c / len(users)) + dt.timedelta(minutes=rng.randint(0, 600))
        tree = _Tree(rng, when)
        parent = tree.system
        for text, item in users[c : c + per]:
            when += dt.timedelta(seconds=rng.randint(20, 400))
            truth.setdefault(text, item)
            user = tree.node("user", text, parent, when)
            when += dt.timedelta(seconds=rng.randint(5, 60))
            parent = tree.node("assistant", _text(rng, prose, 200, 1200), user, when)
        conversations.append(tree.conversation(f"Chat {c // per + 1}", parent, when))
    return conversations, truth
