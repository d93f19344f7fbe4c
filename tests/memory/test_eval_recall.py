"""manage.py eval_recall on a tiny dataset written for these tests (tests/memory/data/eval-mini),
run as a person runs it: in a scratch database of its own, next to the test database."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from bench.management.commands.eval_recall import (
    ABLATIONS,
    TUNABLES,
    Dataset,
    Scored,
    ablation_changes,
    load_datasets,
    miss_lines,
    question_changes,
    question_lines,
    session_recall_at,
    tunables_set,
)
from memory.finding import fusion
from memory.finding.search import search
from tests.memory.conftest import add_turns

DATA = Path(__file__).parent / "data" / "eval-mini"
# A person's chats with an assistant, a session per conversation, asked at a question_date.
SESSIONS = Path(__file__).parent / "data" / "eval-sessions"
SCRATCH = f"test_eval_recall_{os.getpid()}"
METHODS = ["hybrid", "bm25", "keyword", "dense"]
CATEGORIES = ["all", "adversarial", "multi-hop", "single-hop", "temporal"]


def databases() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database")
        return {row[0] for row in cursor.fetchall()}


@pytest.fixture(scope="module")
def eval_recall(django_db_setup, django_db_blocker):
    """Runs the command (outside any test transaction: it makes databases); returns stdout, stderr."""

    def run(*args: str, folder: Path = DATA) -> tuple[str, str]:
        out, err = io.StringIO(), io.StringIO()
        with django_db_blocker.unblock():
            call_command("eval_recall", str(folder), "--scratch-db", SCRATCH, *args, stdout=out, stderr=err)
        return out.getvalue(), err.getvalue()

    yield run
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{SCRATCH}"')  # a --keep run's


@pytest.fixture(scope="module")
def json_run(eval_recall, django_db_blocker):
    with django_db_blocker.unblock():
        test_db = connection.settings_dict["NAME"]
    out, err = eval_recall("--json")
    with django_db_blocker.unblock():
        return {"results": json.loads(out), "table": err, "test_db": test_db,
                "databases": databases(), "name_after": connection.settings_dict["NAME"]}


def test_it_prints_every_method_and_category(json_run):
    results, table = json_run["results"], json_run["table"]
    assert results["conversations"] == ["garden", "islands"]
    assert (results["turns"], results["queries"]) == (20, 7)
    for method in METHODS:
        assert list(results["recall"][method]) == CATEGORIES
        assert set(results["recall"][method]["all"]) == {"queries", "recall@1", "recall@5", "recall@10",
                                                         "recall@25"}
    rows = [line.split() for line in table.splitlines() if line.endswith("%")]
    for method in METHODS:
        assert sum(1 for row in rows if method in row[:3]) == len(CATEGORIES), method
    for category in CATEGORIES:
        assert any(row[:1] == [category] for row in rows), category
    assert "scikit-learn's English stop words, Snowball stemming" in table


def test_bm25_recall_is_what_the_texts_give_by_hand(json_run):
    # Only turns sharing a (stemmed, non-stop) word with the query count as found:
    # islands  "Who owns the bakery on Skiathos?"        turn 3 alone has bakery/Skiathos: 1
    #          "How do they get to Skopelos, and what does Tomas take for the rough sea?"
    #                                                   turn 5 (Skopelos, take), not 6: 1/2
    #          "When is Dimitra's wedding?"              turn 7 alone: 1
    # garden   "How heavy was the pumpkin last year?"    turn 5 alone: 1
    #          "What fertiliser does she use?"           no turn shares a word: 0
    #          "When was the quince tree planted?"       turn 1 alone: 1
    #          "What did Noor's brother win at the village show?"  turn 4 (village show)
    #                                                   first, then 3 (brother): 1/2 at 1, 1 at 5
    bm25 = json_run["results"]["recall"]["bm25"]
    expected = {
        "all": [5 / 7, 5.5 / 7, 5.5 / 7, 5.5 / 7],
        "single-hop": [2 / 3] * 4,
        "multi-hop": [0.5] * 4,
        "temporal": [1.0] * 4,
        "adversarial": [0.5, 1.0, 1.0, 1.0],
    }
    for category, values in expected.items():
        got = [bm25[category][f"recall@{k}"] for k in (1, 5, 10, 25)]
        assert got == pytest.approx(values, abs=1e-4), category


def test_a_history_shorter_than_25_turns_is_found_whole_by_vector_and_hybrid_search(json_run):
    # Vector search ranks every passage of a 10-turn memory, so every expected turn is in the
    # top 25: a wrong mapping from search hits to the dataset's turns would show here.
    recall = json_run["results"]["recall"]
    for method in ("hybrid", "dense"):
        assert recall[method]["all"]["recall@25"] == 1.0, method
    assert recall["keyword"]["temporal"]["recall@5"] == 1.0, "exact words of a turn find it"


def test_it_leaves_no_database_behind_and_the_connection_where_it_was(json_run):
    assert SCRATCH not in json_run["databases"]
    assert json_run["name_after"] == json_run["test_db"]


def test_keep_reuses_the_imported_histories(eval_recall, django_db_blocker):
    out, err = eval_recall("--keep", "--limit-queries", "1")
    assert "7 queries" not in out and "2 queries over 20 turns" in out
    with django_db_blocker.unblock():
        assert SCRATCH in databases()
    again, err = eval_recall("--keep", "--limit-queries", "1")
    # Reused as they are: no import (which would rebuild their topics) and no embedding.
    assert err.count("who holds the history's 10 turns") == 2 and "importing" not in err
    assert again.split("import and embedding")[0] == out.split("import and embedding")[0]


def test_a_miss_shows_the_query_and_the_expected_turns_text():
    dataset = Dataset("d", DATA / "d.history.jsonl", {"d:1": "the ferry leaves at nine", "d:2": "hello"}, [])
    query = {"query": "When does the boat go?", "expected": ["d:1"], "category": "temporal", "answer": "9"}
    assert miss_lines(dataset, query, ["d:1"]) == []
    lines = miss_lines(dataset, query, ["d:2"])
    assert "When does the boat go?" in lines[0] and "[temporal]" in lines[0]
    assert "d:1 (not in top 25): the ferry leaves at nine" in lines[1]
    assert "d:2: hello" in lines[2]


def test_every_constant_set_can_try_is_held_by_the_module_it_sets():
    """--set assigns the constant on its module: one that moved to another module would be set
    where nothing reads it, and the run would quietly measure the default."""
    for name, (module, _kind) in TUNABLES.items():
        assert hasattr(module, name), name


def test_every_rule_ablate_turns_off_is_a_constant_set_can_try():
    for label, changes in ABLATIONS.items():
        assert changes and set(changes) <= set(TUNABLES), label


def test_constants_set_for_a_block_are_put_back_after_it_even_on_an_error():
    before = (fusion.PERIOD_BOOST, fusion.LINK_SEEDS)
    with pytest.raises(RuntimeError), tunables_set({"PERIOD_BOOST": "0", "LINK_SEEDS": "7"}):
        assert (fusion.PERIOD_BOOST, fusion.LINK_SEEDS) == (0.0, 7)
        raise RuntimeError("a query failed")
    assert before == (fusion.PERIOD_BOOST, fusion.LINK_SEEDS)


def test_ablate_runs_hybrid_search_once_with_each_rule_off(eval_recall, monkeypatch):
    """Every query is searched with all rules on, then once more with each rule off alone; the
    constants are the module's own again after the run."""
    from bench.management.commands import eval_recall as command

    names = sorted({name for changes in ABLATIONS.values() for name in changes})
    before = {name: getattr(TUNABLES[name][0], name) for name in names}
    seen: list[frozenset[str]] = []  # per search, the constants that differed from their own

    def recording(*args, **kwargs):
        seen.append(frozenset(n for n in names if getattr(TUNABLES[n][0], n) != before[n]))
        return search(*args, **kwargs)

    monkeypatch.setattr(command, "search", recording)
    out, table = eval_recall("--json", "--keep", "--ablate")
    assert {name: getattr(TUNABLES[name][0], name) for name in names} == before
    queries = json.loads(out)["queries"]
    assert seen.count(frozenset()) == queries
    for label, changes in ABLATIONS.items():
        assert seen.count(frozenset(changes)) == queries, label
    folder = json.loads(out)["datasets"]["eval-mini"]
    assert list(folder["ablation"]) == list(ABLATIONS)
    for label in ABLATIONS:
        assert list(folder["ablation"][label]) == CATEGORIES, label
    for k in (5, 10):
        assert f"hybrid recall@{k} with each ranking rule off" in table
    assert sum(1 for line in table.splitlines() if line.startswith(tuple(ABLATIONS))) == 2 * len(ABLATIONS)


def test_ablation_changes_count_per_history_the_questions_each_rule_gains_and_loses():
    """A rule gains a question whose recall is higher with it on than off, and loses one whose
    recall is lower: counted per history, so a gain in one history and a loss in another show."""

    def row(history, query, r5, r10):
        return Scored("dev", "temporal", (0.0, r5, r10, r10), None, history, query)

    on = [row("a", "q1", 1.0, 1.0), row("a", "q2", 0.0, 0.5), row("b", "q1", 0.0, 0.0)]
    off = {"says when": [row("a", "q1", 0.0, 1.0), row("a", "q2", 0.0, 0.5), row("b", "q1", 1.0, 1.0)]}
    changes = ablation_changes(off, question_lines(on))["says when"]
    unchanged_at_1 = {"rose@1": 0, "fell@1": 0}
    assert changes["a"]["all"] == {"queries": 2, **unchanged_at_1, "rose@5": 1, "fell@5": 0, "rose@10": 0,
                                   "fell@10": 0}
    assert changes["b"]["all"] == {"queries": 1, **unchanged_at_1, "rose@5": 0, "fell@5": 1, "rose@10": 0,
                                   "fell@10": 1}
    assert changes["all histories"]["temporal"]["rose@5"] == 1


def test_ablate_with_per_history_prints_each_rules_gains_and_losses_per_history(eval_recall):
    out, err = eval_recall("--json", "--keep", "--ablate", "--per-history")
    rules = json.loads(out)["rules_by_history"]
    assert list(rules) == list(ABLATIONS)
    for label in ABLATIONS:
        assert list(rules[label]) == ["all histories", "garden", "islands"], label
        assert rules[label]["all histories"]["all"]["queries"] == 7
    table = err[err.index("what each ranking rule does per history"):]
    assert sum(1 for line in table.splitlines() if line.startswith(tuple(ABLATIONS))) == 3 * len(ABLATIONS)


def test_limit_queries_takes_the_first_queries_of_each_conversation():
    datasets = load_datasets([str(DATA)], limit_queries=2)
    assert [(d.id, len(d.queries), len(d.turns)) for d in datasets] == [("garden", 2, 10), ("islands", 2, 10)]


# What the command measured before it ran on real conversations, kept as a check of meaning
# (not words): a fact asked about weeks later in other words, among near misses on the same
# subjects said in other sessions.
FACTS = [
    ("I finally adopted a beagle puppy last weekend and we named him Biscuit.", "What is my dog called?"),
    ("I'm allergic to cashews, so skip anything with cashew cream.", "Which nut should I avoid?"),
    ("I parked the car on level P4, spot 117, at the airport.", "Where did I leave the car at the airport?"),
    ("The book club picked The Remains of the Day for next month.", "Which novel is the book club reading?"),
    ("I keep the spare house key with our neighbour Tomasz.", "Who has a copy of our house key?"),
    ("My passport expires on 2025-02-11, I need to renew it before the trip.",
     "When does my passport run out?"),
]
NEAR_MISSES = [
    "My neighbour's cat keeps sneaking into our garden and chasing the birds.",
    "Can you suggest a dessert without nuts for the school bake sale?",
    "The train to the airport was delayed by forty minutes.",
    "I just finished a thriller on the plane, couldn't put it down.",
    "I lent my ladder to someone on our street and forgot who.",
    "Renewing my driving licence took three visits to the office.",
]


@pytest.mark.django_db
def test_hybrid_search_finds_a_fact_asked_in_other_words_among_near_misses(owner, conversation):
    texts = [text for pair in zip(NEAR_MISSES, [f for f, _ in FACTS], strict=True) for text in pair]
    # Every line is the person's own (add_turns alternates roles: the facts would be the
    # assistant's, which a question about "my" dog ranks below the person's words).
    start = timezone.now() - dt.timedelta(days=1)
    stored = [
        message
        for i, text in enumerate(texts)
        for message in add_turns(owner, conversation, [text], start=start + dt.timedelta(minutes=i))
    ]
    id_of = {m.content: m.pk for m in stored}
    for fact, question in FACTS:
        top = [hit.message_id for hit in search(owner, question, limit=3).hits]
        assert id_of[fact] in top, question


def test_session_recall_is_whether_any_and_all_expected_sessions_are_among_the_first_turns():
    ranked_sessions = ["b", "b", "x", "y", "z", "a", "c"]
    # any@5, any@10, all@5, all@10
    assert session_recall_at(ranked_sessions, ["a", "b"]) == (1.0, 1.0, 0.0, 1.0)
    assert session_recall_at(ranked_sessions, ["q"]) == (0.0, 0.0, 0.0, 0.0)


def test_a_question_date_that_is_no_date_is_refused(tmp_path):
    (tmp_path / "h.history.jsonl").write_text(
        json.dumps({"conversation": "s", "role": "user", "content": "hi", "external_id": "h:1"}) + "\n"
    )
    (tmp_path / "h.queries.jsonl").write_text(
        json.dumps({"query": "hi?", "expected": ["h:1"], "question_date": "last Tuesday"}) + "\n"
    )
    with pytest.raises(CommandError, match="question_date 'last Tuesday' is not an ISO 8601 date"):
        load_datasets([str(tmp_path)])


def test_a_question_without_a_date_is_asked_just_after_the_historys_last_turn(tmp_path):
    """LoCoMo's questions have no question_date: "last year" is the year before the chats
    ended, not the year before the run."""
    turns = [("h:1", "2023-05-08T13:56:00Z"), ("h:2", "2023-10-22T09:30:00Z"),
             ("h:3", "2023-06-01T10:00:00Z")]
    (tmp_path / "h.history.jsonl").write_text("".join(
        json.dumps({"conversation": "s", "role": "user", "content": "hi", "timestamp": when,
                    "external_id": turn}) + "\n"
        for turn, when in turns
    ))
    (tmp_path / "h.queries.jsonl").write_text(
        json.dumps({"query": "What did I do last year?", "expected": ["h:1"]}) + "\n"
        + json.dumps({"query": "hi?", "expected": ["h:2"], "question_date": "2024-01-05T08:00:00Z"}) + "\n"
    )
    [dataset] = load_datasets([str(tmp_path)])
    assert [q["as_of"].isoformat() for q in dataset.queries] == [
        "2023-10-22T09:30:00+00:00", "2024-01-05T08:00:00+00:00"
    ]


def test_questions_are_asked_at_their_date_and_session_recall_is_printed_per_kind(eval_recall):
    out, err = eval_recall("--json", folder=SESSIONS)
    results = json.loads(out)["datasets"]["eval-sessions"]
    # "last Saturday" asked on Tuesday 23 May 2023 is the 20th: the paella, not the curry said
    # in the same words three weeks before.
    assert results["recall"]["hybrid"]["temporal-reasoning"]["recall@1"] == 1.0
    sessions = results["session_recall"]
    assert set(sessions) == {"hybrid", "bm25", "keyword", "dense"}
    assert sessions["hybrid"]["multi-session"] == {
        "queries": 1, "any@5": 1.0, "any@10": 1.0, "all@5": 1.0, "all@10": 1.0
    }
    assert "eval-sessions: session recall" in err and "temporal-reasoning" in err


def test_per_history_prints_each_historys_recall_per_kind_and_they_add_up_to_the_whole(eval_recall):
    out, err = eval_recall("--json", "--per-history")
    results = json.loads(out)
    histories = results["histories"]
    assert list(histories) == ["garden", "islands"]
    assert [histories[h]["all"]["queries"] for h in histories] == [4, 3]
    # Each history's queries weighed by their number give the whole run's figure (each is
    # rounded to four places).
    for k in (1, 5, 10, 25):
        key = f"recall@{k}"
        whole = sum(histories[h]["all"][key] * histories[h]["all"]["queries"] for h in histories) / 7
        assert whole == pytest.approx(results["recall"]["hybrid"]["all"][key], abs=2e-4), key
    table = err[err.index("turn recall@k per history"):]
    rows = [line.split() for line in table.splitlines() if line.endswith("%")]
    assert [row[:3] for row in rows if row[1] == "all"] == [["garden", "all", "4"], ["islands", "all", "3"]]


def test_questions_are_written_and_a_later_run_counts_those_whose_recall_rose_or_fell(eval_recall, tmp_path):
    # An earlier run's file, as --questions writes it: the first question of "garden" was found
    # whole, every other question not at all; and one line whose words are no longer asked.
    queries = {d.id: d.queries for d in load_datasets([str(DATA)])}
    before = [
        {"history": history, "number": n, "category": q["category"], "query": q["query"],
         **{f"recall@{k}": float(history == "garden" and n == 1) for k in (1, 5, 10, 25)}}
        for history, qs in queries.items() for n, q in enumerate(qs, 1)
    ]
    before.append({**before[-1], "number": 99, "query": "A question no longer asked?"})
    earlier, now = tmp_path / "before.jsonl", tmp_path / "now.jsonl"
    earlier.write_text("".join(json.dumps(line) + "\n" for line in before))

    out, err = eval_recall("--json", "--questions", str(now), "--against", str(earlier))

    lines = [json.loads(line) for line in now.read_text().splitlines()]
    assert [(line["history"], line["number"], line["query"]) for line in lines] == [
        (h, n, q["query"]) for h, qs in queries.items() for n, q in enumerate(qs, 1)
    ]
    changes = json.loads(out)["against"]
    for k in (5, 10):
        risen = [line for line in lines[1:] if line[f"recall@{k}"] > 0]
        assert risen, "the tiny dataset's questions are found"
        assert changes["all histories"]["all"][f"rose@{k}"] == len(risen)
        assert changes["all histories"]["all"][f"fell@{k}"] == int(lines[0][f"recall@{k}"] < 1)
    assert changes["all histories"]["all"]["queries"] == 7  # not the question no longer asked
    assert changes["islands"]["multi-hop"]["queries"] == 1
    assert "questions whose recall rose (+) or fell (-)" in err


def test_question_changes_count_each_kind_and_history_apart():
    def line(history, number, category, r5, r10):
        return {"history": history, "number": number, "category": category, "query": f"q{number}",
                "recall@1": 0.0, "recall@5": r5, "recall@10": r10}

    earlier = [line("a", 1, "multi-hop", 0.0, 0.5), line("a", 2, "temporal", 1.0, 1.0),
               line("b", 1, "multi-hop", 0.5, 0.5)]
    before = {(x["history"], x["number"]): x for x in earlier}
    after = [line("a", 1, "multi-hop", 0.5, 0.5), line("a", 2, "temporal", 0.0, 1.0),
             line("b", 1, "multi-hop", 0.5, 1.0)]
    # A third written to four places is the same third.
    before[("b", 1)]["recall@5"] = 1 / 3
    after[2]["recall@5"] = 0.3333
    changes = question_changes(before, after)
    assert changes["all histories"]["multi-hop"] == {
        "queries": 2, "rose@1": 0, "fell@1": 0, "rose@5": 1, "fell@5": 0, "rose@10": 1, "fell@10": 0
    }
    assert changes["a"]["temporal"] == {
        "queries": 1, "rose@1": 0, "fell@1": 0, "rose@5": 0, "fell@5": 1, "rose@10": 0, "fell@10": 0
    }
    assert list(changes["a"]) == ["all", "multi-hop", "temporal"]


def test_a_paraphrase_is_compared_with_its_original_words_wherever_it_was_asked():
    """A paraphrase set holds some of a history's questions in other words, each with its
    "original": --against a run of the originals joins them by those words, not by place."""
    def line(number, query, r10, **extra):
        return {"history": "a", "number": number, "category": "temporal", "query": query,
                "recall@1": 0.0, "recall@5": 0.0, "recall@10": r10, **extra}

    originals = [line(1, "When did Jon go to Paris?", 1.0), line(2, "What does Jon teach?", 1.0),
                 line(3, "When did Gina get her tattoo?", 1.0)]
    before = {(x["history"], x["number"]): x for x in originals}
    paraphrases = [line(1, "Gina's tattoo, when was that?", 0.0, original="When did Gina get her tattoo?"),
                   line(2, "what date was Jon in Paris?", 1.0, original="When did Jon go to Paris?"),
                   line(3, "who is Jon?", 0.0, original="Who is Jon?")]  # no such original: left out
    # The --questions file keeps each paraphrase's original words for that join.
    scored = Scored("p", "temporal", (0.0, 0.0, 1.0, 1.0), None, "a", "what date was Jon in Paris?",
                    "When did Jon go to Paris?")
    assert question_lines([scored])[0]["original"] == "When did Jon go to Paris?"
    changes = question_changes(before, paraphrases)
    assert changes["all histories"]["temporal"] == {
        "queries": 2, "rose@1": 0, "fell@1": 0, "rose@5": 0, "fell@5": 0, "rose@10": 0, "fell@10": 1
    }


def test_against_a_file_that_is_not_a_questions_file_is_refused_before_any_import(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    for path in (bad, tmp_path / "missing.jsonl"):
        with pytest.raises(CommandError, match="--against"):
            call_command("eval_recall", str(DATA), "--against", str(path),
                         stdout=io.StringIO(), stderr=io.StringIO())


def test_where_missed_places_each_expected_turn_left_out_of_the_first_ten(eval_recall, tmp_path):
    # The expected turn, Noor's, in a session of its own, shares no word and little meaning with
    # the question; thirteen turns of the session before repeat its words.
    turns = [("Bea", f"Noor and I talked about the sports we play, week {n}.", "D1") for n in range(12)]
    turns += [("Noor", "Sports we play: we talked about them all week.", "D1"),
              ("Noor", "The cat slept on the warm windowsill all afternoon.", "D2")]
    with (tmp_path / "pitch.history.jsonl").open("w") as history:
        for n, (speaker, text, session) in enumerate(turns):
            day = 11 if session == "D1" else 12
            turn = {"conversation": "pitch", "role": "user" if speaker == "Noor" else "assistant",
                    "speaker": speaker, "content": text, "timestamp": f"2024-05-{day}T08:{n:02d}:00Z",
                    "external_id": f"pitch:{session}:{n + 1}"}
            history.write(json.dumps(turn) + "\n")
    (tmp_path / "pitch.queries.jsonl").write_text(json.dumps(
        {"query": "What sports does Noor play?", "expected": ["pitch:D2:14"], "category": "multi-hop"}
    ) + "\n")
    out, _ = eval_recall("--where-missed", "multi-hop", folder=tmp_path)
    line = next(line for line in out.splitlines() if "pitch:D2:14 " in line)
    fused = int(line.split("fused ")[1].split()[0].rstrip("*"))
    assert fused > 10
    # Both lists fetch it (the name is in its context, "Noor:"); it is the named person's; its
    # own words share none of the question's once the name is left out, its context (the end of
    # the turn before) two.
    assert "vector " in line and "keyword " in line and line.count("*") == 2
    assert "by named yes" in line and "shares - (context: play,sport)" in line
    # Its leaf topic (its own day) comes after the leaf of the day before, which is about sports.
    assert " topic 2/2 " in line
    counts = next(line.split() for line in out.splitlines() if line.startswith("multi-hop "))
    # missed, not fetched, fetched sharing a word, fetched sharing none, by the named person, a
    # turn two places away in the first 10 (none: the turns before it are another session's), in
    # one of the 3 leaf topics nearest the question (of 2)
    assert counts[1:] == ["1", "0", "1", "0", "1", "0", "1"]
