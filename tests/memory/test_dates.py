"""Time at ingest: the periods a message's words name, resolved against when it was said, and the
same phrases in a question, resolved against when it is asked."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from memory.dates import mentioned_periods, query_period
from memory.finding.search import search
from memory.models import Passage
from memory.storage.store import update_message
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

# A Monday.
SAID = dt.datetime(2023, 5, 29, 15, 16, tzinfo=dt.UTC)


def spans(text: str, said: dt.datetime = SAID) -> list[tuple[str, str, str]]:
    return [(p["text"], p["start"], p["end"]) for p in mentioned_periods(text, said)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I didn't get to bed until 2 AM last Wednesday.", [("last Wednesday", "2023-05-24", "2023-05-25")]),
        ("I redeemed a coupon yesterday", [("yesterday", "2023-05-28", "2023-05-29")]),
        ("We went hiking two weeks ago", [("two weeks ago", "2023-05-15", "2023-05-22")]),
        ("The movers come in two weeks", [("in two weeks", "2023-06-12", "2023-06-19")]),
        ("I start the new job next month", [("next month", "2023-06-01", "2023-07-01")]),
        ("I spent 10 hours on it last month", [("last month", "2023-04-01", "2023-05-01")]),
        ("My solo trip to Europe last summer was great", [("last summer", "2022-06-01", "2022-09-01")]),
        ("The party was this past weekend", [("this past weekend", "2023-05-27", "2023-05-29")]),
        # A day and month without a year: the nearest such day, before or after.
        ("The follow-up with Dr. Thompson was on March 20th", [("March 20th", "2023-03-20", "2023-03-21")]),
        ("My exam is on the 3rd of June", [("3rd of June", "2023-06-03", "2023-06-04")]),
    ],
)
def test_a_message_names_the_period_it_refers_to_as_of_when_it_was_said(text, expected):
    assert spans(text) == expected


# The phrases are a grammar (a direction and a unit, a count and a unit, the tense of the
# sentence), so the ways people shorten or turn them are read too, as of the Monday said.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Last Fri I took my kids to a pottery workshop.", [("Last Fri", "2023-05-26", "2023-05-27")]),
        ("I joined a new activist group last Tues.", [("last Tues", "2023-05-23", "2023-05-24")]),
        ("this past Sat was the recital", [("this past Sat", "2023-05-27", "2023-05-28")]),
        ("Last night was amazing!", [("Last night", "2023-05-28", "2023-05-29")]),
        ("We went camping two weekends ago.", [("two weekends ago", "2023-05-20", "2023-05-22")]),
        ("We went hiking over the weekend.", [("over the weekend", "2023-05-27", "2023-05-29")]),
        ("I'm going hiking over the weekend.", [("over the weekend", "2023-06-03", "2023-06-05")]),
        ("I ran into her the other day.", [("the other day", "2023-05-22", "2023-05-29")]),
        ("Later this month I fly out.", [("Later this month", "2023-05-30", "2023-06-01")]),
        ("The party is 3 days from now.", [("3 days from now", "2023-06-01", "2023-06-02")]),
        ("I saw him on Friday.", [("on Friday", "2023-05-26", "2023-05-27")]),
        ("I'll see you on Friday.", [("on Friday", "2023-06-02", "2023-06-03")]),
        ("I went to Rome in March.", [("in March", "2023-03-01", "2023-04-01")]),
        ("I'm flying to Rome in March.", [("in March", "2024-03-01", "2024-04-01")]),
        # Dates with their year are periods too: a question about that day or year finds them,
        # and a question asking when finds a turn that says it.
        ("The meeting on May 3, 2023 went well", [("May 3, 2023", "2023-05-03", "2023-05-04")]),
        ("We got Max back in 2013.", [("back in 2013", "2013-01-01", "2014-01-01")]),
        ("I've lived here since March 2021", [("March 2021", "2021-03-01", "2021-04-01")]),
    ],
)
def test_shortened_and_tense_given_phrases_are_read_as_of_when_they_were_said(text, expected):
    assert spans(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I go swimming on Fridays",  # a habit, no one day
        "I run on Saturday mornings",
        "I walked 2000 steps in 2023.5 hours",  # amounts, not years
        "It may rain in may",  # the verb
        "Earlier this week I quit",  # said on the week's first day: no day before it
        "this sun is hot",  # "sat" and "sun" are days only after last / next
    ],
)
def test_words_that_only_look_like_a_shortened_or_tense_given_period_name_none(text):
    assert spans(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "I'll call you today",  # the day it was said: its own time says so already
        "I'm 30 years old and the lease runs 2 years longer",
        "It may 2x the cost",
        "",
    ],
)
def test_words_that_name_no_other_period_name_none(text):
    assert spans(text) == []


def test_a_few_days_ago_is_a_span_around_it_not_one_day():
    [(_, start, end)] = spans("I bought it a few days ago")
    assert (
        start <= "2023-05-26" < end and (dt.date.fromisoformat(end) - dt.date.fromisoformat(start)).days > 1
    )


def test_a_question_reads_spoken_periods_as_of_when_it_is_asked():
    asked = dt.datetime(2023, 5, 30, 15, 40, tzinfo=dt.UTC)  # a Tuesday
    last_saturday = query_period("What did I do last Saturday?", now=asked)
    assert (last_saturday[0].date(), last_saturday[1].date()) == (dt.date(2023, 5, 27), dt.date(2023, 5, 28))
    the_14th = query_period("What did I do on the 14th?", now=asked)
    assert the_14th[0].date() == dt.date(2023, 5, 14)
    # Before the 14th of the month, "the 14th" is last month's.
    early = query_period("What did I do on the 14th?", now=asked.replace(day=3))
    assert early[0].date() == dt.date(2023, 4, 14)
    last_month = query_period("How many hours did I spend on it last month?", now=asked)
    assert last_month[0].date() == dt.date(2023, 4, 1)


@pytest.mark.parametrize(
    ("query", "month"),
    [
        ("what were the dates of Melanie's June camping trip?", (2023, 6)),
        ("Melanie's July camping trip, when exactly was that?", (2022, 7)),
        ("how did the March fundraiser go for Maria?", (2023, 3)),
        ("what did Jon say about the march downtown?", None),  # a march, not March
        ("the May meeting, who came?", (2023, 5)),
        ("what may Caroline want to study?", None),
    ],
)
def test_a_month_before_a_noun_names_that_month(query, month):
    """A month written as a noun's qualifier ("Melanie's June camping trip") names it as "in June"
    does: its latest occurrence not after the question."""
    period = query_period(query, now=dt.datetime(2023, 6, 20, 12, tzinfo=dt.UTC))
    assert (None if period is None else (period[0].year, period[0].month)) == month


@pytest.mark.django_db
def test_a_stored_message_keeps_the_periods_its_words_name_and_an_edit_reads_them_again(owner, conversation):
    [message] = add_turns(owner, conversation, ["I had the dentist last Thursday"], start=SAID)
    stored = Passage.objects.get(logical_message_id=message.pk)
    assert [(p["text"], p["start"]) for p in stored.periods] == [("last Thursday", "2023-05-25")]
    update_message(owner, message.pk, "I had the dentist two days ago")
    edited = Passage.objects.get(logical_message_id=message.pk)
    assert [(p["text"], p["start"]) for p in edited.periods] == [("two days ago", "2023-05-27")]


@pytest.mark.django_db
def test_a_question_about_a_day_finds_what_was_said_later_about_that_day(owner, conversation):
    # Two accounts said on the same Monday, one about Saturday 27 May, one about Sunday 28 May.
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=SAID - dt.timedelta(days=90))
    sunday, saturday = (
        add_turns(owner, conversation, [f"I went to the climbing gym with Ana last {day}"], start=SAID)[0]
        for day in ("Sunday", "Saturday")
    )
    asked = dt.datetime(2023, 6, 14, 9, 0, tzinfo=dt.UTC)
    assert (
        search(owner, "Who did I go climbing with on May 27?", as_of=asked).hits[0].message_id == saturday.pk
    )
    assert search(owner, "Who did I go climbing with on May 28?", as_of=asked).hits[0].message_id == sunday.pk


@pytest.mark.django_db
def test_a_relative_period_in_a_question_is_read_from_when_it_is_asked(owner, conversation):
    # "Last week" of a question asked in June 2023 is not last week of today.
    asked = dt.datetime(2023, 6, 14, 9, 0, tzinfo=dt.UTC)
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=asked - dt.timedelta(days=90))
    [then] = add_turns(owner, conversation, ["the boiler was repaired"], start=asked - dt.timedelta(days=8))
    [now] = add_turns(
        owner, conversation, ["the boiler was repaired"], start=timezone.now() - dt.timedelta(days=7)
    )
    assert search(owner, "when was the boiler repaired last week?", as_of=asked).hits[0].message_id == then.pk
    assert search(owner, "when was the boiler repaired last week?").hits[0].message_id == now.pk


@pytest.mark.django_db
def test_reread_periods_reads_again_what_was_stored_before_an_upgrade(
    owner, stranger, conversation, stranger_conversation
):
    [mine] = add_turns(owner, conversation, ["Last Fri I took my kids to a pottery workshop."], start=SAID)
    [other] = add_turns(stranger, stranger_conversation, ["We got Max back in 2013."], start=SAID)
    Passage.objects.update(periods=[])  # as an older version stored them

    out = io.StringIO()
    call_command("reread_periods", "--user", owner.username, stdout=out, stderr=io.StringIO())
    assert "1 passages name other periods now" in out.getvalue()
    stored = Passage.objects.get(logical_message_id=mine.pk)
    assert [(p["text"], p["start"]) for p in stored.periods] == [("Last Fri", "2023-05-26")]
    assert Passage.objects.get(logical_message_id=other.pk).periods == []  # only the one named

    call_command("reread_periods", stdout=io.StringIO(), stderr=io.StringIO())
    assert [p["text"] for p in Passage.objects.get(logical_message_id=other.pk).periods] == ["back in 2013"]
    with pytest.raises(CommandError, match="no user"):
        call_command("reread_periods", "--user", "nobody", stdout=io.StringIO(), stderr=io.StringIO())


def test_the_upgrade_reads_the_stored_periods_again_once(owner, conversation):
    """Migration 0019 runs the command's reading on the passages whose words may name a period
    (a person upgrading never has to know the command)."""
    import importlib

    from django.apps import apps

    texts = ["We went over the weekend.", "Thanks, that works."]
    told, plain = add_turns(owner, conversation, texts, start=SAID)
    Passage.objects.update(periods=[])  # as an older version stored them
    importlib.import_module("memory.migrations.0019_reread_periods").reread(apps, None)
    stored = Passage.objects.get(logical_message_id=told.pk)
    assert [(p["text"], p["start"], p["end"]) for p in stored.periods] == [
        ("over the weekend", "2023-05-27", "2023-05-29")
    ]
    assert Passage.objects.get(logical_message_id=plain.pk).periods == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "when",
    # "today": the turn's own date answers it, though no other period is stored (thirteenth round).
    ["last Fri", "over the weekend", "the other day", "back in 2021", "today", "this morning"],
)
def test_a_question_asking_when_finds_the_turn_that_says_when_in_its_own_words(owner, conversation, when):
    start = SAID - dt.timedelta(days=40)
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=start)
    add_turns(owner, conversation, ["The kids love the pottery workshop."],
              start=start + dt.timedelta(days=2))
    said = f"We went to the pottery workshop with the kids {when}."
    [told] = add_turns(owner, conversation, [said], start=start + dt.timedelta(days=9))
    hits = search(owner, "When did we go to the pottery workshop with the kids?", as_of=SAID).hits
    assert hits[0].message_id == told.pk
