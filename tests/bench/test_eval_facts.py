"""manage.py eval_facts on a tiny dataset written for these tests (tests/bench/data/facts-mini: ten
turns of two people, four annotated facts), run as a person runs it: in a scratch database of its
own, next to the test database; and the scoring of the list a person reads (bench.fact_lists)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from bench.management.commands.eval_facts import load, prf

DATA = Path(__file__).parent / "data" / "facts-mini"
SCRATCH = f"test_eval_facts_{os.getpid()}"


@pytest.fixture(scope="module")
def run(django_db_setup, django_db_blocker):
    """The command's JSON, its table and the databases there are after it."""
    out, err = io.StringIO(), io.StringIO()
    with django_db_blocker.unblock():
        call_command("eval_facts", str(DATA), "--suites", "locomo", "--scratch-db", SCRATCH, "--json",
                     "--show", "2", stdout=out, stderr=err)
        with connection.cursor() as cursor:
            cursor.execute("SELECT datname FROM pg_database")
            databases = {row[0] for row in cursor.fetchall()}
    return {"results": json.loads(out.getvalue()), "table": err.getvalue(), "databases": databases}


def test_it_scores_the_list_of_facts_against_the_annotated_ones_beside_the_baselines(run):
    results = run["results"]
    locomo = results["locomo"]
    assert results["threshold"] == 0.9 and len(results["load_average"]) == 3
    assert {"facts", "main's rules", "every turn"} <= set(locomo)
    every, facts = locomo["every turn"], locomo["facts"]
    assert (every["precision"], every["recall"]) == (0.4, 1.0)
    assert (every["facts"], every["per_100_turns"]) == (10, 100.0)
    # The four turns that tell something lasting give a fact each; greetings, questions and praise none.
    assert facts["facts"] == 4 and facts["per_100_turns"] == 40.0 and facts["precision"] == 1.0
    assert facts["list_precision"] > every["list_precision"] and facts["coverage"] > 0
    assert 0 < locomo["unrelated_p95"] < 1


def test_it_prints_a_table_and_a_sample_and_drops_its_scratch_database(run):
    table = run["table"]
    assert "list precision" in table and "coverage" in table and "facts/100 turns" in table
    for method in ("facts ", "main's rules ", "every turn "):
        assert any(line.startswith(method) for line in table.splitlines()), method
    assert "Ben: Ben works at a bakery downtown" in table and "best reference (" in table
    assert SCRATCH not in run["databases"]


def test_precision_recall_and_f1_of_kept_turns():
    assert prf({"a", "b"}, {"b", "c", "d", "e"}) == (0.5, 0.25, pytest.approx(1 / 3))
    assert prf(set(), {"a"}) == (0.0, 0.0, 0.0)


def test_a_folder_without_facts_files_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="no <id>.history.jsonl"):
        load([str(tmp_path)])
    (tmp_path / "x.history.jsonl").write_text("{}\n")
    with pytest.raises(CommandError, match="with a <id>.facts.jsonl beside it"):
        load([str(tmp_path)])


def test_an_answer_is_held_by_a_fact_with_all_its_words_that_shares_a_word_with_the_question():
    from bench.fact_lists import holds_answer

    question = "How many bikes do I currently own?"
    assert holds_answer("You now have four bikes: a road bike, a mountain bike and more.", "4", question)
    assert not holds_answer("You ran four miles.", "4", question)  # nothing of the question
    assert holds_answer("I got pre-approved for $400,000 from Wells Fargo.", "$400,000",
                        "What was the amount I was pre-approved for?")
