from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from memory.context.index_builder import prepare_context
from memory.context.tools import select_tools
from memory.dates import query_period
from memory.finding.candidates import _keyword_candidates, _term_weights, query_lexemes
from memory.finding.search import SearchFilters, SearchResults, search
from memory.lifecycle import deleting
from memory.models import Message
from memory.storage import sessions
from tests.memory.conftest import add_turns

pytestmark = pytest.mark.django_db


def test_term_weights_are_exact_for_a_brand_new_user(owner, conversation):
    add_turns(owner, conversation, ["the garden has tulips", "the garden has roses", "zebras"])
    weights, complete, shares = _term_weights(owner, query_lexemes("garden tulips unicorn"))
    assert complete
    assert set(weights) == {"garden", "tulip"}, "a word nowhere in memory gets no weight"
    assert weights["tulip"] > weights["garden"] > 0
    assert shares["garden"] == pytest.approx(2 / 3)


def test_keyword_search_ranks_the_rare_word_first_in_a_tiny_history(owner, conversation):
    add_turns(owner, conversation, ["the garden plan", "the garden hose", "tulips in the garden"])
    rows = _keyword_candidates(
        owner, "what did I say about tulips in the garden?", SearchFilters(), 10, SearchResults("")
    )
    assert rows and "tulips" in rows[0][3]


def test_question_phrasing_is_not_searched_for(owner, conversation):
    assert query_lexemes("Do you remember what I mentioned about the heron?") == ["heron"]


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what happened on 2024-05-03?", dt.date(2024, 5, 3), dt.date(2024, 5, 4)),
        ("the plan we made in March 2023", dt.date(2023, 3, 1), dt.date(2023, 4, 1)),
        ("what did we do in march", dt.date(2024, 3, 1), dt.date(2024, 4, 1)),
        ("anything from last week?", dt.date(2024, 6, 3), dt.date(2024, 6, 10)),
        ("what did I say yesterday", dt.date(2024, 6, 12), dt.date(2024, 6, 13)),
        ("in 2022 we moved", dt.date(2022, 1, 1), dt.date(2023, 1, 1)),
    ],
)
def test_it_reads_the_period_a_question_names(query, start, end):
    now = timezone.make_aware(dt.datetime(2024, 6, 13, 15, 0))  # a Thursday
    period = query_period(query, now=now)
    assert period is not None
    assert (period[0].date(), period[1].date()) == (start, end)


def test_a_question_without_a_period_has_none():
    assert query_period("what is my dog called?") is None


def test_a_named_period_lifts_matches_from_it(owner, conversation):
    now = timezone.now()
    add_turns(owner, conversation, ["we talked about the boat repair"], start=now - dt.timedelta(days=400))
    # Earlier today, whatever the time of day the test runs.
    midnight = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    recent = add_turns(
        owner, conversation, ["we talked about the boat repair"], start=midnight + (now - midnight) / 2
    )
    hits = search(owner, "the boat repair we talked about today").hits
    assert hits[0].message_id == recent[0].pk


def test_an_identifier_in_the_question_lifts_the_message_that_holds_it(owner, conversation):
    add_turns(
        owner,
        conversation,
        [
            "the flaky login test keeps failing on staging, see INFRA-991",
            "the flaky login test keeps failing on staging, see INFRA-992",
            "the flaky login test keeps failing on staging, see INFRA-993",
        ],
        gap_minutes=60,
    )
    hits = search(owner, "what was INFRA-992 about?").hits
    assert "INFRA-992" in hits[0].passage_text


def test_session_neighbours_in_one_query_match_the_one_by_one_answer(owner, conversation):
    msgs = add_turns(owner, conversation, ["a", "b", "c", "d"], gap_minutes=1)
    msgs += add_turns(
        owner, conversation, ["e", "f"], start=msgs[-1].timestamp + dt.timedelta(hours=2)
    )
    found = sessions.neighbours_many(owner, [msgs[1].pk, msgs[3].pk, msgs[4].pk, "01UNKNOWN"])
    assert set(found) == {msgs[1].pk, msgs[3].pk, msgs[4].pk}
    for m in (msgs[1], msgs[3], msgs[4]):
        assert [n.pk for n in found[m.pk]] == [n.pk for n in sessions.neighbours(owner, m)]
    assert [n.pk for n in found[msgs[4].pk]] == [msgs[5].pk], "an idle gap ends a session"


def test_session_neighbours_hold_what_an_index_line_reads_without_another_query(
    owner, conversation, django_assert_num_queries
):
    msgs = add_turns(owner, conversation, ["first words", "second words", "third words"], gap_minutes=1)
    with django_assert_num_queries(1):
        found = sessions.neighbours_many(owner, [msgs[1].pk])
        lines = [(n.pk, n.role, n.snippet or n.content, n.timestamp, n.position) for n in found[msgs[1].pk]]
    assert [line[2] for line in lines] == ["first words", "third words"]
    # The other columns are deferred, not missing: read when asked for.
    assert found[msgs[1].pk][0].metadata == Message.objects.get(pk=msgs[0].pk).metadata


def test_tool_filtering_offers_few_tools_and_keeps_recently_used_ones():
    chosen, _ = select_tools("what is my dog called?", 5000, recently_used=["get_tool_call"])
    names = {c["function"]["name"] for c in chosen}
    assert "get_tool_call" in names, "a recently used tool is always kept"
    assert {"get_message_by_id", "vector_search", "search_and_retrieve"} <= names
    assert "memory_graph_query" not in names, "nothing in the question points to it"
    assert len(names) <= 8


def test_the_plan_offers_the_tools_its_index_points_to(owner, conversation, settings):
    settings.INDEX_FULL_MAX = 1
    settings.INDEX_SNIPPET_MAX = 2
    settings.INDEX_CLUSTER_MAX = 3
    add_turns(owner, conversation, ["tulips", "roses", "herons", "pelicans", "zebras"])
    plan = prepare_context(owner, conversation, "tulips")
    assert plan.strategy == "hierarchical"
    assert {"view_topic", "get_period_messages"} <= set(plan.tool_names)
    for name in ("find(", "memory_graph_query"):
        if name.rstrip("(") not in plan.tool_names:
            assert name not in plan.text


@pytest.mark.parametrize(
    ("query", "start"),
    [
        ("What did Gina find for her store on 1 February, 2023?", dt.date(2023, 2, 1)),
        ("Who did Maria have dinner with on May 3, 2023?", dt.date(2023, 5, 3)),
        ("what happened on the 3rd of June 2023", dt.date(2023, 6, 3)),
    ],
)
def test_it_reads_a_day_written_out(query, start):
    period = query_period(query)
    assert period is not None
    assert (period[0].date(), (period[1] - period[0]).days) == (start, 1)


@pytest.mark.parametrize(
    "query",
    ["the contract expires 9999-12-31", "in December 9999", "on 31 February, 2023", "on 2023-13-45"],
)
def test_a_date_no_calendar_holds_names_no_period_and_search_still_answers(owner, conversation, query):
    add_turns(owner, conversation, ["the contract expires soon"])
    if "9999" not in query:
        assert query_period(query) is None
    assert search(owner, query).hits


def test_keyword_scores_recover_term_frequency_from_ts_rank(owner):
    """BM25 needs each term's frequency in a row; it is read back from ts_rank (see
    _keyword_candidates) and must be close to the true count."""
    from django.db import connection

    with connection.cursor() as cursor:
        for tf in (1, 2, 3, 5, 10, 40):
            cursor.execute(
                "SELECT 1.0 / greatest(1e-6, 1.64493406685 - 1.64493406685 * ts_rank('{1,1,1,1}'::float4[], "
                "to_tsvector('english', %s), to_tsquery('english', 'heron'), 0)) - 0.5",
                [" ".join(["heron"] * tf + ["lake"] * 3)],
            )
            assert cursor.fetchone()[0] == pytest.approx(tf, rel=0.06)


_MONTH_WORDS = ["January", "february", "MAY", "December", "Sept", "in", "on", "of", "the", "last", "week"]


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(min_value=-10, max_value=10**12).map(str),
            st.sampled_from(_MONTH_WORDS),
            st.from_regex(r"\d{1,5}-\d{1,3}-\d{1,3}", fullmatch=True),
            st.from_regex(r"\d{1,3}(st|nd|rd|th)?", fullmatch=True),
            st.text(alphabet=" ,.-/", max_size=3),
        ),
        max_size=8,
    ).map(" ".join)
)
def test_no_date_or_number_breaks_the_query_parser(text):
    period = query_period(text)
    assert period is None or period[0] < period[1]


def test_a_turn_gets_a_share_of_the_score_of_the_turn_two_replies_away(owner, conversation, monkeypatch):
    """A fact is often stated a turn after the one that names its subject: turns two replies
    apart share NEIGHBOR_SHARE of each other's score (both ways), and no further."""
    from memory.finding import fusion

    texts = [
        "The company retreat will be at Whispering Pines lodge.",
        "Noted, I will remember that.",
        "Whispering Pines is in Estes Park, Colorado.",
        "Noted, I will remember that.",
        "The lodge in town has a sauna and a retreat room.",
    ]
    retreat, _, fact, _, far = add_turns(owner, conversation, texts, linked=True)
    monkeypatch.setattr(fusion, "REPLY_SHARE", 0.0)
    # The scores as fused: the final order's places (DIVERSITY_SHIFT) lower the later turns of one chat.
    monkeypatch.setattr(fusion, "DIVERSITY_SHIFT", 0.0)

    def scores(share: float) -> dict[str, float]:
        monkeypatch.setattr(fusion, "NEIGHBOR_SHARE", share)
        return {h.message_id: h.score for h in search(owner, "Which town is the retreat lodge in?").hits}

    base, shared = scores(0.0), scores(0.5)
    # The fact is two replies after the retreat turn and two before the last one.
    assert shared[fact.pk] == pytest.approx(base[fact.pk] + 0.5 * (base[retreat.pk] + base[far.pk]))
    assert shared[retreat.pk] == pytest.approx(base[retreat.pk] + 0.5 * base[fact.pk])
    # The last turn is four replies after the retreat turn: it gets the fact's share only.
    assert shared[far.pk] == pytest.approx(base[far.pk] + 0.5 * base[fact.pk])


def test_the_turn_two_replies_after_the_best_hit_joins_the_candidates(owner, conversation, monkeypatch):
    """Among many closer matches neither list returns "Whispering Pines is in Estes Park" for
    "Which town is the retreat lodge in?"; as the turn two replies after the best hit it joins
    the candidates, unless it was deleted, excluded or left out by the search's filters."""
    from memory.finding import fusion
    from memory.models import Conversation

    other = Conversation.objects.create(owner=owner, title="lodges")
    add_turns(owner, other, [f"The lodge number {i} is in the old town." for i in range(30)])
    texts = [
        "The company retreat will be at Whispering Pines lodge.",
        "Noted, I will remember that.",
        "Whispering Pines is in Estes Park, Colorado.",
        "Noted, I will remember that.",
    ]
    retreat, _, fact, _ = add_turns(owner, conversation, texts, linked=True)
    query = "Which town is the retreat lodge in?"

    def found(**kwargs) -> list[str]:
        # Ten candidates from each list: the fact is in neither; every candidate is a hit.
        return [h.message_id for h in search(owner, query, candidates=10, limit=100, **kwargs).hits]

    monkeypatch.setattr(fusion, "NEIGHBOR_SEEDS", 0)
    assert retreat.pk in found() and fact.pk not in found()
    monkeypatch.setattr(fusion, "NEIGHBOR_SEEDS", 5)
    assert fact.pk in found()
    assert fact.pk not in found(filters=SearchFilters(conversation_id=other.pk))
    assert fact.pk not in found(exclude_message_ids=[fact.pk])
    deleting.delete_message(owner, fact.pk)
    assert fact.pk not in found()


def test_session_neighbours_of_many_messages_match_the_one_by_one_answer(
    owner, conversation, stranger, settings
):
    """Speed only: neighbours_of answers for several messages in one query what neighbours()
    answers for each: across idle gaps, deleted messages and chunks, other conversations, and
    wider windows."""
    from memory.models import Conversation, Message

    msgs = add_turns(owner, conversation, ["a", "b", "c", "d", "e"], gap_minutes=1)
    msgs += add_turns(owner, conversation, ["f", "g", "h"], start=msgs[-1].timestamp + dt.timedelta(hours=2))
    settings.INDEX_CHUNK_THRESHOLD = 100
    long = " ".join(f"garden{i}" for i in range(60))
    later = msgs[-1].timestamp + dt.timedelta(minutes=1)
    msgs += add_turns(owner, conversation, [long, "i", "j"], start=later)
    assert Message.objects.filter(chunk_parent=msgs[8]).exists()
    other = Conversation.objects.create(owner=owner, title="Other")
    msgs += add_turns(owner, other, ["k", "l", "m"], gap_minutes=1)
    Message.objects.filter(pk=msgs[2].pk).update(deleted=True)
    anchors = [m for i, m in enumerate(msgs) if i != 2]
    for before, after in ((1, 1), (2, 1), (0, 3), (3, 3)):
        expected = [
            [n.pk for n in sessions.neighbours(owner, m, before=before, after=after)] for m in anchors
        ]
        found = sessions.neighbours_of(owner, anchors, before=before, after=after)
        assert [[n.pk for n in near] for near in found] == expected, (before, after)
    assert [n.pk for n in sessions.neighbours_of(owner, [msgs[3]])[0]] == [msgs[1].pk, msgs[4].pk]
    assert sessions.neighbours_of(stranger, [msgs[3]]) == [[]], "another user's messages are not read"


def test_search_and_retrieve_shows_each_hits_session_neighbours(owner, conversation):
    from memory.context.tools import execute_tool
    from memory.models import Message

    msgs = add_turns(owner, conversation, [f"note {i}: the heron nests by the lake" for i in range(4)])
    later = msgs[-1].timestamp + dt.timedelta(hours=3)
    msgs += add_turns(owner, conversation, ["the heron left", "ok"], start=later)
    result = execute_tool(owner, "search_and_retrieve", {"query": "heron nests", "auto_limit": 5})
    assert result.ok and len(result.result["messages"]) >= 3
    for item in result.result["messages"]:
        m = Message.objects.get(pk=item["id"])
        assert [n["id"] for n in item["session"]] == [n.pk for n in sessions.neighbours(owner, m)]
    assert any(item["session"] for item in result.result["messages"])
