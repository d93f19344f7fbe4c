"""manage.py eval_summaries on a tiny dataset written for these tests (tests/bench/data/summaries-mini:
two sessions of two people, with a written summary each), run as a person runs it: in a scratch
database of its own, next to the test database."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from bench.management.commands.eval_summaries import (
    junk_label,
    lcs_length,
    lead,
    load,
    rouge_1,
    rouge_l,
    shared_labels,
    tokens,
)

DATA = Path(__file__).parent / "data" / "summaries-mini"
SCRATCH = f"test_eval_summaries_{os.getpid()}"


@pytest.fixture(scope="module")
def run(django_db_setup, django_db_blocker):
    """The command's JSON, its table and the databases there are after it."""
    out, err = io.StringIO(), io.StringIO()
    with django_db_blocker.unblock():
        call_command("eval_summaries", str(DATA), "--scratch-db", SCRATCH, "--json", "--show", "1",
                     stdout=out, stderr=err)
        with connection.cursor() as cursor:
            cursor.execute("SELECT datname FROM pg_database")
            databases = {row[0] for row in cursor.fetchall()}
    return {"results": json.loads(out.getvalue()), "table": err.getvalue(), "databases": databases}


def test_it_scores_every_session_against_its_written_summary_beside_the_lead(run):
    results = run["results"]
    assert results["conversations"] == ["pets"] and results["sessions"] == 2
    for method in ("topics", "lead"):
        assert set(results["rouge"][method]) == {"rouge1_recall", "rouge1_f1", "rougeL_recall", "rougeL_f1"}
        assert all(0 < v <= 1 for v in results["rouge"][method].values()), method
    # Dated summaries of what was said score above the session's opening lines.
    assert results["rouge"]["topics"]["rouge1_f1"] > results["rouge"]["lead"]["rouge1_f1"]
    assert results["labels"] >= 2 and results["junk_labels"] == 0 and results["junk_share"] == 0
    assert results["keywords"] >= 2 and results["junk_keywords"] == 0 and results["shared_labels"] == 0


def test_it_prints_a_table_and_a_sample_and_drops_its_scratch_database(run):
    table = run["table"]
    assert "R-1 recall" in table and "R-L F1" in table
    assert any(line.startswith("topics ") for line in table.splitlines())
    assert any(line.startswith("lead ") for line in table.splitlines())
    assert "labels with an id, a number-letter code or a system word: 0 of" in table
    assert "keywords with an id, a number-letter code or a system word: 0 of" in table
    assert "labels a sibling topic also has: 0 of" in table
    assert "written: On 2 March 2024 Ana told Ben" in table and "topics:  2 March 2024. " in table
    assert SCRATCH not in run["databases"]


def test_rouge_counts_shared_words_and_the_longest_common_subsequence():
    reference = tokens("Ana adopted a greyhound called Pepper")
    recall, precision = 2 / 6, 2 / 3  # "pepper" and "greyhound" of 6 and of 3 words
    f1 = 2 * recall * precision / (recall + precision)
    assert rouge_1(tokens("Pepper the greyhound"), reference) == (recall, f1)
    assert lcs_length(tokens("a b c d"), tokens("a x c d")) == 3
    recall, f1 = rouge_l(tokens("Ana a greyhound"), reference)
    assert recall == pytest.approx(3 / 6) and f1 == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert rouge_1([], reference) == (0.0, 0.0)


def test_the_lead_is_the_sessions_first_sentences_cut_to_as_many_words():
    assert lead(["Hi Ben! Guess what.", "No way, a greyhound!"], 5) == "Hi Ben! Guess what. No"


def test_a_label_with_an_id_a_code_or_a_system_word_is_junk():
    assert junk_label("Ticket m88dk6dhp09gb6vfxy0g4kha")
    assert junk_label("Matches it yet offline")
    assert junk_label("Query Mi perro se llama")
    assert not junk_label("Greyhound called Pepper")


def test_siblings_sharing_a_labels_words_are_counted_and_cousins_are_not():
    tree = [(None, "Garden roses", []), (None, "Roses garden", []), (None, "Kayak trip", []),
            ("a", "Kayak trip", []), ("a", "Garden roses, June 2023", [])]
    assert shared_labels(tree) == 2


def test_a_sessions_file_naming_an_unknown_turn_is_refused(tmp_path):
    (tmp_path / "x.history.jsonl").write_text((DATA / "pets.history.jsonl").read_text())
    (tmp_path / "x.sessions.jsonl").write_text('{"session": 1, "first_turn": "nope", "summary": "s"}\n')
    with pytest.raises(CommandError, match="x.sessions.jsonl:1"):
        load([str(tmp_path)])
