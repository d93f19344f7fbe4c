"""manage.py eval_summaries [FOLDER ...]: how well topic summaries say what happened.

A dataset folder holds `<id>.history.jsonl` (import_history's JSON Lines) and
`<id>.sessions.jsonl` (`{"session", "date", "first_turn", "summary"}`: a written summary of each
session, the session starting at the turn `first_turn` and running to the next session's first
turn); ../shared/eval/README.md describes the default one. Each history is imported as its own
user into a scratch database (eval_recall's machinery), its topics are built as `build_topics`
builds them, and for every session:

- topics: the summaries of the leaf topics holding the session's turns, oldest first;
- lead: the session's first sentences, cut to the same number of words (the baseline).

Both are scored against the written summary with ROUGE-1 and ROUGE-L (recall and F1, on
lowercased words, no stemming), averaged over the sessions. Also printed: the share of topic
labels and of keywords that contain an id, a number-letter code or a word of Recollect's own
texts (goal 0), how many labels a sibling topic shares (goal 0), and the share of labels that
are fragments of a sentence rather than names (labels.is_fragment: under two words, ending in a
function word or a verb, starting with a verb without its object; goal 0).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from bench.management.commands.eval_recall import (
    DEFAULT_DATASET,
    history_files,
    import_history_as_user,
    read_jsonl,
    scratch_database,
)
from memory.models import Message, Topic, TopicMembership
from memory.organizing import labels, topics

SCRATCH_DB = "recollect_eval_summaries"
_WORD = re.compile(r"\w+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Session:
    number: int
    date: str
    summary: str
    turns: list[str]  # external ids, in file order
    texts: list[str]


@dataclass
class Conversation:
    id: str
    history: Path
    sessions: list[Session]


def load(folders: list[str]) -> list[Conversation]:
    """Every `<id>.history.jsonl` that has a `<id>.sessions.jsonl` beside it, cut into sessions."""
    found: dict[str, Conversation] = {}
    for cid, history in history_files(folders):
        sessions_file = history.with_name(f"{cid}.sessions.jsonl")
        if not sessions_file.is_file():
            continue
        if cid in found:
            raise CommandError(f"{history}: {cid!r} is already in {found[cid].history.parent}")
        turns = [(str(t.get("external_id") or ""), t.get("content") or "")
                 for _, t in read_jsonl(history)]
        order = {tid: i for i, (tid, _) in enumerate(turns) if tid}
        rows = []
        for lineno, row in read_jsonl(sessions_file):
            if not isinstance(row.get("summary"), str) or str(row.get("first_turn")) not in order:
                raise CommandError(
                    f'{sessions_file}:{lineno}: needs "summary" and a "first_turn" of {history.name}'
                )
            rows.append(row)
        rows.sort(key=lambda r: order[str(r["first_turn"])])
        sessions = []
        for i, row in enumerate(rows):
            start = order[str(row["first_turn"])]
            end = order[str(rows[i + 1]["first_turn"])] if i + 1 < len(rows) else len(turns)
            part = turns[start:end]
            sessions.append(
                Session(int(row.get("session") or i + 1), str(row.get("date") or ""), row["summary"],
                        [t for t, _ in part], [c for _, c in part])
            )
        found[cid] = Conversation(cid, history, sessions)
    if not found:
        raise CommandError("no <id>.history.jsonl with a <id>.sessions.jsonl beside it")
    return list(found.values())


# --- ROUGE -------------------------------------------------------------------------------------


def tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _f1(overlap: float, candidate: int, reference: int) -> tuple[float, float]:
    """(recall, F1) of `overlap` units shared by a candidate and a reference of these lengths."""
    if not overlap or not candidate or not reference:
        return 0.0, 0.0
    recall, precision = overlap / reference, overlap / candidate
    return recall, 2 * recall * precision / (recall + precision)


def rouge_1(candidate: list[str], reference: list[str]) -> tuple[float, float]:
    """(recall, F1) of the words the two share, each counted at most as often as in both."""
    counts: dict[str, int] = {}
    for w in reference:
        counts[w] = counts.get(w, 0) + 1
    overlap = 0
    for w in candidate:
        if counts.get(w, 0) > 0:
            counts[w] -= 1
            overlap += 1
    return _f1(overlap, len(candidate), len(reference))


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence (one row of the table at a time)."""
    if len(a) < len(b):
        a, b = b, a
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l(candidate: list[str], reference: list[str]) -> tuple[float, float]:
    return _f1(lcs_length(candidate, reference), len(candidate), len(reference))


def lead(texts: list[str], words: int) -> str:
    """The session's first sentences, cut to `words` words."""
    taken: list[str] = []
    for text in texts:
        for sentence in _SENTENCE.split(" ".join(text.split())):
            taken.extend(sentence.split())
            if len(taken) >= words:
                return " ".join(taken[:words])
    return " ".join(taken)


def junk_label(label: str) -> bool:
    """A label holding an id, a number-letter code or a word only Recollect's own texts use."""
    words = re.findall(r"[\w'-]+", label)
    return any(labels.is_id_like(w) or w.lower() in labels.SYSTEM_WORDS for w in words)


def shared_labels(tree: list[tuple]) -> int:
    """How many of the (parent_id, label, ...) topics have a sibling whose label has the same
    content words (labels.label_key)."""
    by_parent: dict = {}
    for parent_id, label, *_ in tree:
        by_parent.setdefault(parent_id, []).append(label)
    return sum(
        any(labels.label_key(a) == labels.label_key(b) for j, b in enumerate(names) if j != i)
        for names in by_parent.values()
        for i, a in enumerate(names)
    )


class Command(BaseCommand):
    help = ("ROUGE-1/ROUGE-L of topic summaries against written session summaries, beside a lead "
            "baseline, and the share of junk topic labels, on conversation datasets in a scratch database.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("folders", nargs="*", metavar="FOLDER",
                            help=f"dataset folders (default {DEFAULT_DATASET})")
        parser.add_argument("--json", action="store_true",
                            help="print the results as one JSON object (the table goes to standard error)")
        parser.add_argument("--show", type=int, default=0, metavar="N",
                            help="print the first N sessions' summaries beside their written ones")
        parser.add_argument("--keep", action="store_true",
                            help="keep the scratch database and reuse its imported histories (topics are "
                                 "built again every run)")
        parser.add_argument("--scratch-db", default=SCRATCH_DB, metavar="NAME",
                            help=f"the scratch database's name (default {SCRATCH_DB})")

    def handle(self, *args, **opts) -> None:
        self.stderr.style_func = None  # notes and progress, not errors
        conversations = load(opts["folders"] or [str(DEFAULT_DATASET)])
        out = self.stderr if opts["json"] else self.stdout
        rows: list[dict] = []
        all_labels: list[str] = []
        top_labels: list[str] = []
        all_keywords: list[str] = []
        shared = 0  # labels a sibling also has (as a reader would see it)
        with scratch_database(opts["scratch_db"], keep=opts["keep"]):
            started = time.perf_counter()
            for conversation in conversations:
                user = import_history_as_user(conversation.id, conversation.history, self.stderr)
                topics.rebuild(user)
                rows += self._score(user, conversation)
                tree = list(Topic.objects.owned_by(user).values_list("parent_id", "label", "keywords"))
                all_labels += [label for _, label, _ in tree]
                top_labels += [label for parent, label, _ in tree if parent is None]
                all_keywords += [k for *_, keywords in tree for k in keywords or []]
                shared += shared_labels(tree)
            seconds = time.perf_counter() - started
        for row in rows[: opts["show"]]:
            out.write(f"--- {row['conversation']} session {row['session']} ({row['date']})")
            out.write(f"written: {row['reference']}")
            out.write(f"topics:  {row['topics_text']}")
            out.write(f"lead:    {row['lead_text']}\n")
        means = {
            method: {key: round(sum(r[method][key] for r in rows) / max(1, len(rows)), 4)
                     for key in ("rouge1_recall", "rouge1_f1", "rougeL_recall", "rougeL_f1")}
            for method in ("topics", "lead")
        }
        junk = [label for label in all_labels if junk_label(label)]
        junk_keywords = [k for k in all_keywords if junk_label(k)]
        fragments = [label for label in all_labels if labels.is_fragment(label)]
        words = sum(len(tokens(r["topics_text"])) for r in rows) / max(1, len(rows))
        out.write(f"session summaries: {len(rows)} sessions of {len(conversations)} conversations "
                  f"({', '.join(c.id for c in conversations)}); {words:.0f} words per summary on average")
        out.write("")
        out.write(f"{'method':<8}{'R-1 recall':>12}{'R-1 F1':>10}{'R-L recall':>12}{'R-L F1':>10}")
        for method, m in means.items():
            out.write(f"{method:<8}{m['rouge1_recall']:>12.1%}{m['rouge1_f1']:>10.1%}"
                      f"{m['rougeL_recall']:>12.1%}{m['rougeL_f1']:>10.1%}")
        out.write("")
        out.write(f"labels with an id, a number-letter code or a system word: {len(junk)} of "
                  f"{len(all_labels)} ({len(junk) / max(1, len(all_labels)):.1%})"
                  + (f", e.g. {', '.join(repr(j) for j in junk[:5])}" if junk else ""))
        out.write(f"keywords with an id, a number-letter code or a system word: {len(junk_keywords)} of "
                  f"{len(all_keywords)} ({len(junk_keywords) / max(1, len(all_keywords)):.1%})"
                  + (f", e.g. {', '.join(repr(j) for j in junk_keywords[:5])}" if junk_keywords else ""))
        out.write(f"labels a sibling topic also has: {shared} of {len(all_labels)}")
        out.write(f"labels that are fragments of a sentence: {len(fragments)} of {len(all_labels)} "
                  f"({len(fragments) / max(1, len(all_labels)):.1%})"
                  + (f", e.g. {', '.join(repr(f) for f in fragments[:5])}" if fragments else ""))
        out.write(f"top-level topics: {len(top_labels)}: " + "; ".join(top_labels[:8])
                  + ("; …" if len(top_labels) > 8 else ""))
        out.write("topics: the summaries of the leaf topics holding the session's turns; lead: the "
                  "session's first sentences, as many words")
        out.write(f"import, topics and scoring {seconds:.0f} s")
        if opts["json"]:
            self.stdout.write(json.dumps({
                "conversations": [c.id for c in conversations],
                "sessions": len(rows),
                "rouge": means,
                "labels": len(all_labels),
                "junk_labels": len(junk),
                "junk_share": round(len(junk) / max(1, len(all_labels)), 4),
                "keywords": len(all_keywords),
                "junk_keywords": len(junk_keywords),
                "shared_labels": shared,
                "fragment_labels": len(fragments),
                "fragment_share": round(len(fragments) / max(1, len(all_labels)), 4),
                "top_labels": top_labels,
                "all_labels": all_labels,
            }))

    def _score(self, user, conversation: Conversation) -> list[dict]:
        ids = dict(Message.objects.owned_by(user).logical().values_list("external_id", "pk"))
        rows = []
        for session in conversation.sessions:
            members = [ids[t] for t in session.turns if t in ids]
            leaves = list(
                Topic.objects.owned_by(user)
                .filter(pk__in=TopicMembership.objects.owned_by(user).filter(message_id__in=members)
                        .values("topic_id"))
                .order_by("period_start")
                .values_list("summary", flat=True)
            )
            summary = " ".join(s for s in leaves if s)
            candidate, reference = tokens(summary), tokens(session.summary)
            baseline = lead(session.texts, len(candidate))
            base = tokens(baseline)
            rows.append({
                "conversation": conversation.id,
                "session": session.number,
                "date": session.date,
                "reference": session.summary,
                "topics_text": summary,
                "lead_text": baseline,
                **{name: dict(zip(("rouge1_recall", "rouge1_f1"), rouge_1(c, reference), strict=True))
                   | dict(zip(("rougeL_recall", "rougeL_f1"), rouge_l(c, reference), strict=True))
                   for name, c in (("topics", candidate), ("lead", base))},
            })
        return rows
