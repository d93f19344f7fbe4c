"""get_facts, the tool for the facts the index leaves out: current first, superseded on request
with their dates; wrong arguments and unknown subjects get clear errors."""

from __future__ import annotations

import pytest

from memory.context.tools import execute_tool
from memory.knowledge import facts
from tests.memory.test_facts import SCRIPT, tell

pytestmark = pytest.mark.django_db


@pytest.fixture
def life(owner, conversation):
    tell(owner, conversation)
    facts.extract_messages(owner)


def test_it_gives_the_current_facts_about_the_user(owner, life):
    out = execute_tool(owner, "get_facts", {"subject": "the user"})
    assert out.ok, out.error
    assert out.result["current_count"] == 5 and all(f["current"] for f in out.result["facts"])
    texts = {f["fact"] for f in out.result["facts"]}
    assert texts >= {"the user lives in Hamburg", "the user works at Globex"}


def test_with_superseded_it_adds_what_changed_with_the_dates(owner, life):
    out = execute_tool(owner, "get_facts", {"subject": "me", "include_superseded": True, "limit": 50})
    trip = [(f["fact"], f["valid_from"][:10], (f.get("valid_to") or "")[:10])
            for f in out.result["facts"] if f["attribute"] == "plan: trip"]
    assert trip == [("the user's trip is planned for July 2", "2024-04-01", ""),
                    ("the user's trip is planned for 10 June", "2024-03-15", "2024-04-01"),
                    ("the user's trip is planned for 3 May", "2024-02-05", "2024-03-15")]


def test_a_name_without_facts_of_its_own_gives_the_facts_that_name_it(owner, life):
    out = execute_tool(owner, "get_facts", {"subject": "Sam", "include_superseded": True})
    texts = {f["fact"] for f in out.result["facts"]}
    assert texts == {"the user's partner is Sam", "the user broke up with Sam"}


def test_it_pages_with_limit_and_offset(owner, life):
    first = execute_tool(owner, "get_facts", {"subject": "the user", "include_superseded": True, "limit": 2})
    assert len(first.result["facts"]) == 2 and first.result["next_offset"] == 2
    second = execute_tool(owner, "get_facts", {"subject": "the user", "include_superseded": True,
                                               "limit": 2, "offset": 2})
    assert {f["id"] for f in first.result["facts"]}.isdisjoint({f["id"] for f in second.result["facts"]})


@pytest.mark.parametrize(("arguments", "error"), [
    ({}, "missing required argument(s): subject"),
    ({"subject": 7}, "subject must be a string"),
    ({"subject": "Ana", "include_superseded": "yes"}, "include_superseded must be true or false"),
    ({"subject": "Ana", "when": "now"}, "unexpected argument(s) when"),
    ({"subject": "   "}, "subject must name someone"),
    ({"subject": "x" * 201}, "subject is too long"),
])
def test_wrong_arguments_get_a_clear_error(owner, life, arguments, error):
    out = execute_tool(owner, "get_facts", arguments)
    assert not out.ok and error in out.error


def test_an_unknown_subject_names_the_subjects_there_are(owner, life):
    out = execute_tool(owner, "get_facts", {"subject": "Zebulon"})
    assert not out.ok and out.error == "no facts about 'Zebulon'; subjects with facts: the user"


def test_a_stranger_gets_none_of_the_facts(stranger, owner, conversation):
    tell(owner, conversation, SCRIPT[:1])
    facts.extract_messages(owner)
    out = execute_tool(stranger, "get_facts", {"subject": "the user"})
    assert not out.ok and "memory holds no facts yet" in out.error


def test_its_pages_run_through_the_current_facts_then_what_they_replaced_each_once(owner, conversation, life):
    from memory.lifecycle import deleting
    from memory.models import Fact

    live = Fact.objects.owned_by(owner).live().about("the user")
    hidden = live.filter(superseded_by__isnull=True).first()
    deleting.delete_message(owner, hidden.message_id)  # its facts are hidden, not counted
    seen, offset, pages = [], 0, 0
    while offset is not None:
        out = execute_tool(owner, "get_facts", {"subject": "the user", "include_superseded": True,
                                                "limit": 2, "offset": offset})
        assert out.ok, out.error
        seen += out.result["facts"]
        offset, pages = out.result.get("next_offset"), pages + 1
    ids = [f["id"] for f in seen]
    assert len(ids) == len(set(ids)) == live.count() and hidden.pk not in ids and pages > 2
    currents = [f["current"] for f in seen]
    assert currents == sorted(currents, reverse=True)  # every current fact before the replaced ones
    current = live.filter(superseded_by__isnull=True).count()
    assert out.result["current_count"] == current == currents.count(True)
