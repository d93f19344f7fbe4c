"""manage.py eval_facts on a tiny dataset written for these tests (tests/bench/data/facts-mini: ten
turns of two people, four annotated facts), run as a person runs it: in a scratch database of its
own, next to the test database."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from bench.management.commands.eval_facts import first_person_or_named, load, prf

DATA = Path(__file__).parent / "data" / "facts-mini"
SCRATCH = f"test_eval_facts_{os.getpid()}"


@pytest.fixture(scope="module")
def run(django_db_setup, django_db_blocker):
    """The command's JSON, its table and the databases there are after it."""
    out, err = io.StringIO(), io.StringIO()
    with django_db_blocker.unblock():
        call_command("eval_facts", str(DATA), "--scratch-db", SCRATCH, "--json", "--show", "2",
                     stdout=out, stderr=err)
        with connection.cursor() as cursor:
            cursor.execute("SELECT datname FROM pg_database")
            databases = {row[0] for row in cursor.fetchall()}
    return {"results": json.loads(out.getvalue()), "table": err.getvalue(), "databases": databases}


def test_it_scores_the_facts_source_turns_against_the_evidence_beside_the_baselines(run):
    results = run["results"]
    assert results["conversations"] == ["chat"] and results["turns"] == 10 and results["evidence_turns"] == 4
    every, facts = results["methods"]["every turn"], results["methods"]["facts"]
    assert (every["precision"], every["recall"]) == (0.4, 1.0)
    assert (every["facts"], every["per_100_turns"]) == (10, 100.0)
    # The four turns that tell something lasting are kept; greetings, questions and praise are not.
    assert (facts["precision"], facts["recall"], facts["f1"]) == (1.0, 1.0, 1.0)
    assert facts["per_100_turns"] == 40.0
    assert 0 < facts["median_cosine"] <= 1 and facts["median_cosine"] > every["median_cosine"]
    named = results["methods"]["first person or named"]
    assert named["recall"] == 1.0 and named["precision"] < facts["precision"]


def test_it_scores_each_speaker_on_the_turns_they_said(run):
    speakers = run["results"]["speakers"]
    assert set(speakers) == {"chat Ana", "chat Ben"}
    assert speakers["chat Ben"]["facts"] == 2 and speakers["chat Ben"]["per_100_turns"] == 40.0


def test_it_prints_a_table_and_a_sample_and_drops_its_scratch_database(run):
    table = run["table"]
    assert "precision" in table and "median best cosine" in table
    for method in ("facts ", "every turn ", "first person or named "):
        assert any(line.startswith(method) for line in table.splitlines()), method
    assert "chat:D1:2 Ben: Last month Ben started a new job at a bakery downtown" in table
    assert "best reference (" in table
    assert SCRATCH not in run["databases"]


def test_precision_recall_and_f1_of_kept_turns():
    assert prf({"a", "b"}, {"b", "c", "d", "e"}) == (0.5, 0.25, pytest.approx(1 / 3))
    assert prf(set(), {"a"}) == (0.0, 0.0, 0.0)


def test_the_baseline_keeps_turns_that_speak_of_their_speaker_or_name_someone():
    assert first_person_or_named("I moved to Lisbon", set())
    assert first_person_or_named("Ben, that sounds great", {"Ben"})
    assert not first_person_or_named("That sounds great!", {"Ben"})


def test_a_folder_without_facts_files_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="no <id>.history.jsonl"):
        load([str(tmp_path)])
    (tmp_path / "x.history.jsonl").write_text("{}\n")
    with pytest.raises(CommandError, match="with a <id>.facts.jsonl beside it"):
        load([str(tmp_path)])
