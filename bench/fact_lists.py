"""The list of facts a person reads, measured (manage.py eval_facts): how the facts memory draws
are scored on chats with an assistant (LongMemEval haystacks and knowledge updates), on
conversations of two people (LoCoMo's annotated observations) and on a generated ChatGPT history
(bench.chatgpt_export.life), each beside the baselines drawn in the same run:

- "facts": memory.knowledge.facts as it is;
- "main's rules": memory/knowledge/facts.py as it was before issue 34 (read from git at
  BASELINE_COMMIT and run against the same database);
- "every user turn": every turn of the person (of each speaker, on LoCoMo) kept as a fact.
"""

from __future__ import annotations

import functools
import io
import json
import re
import subprocess
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model

from memory.knowledge import facts as memory_facts
from memory.models import Fact, Message, Role
from memory.transfer import importers

# The last commit of main before issue 34: its facts module is the "main's rules" baseline.
BASELINE_COMMIT = "7b24fc0"
FILLER = ("sharegpt_", "ultrachat_")

_NUMBER_WORDS = {
    "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8",
    "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "twice": "2", "once": "1",
}
_STOP = {
    "a", "an", "the", "and", "or", "but", "so", "of", "to", "in", "on", "at", "for", "with", "from",
    "by", "about", "as", "is", "are", "was", "were", "be", "been", "do", "does", "did", "i", "my", "me",
    "you", "your", "we", "our", "it", "its", "this", "that", "what", "which", "who", "how", "when",
    "where", "why", "have", "has", "had", "can", "could", "would", "should", "will", "there", "their",
    "they", "them", "he", "she", "his", "her", "not", "no", "yes", "also", "just", "currently", "now",
    "then", "than", "more", "most", "some", "any", "much", "many", "before", "after", "still", "get",
    "got", "getting"
}
_TOKEN = re.compile(r"\$?\d[\d,.:]*|[a-z][a-z'-]*")


def tokens(text: str) -> set[str]:
    """Content words (stemmed) and numbers of a text: "$400,000" -> 400000, "four" -> 4."""
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    out = set()
    for raw in _TOKEN.findall((text or "").lower()):
        word = raw.strip(".,:'-")
        if not word or word in _STOP:
            continue
        if word[0] in "$0123456789":
            out.add(word.lstrip("$").replace(",", "").rstrip("."))
        elif word in _NUMBER_WORDS:
            out.add(_NUMBER_WORDS[word])
        else:
            out.add(stemmer.stemWord(word))
    return out


def holds_answer(fact_text: str, answer: str, question: str) -> bool:
    """All of the answer's content words and numbers are in the fact, which also shares a
    content word with the question."""
    words, wanted = tokens(fact_text), tokens(answer)
    return bool(wanted) and wanted <= words and bool(words & tokens(question))


# --- Methods ------------------------------------------------------------------------------------


@functools.cache
def baseline_rules(commit: str = BASELINE_COMMIT) -> types.ModuleType | None:
    """memory/knowledge/facts.py as it was at `commit`, as a module (None without git)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{commit}:memory/knowledge/facts.py"], cwd=settings.BASE_DIR,
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    module = types.ModuleType("bench_baseline_facts")
    module.__file__ = f"{commit}:memory/knowledge/facts.py"
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - our own file, from git
    return module


def every_user_turn(owner, speakers: bool = False) -> int:
    """Every turn of the person (with `speakers`, of every named speaker) as a fact."""
    messages = Message.objects.owned_by(owner).logical().visible().sources()
    made = []
    for m in messages.iterator(chunk_size=1000):
        subject = memory_facts.subject_of(m)
        if subject is None or (not speakers and m.role != Role.USER):
            continue
        made.append(Fact(owner=owner, message=m, subject=subject, subject_key=subject.lower(),
                         attribute="about", statement=m.content[:4000], wording=m.content[:4000],
                         said_at=m.timestamp, valid_from=m.timestamp, origin="baseline"))
    Fact.objects.bulk_create(made, batch_size=1000)
    return len(made)


def methods(speakers: bool = False) -> dict[str, Callable[[object], int]]:
    """The ways of drawing facts compared, by name: each draws into an owner with no facts."""
    found: dict[str, Callable[[object], int]] = {"facts": memory_facts.extract_messages}
    old = baseline_rules()
    if old is not None:
        found["main's rules"] = old.extract_messages
    name = "every turn" if speakers else "every user turn"
    found[name] = lambda owner: every_user_turn(owner, speakers)
    return found


@dataclass
class Drawn:
    """One fact as scored: its text as a person reads it, its source turns, and its links."""

    id: int
    text: str
    turns: list[str]
    current: bool
    superseded_by: int | None
    conversation: str
    subject: str


def drawn(owner) -> list[Drawn]:
    rows = Fact.objects.owned_by(owner).live().select_related("message__conversation")
    rows = rows.prefetch_related("also_in")
    out = []
    for f in rows.order_by("said_at", "id"):
        turns = [f.message.external_id or f.message_id] + [m.external_id or m.pk for m in f.also_in.all()]
        out.append(Drawn(f.pk, f.text, turns, f.superseded_by_id is None, f.superseded_by_id,
                         f.message.conversation.title, f.subject))
    return out


def import_user(name: str, lines: Iterable[str]):
    """A user named `name` with these JSON Lines stored (no vectors: facts need none)."""
    user, _ = get_user_model().objects.get_or_create(username=name)
    if not Message.objects.owned_by(user).exists():
        importers.import_json_lines(user, lines, embed="upkeep")
    return user


# --- LongMemEval haystacks -----------------------------------------------------------------------


@dataclass
class Haystack:
    id: str
    history: Path
    query: dict
    turns: int = 0


def haystacks(folder: Path) -> list[Haystack]:
    out = []
    for queries in sorted(folder.glob("*.queries.jsonl")):
        qid = queries.name.removesuffix(".queries.jsonl")
        query = json.loads(queries.read_text().splitlines()[0])
        history = queries.with_name(f"{qid}.history.jsonl")
        out.append(Haystack(qid, history, query, sum(1 for line in history.open() if line.strip())))
    return out


@dataclass
class HaystackScore:
    answered: list[bool] = field(default_factory=list)
    facts: int = 0
    filler: int = 0
    turns: int = 0
    misses: list[str] = field(default_factory=list)

    def row(self) -> dict:
        n = len(self.answered)
        return {
            "answer_coverage": round(sum(self.answered) / n, 4) if n else None, "questions": n,
            "filler_share": round(self.filler / self.facts, 4) if self.facts else 0.0,
            "facts_per_100_turns": round(100 * self.facts / max(1, self.turns), 1),
            "facts": self.facts, "filler_facts": self.filler,
        }


COVERED = {"single-session-user", "knowledge-update", "single-session-preference"}


def score_haystack(stack: Haystack, facts_: list[Drawn], score: HaystackScore) -> None:
    score.turns += stack.turns
    score.facts += len(facts_)
    score.filler += sum(1 for f in facts_ if f.conversation.startswith(FILLER))
    category = stack.query["category"]
    if category not in COVERED:
        return
    if category == "single-session-preference":
        expected = set(stack.query["expected"])
        hit = any(expected & set(f.turns) for f in facts_)
    else:
        hit = any(f.current and holds_answer(f.text, str(stack.query["answer"]), stack.query["query"])
                  for f in facts_)
    score.answered.append(hit)
    if not hit:
        near = [f for f in facts_ if tokens(str(stack.query["answer"])) <= tokens(f.text)][:3]
        said = "; ".join(f"{'current' if f.current else 'superseded'}: {f.text[:100]}" for f in near)
        answer = str(stack.query["answer"])[:80]
        score.misses.append(f"{stack.id} ({category}): {stack.query['query']} -> {answer}"
                            + (f" [{said}]" if said else ""))


# --- Knowledge updates -----------------------------------------------------------------------------


@dataclass
class UpdateScore:
    questions: int = 0
    new_current: int = 0
    pairs: int = 0
    linked: int = 0
    old_instead: int = 0
    other_links: int = 0
    notes: list[str] = field(default_factory=list)

    def row(self) -> dict:
        return {
            "questions": self.questions, "pairs": self.pairs,
            "new_value_current": round(self.new_current / max(1, self.questions), 4),
            "old_linked_as_superseded": round(self.linked / max(1, self.pairs), 4),
            "old_still_current_instead": round(self.old_instead / max(1, self.pairs), 4),
            "other_supersessions": self.other_links,
        }


def score_update(stack: Haystack, facts_: list[Drawn], score: UpdateScore) -> None:
    expected = list(stack.query["expected"])
    new, olds = expected[-1], set(expected[:-1])
    by_id = {f.id: f for f in facts_}
    score.questions += 1
    new_facts = [f for f in facts_ if new in f.turns]
    new_current = any(f.current for f in new_facts)
    score.new_current += new_current
    if not new_current:
        answer = stack.query["answer"][:60]
        score.notes.append(f"{stack.id}: no current fact from the new statement ({answer})")
    links = [(f, by_id.get(f.superseded_by)) for f in facts_ if f.superseded_by]

    def leads_to_new(fact: Drawn | None, steps: int = 0) -> bool:
        """A chain of supersessions (old -> ... -> new) links the old value to the new one."""
        if fact is None or steps > 10:
            return False
        return new in fact.turns or leads_to_new(by_id.get(fact.superseded_by), steps + 1)

    expected_links = [(o, n) for o, n in links if olds & set(o.turns) and leads_to_new(n)]
    chained = {id(n) for _, n in expected_links}
    expected_links += [(o, n) for o, n in links if id(o) in chained and leads_to_new(n)]
    score.other_links += len(links) - len(expected_links)
    for o, n in links:
        if (o, n) not in expected_links and n is not None:
            score.notes.append(f"{stack.id}: other link: {o.text[:90]!r} -> {n.text[:90]!r}")
    if olds:
        score.pairs += 1
        score.linked += bool(expected_links)
        old_current = any(f.current for f in facts_ if olds & set(f.turns))
        score.old_instead += old_current and not new_current


# --- The generated ChatGPT history -----------------------------------------------------------------


@dataclass
class ExportScore:
    messages: int = 0
    facts: int = 0
    from_paste: int = 0
    from_request: int = 0
    duplicates: int = 0
    planted: int = 0
    kept: int = 0
    remember: int = 0
    remembered: int = 0
    updates: int = 0
    updated: int = 0
    misses: list[str] = field(default_factory=list)

    def row(self) -> dict:
        return {
            "messages": self.messages, "facts": self.facts,
            "facts_per_100_messages": round(100 * self.facts / max(1, self.messages), 1),
            "facts_from_pasted_text": self.from_paste, "requests_stored_as_facts": self.from_request,
            "duplicates": self.duplicates,
            "statements_kept": round(self.kept / max(1, self.planted), 4),
            "remember_kept": round(self.remembered / max(1, self.remember), 4),
            "updates_superseding": round(self.updated / max(1, self.updates), 4),
        }


def score_export(owner, truth: dict[str, dict], score: ExportScore) -> None:
    rows = list(Fact.objects.owned_by(owner).live().select_related("message", "superseded_by"))
    texts = {m.pk: m.content for m in Message.objects.owned_by(owner).logical().visible()}
    score.messages += len(texts)
    score.facts += len(rows)
    by_message: dict[str, list[Fact]] = {}
    for f in rows:
        by_message.setdefault(f.message_id, []).append(f)
        label = truth.get(texts.get(f.message_id, ""), {}).get("label")
        score.from_paste += label in ("paste", "prose", "clarification")
        score.from_request += label == "request"
    current = [f for f in rows if f.superseded_by_id is None]
    seen: dict[str, int] = {}
    for f in current:
        key = " ".join(re.findall(r"\w+", f.text.lower()))
        seen[key] = seen.get(key, 0) + 1
    score.duplicates += sum(n - 1 for n in seen.values())
    # A repeat ("As I said, I'm lactose intolerant") must not be a second current fact.
    for message_id, content in texts.items():
        item = truth.get(content, {})
        if item.get("repeats") and any(f.superseded_by_id is None for f in by_message.get(message_id, [])):
            score.duplicates += 1
    for message_id, content in texts.items():
        item = truth.get(content)
        if not item or item["label"] not in ("statement", "remember", "update"):
            continue
        again = [f for f in rows if f.also_in.filter(pk=message_id).exists()]
        facts_here = by_message.get(message_id, []) + again
        holds = any(all(h.lower() in f.text.lower() for h in item["holds"]) for f in facts_here)
        if item["label"] == "remember":
            score.remember += 1
            score.remembered += holds
        elif item["label"] == "update":
            score.updates += 1
            old = [f for f in rows if item["updates"] in texts.get(f.message_id, "") and f.superseded_by_id]
            score.updated += any(o.superseded_by.message_id == message_id for o in old)
        if not item.get("repeats"):
            score.planted += 1
            score.kept += holds
        if not holds:
            score.misses.append(f"{item['label']} {item.get('kind', '')}: {content[:100]}")


def export_lines(conversations) -> io.StringIO:
    """conversations.json as text, for the importer."""
    return io.StringIO(json.dumps(conversations))
