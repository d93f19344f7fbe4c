"""A small memory is listed whole, without a search: what the plan shows is the same as when it
is read query by query, and nothing is searched or embedded for it."""

from __future__ import annotations

import pytest

from memory.context import index_builder
from memory.context.index_builder import ContextPlan, _read_ahead, prepare_context
from memory.models import Conversation
from memory.organizing import hierarchy
from memory.storage.store import store_message
from tests.memory.conftest import add_turns

TOPICS = ["the boat trip", "sourdough starters", "the tax return", "a broken bike chain", "tomato seedlings"]


def _memory(owner, conversation, other, count: int):
    texts = [f"note {i} about {TOPICS[i % len(TOPICS)]}. It went well on day {i}." for i in range(count)]
    add_turns(owner, other, texts[: count // 2], embed=False, linked=True)
    messages = add_turns(owner, conversation, texts[count // 2 :], embed=False, linked=True)
    messages[1].set_pinned(True)
    messages[3].set_pinned(True)
    return messages


@pytest.mark.django_db
@pytest.mark.parametrize("count", [8, 40])  # levels inactive, then active (over 20 messages)
def test_what_a_small_memory_shows_is_read_the_same_from_its_rows(owner, conversation, count):
    other = Conversation.objects.create(owner=owner, title="other")
    messages = _memory(owner, conversation, other, count)
    new = store_message(owner, conversation, "user", "what about the boat?", embed=False)
    active = [m.pk for m in messages[::2]] + [new.pk]  # a branch that leaves some out
    for active_ids in (None, active):
        whole = index_builder._whole_memory(owner, 100_000)
        assert whole is not None and len(whole) == count + 1
        plans = [ContextPlan(query="boat", strategy="full", reason="") for _ in range(2)]
        plans[1].whole = whole
        read, derived = (
            _read_ahead(owner, conversation, plan, {new.pk}, active_ids, None, 500) for plan in plans
        )
        assert [m.pk for m in derived.window] == [m.pk for m in read.window]
        assert [m.pk for m in derived.pinned] == [m.pk for m in read.pinned] and len(read.pinned) == 2
        assert derived.levels.boundaries == read.levels.boundaries
        assert derived.levels.topics == read.levels.topics
        assert derived.summary == read.summary
        assert derived.tool_names == read.tool_names
    assert hierarchy.boundaries(owner).active == (count + 1 > 20)


@pytest.mark.django_db
def test_a_small_memory_that_fits_is_listed_whole_with_no_search(owner, conversation):
    other = Conversation.objects.create(owner=owner, title="other")
    messages = _memory(owner, conversation, other, 8)
    new = store_message(owner, conversation, "user", "what about the sourdough?", embed=False)
    plan = prepare_context(owner, conversation, new.content, user_message=new)
    assert plan.strategy == "full"
    assert "without a search" in plan.reason
    assert not any(k.startswith("search_") for k in plan.timings_ms), plan.timings_ms
    assert plan.hits == []
    # Every message but the new one is in the plan: in the recent window or the index.
    shown = {m.pk for m in plan.recent} | set(plan.included_ids)
    assert shown >= {m.pk for m in messages}
    assert new.pk not in plan.text
    assert index_builder.memory_listed_whole(owner) is True


@pytest.mark.django_db
def test_a_small_memory_over_the_memory_zone_is_searched(owner, conversation, settings):
    other = Conversation.objects.create(owner=owner, title="other")
    _memory(owner, conversation, other, 8)
    new = store_message(owner, conversation, "user", "what about the sourdough?", embed=False)
    zones = {"system": 200, "tools": 0, "memory": 60, "history": 100, "reserve": 0}
    plan = prepare_context(owner, conversation, new.content, user_message=new, zones=zones)
    assert plan.strategy == "full"
    assert "without a search" not in plan.reason
    assert any(k.startswith("search_") for k in plan.timings_ms), plan.timings_ms
    assert any("sourdough" in h["snippet"] for h in plan.hits)
    assert index_builder.memory_listed_whole(owner) is False


@pytest.mark.django_db
def test_more_messages_than_the_full_strategy_shows_are_searched(owner, conversation, settings):
    settings.INDEX_FULL_MAX = 5
    other = Conversation.objects.create(owner=owner, title="other")
    _memory(owner, conversation, other, 8)
    assert index_builder.too_big_to_list_whole(owner)
    new = store_message(owner, conversation, "user", "what about the sourdough?", embed=False)
    plan = prepare_context(owner, conversation, new.content, user_message=new)
    assert plan.strategy == "snippets"
    assert plan.hits


@pytest.mark.django_db
def test_a_memory_listed_whole_before_is_read_with_its_size_in_one_query(owner, conversation, settings):
    # The plan's reads batched: once a memory was listed whole, the next plan reads its rows
    # first and takes their number as its size (no count); one that has grown past
    # INDEX_FULL_MAX meanwhile is counted and searched as before.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.INDEX_FULL_MAX = 10
    other = Conversation.objects.create(owner=owner, title="other")
    _memory(owner, conversation, other, 8)
    first = store_message(owner, conversation, "user", "what about the sourdough?", embed=False)
    prepare_context(owner, conversation, first.content, user_message=first)
    assert index_builder.memory_listed_whole(owner) is True

    new = store_message(owner, conversation, "user", "and the boat?", embed=False)
    with CaptureQueriesContext(connection) as queries:
        plan = prepare_context(owner, conversation, new.content, user_message=new)
    assert plan.strategy == "full" and plan.history_size == 10 and plan.whole is not None
    assert not [q for q in queries.captured_queries if "count(*)" in q["sql"].lower()]

    grown = store_message(owner, conversation, "user", "one more", embed=False)
    plan = prepare_context(owner, conversation, grown.content, user_message=grown)
    assert plan.strategy == "snippets" and plan.history_size == 11 and plan.whole is None
    assert index_builder.memory_listed_whole(owner) is False
