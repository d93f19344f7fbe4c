"""manage.py eval_recall [FOLDER ...]: turn recall@k of Recollect's search on real conversations.

A dataset folder holds `<id>.history.jsonl` (import_history's JSON Lines) and `<id>.queries.jsonl`
(`{"query", "expected": [external_id, ...], "category", "answer"}`); ../shared/eval/README.md
describes the default one. Each history is imported as its own user, as a person would import
it (embedded on the way), into a scratch database made for the run and dropped after it, so no
one's memory is touched. Then every query goes to four searches over the same turns:

- hybrid: memory.finding.search.search(), the search the memory tools use;
- bm25: Okapi BM25 over each turn's text alone (bm25s), the dataset's reference point;
- keyword, dense: the two candidate lists search() fuses, each on its own.

Turn recall@k: the share of a query's expected turns among its first k results, averaged over
the queries. A query is asked at its `question_date`, or without one just after its history's
last turn. --ablate adds hybrid search with each ranking rule off in turn (ABLATIONS).
--per-history prints hybrid search's recall per kind for each history on its own: a rule tuned
on a dev folder should help (or do no harm) on each of its histories, not on one of them only;
with --ablate it also counts, per rule and history, the questions the rule gains and loses.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.models import Q

from memory.embedders import get_embedder
from memory.finding import candidates, fusion
from memory.finding.candidates import _keyword_candidates, _vector_candidates, query_lexemes, vector_literal
from memory.finding.search import SearchFilters, SearchResults, search
from memory.knowledge import entities, graph
from memory.models import Entity, Message, Passage
from memory.progress import Progress
from memory.storage import store as store_module
from memory.storage.store import embed_pending

KS = (1, 5, 10, 25)
DEFAULT_DATASET = settings.BASE_DIR.parent / "shared" / "eval" / "long-conversations"
SCRATCH_DB = "recollect_eval_scratch"


# Ranking constants a run may try (--set); the context ones act when a history is imported.
TUNABLES: dict[str, tuple[Any, Callable[[str], Any]]] = {
    **dict.fromkeys(
        (
            "KEYWORD_WEIGHT", "VECTOR_WEIGHT", "PERIOD_BOOST", "REPLY_SHARE", "NEIGHBOR_SHARE", "ROLE_SHIFT",
            "SPEAKER_SHIFT", "QUESTION_SHIFT", "PRESENT_BOOST", "SESSION_SHARE", "DIVERSITY_SHIFT",
            "ABSENT_Z", "LINK_SHARE", "WHEN_BOOST", "TASTE_BOOST",
        ),
        (fusion, float),
    ),
    **dict.fromkeys(("NEIGHBOR_SEEDS", "PRESENT_POOL", "LINK_SEEDS", "LINK_POOL"), (fusion, int)),
    **dict.fromkeys(("BM25_K1", "BM25_B"), (candidates, float)),
    "CONTEXT_PARENT_CHARS": (store_module, int),
    "CONTEXT_SPEAKER": (store_module, lambda v: v.lower() in ("1", "true", "yes")),
    # The graph boost (memory.knowledge.graph) reads settings.
    "GRAPH_SEARCH": (settings, lambda v: v.lower() in ("1", "true", "yes")),
    "GRAPH_SEARCH_WEIGHT": (settings, float),
    "GRAPH_SEARCH_HOPS": (settings, int),
    "GRAPH_MAX_SHARE": (settings, float),
}
# Each rule of the ranking, and the values that turn it off (--ablate): what each adds on a split.
ABLATIONS: dict[str, dict[str, str]] = {
    "period named": {"PERIOD_BOOST": "0"},
    "reply share": {"REPLY_SHARE": "0"},
    "neighbours": {"NEIGHBOR_SHARE": "0"},
    "whose words": {"ROLE_SHIFT": "0"},
    "named speaker": {"SPEAKER_SHIFT": "0"},
    "statements": {"QUESTION_SHIFT": "0"},
    "says when": {"WHEN_BOOST": "0"},
    "newest for now": {"PRESENT_BOOST": "0"},
    "stated tastes": {"TASTE_BOOST": "0"},
    "session share": {"SESSION_SHARE": "0"},
    "links": {"LINK_SHARE": "0"},
    "other chats": {"DIVERSITY_SHIFT": "0"},
    "absent floor": {"ABSENT_Z": "0"},
    "graph": {"GRAPH_SEARCH": "0"},
}
ABLATION_KS = (5, 10)
# Passages taken from each candidate list on its own: what search() takes for 25 results.
CANDIDATES = max(50, max(KS) * 5)
# scikit-learn's stop words with Snowball stemming reproduce the dataset README's 59.2%
# recall@10; bm25s' own 33 stop words give 57.4% (53.8% unstemmed).
BM25_LABEL = (
    "Okapi BM25 over each turn's text (bm25s: k1 1.2, b 0.75, scikit-learn's English stop words, "
    "Snowball stemming: the dataset README's configuration)"
)


@dataclass
class Dataset:
    id: str
    history: Path
    turns: dict[str, str]  # external_id -> content, in file order
    queries: list[dict]
    sessions: dict[str, str] = field(default_factory=dict)  # external_id -> its session (conversation)
    speakers: dict[str, str] = field(default_factory=dict)  # external_id -> its speaker, when named

    @property
    def folder(self) -> str:
        return self.history.parent.name


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise CommandError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None


def history_files(folders: list[str]) -> Iterator[tuple[str, Path]]:
    """(id, path) of every `<id>.history.jsonl` in the folders; a folder without one is an error."""
    for folder in folders:
        histories = sorted(Path(folder).glob("*.history.jsonl"))
        if not histories:
            raise CommandError(f"{folder}: no <id>.history.jsonl files")
        for history in histories:
            yield history.name.removesuffix(".history.jsonl"), history


def load_datasets(
    folders: list[str], limit_queries: int | None = None, only: list[str] | None = None
) -> list[Dataset]:
    """Every `<id>.history.jsonl` with its `<id>.queries.jsonl` in the folders (or those of the
    ids in `only`); the first `limit_queries` queries of each."""
    datasets: dict[str, Dataset] = {}
    for cid, history in history_files(folders):
        if only and cid not in only:
            continue
        if cid in datasets:
            raise CommandError(f"{history}: {cid!r} is already in {datasets[cid].history.parent}")
        turns, sessions, speakers, last = {}, {}, {}, None
        for lineno, turn in read_jsonl(history):
            if not turn.get("external_id"):
                raise CommandError(f"{history}:{lineno}: a turn without external_id can't be scored")
            turns[str(turn["external_id"])] = turn.get("content") or ""
            sessions[str(turn["external_id"])] = str(turn.get("conversation") or "")
            if turn.get("speaker"):
                speakers[str(turn["external_id"])] = str(turn["speaker"])
            with contextlib.suppress(CommandError):  # import_history reports a bad timestamp
                when = question_moment(turn.get("timestamp"), f"{history}:{lineno}")
                last = max(last, when) if last and when else when or last
        queries_file = history.with_name(f"{cid}.queries.jsonl")
        if not queries_file.is_file():
            raise CommandError(f"{history}: no {queries_file.name} beside it")
        queries = []
        for lineno, query in read_jsonl(queries_file):
            expected = query.get("expected")
            if not isinstance(query.get("query"), str) or not expected or not isinstance(expected, list):
                raise CommandError(f'{queries_file}:{lineno}: needs "query" and a list "expected"')
            if unknown := [e for e in expected if str(e) not in turns]:
                raise CommandError(f"{queries_file}:{lineno}: no turn {unknown[0]!r} in {history.name}")
            # Asked at its question_date; without one, just after the history's last turn (when
            # a person who had these chats would ask: "last year" is the year before that).
            asked = question_moment(query.get("question_date"), f"{queries_file}:{lineno}")
            query = {**query, "expected": list(dict.fromkeys(map(str, expected))), "as_of": asked or last}
            queries.append(query)
        datasets[cid] = Dataset(cid, history, turns, queries[:limit_queries], sessions, speakers)
    if only and (unknown := sorted(set(only) - set(datasets))):
        raise CommandError(f"no history {unknown[0]!r} in {', '.join(folders)}")
    return list(datasets.values())


def question_moment(value, where: str) -> dt.datetime | None:
    """A query's `question_date` (ISO 8601, "Z" or an offset; a naive one is UTC) as an aware
    datetime, or None when the query has none: the moment the question is asked."""
    if value in (None, ""):
        return None
    try:
        moment = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(f"{where}: question_date {value!r} is not an ISO 8601 date") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def recall_at(ranked: list[str], expected: list[str]) -> tuple[float, ...]:
    """Turn recall at each of KS: the share of `expected` among the first k of `ranked`."""
    return tuple(len(set(ranked[:k]) & set(expected)) / len(expected) for k in KS)


SESSION_KS = (5, 10)


def session_recall_at(sessions: list[str], expected: list[str]) -> tuple[float, ...]:
    """Session recall of ranked turns given as their sessions: at each of SESSION_KS, whether any
    of `expected` is among the sessions of the first k turns, then whether all are (LongMemEval's
    recall_any and recall_all)."""
    found = [set(sessions[:k]) & set(expected) for k in SESSION_KS]
    return (*(float(bool(f)) for f in found), *(float(len(f) == len(set(expected))) for f in found))


# scikit-learn's English stop words (BSD-3-Clause), the list the BM25 baseline was measured with;
# kept here so the baseline needs no scikit-learn.
_STOP_WORDS = """
    a about above across after afterwards again against all almost alone along already also
    although always am among amongst amoungst amount an and another any anyhow anyone anything
    anyway anywhere are around as at back be became because become becomes becoming been before
    beforehand behind being below beside besides between beyond bill both bottom but by call can
    cannot cant co con could couldnt cry de describe detail do done down due during each eg
    eight either eleven else elsewhere empty enough etc even ever every everyone everything
    everywhere except few fifteen fifty fill find fire first five for former formerly forty
    found four from front full further get give go had has hasnt have he hence her here
    hereafter hereby herein hereupon hers herself him himself his how however hundred i ie if in
    inc indeed interest into is it its itself keep last latter latterly least less ltd made many
    may me meanwhile might mill mine more moreover most mostly move much must my myself name
    namely neither never nevertheless next nine no nobody none noone nor not nothing now nowhere
    of off often on once one only onto or other others otherwise our ours ourselves out over own
    part per perhaps please put rather re same see seem seemed seeming seems serious several she
    should show side since sincere six sixty so some somehow someone something sometime
    sometimes somewhere still such system take ten than that the their them themselves then
    thence there thereafter thereby therefore therein thereupon these they thick thin third this
    those though three through throughout thru thus to together too top toward towards twelve
    twenty two un under until up upon us very via was we well were what whatever when whence
    whenever where whereafter whereas whereby wherein whereupon wherever whether which while
    whither who whoever whole whom whose why will with within without would yet you your yours
    yourself yourselves
"""
ENGLISH_STOP_WORDS = frozenset(_STOP_WORDS.split())


def distinct(ids) -> list[str]:
    """Turn ids in rank order, each once, at most max(KS) of them (a long message's several
    passages or chunks are one turn)."""
    return [i for i in dict.fromkeys(ids) if i is not None][: max(KS)]


def bm25_ranker(dataset: Dataset) -> Callable[[str], list[str]]:
    """Okapi BM25 over the dataset's turn texts: a query's turns in rank order, only those
    sharing a term with it."""
    import bm25s
    import Stemmer

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # a DEBUG line per index otherwise
    ids = list(dataset.turns)
    stop_words, stemmer = sorted(ENGLISH_STOP_WORDS), Stemmer.Stemmer("english")
    retriever = bm25s.BM25(method="robertson", k1=1.2, b=0.75)
    retriever.index(
        bm25s.tokenize(list(dataset.turns.values()), stopwords=stop_words, stemmer=stemmer,
                       show_progress=False),
        show_progress=False,
    )

    def ranked(query: str) -> list[str]:
        [terms] = bm25s.tokenize([query], stopwords=stop_words, stemmer=stemmer, return_ids=False,
                                 show_progress=False)
        terms = [t for t in terms if t in retriever.vocab_dict]
        if not terms:
            return []
        docs, scores = retriever.retrieve([terms], k=min(max(KS), len(ids)), show_progress=False)
        return [ids[d] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    return ranked


Ranker = Callable[[str, "dt.datetime | None"], list[str]]


METHODS = ("hybrid", "bm25", "keyword", "dense")


def rankers(user, dataset: Dataset, only: tuple[str, ...] = METHODS) -> dict[str, Ranker]:
    """The four searches over one user's memory of `dataset` (or those `only` names): each
    gives a query's turn ids (external ids) in rank order, for the query asked at a moment
    (None: now)."""
    turn_of = dict(Message.objects.owned_by(user).logical().values_list("pk", "external_id"))

    def hybrid(query: str, as_of) -> list[str]:
        hits = search(user, query, limit=max(KS), as_of=as_of).hits
        return [h.external_id or turn_of.get(h.message_id) for h in hits]

    def keyword(query: str, as_of) -> list[str]:
        rows = _keyword_candidates(user, query, SearchFilters(), CANDIDATES, SearchResults(query))
        return [turn_of.get(row[2]) for row in rows]

    def dense(query: str, as_of) -> list[str]:
        rows = _vector_candidates(user, query, SearchFilters(), CANDIDATES, SearchResults(query))
        return [turn_of.get(row[2]) for row in rows]

    methods: dict[str, Ranker] = {"hybrid": hybrid, "keyword": keyword, "dense": dense}
    if "bm25" in only:  # its index is built from every turn's text
        bm25 = bm25_ranker(dataset)
        methods["bm25"] = lambda query, as_of: bm25(query)
    return {method: methods[method] for method in only}


@contextmanager
def scratch_database(name: str, *, keep: bool) -> Iterator[None]:
    """Point the default connection at a database of its own, made (migrated) for the block and
    dropped after it; with keep, reused if it exists and kept."""
    test_settings = connection.settings_dict.setdefault("TEST", {})
    old_name, old_test_name = connection.settings_dict["NAME"], test_settings.get("NAME")
    if name == old_name:
        raise CommandError(f"the scratch database {name!r} is the database in use")
    test_settings["NAME"] = name
    try:
        try:
            connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False, keepdb=keep)
        except SystemExit:  # how Django reports a database it could not replace (one in use)
            raise CommandError(f"could not create the scratch database {name!r}; is it in use?") from None
        yield
    finally:
        # destroy_test_db drops whatever the connection points at: only ever the scratch one.
        # The search's worker threads hold connections to it too.
        candidates.release_connections()
        if connection.settings_dict["NAME"] == name:
            connection.creation.destroy_test_db(old_name, verbosity=0, keepdb=keep)
        test_settings["NAME"] = old_test_name


def import_history_as_user(dataset_id: str, history: Path, stderr, turns: int | None = None):
    """Import one history as user eval-<id>, embedded and with its entity graph, as a person's
    imported memory would be; returns the user. Progress and notes go to `stderr`. A user who
    already holds the history's `turns` (a kept scratch database) is reused as it is: an import
    that adds nothing would still rebuild its topics."""
    username = f"eval-{dataset_id}"
    user = get_user_model().objects.filter(username=username).first()
    held = Message.objects.owned_by(user).logical().count() if user is not None else 0
    if user is not None and turns is not None and held >= turns:
        stderr.write(f"{dataset_id}: reusing user {username}, who holds the history's {turns:,} turns")
    else:
        stderr.write(f"{dataset_id}: importing {history.name} as user {username}")
        call_command("import_history", str(history), user=username, wait=True, stdout=stderr, stderr=stderr)
        user = get_user_model().objects.get(username=username)
    # The import embeds (--wait); this catches up what it left (a kept database made with
    # another embedding model, an import cut short).
    embedder = get_embedder()
    pending = Passage.objects.owned_by(user).filter(
        Q(embedding__isnull=True) | ~Q(embedding_model=embedder.name)
    ).count()
    if pending:
        with Progress(pending, f"embed {dataset_id}") as bar:
            embed_pending(user, progress=bar.update)
    # The entity graph, as upkeep builds it after a person's turns (an import queues none).
    if not Entity.objects.owned_by(user).exists():
        entities.rebuild(user)
        graph.upkeep(user)
    return user


class Command(BaseCommand):
    help = ("Turn recall@1/5/10/25 of hybrid search, BM25, keyword-only and vector-only search on "
            "conversation datasets, in a scratch database.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("folders", nargs="*", metavar="FOLDER",
                            help=f"dataset folders (default {DEFAULT_DATASET})")
        parser.add_argument("--json", action="store_true",
                            help="print the results as one JSON object (the table goes to standard error)")
        parser.add_argument("--limit-queries", type=int, metavar="N",
                            help="only the first N queries of each conversation")
        parser.add_argument("--only", action="append", metavar="ID",
                            help="only the history <ID>.history.jsonl (repeatable)")
        parser.add_argument("--per-history", action="store_true",
                            help="also print hybrid search's recall per kind for each history on its own")
        parser.add_argument("--questions", metavar="FILE",
                            help="write hybrid search's recall of each question to FILE (JSON Lines), "
                                 "for --against in a later run")
        parser.add_argument("--against", metavar="FILE",
                            help="count, per kind and per history, the questions whose hybrid recall @1, @5 "
                                 "and @10 rose or fell against a run's --questions FILE")
        parser.add_argument("--verbose-misses", action="store_true",
                            help="print every query whose expected turns hybrid search misses in its top 10")
        parser.add_argument("--where-missed", action="append", default=[], metavar="KIND",
                            help="for each question of this kind (repeatable), where each expected turn "
                                 "missing from hybrid's top 10 is: its rank in the fused list, in each "
                                 "candidate list and whether they fetch it, its speaker, the words it "
                                 "shares, the place of its topic among the owner's topics")
        parser.add_argument("--keep", action="store_true",
                            help="keep the scratch database, and reuse its imported histories when it "
                                 "exists (run once without --keep after changing how memory is stored)")
        parser.add_argument("--scratch-db", default=SCRATCH_DB, metavar="NAME",
                            help=f"the scratch database's name (default {SCRATCH_DB})")
        parser.add_argument("--ablate", action="store_true",
                            help="also run hybrid search once with each ranking rule off ("
                            + ", ".join(ABLATIONS) + ") and print recall@5 and @10 per kind for each")
        parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                            help="try a ranking constant for this run: one of "
                            + ", ".join(sorted(TUNABLES)) + " (context ones apply at import: "
                            "use a --scratch-db of their own)")

    def handle(self, *args, **opts) -> None:
        self.stderr.style_func = None  # notes and progress, not errors
        for assignment in opts["set"]:
            name, _, value = assignment.partition("=")
            if name not in TUNABLES or not value:
                raise CommandError(f"--set takes NAME=VALUE with NAME one of {', '.join(sorted(TUNABLES))}")
            try:
                set_tunable(name, value)
            except ValueError:
                raise CommandError(f"--set {name}: {value!r} is not a valid value") from None
            self.stderr.write(f"note: {name} = {value} for this run")
        if opts["limit_queries"] is not None and opts["limit_queries"] < 1:
            raise CommandError("--limit-queries must be at least 1")
        datasets = load_datasets(
            opts["folders"] or [str(DEFAULT_DATASET)], opts["limit_queries"], opts["only"]
        )
        out = self.stderr if opts["json"] else self.stdout
        before = read_questions(opts["against"]) if opts["against"] else None
        with scratch_database(opts["scratch_db"], keep=opts["keep"]):
            started = time.perf_counter()
            users = {d.id: self._import(d) for d in datasets}
            import_s = time.perf_counter() - started
            scores, misses, seconds = self._run_queries(datasets, users)
            if opts["where_missed"]:
                self._where_missed(out, datasets, users, set(opts["where_missed"]))
            ablated = {
                label: self._run_queries(datasets, users, ("hybrid",), changes)[0]["hybrid"]
                for label, changes in (ABLATIONS.items() if opts["ablate"] else ())
            }
        if opts["verbose_misses"]:
            for line in misses:
                out.write(line)
        embedder = get_embedder().name
        labels = {
            "hybrid": "memory.finding.search.search(), what the memory tools use",
            "bm25": BM25_LABEL,
            "keyword": (
                "memory.finding.candidates._keyword_candidates alone "
                "(Postgres full-text search, BM25-weighted)"
            ),
            "dense": (
                f"memory.finding.candidates._vector_candidates alone ({embedder} passage vectors, cosine)"
            ),
        }
        recall = {method: summarise(rows) for method, rows in scores.items()}
        by_folder = {}
        for folder in dict.fromkeys(d.folder for d in datasets):
            rows_of = {m: [r for r in rows if r.folder == folder] for m, rows in scores.items()}
            by_folder[folder] = {
                "conversations": [d.id for d in datasets if d.folder == folder],
                "turns": sum(len(d.turns) for d in datasets if d.folder == folder),
                "queries": len(rows_of["hybrid"]),
                "recall": {m: summarise(rows) for m, rows in rows_of.items()},
                "session_recall": {m: summarise_sessions(rows) for m, rows in rows_of.items()},
            }
        n_queries = sum(len(d.queries) for d in datasets)
        ms_per_query = {m: round(1000 * s / max(1, n_queries), 1) for m, s in seconds.items()}
        for folder, results in by_folder.items():
            if ablated:
                results["ablation"] = {
                    label: summarise([r for r in rows if r.folder == folder])
                    for label, rows in ablated.items()
                }
            self._table(out, folder, results, embedder)
        for method, label in labels.items():
            out.write(f"{method:<9}{label}")
        out.write(f"import and embedding {import_s:.0f} s; ms per query: "
                  + ", ".join(f"{m} {ms:g}" for m, ms in ms_per_query.items()))
        histories = {
            d.id: summarise([r for r in scores["hybrid"] if r.history == d.id]) for d in datasets
        }
        if opts["per_history"]:
            self._history_rows(out, histories)
        questions = question_lines(scores["hybrid"])
        if opts["questions"]:
            Path(opts["questions"]).write_text("".join(json.dumps(line) + "\n" for line in questions))
        rule_changes = None
        if ablated and opts["per_history"]:
            rule_changes = ablation_changes(ablated, questions)
            self._rule_rows(out, rule_changes)
        changes = None
        if before is not None:
            changes = question_changes(before, questions)
            self._change_rows(out, opts["against"], changes)
        if opts["json"]:
            self.stdout.write(json.dumps({
                "conversations": [d.id for d in datasets],
                "turns": sum(len(d.turns) for d in datasets),
                "queries": n_queries,
                "embedder": embedder,
                "labels": labels,
                "recall": recall,
                "datasets": by_folder,
                "histories": histories,
                "ms_per_query": ms_per_query,
                **({"against": changes} if changes is not None else {}),
                **({"rules_by_history": rule_changes} if rule_changes is not None else {}),
            }))

    def _import(self, dataset: Dataset):
        # A turn with no words is never stored (import_history reports it as a bad line).
        storable = sum(1 for text in dataset.turns.values() if text.strip())
        return import_history_as_user(dataset.id, dataset.history, self.stderr, storable)

    def _run_queries(
        self, datasets: list[Dataset], users: dict, only: tuple[str, ...] = METHODS,
        changes: dict[str, str] | None = None,
    ):
        """Every query through every method (or those `only` names), asked at its question_date
        when it has one, with the ranking constants of `changes` set meanwhile (put back after):
        (per method, a Scored row per query; hybrid's misses at 10 as printable lines; seconds
        per method)."""
        changes = changes or {}
        with tunables_set(changes):
            return self._queries(datasets, users, only, ", ".join(f"{k}={v}" for k, v in changes.items()))

    def _queries(self, datasets: list[Dataset], users: dict, only: tuple[str, ...], note: str):
        scores: dict[str, list[Scored]] = {m: [] for m in only}
        seconds = dict.fromkeys(scores, 0.0)
        misses: list[str] = []
        with Progress(sum(len(d.queries) for d in datasets), f"queries {note}".strip()) as bar:
            for dataset in datasets:
                methods = rankers(users[dataset.id], dataset, only)
                for query in dataset.queries:
                    category = query.get("category") or "none"
                    expected_sessions = [str(s) for s in query.get("expected_sessions") or []]
                    for method, run in methods.items():
                        started = time.perf_counter()
                        ranked = distinct(run(query["query"], query["as_of"]))
                        seconds[method] += time.perf_counter() - started
                        sessions = None
                        if expected_sessions:
                            sessions_of = [dataset.sessions.get(t, "") for t in ranked]
                            sessions = session_recall_at(sessions_of, expected_sessions)
                        scores[method].append(
                            Scored(dataset.folder, category, recall_at(ranked, query["expected"]), sessions,
                                   dataset.id, query["query"], str(query.get("original") or ""))
                        )
                        if method == "hybrid":
                            misses.extend(miss_lines(dataset, query, ranked))
                    bar.update()
        return scores, misses, seconds

    @staticmethod
    def _where_missed(out, datasets: list[Dataset], users: dict, kinds: set[str]) -> None:
        """--where-missed: a line per expected turn missing from the first 10, then the counts."""
        found = [
            row for d in datasets for query in d.queries if query.get("category") in kinds
            for row in missed_evidence(users[d.id], d, query)
        ]
        out.write("where the expected turns missing from hybrid's first 10 are (fused: rank in "
                  f"hybrid's list; vector, keyword: rank in each list, * when among the {CANDIDATES} "
                  "it fetches; by named: the turn's speaker is the one the question names; topic: "
                  "the place of its leaf topic among the owner's leaves, nearest the question first)")
        for row in found:
            ranks = " ".join(
                f"{name} {row[name] or '-'}{'*' if row.get(f'{name}_pool') else ''}"
                for name in ("fused", "vector", "keyword")
            )
            context = f" (context: {','.join(row['context_shares'])})" if row["context_shares"] else ""
            out.write(f"  [{row['category']}] {shorten(row['query'], 60)} | {row['turn']} {ranks} "
                      f"by named {row['by_named']} topic {row['topic'] or '-'}/{row['topics']} "
                      f"shares {','.join(row['shares']) or '-'}{context}"
                      f" | {shorten(row['text'], 70)}")
        out.write("")
        out.write(f"{'category':<16}{'missed':>8}{'not fetched':>13}{'fetched, a word':>17}"
                  f"{'fetched, none':>15}{'by named':>10}{'2 turns away in 10':>20}"
                  f"{f'topic in top {TOPIC_TOP}':>16}")
        for kind in sorted({row["category"] for row in found}):
            rows = [row for row in found if row["category"] == kind]
            fetched = [row for row in rows if row["vector_pool"] or row["keyword_pool"]]
            worded = sum(1 for row in fetched if row["shares"] or row["context_shares"])
            out.write(f"{kind:<16}{len(rows):>8}{len(rows) - len(fetched):>13}{worded:>17}"
                      f"{len(fetched) - worded:>15}{sum(1 for r in rows if r['by_named'] == 'yes'):>10}"
                      f"{sum(1 for r in rows if r['near']):>20}"
                      f"{sum(1 for r in rows if r['topic'] and r['topic'] <= TOPIC_TOP):>16}")
        out.write("")

    def _table(self, out, folder: str, results: dict, embedder: str) -> None:
        recall, sessions = results["recall"], results["session_recall"]
        conversations = results["conversations"]
        out.write(f"{folder}: turn recall@k: {results['queries']:,} queries over {results['turns']:,} "
                  f"turns of {len(conversations)} histories ({', '.join(conversations)}); "
                  f"embedder {embedder}")
        out.write("")
        self._rows(out, recall, [f"@{k}" for k in KS], [f"recall@{k}" for k in KS])
        out.write("")
        if results.get("ablation"):
            self._ablation_rows(out, folder, recall["hybrid"], results["ablation"])
        if sessions["hybrid"]:
            out.write(f"{folder}: session recall: whether any / all of a query's expected sessions are among "
                      "the sessions of its first k turns")
            out.write("")
            names = [f"{which}@{k}" for which in ("any", "all") for k in SESSION_KS]
            self._rows(out, sessions, names, names)
            out.write("")

    @staticmethod
    def _history_rows(out, histories: dict[str, dict]) -> None:
        """Hybrid recall@k per kind of each history on its own."""
        out.write("hybrid search, turn recall@k per history")
        out.write("")
        out.write(f"{'history':<16}{'category':<26}{'queries':>8}" + "".join(f"{f'@{k}':>8}" for k in KS))
        for history, by_kind in histories.items():
            for kind, row in by_kind.items():
                out.write(f"{history:<16}{kind:<26}{row['queries']:>8}"
                          + "".join(f"{row[f'recall@{k}']:>8.1%}" for k in KS))
        out.write("")

    @staticmethod
    def _change_rows(out, against: str, changes: dict[str, dict]) -> None:
        """Per kind over every history, then per history and kind: the questions whose hybrid
        recall rose and fell at each of CHANGE_KS against an earlier run's questions."""
        out.write(f"hybrid search against {against}: questions whose recall rose (+) or fell (-)")
        out.write("")
        out.write(f"{'history':<16}{'category':<26}{'queries':>8}"
                  + "".join(f"{f'@{k} +/-':>12}" for k in CHANGE_KS))
        for group, by_kind in changes.items():
            for kind, row in by_kind.items():
                cells = [f"+{row[f'rose@{k}']}/-{row[f'fell@{k}']}" for k in CHANGE_KS]
                out.write(f"{group:<16}{kind:<26}{row['queries']:>8}" + "".join(f"{c:>12}" for c in cells))
        out.write("")

    @staticmethod
    def _rule_rows(out, rule_changes: dict[str, dict]) -> None:
        """Per rule, per history: the questions whose recall the rule raises (+) and lowers (-)
        at each of CHANGE_KS, against the same search with that rule off."""
        out.write("hybrid search, what each ranking rule does per history: questions whose recall it "
                  "raises (+) or lowers (-), against the same search with it off")
        out.write("")
        groups = list(next(iter(rule_changes.values()), {}))
        out.write(f"{'rule':<16}" + "".join(f"{g[:20]:>22}" for g in groups))
        for k in CHANGE_KS:
            for label, by_group in rule_changes.items():
                cells = [f"@{k} +{by_group[g]['all'][f'rose@{k}']}/-{by_group[g]['all'][f'fell@{k}']}"
                         for g in groups]
                out.write(f"{label:<16}" + "".join(f"{c:>22}" for c in cells))
            out.write("")

    @staticmethod
    def _ablation_rows(out, folder: str, hybrid: dict, ablation: dict) -> None:
        """Hybrid recall@5 and @10 per kind with every rule on, then with each rule off (the
        change in points beside it)."""
        kinds = list(hybrid)
        for k in ABLATION_KS:
            key = f"recall@{k}"
            out.write(f"{folder}: hybrid recall@{k} with each ranking rule off (points against all rules on)")
            out.write("")
            out.write(f"{'rule off':<16}" + "".join(f"{kind[:16]:>18}" for kind in kinds))
            out.write(f"{'(none)':<16}" + "".join(f"{hybrid[kind][key]:>18.1%}" for kind in kinds))
            for label, by_kind in ablation.items():
                cells = [
                    f"{by_kind[kind][key]:>10.1%} ({100 * (by_kind[kind][key] - hybrid[kind][key]):+.1f})"
                    for kind in kinds
                ]
                out.write(f"{label:<16}" + "".join(f"{cell:>18}" for cell in cells))
            out.write("")

    @staticmethod
    def _rows(out, by_method: dict, headers: list[str], keys: list[str]) -> None:
        out.write(f"{'category':<26}{'queries':>8}  {'method':<9}" + "".join(f"{h:>8}" for h in headers))
        for category in by_method["hybrid"]:
            for i, (method, by_category) in enumerate(by_method.items()):
                row = by_category[category]
                head = f"{category:<26}{row['queries']:>8}" if i == 0 else " " * 34
                out.write(f"{head}  {method:<9}" + "".join(f"{row[key]:>8.1%}" for key in keys))


# @1 too: a rule that says which turn comes first ("says when") acts there.
CHANGE_KS = (1, 5, 10)


def question_lines(rows: list[Scored]) -> list[dict]:
    """One line per question: its history, its place among the history's questions, its kind,
    its words and its recall at KS."""
    lines, places = [], {}
    for row in rows:
        places[row.history] = places.get(row.history, 0) + 1
        recall = {f"recall@{k}": round(v, 4) for k, v in zip(KS, row.turns, strict=True)}
        line = {"history": row.history, "number": places[row.history], "category": row.category,
                "query": row.query, **recall}
        if row.original:
            line["original"] = row.original
        lines.append(line)
    return lines


def read_questions(path: str) -> dict[tuple[str, int], dict]:
    """A --questions file, by (history, number); CommandError when it is missing or no such file."""
    try:
        lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        return {(line["history"], int(line["number"])): line for line in lines}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"--against {path}: not a file --questions wrote ({exc})") from None


def question_changes(before: dict[tuple[str, int], dict], after: list[dict]) -> dict[str, dict]:
    """{"all histories" and each history: {kind and "all": {"queries", "rose@k", "fell@k"}}}, over
    the questions both runs asked (the same words at the same place of the same history). A
    question with an "original" (a paraphrase: its queries file says which question it rewords)
    is matched to the earlier run's question in those words, in the same history: against a run
    of the originals, what changed is the wording alone."""
    changes: dict[str, dict] = {}
    by_words = {(line["history"], line["query"]): line for line in before.values()}
    for line in after:
        if line.get("original"):
            earlier = by_words.get((line["history"], line["original"]))
        else:
            earlier = before.get((line["history"], line["number"]))
            if earlier is not None and earlier["query"] != line["query"]:
                earlier = None
        if earlier is None:
            continue
        for group in ("all histories", line["history"]):
            for kind in ("all", line["category"]):
                row = changes.setdefault(group, {}).setdefault(
                    kind, {"queries": 0, **{f"{d}@{k}": 0 for k in CHANGE_KS for d in ("rose", "fell")}}
                )
                row["queries"] += 1
                for k in CHANGE_KS:
                    # Recall is written to four places: a smaller difference is rounding.
                    change = round(line[f"recall@{k}"] - earlier[f"recall@{k}"], 3)
                    row[f"rose@{k}"] += change > 0
                    row[f"fell@{k}"] += change < 0
    # Each group's "all" row first, then its kinds as they came.
    return {group: dict(sorted(kinds.items(), key=lambda kv: kv[0] != "all"))
            for group, kinds in changes.items()}


def ablation_changes(ablated: dict[str, list[Scored]], questions: list[dict]) -> dict[str, dict]:
    """{rule: question_changes of the run with every rule on against the run with that rule
    off}: per history and kind, the questions a rule gains ("rose") and loses ("fell"). A rule
    whose gain is one or two questions of one history, or that gains in one and loses in
    another, fits the questions it was tuned on."""
    return {
        label: question_changes(
            {(line["history"], line["number"]): line for line in question_lines(rows)}, questions
        )
        for label, rows in ablated.items()
    }


def set_tunable(name: str, value: str) -> None:
    """Set one ranking constant of TUNABLES from its text (ValueError when it is no value)."""
    module, kind = TUNABLES[name]
    setattr(module, name, kind(value))


@contextmanager
def tunables_set(changes: dict[str, str]) -> Iterator[None]:
    """Within this block, the ranking constants of `changes` hold their values; then their own."""
    before = {name: getattr(TUNABLES[name][0], name) for name in changes}
    try:
        for name, value in changes.items():
            set_tunable(name, value)
        yield
    finally:
        for name, value in before.items():
            setattr(TUNABLES[name][0], name, value)


@dataclass
class Scored:
    """One query's figures for one method."""

    folder: str
    category: str
    turns: tuple[float, ...]  # turn recall at KS
    sessions: tuple[float, ...] | None  # session_recall_at, when the query names its sessions
    history: str = ""  # the dataset's id
    query: str = ""
    original: str = ""  # a paraphrase's original words (its "original" field), if any


def _means(groups: dict[str, list[tuple[float, ...]]], names: list[str]) -> dict[str, dict]:
    return {
        category: {
            "queries": len(values),
            **{name: round(sum(v[i] for v in values) / len(values), 4) for i, name in enumerate(names)},
        }
        for category, values in groups.items()
    }


def _by_category(rows: list[tuple[str, tuple[float, ...]]]) -> dict[str, list[tuple[float, ...]]]:
    groups: dict[str, list[tuple[float, ...]]] = {"all": [r for _, r in rows]}
    for category, r in sorted(rows, key=lambda row: row[0]):
        groups.setdefault(category, []).append(r)
    return groups


def summarise(rows: list[Scored]) -> dict[str, dict]:
    """Mean turn recall at each k over all queries ("all") and per category (alphabetical)."""
    return _means(_by_category([(r.category, r.turns) for r in rows]), [f"recall@{k}" for k in KS])


def summarise_sessions(rows: list[Scored]) -> dict[str, dict]:
    """Mean session recall (any@k, then all@k) over the queries that name their sessions, as
    summarise; empty when none does."""
    named = [(r.category, r.sessions) for r in rows if r.sessions is not None]
    if not named:
        return {}
    return _means(_by_category(named), [f"{w}@{k}" for w in ("any", "all") for k in SESSION_KS])


def miss_lines(dataset: Dataset, query: dict, ranked: list[str]) -> list[str]:
    """A query whose expected turns are not all in hybrid's top 10: the query, each missed turn's
    text and rank, and the turn ranked first instead."""
    missed = [e for e in query["expected"] if e not in ranked[:10]]
    if not missed:
        return []
    lines = [f"miss [{query.get('category') or 'none'}] {query['query']}  (answer: {query.get('answer')})"]
    for turn in missed:
        where = f"rank {ranked.index(turn) + 1}" if turn in ranked else f"not in top {max(KS)}"
        lines.append(f"    expected {turn} ({where}): {shorten(dataset.turns[turn])}")
    if ranked:
        lines.append(f"    first    {ranked[0]}: {shorten(dataset.turns.get(ranked[0], ''))}")
    return lines


# How deep --where-missed reads each list for a turn's rank.
WHERE_DEPTH = 2000
# --where-missed counts the turns whose leaf topic is among this many nearest the question.
TOPIC_TOP = 3


def missed_evidence(user, dataset: Dataset, query: dict) -> list[dict]:
    """Where each expected turn of `query` that hybrid search leaves out of its first 10 is: its
    rank in the fused list (of the candidates search() fetches for 25 results), in the vector
    and keyword lists (read WHERE_DEPTH deep) and whether each list fetches it; whether its
    speaker is the one the question names; the question's words (lexemes, the named person's
    left out) its text shares, and those only its context (the end of the turn it replies to)
    holds; whether a turn two places away in its session is in the first 10; the place of its
    leaf topic among the owner's leaves by the question's vector (topic_ranks)."""
    turn_of = dict(Message.objects.owned_by(user).logical().values_list("pk", "external_id"))
    text = query["query"]

    def ranked(ids) -> list[str]:
        return [i for i in dict.fromkeys(turn_of.get(i) for i in ids) if i is not None]

    first = ranked(h.message_id for h in search(user, text, limit=max(KS), as_of=query["as_of"]).hits)[:10]
    missed = [e for e in query["expected"] if e not in first]
    if not missed:
        return []
    fused = ranked(h.message_id for h in search(
        user, text, limit=200, candidates=CANDIDATES, as_of=query["as_of"]).hits)
    topics, leaves = topic_ranks(user, text)
    lists = {
        name: [row[2] for row in fetch(user, text, SearchFilters(), WHERE_DEPTH, SearchResults(text))]
        for name, fetch in (("vector", _vector_candidates), ("keyword", _keyword_candidates))
    }
    named = {s for s in set(dataset.speakers.values()) if re.search(rf"\b{re.escape(s)}\b", text, re.I)}
    asked = set(query_lexemes(text)) - _lexemes(" ".join(named))
    order = list(dataset.turns)
    rows = []
    for turn in missed:
        passage = (Passage.objects.owned_by(user).filter(logical_message__external_id=turn, kind="message")
                   .order_by("index").values_list("text", "context").first()) or ("", "")
        in_text, in_context = asked & _lexemes(passage[0]), asked & _lexemes(passage[1])
        at = order.index(turn)
        near = [order[j] for j in (at - 2, at - 1, at + 1, at + 2) if 0 <= j < len(order)]
        session = _session(turn)
        row = {"category": query.get("category") or "none", "query": text, "turn": turn,
               "fused": fused.index(turn) + 1 if turn in fused else None, "text": dataset.turns[turn],
               "shares": sorted(in_text), "context_shares": sorted(in_context - in_text),
               "near": any(n in first and _session(n) == session for n in near),
               "by_named": ("yes" if dataset.speakers.get(turn) in named else "no") if named else "-",
               "topic": topics.get(turn), "topics": leaves}
        for name, ids in lists.items():
            order_of = ranked(ids)
            row[name] = order_of.index(turn) + 1 if turn in order_of else None
            row[f"{name}_pool"] = turn in ranked(ids[:CANDIDATES])
        rows.append(row)
    return rows


def topic_ranks(user, text: str) -> tuple[dict[str, int], int]:
    """({external id: the best place of its leaf topics among the owner's leaves, nearest the
    question's vector first}, the number of leaves): whether memory's topic tree holds a turn
    with others about what is asked. A turn in no leaf yet (topics lag behind) has no place."""
    vector = vector_literal(get_embedder().embed_query(text))
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH leaves AS (SELECT t.id, rank() OVER (ORDER BY t.centroid <=> %s::vector) AS place "
            "FROM memory_topic t WHERE t.owner_id = %s AND t.centroid IS NOT NULL AND NOT EXISTS "
            "(SELECT 1 FROM memory_topic c WHERE c.parent_id = t.id)) "
            "SELECT m.external_id, min(l.place), (SELECT count(*) FROM leaves) FROM leaves l "
            "JOIN memory_topicmembership tm ON tm.topic_id = l.id "
            "JOIN memory_message m ON m.id = tm.message_id "
            "WHERE tm.owner_id = %s AND m.external_id IS NOT NULL GROUP BY m.external_id",
            [vector, user.pk, user.pk],
        )
        rows = cursor.fetchall()
    return {row[0]: row[1] for row in rows}, rows[0][2] if rows else 0


def _lexemes(text: str) -> set[str]:
    """Every English lexeme of `text` (Postgres' stemming and stop words, as the keyword list's)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [text or ""])
        return set(cursor.fetchone()[0])


def _session(turn: str) -> str:
    """A turn's session, from its id where the id names one (LoCoMo's "conv-26:D3:7" is D3)."""
    return turn.rsplit(":", 1)[0] if turn.count(":") >= 2 else ""


def shorten(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
