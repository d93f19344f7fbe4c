"""A new value for the same thing supersedes the current fact, not only for the fixed attributes
(issue 34): the engineers one leads, a highest score, a routine's time; two different things
(different heads, different dated events) never do. The same thing said twice is one fact with
both sources. Dates a fact names are read against the day it was said."""

from __future__ import annotations

import datetime as dt

import pytest

from memory.dates import resolve_when
from memory.knowledge import facts, updates
from memory.lifecycle import forgetting
from memory.models import Fact
from tests.memory.test_facts import day, tell

D = dt.date

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("I lead a team of 4 engineers in my new role.", "I now lead a team of five engineers."),
        ("My highest score in Ticket to Ride is 124 points.",
         "I just got my highest score in Ticket to Ride - 132 points!"),
        ("I usually go to the gym at 7:00 pm.", "I usually go to the gym at 6:00 pm now."),
        ("I have a cocktail-making class on Thursday.", "I have a cocktail-making class on Fridays."),
        ("I see Dr. Smith every two weeks.", "I see Dr. Smith every week."),
        ("I've got 500 followers on Instagram.", "I'm now at 600 followers on Instagram."),
        ("My recent family trip was to Hawaii.", "My recent family trip was to Paris."),
    ],
)
def test_a_new_value_for_the_same_thing_supersedes(old, new):
    assert updates.supersedes(new, old)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("I have 3 kids.", "I have 2 cats."),
        ("I spent 5 hours on my sculpture.", "I spent 10 hours watching documentaries."),
        ("I caught 7 bass with Alex on 7/10.", "We caught 9 bass with Alex on 7/22."),
        ("I bought a Fitbit on February 15th.", "I bought an Omron blood pressure monitor."),
        ("My sister Ana lives in Porto.", "My brother Tom lives in Lisbon."),
        ("I run 5 km every Monday.", "I swim 2 km every Friday."),
        ("I'm 34 years old.", "I have 2 kids."),
        # One time it happened is no new value of what recurs.
        ("My marathon training plan has a long run of 26 km on Sundays.",
         "I ran the long run in 2 h 31, my knee held up after the physio exercises."),
        ("I walk 8,000 steps every day.", "I walked 12,000 steps with Ana along the river."),
    ],
)
def test_different_things_never_supersede(old, new):
    assert not updates.supersedes(new, old)


def test_the_newer_statement_supersedes_the_older_which_stays_dated(owner, conversation):
    tell(owner, conversation, [(0, "By the way, I lead a team of 4 engineers."),
                               (30, "Can you suggest a team outing? I now lead a team of five engineers.")])
    facts.extract_messages(owner)
    old, new = Fact.objects.owned_by(owner).order_by("said_at")
    assert (old.superseded_by_id, old.valid_to) == (new.pk, day(30)) and new.is_current
    assert facts.shown(new) == "You now lead a team of five engineers."


def test_the_same_thing_said_twice_is_one_fact_with_both_sources(owner, conversation):
    first, again = tell(owner, conversation, [(0, "I'm lactose intolerant, so I skip most desserts."),
                                              (9, "As I said, I'm lactose intolerant.")])
    facts.extract_messages(owner)
    [fact] = Fact.objects.owned_by(owner)
    assert fact.message_id == first.pk and list(fact.also_in.all()) == [again]


def test_forgetting_one_source_draws_the_fact_again_from_the_other(
    owner, conversation, immediate_tasks, django_capture_on_commit_callbacks
):
    first, again = tell(owner, conversation, [(0, "I'm lactose intolerant, so I skip most desserts."),
                                              (9, "As I said, I'm lactose intolerant.")])
    facts.extract_messages(owner)
    with django_capture_on_commit_callbacks(execute=True):
        forgetting.forget_message(owner, first.pk)
    [fact] = Fact.objects.owned_by(owner)
    assert fact.message_id == again.pk and fact.wording == "I'm lactose intolerant."


@pytest.mark.parametrize(
    ("text", "said", "span"),
    [  # (the day said, and the first and the day after the last day of what it names)
        ("I'm running a half marathon at the end of June.", D(2024, 5, 4), (D(2024, 6, 1), D(2024, 7, 1))),
        ("We have book club in September.", D(2025, 8, 12), (D(2025, 9, 1), D(2025, 10, 1))),
        ("I'm going to Valencia in April.", D(2024, 11, 20), (D(2025, 4, 1), D(2025, 5, 1))),
        ("I went to Valencia in April.", D(2024, 11, 20), (D(2024, 4, 1), D(2024, 5, 1))),
        ("I ran my first marathon last April.", D(2024, 11, 20), (D(2024, 4, 1), D(2024, 5, 1))),
        ("I redeemed a coupon last Sunday.", D(2023, 5, 29), (D(2023, 5, 28), D(2023, 5, 29))),
        ("I'm seeing the dentist next Friday.", D(2024, 5, 4), (D(2024, 5, 10), D(2024, 5, 11))),
    ],
)
def test_a_date_is_read_forward_for_plans_and_back_for_what_happened(text, said, span):
    when = dt.datetime.combine(said, dt.time(12), tzinfo=dt.UTC)
    start, end = resolve_when(text, when)
    assert (start.date(), end.date()) == span


def test_a_fact_keeps_the_period_its_words_name(owner, conversation):
    tell(owner, conversation, [(0, "I'm going to Valencia in April for a long weekend.")])
    facts.extract_messages(owner)
    fact = Fact.objects.owned_by(owner).get()
    assert (fact.refers_from.date(), fact.refers_to.date()) == (D(2024, 4, 1), D(2024, 5, 1))
