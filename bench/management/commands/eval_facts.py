"""manage.py eval_facts [FOLDER ...]: how well the facts memory keeps match an annotator's.

A dataset folder holds `<id>.history.jsonl` (import_history's JSON Lines, with "speaker") and
`<id>.facts.jsonl` (`{"session", "speaker", "fact", "evidence": [external_id, ...]}`: the facts an
annotator drew about each speaker, with the turns that state them); ../shared/eval/README.md
describes the default one. Each history is imported as its own user into a scratch database
(eval_recall's machinery) and its facts are drawn as background upkeep draws them
(memory.knowledge.facts.extract_messages). Scored, per speaker and overall:

- turn-level precision, recall and F1 of the facts' source turns against the union of the
  evidence turns (a speaker's row counts the turns that speaker said);
- facts per 100 turns;
- for every fact, its text's best cosine among the same speaker's reference facts (the median).

Baselines in the same run: every turn, and every turn with a first-person or named subject.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from django.core.management.base import BaseCommand, CommandError

from bench.management.commands import eval_recall
from bench.management.commands.eval_recall import read_jsonl
from memory.embedders import get_embedder
from memory.knowledge import facts
from memory.models import Fact, Passage

SCRATCH_DB = "recollect_eval_facts"
_FIRST_PERSON = re.compile(r"\b(I|I'm|I've|I'd|I'll|my|me|mine|myself|we|we're|our|us)\b")


@dataclass
class Turn:
    id: str
    speaker: str
    text: str


@dataclass
class Conversation:
    id: str
    history: Path
    turns: list[Turn]
    evidence: set[str]
    references: dict[str, list[str]] = field(default_factory=dict)  # speaker -> fact texts


def _histories(folders: list[str]) -> Iterator[Path]:
    for folder in folders:
        histories = sorted(Path(folder).glob("*.history.jsonl"))
        if not histories:
            raise CommandError(f"{folder}: no <id>.history.jsonl files")
        yield from histories


def load(folders: list[str]) -> list[Conversation]:
    """Every `<id>.history.jsonl` that has a `<id>.facts.jsonl` beside it."""
    found: dict[str, Conversation] = {}
    for history in _histories(folders):
        cid = history.name.removesuffix(".history.jsonl")
        facts_file = history.with_name(f"{cid}.facts.jsonl")
        if facts_file.is_file():
            if cid in found:
                raise CommandError(f"{history}: {cid!r} is already in {found[cid].history.parent}")
            turns = [Turn(str(t.get("external_id") or ""), str(t.get("speaker") or t.get("role") or ""),
                          str(t.get("content") or "")) for _, t in read_jsonl(history)]
            known = {t.id for t in turns if t.id}
            conversation = Conversation(cid, history, turns, set())
            for lineno, row in read_jsonl(facts_file):
                evidence = row.get("evidence")
                if not isinstance(row.get("fact"), str) or not isinstance(evidence, list):
                    raise CommandError(f'{facts_file}:{lineno}: needs "fact" and an "evidence" list')
                conversation.evidence |= {str(e) for e in evidence if str(e) in known}
                conversation.references.setdefault(str(row.get("speaker") or ""), []).append(row["fact"])
            found[cid] = conversation
    if not found:
        raise CommandError("no <id>.history.jsonl with a <id>.facts.jsonl beside it")
    return list(found.values())


def prf(kept: set[str], relevant: set[str]) -> tuple[float, float, float]:
    """Precision, recall and F1 of the kept turns against the relevant ones."""
    hit = len(kept & relevant)
    precision = hit / len(kept) if kept else 0.0
    recall = hit / len(relevant) if relevant else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hit else 0.0
    return precision, recall, f1


def first_person_or_named(text: str, names: set[str]) -> bool:
    """The baseline's test: the turn speaks of its speaker or names a person of the conversation."""
    return bool(_FIRST_PERSON.search(text)) or any(re.search(rf"\b{re.escape(n)}\b", text) for n in names)


def unit_rows(vectors) -> np.ndarray:
    rows = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
    return rows / (np.linalg.norm(rows, axis=1, keepdims=True) + 1e-12)


def best_matches(texts: list[str] | np.ndarray, references: np.ndarray) -> list[tuple[float, int]]:
    """For each text (or its vector), its highest cosine among the reference vectors and that
    reference's index; texts are embedded as passages by the configured embedder."""
    if not len(texts) or not len(references):
        return []
    a = texts if isinstance(texts, np.ndarray) else unit_rows(get_embedder().embed(list(texts)))
    similarity = a @ references.T
    return [(float(row.max()), int(row.argmax())) for row in similarity]


class Command(BaseCommand):
    help = ("Turn-level precision/recall/F1 of the facts memory draws against annotated facts, facts "
            "per 100 turns and their best cosine to the reference facts, beside every-turn and "
            "first-person baselines, on conversation datasets in a scratch database.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("folders", nargs="*", metavar="FOLDER",
                            help=f"dataset folders (default {eval_recall.DEFAULT_DATASET})")
        parser.add_argument("--show", type=int, default=0, metavar="N",
                            help="print the first N facts with their best reference fact")
        parser.add_argument("--json", action="store_true",
                            help="print the results as one JSON object (the table goes to standard error)")
        parser.add_argument("--scratch-db", default=SCRATCH_DB, metavar="NAME",
                            help=f"the scratch database's name (default {SCRATCH_DB})")
        parser.add_argument("--keep", action="store_true",
                            help="keep the scratch database and reuse its imported histories (facts are "
                                 "drawn again every run)")

    def handle(self, *args, **opts) -> None:
        self.stderr.style_func = None  # notes and progress, not errors
        conversations = load(opts["folders"] or [str(eval_recall.DEFAULT_DATASET)])
        out = self.stderr if opts["json"] else self.stdout
        drawn: dict[str, list[tuple[str, str, str]]] = {}  # conversation -> (turn, subject, text)
        vectors: dict[str, np.ndarray] = {}  # turn -> its stored vector
        with eval_recall.scratch_database(opts["scratch_db"], keep=opts["keep"]):
            started = time.perf_counter()
            for conversation in conversations:
                user = eval_recall.import_history_as_user(conversation.id, conversation.history, self.stderr)
                Fact.objects.owned_by(user).delete()
                facts.extract_messages(user)
                drawn[conversation.id] = list(
                    Fact.objects.owned_by(user).order_by("said_at", "id")
                    .values_list("message__external_id", "subject", "statement")
                )
                first_passages = Passage.objects.owned_by(user).filter(
                    kind=Passage.Kind.MESSAGE, index=0, embedding__isnull=False
                ).values_list("logical_message__external_id", "embedding")
                vectors.update({turn: np.asarray(v, dtype=np.float32) for turn, v in first_passages})
            seconds = time.perf_counter() - started
        results = self._score(conversations, drawn, vectors)
        self._table(out, conversations, results, seconds)
        for turn, subject, text, cosine, reference in results["samples"][: opts["show"]]:
            out.write(f"{turn} {subject}: {text}\n    best reference ({cosine:.2f}): {reference}")
        if opts["json"]:
            self.stdout.write(json.dumps({k: v for k, v in results.items() if k != "samples"}))

    def _score(self, conversations: list[Conversation], drawn: dict, vectors: dict) -> dict:
        turns = [t for c in conversations for t in c.turns]
        relevant = {t for c in conversations for t in c.evidence}
        names = {c.id: {t.speaker for t in c.turns if t.speaker} for c in conversations}
        kept = {
            "facts": {turn for rows in drawn.values() for turn, _, _ in rows},
            "every turn": {t.id for t in turns},
            "first person or named": {t.id for c in conversations for t in c.turns
                                      if first_person_or_named(t.text, names[c.id])},
        }
        count = {"facts": sum(len(rows) for rows in drawn.values()),
                 "every turn": len(turns), "first person or named": len(kept["first person or named"])}
        cosines: dict[str, list[float]] = {"facts": [], "every turn": []}
        samples = []
        for c in conversations:
            for speaker, references in c.references.items():
                mine = [(turn, text) for turn, subject, text in drawn[c.id] if subject == speaker]
                reference_rows = unit_rows(get_embedder().embed(references))
                matches = best_matches([text for _, text in mine], reference_rows)
                cosines["facts"] += [cosine for cosine, _ in matches]
                samples += [(turn, speaker, text, cosine, references[i])
                            for (turn, text), (cosine, i) in zip(mine, matches, strict=True)]
                # A turn's vector is its first passage's, as the import stored it (embedded once).
                said = [vectors[t.id] for t in c.turns if t.speaker == speaker and t.id in vectors]
                if said:
                    matches = best_matches(unit_rows(said), reference_rows)
                    cosines["every turn"] += [cosine for cosine, _ in matches]
        rows = {}
        for method, chosen in kept.items():
            p, r, f = prf(chosen, relevant)
            rows[method] = {
                "precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4),
                "facts": count[method], "per_100_turns": round(100 * count[method] / max(1, len(turns)), 1),
                "median_cosine": round(statistics.median(cosines[method]), 4) if cosines.get(method)
                else None,
            }
        speakers = {}
        for c in conversations:
            for speaker in sorted(names[c.id]):
                said = {t.id for t in c.turns if t.speaker == speaker}
                p, r, f = prf(kept["facts"] & said, c.evidence & said)
                n = sum(1 for _, subject, _ in drawn[c.id] if subject == speaker)
                speakers[f"{c.id} {speaker}"] = {
                    "precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4), "facts": n,
                    "per_100_turns": round(100 * n / max(1, len(said)), 1),
                }
        return {"conversations": [c.id for c in conversations], "turns": len(turns),
                "evidence_turns": len(relevant), "methods": rows, "speakers": speakers, "samples": samples}

    def _table(self, out, conversations: list[Conversation], results: dict, seconds: float) -> None:
        out.write(f"facts: {results['turns']} turns of {len(conversations)} conversations "
                  f"({', '.join(c.id for c in conversations)}), {results['evidence_turns']} of them evidence "
                  f"of a reference fact")
        out.write("")
        header = f"{'method':<24}{'precision':>10}{'recall':>8}{'F1':>7}{'facts':>7}{'per 100 turns':>15}"
        out.write(header + f"{'median best cosine':>20}")
        for method, m in results["methods"].items():
            cosine = "" if m["median_cosine"] is None else f"{m['median_cosine']:.3f}"
            out.write(f"{method:<24}{m['precision']:>10.3f}{m['recall']:>8.3f}{m['f1']:>7.3f}{m['facts']:>7}"
                      f"{m['per_100_turns']:>15.1f}{cosine:>20}")
        out.write("")
        out.write(header.replace("method", "facts, per speaker", 1).replace("    facts, per", "facts, per"))
        for speaker, m in results["speakers"].items():
            out.write(f"{speaker:<24}{m['precision']:>10.3f}{m['recall']:>8.3f}{m['f1']:>7.3f}{m['facts']:>7}"
                      f"{m['per_100_turns']:>15.1f}")
        out.write("")
        out.write("turns scored against the union of the reference facts' evidence turns; a speaker's row "
                  "counts the turns they said; cosine: each text's best match among the same speaker's "
                  "reference facts (every turn: the turn's stored vector)")
        out.write(f"import and facts {seconds:.0f} s")
