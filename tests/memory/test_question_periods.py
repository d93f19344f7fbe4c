"""The periods a question names in the many ways people say them (held-out wordings, written
here, not taken from the evaluation's questions): seasons, a day with an offset, the weeks up to
now, holidays, a year said any way; and the wordings that name none."""

from __future__ import annotations

import datetime as dt

import pytest

from memory.dates import query_period
from memory.finding.search import search
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

# Asked on a Sunday in October 2023 (after the summer, before Halloween and Thanksgiving).
ASKED = dt.datetime(2023, 10, 22, 12, 0, tzinfo=dt.UTC)


def days(query: str, asked: dt.datetime = ASKED) -> tuple[str, str] | None:
    period = query_period(query, now=asked)
    return None if period is None else (period[0].date().isoformat(), period[1].date().isoformat())


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # A season: of the year given, else the latest one begun by the time of asking.
        ("When did Priya go to the lake during the summer?", ("2023-06-01", "2023-09-01")),
        ("What did Tom bake in the summer of 2022?", ("2022-06-01", "2022-09-01")),
        ("Where did we travel summer 2021?", ("2021-06-01", "2021-09-01")),
        ("What sport did Ana pick up over the winter?", ("2022-12-01", "2023-03-01")),
        ("Which trail did Lee hike in the fall?", ("2023-09-01", "2023-12-01")),
        ("What did Sam plant in early spring 2023?", ("2023-03-01", "2023-06-01")),
        # A day with an offset: the days between the two.
        ("What did Omar buy the week before June 9, 2023?", ("2023-06-02", "2023-06-10")),
        ("What did Kim adopt three days before 2023-08-20?", ("2023-08-17", "2023-08-21")),
        ("Where did Raj go the day after 14 March 2023?", ("2023-03-14", "2023-03-16")),
        ("What happened the Friday before September 1, 2023?", ("2023-08-25", "2023-09-02")),
        # The same offsets before a day written without its year (its latest before the asking).
        ("What did Omar buy the week before June 9?", ("2023-06-02", "2023-06-10")),
        ("What did Caroline go to on the Friday before June 27th?", ("2023-06-20", "2023-06-28")),
        ("Where did Raj go the day after 14 March?", ("2023-03-14", "2023-03-16")),
        ("What did Maria do the weekend before the 17th of July?", ("2023-07-10", "2023-07-18")),
        # A day and month without a year, written either way: that day, not its whole month.
        ("Who did Maria have dinner with on the 3rd of May?", ("2023-05-03", "2023-05-04")),
        ("Who did Maria have dinner with on May 3rd?", ("2023-05-03", "2023-05-04")),
        # Part of a month with no word before it: that month.
        ("What did Caroline do mid-July?", ("2023-07-01", "2023-08-01")),
        ("Which class did Jon start early March?", ("2023-03-01", "2023-04-01")),
        ("Where was Maria late August 2022?", ("2022-08-01", "2022-09-01")),
        # The weeks up to the moment of asking, not the calendar month before.
        ("How many books have I read in the past few weeks?", ("2023-10-01", "2023-10-23")),
        ("What did I cook over the last two months?", ("2023-08-22", "2023-10-23")),
        ("Which shows did I watch in the past month?", ("2023-09-22", "2023-10-23")),
        ("What did I fix in the past year?", ("2022-10-22", "2023-10-23")),
        # Holidays: the latest one by the time of asking, or of the year given.
        ("What did Maria do on Christmas Eve?", ("2022-12-24", "2022-12-25")),
        ("Who came over for Thanksgiving 2022?", ("2022-11-24", "2022-11-28")),
        ("What did the kids dress up as for Halloween?", ("2022-10-31", "2022-11-01")),
        ("Where were we on New Year's Eve?", ("2022-12-31", "2023-01-01")),
        ("Around Valentine's Day, what did Jon cook?", ("2023-02-14", "2023-02-15")),
        # A year said any way: that year.
        ("In which month of 2023 did Gina open her store?", ("2023-01-01", "2024-01-01")),
        ("What did Ben start doing in early 2022?", ("2022-01-01", "2023-01-01")),
        ("Which car did Nadia buy back in 2019?", ("2019-01-01", "2020-01-01")),
    ],
)
def test_it_reads_the_period_a_question_names_however_it_is_said(query, expected):
    assert days(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "In what year did Caroline move?",
        "How long ago was Caroline's 18th birthday?",
        "What are Melanie's plans for the summer?",  # made before it: not the summer's own turns
        "What did the kids do at the summer camp?",
        "How many steps did I walk, 2000 steps or more?",
        "How much did I pay for the $1999 laptop?",
        "What did I buy on 31 February, 2023?",  # no calendar holds it
        "What time do I wake up on Saturday mornings?",
    ],
)
def test_wordings_that_name_no_period_name_none(query):
    assert days(query) is None


def test_the_older_wordings_still_read_as_before():
    assert days("What did we do in March 2023?") == ("2023-03-01", "2023-04-01")
    # Asked in October, "last summer" is the one just ended (as a message says it).
    assert days("What did I do last summer?") == ("2023-06-01", "2023-09-01")
    assert days("What happened on 7 July, 2023?") == ("2023-07-07", "2023-07-08")
    assert days("anything from last month?") == ("2023-09-01", "2023-10-01")


@pytest.mark.django_db
def test_a_question_about_the_summer_finds_what_was_said_then(owner, conversation):
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=ASKED - dt.timedelta(days=300))
    kayaking = ["we went kayaking on the lake"]
    [spring] = add_turns(owner, conversation, kayaking, start=ASKED - dt.timedelta(days=200))
    [summer] = add_turns(owner, conversation, kayaking, start=ASKED - dt.timedelta(days=90))
    hits = search(owner, "When did we go kayaking during the summer?", as_of=ASKED).hits
    assert hits[0].message_id == summer.pk
    assert spring.pk in [h.message_id for h in hits]


@pytest.mark.django_db
def test_an_offset_before_a_day_without_its_year_finds_what_was_said_in_the_days_between(
    owner, conversation
):
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=ASKED - dt.timedelta(days=300))
    picnic = ["we had a picnic under the trees"]
    [early_july] = add_turns(owner, conversation, picnic, start=dt.datetime(2023, 7, 2, 12, tzinfo=dt.UTC))
    [mid_july] = add_turns(owner, conversation, picnic, start=dt.datetime(2023, 7, 12, 12, tzinfo=dt.UTC))
    # Read as the 17th alone (or as all of July), neither question would tell the two apart.
    before = search(owner, "When did we have a picnic the week before July 17th?", as_of=ASKED).hits
    after = search(owner, "When did we have a picnic the week after the 27th of June?", as_of=ASKED).hits
    assert before[0].message_id == mid_july.pk
    assert after[0].message_id == early_july.pk
