"""The FACTS section of a turn when memory holds many facts: its rows are read while the turn's
search runs (and the best matches' neighbours while the sections before them are written), a
subject's facts from the top of their index, the subjects one index descent each, and a subject
is named by whole words as a word-boundary regex would say."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from memory.context.index_builder import prepare_context
from memory.knowledge import facts
from memory.models import Fact
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns
from tests.memory.test_facts import SCRIPT, tell

# Letters, digits, what _WORD keeps inside a word (' and -), spaces and a few non-ASCII letters.
_TEXT = st.text(alphabet="anbe'- 1_éß", max_size=24)


@hypothesis_settings(max_examples=400, deadline=None)
@given(text=_TEXT, key=_TEXT.filter(bool))
def test_a_subject_is_named_where_a_word_boundary_regex_finds_it(text, key):
    expected = re.search(rf"\b{re.escape(key)}\b", text) is not None
    assert facts._names(text, key) is expected


def test_a_name_inside_a_longer_word_names_nobody_but_a_possessive_does():
    assert facts._names("i met anabel and ana's sister", "ana")
    assert not facts._names("i met anabel today", "ana")
    assert facts._names("jean-luc called", "jean-luc")
    assert facts._names("jean-luc called", "luc")
    assert not facts._names("marco polo", "marco p")


@pytest.mark.django_db
def test_the_subjects_are_the_current_facts_distinct_subjects_within_the_bound(owner, stranger, conversation):
    message = tell(owner, conversation, SCRIPT[:1])[0]
    when = message.timestamp

    def fact(subject: str, **extra) -> Fact:
        return Fact.objects.create(
            owner=extra.pop("who", owner), message=message, subject=subject, subject_key=subject.lower(),
            attribute="about", statement=f"{subject} said so", said_at=when, valid_from=when, **extra,
        )

    for subject in ("the user", "the user", "Ana Costa", "Bruno", "Bruno"):
        fact(subject)
    replaced = fact("Old Name")
    replaced.superseded_by = fact("the user")
    replaced.save()
    fact("Stranger's friend", who=stranger)
    assert facts.subject_keys(owner) == ["ana costa", "bruno", "the user"]
    assert facts.subject_keys(owner, limit=2) == ["ana costa", "bruno"]
    assert facts.subjects_named(owner, "Did Bruno meet ana costa?") == ["the user", "bruno", "ana costa"]


@pytest.mark.django_db
def test_a_subjects_facts_are_read_from_the_top_of_their_index_without_sorting(owner, conversation):
    tell(owner, conversation)
    facts.extract_messages(owner)
    assert facts.ranked(owner, "the user").exists()
    sql, params = facts.ranked(owner, "the user")[:24].query.sql_with_params()
    with connection.cursor() as cursor:
        # A table this small is read whole by choice; forbidden that, the only way left to the
        # order without a sort is the index, which exists only if the order is the index's.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_incremental_sort = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "fact_current_rank" in plan
    assert "Sort" not in plan


@pytest.mark.django_db
def test_the_index_reads_a_subjects_facts_from_the_top_of_their_index_too(owner, conversation):
    tell(owner, conversation)
    facts.extract_messages(owner)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_incremental_sort = off")
        cursor.execute("EXPLAIN " + facts._LINES, [owner.pk, Fact.FORGOTTEN, "the user", 24])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "fact_current_rank" in plan
    assert "Sort" not in plan.split("SubPlan")[0]


@pytest.mark.django_db
def test_the_index_shows_the_facts_ranked_shows_with_what_each_replaced(owner, conversation):
    message = tell(owner, conversation, SCRIPT[:1])[0]
    when = message.timestamp

    def fact(value: str, **extra) -> Fact:
        return Fact.objects.create(
            owner=owner, message=message, subject="the user", subject_key="the user",
            attribute=extra.pop("attribute", "lives in"), value=value,
            statement=f"I live in {value}", said_at=when, valid_from=when, **extra,
        )

    lisbon = fact("Lisbon")
    porto = fact("Porto", pinned=True)
    lisbon.superseded_by = porto
    lisbon.save()
    corrected = fact("", attribute="partner", corrected="my partner is Alex")
    ana = fact("", attribute="partner")
    corrected.superseded_by = ana
    corrected.save()
    fact("", attribute="about")
    shown = facts.current_for_index(owner, "where do I live?")
    assert [f.pk for f in shown] == [f.pk for f in facts.ranked(owner, "the user")]
    lines = [facts.fact_line(f) for f in shown]
    # What fact_line says of a fact read by the ORM, with what it replaced prefetched.
    assert lines == [
        facts.fact_line(f) for f in facts.ranked(owner, "the user").prefetch_related("supersedes")
    ]
    assert "; was: Lisbon)" in lines[0]
    assert any("; was: my partner is Alex)" in line for line in lines)
    assert sum("; was:" in line for line in lines) == 2


@pytest.mark.django_db(transaction=True)
def test_a_turn_reads_its_facts_on_a_search_worker_and_its_matches_neighbours_in_one_query(
    owner, conversation, settings
):
    settings.INDEX_FULL_MAX = 1  # a memory the turn searches (not one listed whole)
    settings.INDEX_SNIPPET_MAX = 2
    settings.INDEX_CLUSTER_MAX = 3
    settings.SESSION_IDLE_MINUTES = 10**6  # the script's days apart are one session: hits have neighbours
    tell(owner, conversation)
    facts.extract_messages(owner)
    add_turns(owner, conversation, EVERYDAY_TEXTS)
    with CaptureQueriesContext(connection) as own:
        plan = prepare_context(owner, conversation, "where does Sam live now?")
    assert plan.strategy == "hierarchical" and "search" in plan.timings_ms
    section = plan.text.split("FACTS (", 1)[1]
    assert "Hamburg" in section.split("\n\n", 1)[0]
    assert "↳ same session:" in plan.text
    # The facts were read while the turn searched; the best hits' session neighbours, when the
    # matches are written, in one query on the turn's own connection.
    assert not [q["sql"] for q in own if "memory_fact" in q["sql"]]
    assert len([q["sql"] for q in own if "anchor_id" in q["sql"]]) == 1
