"""explorer.filters: the query-string filters read by a Django form; bad values are messages."""

from __future__ import annotations

import datetime as dt

from django.http import QueryDict
from django.urls import reverse

from explorer.filters import FilterForm, parse_filters

EVERY = set(FilterForm.base_fields)


def read(query: str, user, allowed=EVERY):
    return parse_filters(QueryDict(query), user, allowed)


def test_good_values_become_filters(owner, mem):
    f = read(
        f"conversation={mem.conversation.pk}&topic={mem.root.pk}&role=user&start=2024-05-01&end=2024-05-31"
        "&q=+postgres+&granularity=week&period=2024-05-06",
        owner,
    )
    assert f.errors == []
    assert f.conversation == mem.conversation and f.topic == mem.root
    assert (f.role, f.q, f.granularity) == ("user", "postgres", "week")
    assert (f.start, f.end, f.period) == (dt.date(2024, 5, 1), dt.date(2024, 5, 31), dt.date(2024, 5, 6))
    assert f.active


def test_no_values_are_no_filters(owner):
    f = read("", owner)
    assert f.errors == [] and not f.active and f.granularity == "day" and f.until is None


def test_a_bad_date_is_a_message_and_the_other_filters_still_apply(owner):
    f = read("start=31/12/2024&end=2024-13-45&role=assistant", owner)
    assert f.start is None and f.end is None and f.role == "assistant"
    assert f.errors == [
        "“31/12/2024” is not a date for “from”; use YYYY-MM-DD. The filter was ignored.",
        "“2024-13-45” is not a date for “to”; use YYYY-MM-DD. The filter was ignored.",
    ]


def test_an_unknown_role_or_granularity_is_a_message(owner):
    f = read("role=wizard&granularity=year", owner)
    assert f.role is None and f.granularity == "day"
    assert "“wizard” is not a role; choose one of" in f.errors[0]
    assert "“year” is not one of day, week, month; showing day." in f.errors[1]


def test_a_strangers_ids_are_unknown_like_ids_that_do_not_exist(stranger, mem):
    f = read(f"conversation={mem.conversation.pk}&topic={mem.root.pk}", stranger)
    assert f.conversation is None and f.topic is None
    assert f.errors == [
        f"No conversation “{mem.conversation.pk}” in your memory; showing all conversations.",
        f"No topic “{mem.root.pk}” in your memory; showing all topics.",
    ]


def test_dates_the_wrong_way_round_are_swapped_and_said_so(owner):
    f = read("start=2024-05-02&end=2024-05-01", owner)
    assert (f.start, f.end) == (dt.date(2024, 5, 1), dt.date(2024, 5, 2))
    assert f.errors == ["“from” is after “to”; the dates were swapped."]


def test_long_values_are_cut_short_in_messages_and_filters(owner):
    query = f"conversation={'x' * 300}&q={'y' * 900}&kind={'z' * 50}&tool={'t' * 101}"
    f = read(query, owner)
    assert f.errors[0] == f"No conversation “{'x' * 40}” in your memory; showing all conversations."
    assert f.errors[1] == "That tool name is longer than any tool's; the filter was ignored."
    assert len(f.q) == 500 and f.kind == "z" * 32 and f.tool is None


def test_only_the_fields_a_page_asks_for_are_read(owner):
    form = FilterForm(QueryDict("role=wizard&q=rotate"), user=owner, fields={"q"})
    f = form.filters()
    assert f.errors == [] and f.role is None and f.q == "rotate"


def test_a_bad_value_is_shown_escaped(owner_client, mem):
    response = owner_client.get(reverse("explorer:timeline") + "?role=<b>x</b>")
    page = response.content.decode()
    assert response.status_code == 200
    assert "&lt;b&gt;x&lt;/b&gt;” is not a role" in page and "<b>x</b>" not in page
