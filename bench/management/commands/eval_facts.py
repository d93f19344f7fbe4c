"""manage.py eval_facts: the facts memory keeps, measured as the list a person reads.

Four suites (--suites), each drawing the facts of histories imported into a scratch database
(eval_recall's machinery; nobody's memory is touched), beside baselines drawn the same way in the
same run (bench.fact_lists: "main's rules" before issue 34, and every user turn as a fact):

- locomo (FOLDER ..., default ../shared/eval/long-conversations): `<id>.history.jsonl` with
  `<id>.facts.jsonl`, an annotator's facts about each speaker. List precision: the share of the
  facts whose best cosine among the same speaker's reference facts is at least --threshold;
  coverage: the share of reference facts some fact of the speaker matches that well; facts per
  100 turns; and, as before, turn-level precision/recall/F1 of the facts' source turns;
- longmemeval (--longmemeval DIR): one person's chats with an assistant, a history per question.
  Answer coverage (single-session-user and knowledge-update: a current fact holds all the
  answer's content words and numbers and shares a content word with the question;
  single-session-preference: a fact is drawn from an expected turn), filler share (facts from
  other people's sharegpt_/ultrachat_ sessions, of all facts) and facts per 100 turns;
- updates (--updates DIR): a statement and its later new value; new value current, old linked as
  superseded by it, old still current instead, and the other supersessions made;
- export: bench.chatgpt_export.life's generated ChatGPT history (--export-messages), with the
  truth of what each message is: facts per 100 messages, facts from pasted text, requests stored
  as facts, duplicates, and the share of planted statements, "remember that…" requests and
  updates kept.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from bench import chatgpt_export, fact_lists
from bench.management.commands import eval_recall
from bench.management.commands.eval_recall import read_jsonl
from memory.embedders import get_embedder
from memory.models import Fact, Message, Passage
from memory.transfer import importers

SCRATCH_DB = "recollect_eval_facts"
SHARED = eval_recall.DEFAULT_DATASET.parent
SUITES = ("locomo", "longmemeval", "updates", "export")
# A fact and a reference fact say the same thing at this cosine or above (e5, passage vectors of
# both): the level that only 5% of the annotated facts reach with their nearest fact about other
# people in other conversations (related topics, never the same fact); see docs/evaluation.md.
THRESHOLD = 0.9


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


def unit_rows(vectors) -> np.ndarray:
    rows = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
    return rows / (np.linalg.norm(rows, axis=1, keepdims=True) + 1e-12)


def unrelated_level(conversations: list[Conversation], references: dict) -> float:
    """The cosine that 95% of the annotated facts stay below with their nearest annotated fact
    about other people (the other conversations; with one conversation, the other speaker's):
    two facts this close are no longer merely on related topics."""
    best = []
    alone = len({cid for cid, _ in references}) == 1
    for key, rows in references.items():
        others = [theirs for other, theirs in references.items()
                  if (other != key if alone else other[0] != key[0])]
        if others:
            best += list((rows @ np.vstack(others).T).max(axis=1))
    return round(float(np.percentile(best, 95)), 4) if best else 0.0


def best_matches(texts: list[str] | np.ndarray, references: np.ndarray) -> list[tuple[float, int]]:
    """For each text (or its vector), its highest cosine among the reference vectors and that
    reference's index; texts are embedded as passages by the configured embedder."""
    if not len(texts) or not len(references):
        return []
    a = texts if isinstance(texts, np.ndarray) else unit_rows(get_embedder().embed(list(texts)))
    similarity = a @ references.T
    return [(float(row.max()), int(row.argmax())) for row in similarity]


class Command(BaseCommand):
    help = ("The facts memory draws, measured as the list a person reads: list precision and coverage on "
            "annotated conversations (LoCoMo), answer coverage, filler share and facts per 100 turns on "
            "LongMemEval haystacks, knowledge updates, and a generated ChatGPT history, beside main's "
            "rules before issue 34 and every user turn, in a scratch database.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("folders", nargs="*", metavar="FOLDER",
                            help=f"LoCoMo-style dataset folders (default {eval_recall.DEFAULT_DATASET})")
        parser.add_argument("--suites", default=",".join(SUITES),
                            help=f"comma-separated, of {', '.join(SUITES)} (default all)")
        parser.add_argument("--longmemeval", default=str(SHARED / "longmemeval"), metavar="DIR")
        parser.add_argument("--updates", default=str(SHARED / "longmemeval-updates"), metavar="DIR")
        parser.add_argument("--export-messages", type=int, default=440, metavar="N")
        parser.add_argument("--threshold", type=float, default=THRESHOLD,
                            help=f"cosine at which a fact matches a reference fact (default {THRESHOLD})")
        parser.add_argument("--methods", default="",
                            help="comma-separated subset of the methods "
                                 "(facts, main's rules, every user turn)")
        parser.add_argument("--show", type=int, default=0, metavar="N",
                            help="print the first N facts with their best reference fact, and the misses")
        parser.add_argument("--json", action="store_true",
                            help="print the results as one JSON object (the tables go to standard error)")
        parser.add_argument("--scratch-db", default=SCRATCH_DB, metavar="NAME",
                            help=f"the scratch database's name (default {SCRATCH_DB})")
        parser.add_argument("--keep", action="store_true",
                            help="keep the scratch database and reuse its imported histories (facts are "
                                 "drawn again every run)")

    def handle(self, *args, **opts) -> None:
        self.stderr.style_func = None  # notes and progress, not errors
        suites = [x.strip() for x in opts["suites"].split(",") if x.strip()]
        if unknown := set(suites) - set(SUITES):
            raise CommandError(f"unknown suites: {', '.join(sorted(unknown))} (known: {', '.join(SUITES)})")
        out = self.stderr if opts["json"] else self.stdout
        self.show = opts["show"]
        self.wanted = {m.strip() for m in opts["methods"].split(",") if m.strip()}
        load_average = [round(x, 2) for x in os.getloadavg()]
        results: dict = {"threshold": opts["threshold"], "load_average": load_average}
        folders = opts["folders"] or [str(eval_recall.DEFAULT_DATASET)]
        conversations = load(folders) if "locomo" in suites else []
        started = time.perf_counter()
        with eval_recall.scratch_database(opts["scratch_db"], keep=opts["keep"]):
            if "locomo" in suites:
                results["locomo"] = self._locomo(out, conversations, opts["threshold"])
            if "longmemeval" in suites:
                results["longmemeval"] = self._haystacks(out, Path(opts["longmemeval"]))
            if "updates" in suites:
                results["updates"] = self._updates(out, Path(opts["updates"]))
            if "export" in suites:
                results["export"] = self._export(out, opts["export_messages"])
        out.write(f"eval_facts took {time.perf_counter() - started:.0f} s; load average "
                  f"{' '.join(str(x) for x in results['load_average'])}")
        if opts["json"]:
            self.stdout.write(json.dumps(results))

    def _methods(self, speakers: bool = False) -> dict:
        found = fact_lists.methods(speakers)
        if "main's rules" not in found:
            self.stderr.write(f"main's rules: git show {fact_lists.BASELINE_COMMIT} failed; "
                              "that baseline is left out")
        return {k: v for k, v in found.items() if not self.wanted or k in self.wanted}

    def _draw(self, method, user) -> list[fact_lists.Drawn]:
        Fact.objects.owned_by(user).delete()
        method(user)
        return fact_lists.drawn(user)

    # --- LongMemEval ---------------------------------------------------------------------------

    def _haystacks(self, out, folder: Path) -> dict:
        stacks = fact_lists.haystacks(folder)
        scores = {name: fact_lists.HaystackScore() for name in self._methods()}
        for stack in stacks:
            user = fact_lists.import_user(f"lme-{stack.id}", stack.history.open())
            for name, method in self._methods().items():
                fact_lists.score_haystack(stack, self._draw(method, user), scores[name])
        rows = {name: score.row() for name, score in scores.items()}
        turns = sum(stack.turns for stack in stacks)
        out.write(f"\nLongMemEval haystacks: {len(stacks)} questions, {turns} "
                  "turns (answer coverage over the single-session-user, knowledge-update and "
                  "single-session-preference questions)")
        out.write(f"{'method':<18}{'answer coverage':>16}{'filler share':>14}{'facts/100 turns':>17}"
                  f"{'facts':>7}")
        for name, r in rows.items():
            coverage = "" if r["answer_coverage"] is None else f"{r['answer_coverage']:.1%}"
            out.write(f"{name:<18}{coverage:>16}{r['filler_share']:>14.1%}{r['facts_per_100_turns']:>17.1f}"
                      f"{r['facts']:>7}")
        if self.show and "facts" in scores:
            for miss in scores["facts"].misses:
                out.write(f"  not covered: {miss}")
        return rows

    # --- Knowledge updates -------------------------------------------------------------------------

    def _updates(self, out, folder: Path) -> dict:
        stacks = fact_lists.haystacks(folder)
        scores = {name: fact_lists.UpdateScore() for name in self._methods()}
        for stack in stacks:
            user = fact_lists.import_user(f"upd-{stack.id}", stack.history.open())
            for name, method in self._methods().items():
                fact_lists.score_update(stack, self._draw(method, user), scores[name])
        rows = {name: score.row() for name, score in scores.items()}
        out.write(f"\nKnowledge updates: {len(stacks)} questions")
        out.write(f"{'method':<18}{'new current':>12}{'old linked':>12}{'old instead':>13}"
                  f"{'other links':>13}")
        for name, r in rows.items():
            out.write(f"{name:<18}{r['new_value_current']:>12.1%}{r['old_linked_as_superseded']:>12.1%}"
                      f"{r['old_still_current_instead']:>13.1%}{r['other_supersessions']:>13}")
        if self.show and "facts" in scores:
            for note in scores["facts"].notes:
                out.write(f"  {note}")
        return rows

    # --- The generated ChatGPT history ------------------------------------------------------------

    def _export(self, out, messages: int) -> dict:
        conversations, truth = chatgpt_export.life(messages)
        user, _ = get_user_model().objects.get_or_create(username=f"eval-life-export-{messages}")
        if not Message.objects.owned_by(user).exists():
            importers.import_conversations(user, importers.parse_chatgpt(conversations), embed="upkeep")
        scores = {}
        for name, method in self._methods().items():
            self._draw(method, user)
            scores[name] = fact_lists.ExportScore()
            fact_lists.score_export(user, truth, scores[name])
        rows = {name: score.row() for name, score in scores.items()}
        out.write(f"\nGenerated ChatGPT history (bench.chatgpt_export.life, {messages} messages)")
        out.write(f"{'method':<18}{'facts/100 msgs':>15}{'from pastes':>12}{'requests':>9}{'duplicates':>11}"
                  f"{'kept':>7}{'remember':>9}{'updates':>8}")
        for name, r in rows.items():
            out.write(f"{name:<18}{r['facts_per_100_messages']:>15.1f}{r['facts_from_pasted_text']:>12}"
                      f"{r['requests_stored_as_facts']:>9}{r['duplicates']:>11}{r['statements_kept']:>7.0%}"
                      f"{r['remember_kept']:>9.0%}{r['updates_superseding']:>8.0%}")
        if self.show and "facts" in scores:
            for miss in scores["facts"].misses:
                out.write(f"  not kept: {miss}")
        return rows

    # --- LoCoMo --------------------------------------------------------------------------------

    def _locomo(self, out, conversations: list[Conversation], threshold: float) -> dict:
        users = {}
        vectors: dict[str, np.ndarray] = {}  # turn -> its stored vector
        for conversation in conversations:
            user = eval_recall.import_history_as_user(conversation.id, conversation.history, self.stderr)
            users[conversation.id] = user
            first_passages = Passage.objects.owned_by(user).filter(
                kind=Passage.Kind.MESSAGE, index=0, embedding__isnull=False
            ).values_list("logical_message__external_id", "embedding")
            vectors.update({turn: np.asarray(v, dtype=np.float32) for turn, v in first_passages})
        references = {(c.id, speaker): unit_rows(get_embedder().embed(texts))
                      for c in conversations for speaker, texts in c.references.items()}
        results: dict = {"unrelated_p95": unrelated_level(conversations, references)}
        samples = []
        for name, method in self._methods(speakers=True).items():
            drawn_by: dict[str, list[tuple[str, str, str]]] = {}
            for c in conversations:
                rows = self._draw(method, users[c.id])
                drawn_by[c.id] = [(f.turns[0], f.subject, f.text) for f in rows]
            results[name] = self._score_locomo(name, conversations, drawn_by, vectors, references, threshold,
                                               results["unrelated_p95"])
            if name == "facts":
                samples = results[name].pop("samples")
            else:
                results[name].pop("samples")
        turns = sum(len(c.turns) for c in conversations)
        out.write(f"LoCoMo: {turns} turns of {len(conversations)} conversations "
                  f"({', '.join(c.id for c in conversations)}); a fact matches a reference fact at cosine "
                  f">= {threshold}")
        out.write("(the threshold's reference: 95% of the annotated facts have no fact about other people, "
                  f"in the other conversations, closer than {results['unrelated_p95']:.3f})")
        out.write(f"{'method':<18}{'list precision':>15}{'at p95':>8}{'coverage':>10}{'facts/100 turns':>17}"
                  f"{'turn P':>8}{'turn R':>8}{'turn F1':>8}{'median cos':>11}")
        for name, r in results.items():
            if not isinstance(r, dict):
                continue
            median = "" if r["median_cosine"] is None else f"{r['median_cosine']:.3f}"
            out.write(f"{name:<18}{r['list_precision']:>15.3f}{r['list_precision_at_p95']:>8.3f}"
                      f"{r['coverage']:>10.3f}{r['per_100_turns']:>17.1f}"
                      f"{r['precision']:>8.3f}{r['recall']:>8.3f}{r['f1']:>8.3f}{median:>11}")
        for turn, subject, text, cosine, reference in samples[: self.show]:
            out.write(f"{turn} {subject}: {text}\n    best reference ({cosine:.2f}): {reference}")
        return results

    def _score_locomo(self, name: str, conversations: list[Conversation], drawn_by: dict, vectors: dict,
                      references: dict, threshold: float, unrelated: float = 1.0) -> dict:
        turns = [t for c in conversations for t in c.turns]
        relevant = {t for c in conversations for t in c.evidence}
        kept = {turn for rows in drawn_by.values() for turn, _, _ in rows}
        count = sum(len(rows) for rows in drawn_by.values())
        cosines, matched, total_refs, samples = [], 0, 0, []
        every_turn = name.startswith("every")
        for c in conversations:
            for speaker, texts in c.references.items():
                reference_rows = references[(c.id, speaker)]
                mine = [(turn, text) for turn, subject, text in drawn_by[c.id] if subject == speaker]
                if every_turn:  # a turn's vector is its first passage's, as the import stored it
                    said = [vectors[turn] for turn, _ in mine if turn in vectors]
                    fact_rows = unit_rows(said) if said else np.zeros((0, reference_rows.shape[1]))
                else:
                    fact_rows = unit_rows(get_embedder().embed([t for _, t in mine])) if mine else \
                        np.zeros((0, reference_rows.shape[1]))
                matches = best_matches(fact_rows, reference_rows) if len(fact_rows) else []
                cosines += [cosine for cosine, _ in matches]
                samples += [(turn, speaker, text, cosine, texts[i])
                            for (turn, text), (cosine, i) in zip(mine, matches, strict=False)]
                total_refs += len(texts)
                if len(fact_rows):
                    matched += int(((reference_rows @ fact_rows.T).max(axis=1) >= threshold).sum())
        p, r, f = prf(kept, relevant)
        return {
            "list_precision": round(sum(c >= threshold for c in cosines) / len(cosines), 4)
            if cosines else 0.0,
            # the same at the level 95% of annotated facts stay below with other people's facts
            "list_precision_at_p95": round(sum(c >= unrelated for c in cosines) / len(cosines), 4)
            if cosines else 0.0,
            "coverage": round(matched / max(1, total_refs), 4),
            "facts": count, "per_100_turns": round(100 * count / max(1, len(turns)), 1),
            "precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4),
            "median_cosine": round(statistics.median(cosines), 4) if cosines else None,
            "samples": samples,
        }
