from __future__ import annotations

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from memory.context.index_builder import choose_strategy, prepare_context, save_snapshot
from memory.models import ContextSnapshot, Conversation
from memory.storage.store import store_message
from memory.tokens import count_tokens
from tests.memory.conftest import add_turns


@pytest.fixture
def small_thresholds(settings):
    settings.INDEX_FULL_MAX = 2
    settings.INDEX_SNIPPET_MAX = 4
    settings.INDEX_CLUSTER_MAX = 6


@pytest.mark.django_db
def test_it_chooses_the_strategy_at_each_threshold(owner, conversation, small_thresholds):
    expected = {
        1: "full",
        2: "full",
        3: "snippets",
        4: "snippets",
        5: "clusters",
        6: "clusters",
        7: "hierarchical",
        9: "hierarchical",
    }
    stored = 0
    for size, strategy in expected.items():
        while stored < size:
            store_message(
                owner, conversation, "user", f"note number {stored} about gardening", embed=False
            )
            stored += 1
        plan = prepare_context(owner, conversation, "gardening")
        assert plan.strategy == strategy, (size, plan.reason)
        assert plan.history_size == min(size, 7)


def test_strategy_names_follow_seed_000_defaults(settings):
    assert choose_strategy(0)[0] == "full"
    assert choose_strategy(50)[0] == "full"
    assert choose_strategy(51)[0] == "snippets"
    assert choose_strategy(500)[0] == "snippets"
    assert choose_strategy(501)[0] == "clusters"
    assert choose_strategy(5000)[0] == "clusters"
    assert choose_strategy(5001)[0] == "hierarchical"


@pytest.mark.django_db
def test_it_shows_the_recent_window_oldest_first_without_the_new_message(
    owner, conversation, settings
):
    settings.INDEX_RECENT_WINDOW = 3
    msgs = add_turns(
        owner, conversation, [f"message {i} about kites" for i in range(6)], embed=False
    )
    new = store_message(owner, conversation, "user", "what about kites?", embed=False)
    plan = prepare_context(owner, conversation, new.content, user_message=new)
    assert [m.pk for m in plan.recent] == [m.pk for m in msgs[-3:]]
    assert new.pk not in plan.included_ids


@pytest.mark.django_db
def test_only_the_active_branch_counts_as_recent(owner, conversation):
    msgs = add_turns(owner, conversation, ["a one", "b two", "c three", "d four"], embed=False)
    plan = prepare_context(owner, conversation, "four", active_message_ids=[msgs[0].pk, msgs[3].pk])
    assert [m.pk for m in plan.recent] == [msgs[0].pk, msgs[3].pk]


@pytest.mark.django_db
def test_historical_matches_carry_ids_and_the_fact(owner, conversation, settings):
    settings.INDEX_FULL_MAX = 2
    settings.INDEX_RECENT_WINDOW = 2
    texts = [f"small talk about the weather, day {i}" for i in range(10)]
    texts[3] = "The Redis cluster for INFRA-992 listens on port 6379"
    msgs = add_turns(owner, conversation, texts)
    plan = prepare_context(owner, conversation, "which port does the INFRA-992 redis use?")
    assert plan.strategy == "snippets"
    assert msgs[3].pk in plan.included_ids
    assert msgs[3].pk in plan.text and "6379" in plan.text
    assert "KEY ENTITIES" in plan.text


@pytest.mark.django_db
def test_the_snapshot_stores_what_the_model_saw(owner, conversation):
    add_turns(owner, conversation, ["hello there", "hi"], embed=False)
    plan = prepare_context(owner, conversation, "hello")
    snap = save_snapshot(plan, owner, conversation)
    snap = ContextSnapshot.objects.owned_by(owner).get(pk=snap.pk)
    assert snap.strategy == plan.strategy
    assert snap.tokens_by_zone == plan.tokens_by_zone
    assert snap.whole_plan()["text"] == plan.text
    assert snap.tools_offered == plan.tool_names


@pytest.mark.django_db
def test_a_build_past_its_timeout_falls_back_to_the_simple_format(owner, conversation, settings):
    settings.INDEX_BUILD_TIMEOUT_MS = 1
    settings.INDEX_FULL_MAX = 0
    settings.INDEX_RECENT_WINDOW = 2
    earlier = Conversation.objects.create(owner=owner, title="earlier")
    add_turns(owner, earlier, [f"kites and wind {i}" for i in range(5)], embed=False)
    add_turns(owner, conversation, ["flying today", "enjoy it"], embed=False)
    plan = prepare_context(owner, conversation, "kites")
    assert any(f["kind"] == "index_timeout" for f in plan.fallbacks)
    # Seed 000 §7.2's simple format: the recent header and one line per match, nothing else
    # (no blank lines between sections, no "Best Matches" of the snippets format).
    lines = plan.text.splitlines()
    assert lines[0] == "Recent Conversation: the last 2 messages follow as chat history."
    assert lines[1] == "Historical Matches (retrieve with get_message_by_id):"
    assert len(lines) > 2 and all(line.startswith("- ") and "kites and wind" in line for line in lines[2:])


@pytest.mark.django_db
def test_it_never_shows_another_users_memory(owner, stranger, conversation, stranger_conversation):
    store_message(stranger, stranger_conversation, "user", "stranger secret SECRET-7 aardvark")
    store_message(owner, conversation, "user", "my own aardvark note")
    plan = prepare_context(owner, conversation, "aardvark SECRET-7")
    assert "SECRET-7" not in plan.text
    assert "stranger" not in plan.text


words = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x24F), min_size=0, max_size=400
)


@pytest.mark.django_db
@hsettings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=st.lists(
        st.one_of(words, st.builds(lambda w, n: (w + " ") * n, words, st.integers(1, 40))),
        min_size=0,
        max_size=14,
    ),
    budget=st.integers(min_value=0, max_value=4000),
    full_max=st.integers(min_value=0, max_value=6),
    query=words,
)
def test_the_plan_never_exceeds_its_budget(owner, texts, budget, full_max, query):
    conversation = Conversation.objects.create(owner=owner)
    texts = [t for t in texts if t.strip()]
    if texts:
        add_turns(owner, conversation, texts, embed=False)
    with override_settings(
        INDEX_FULL_MAX=full_max, INDEX_SNIPPET_MAX=full_max + 4, INDEX_CLUSTER_MAX=full_max + 8
    ):
        plan = prepare_context(owner, conversation, query, max_index_tokens=budget)
    assert plan.total_tokens <= budget
    assert count_tokens(plan.text) == plan.tokens_by_zone["memory"]
    assert count_tokens(plan.instructions) == plan.tokens_by_zone["system"]
    assert sum(m.token_count + 4 for m in plan.recent) == plan.tokens_by_zone["history"]


@pytest.mark.django_db
def test_index_strategy_overrides_the_choice_by_history_size(owner, conversation, settings):
    add_turns(owner, conversation, ["the heron nests by the lake", "the bike needs a chain"])
    assert prepare_context(owner, conversation, "heron").strategy == "full"
    settings.INDEX_STRATEGY = "hierarchical"
    plan = prepare_context(owner, conversation, "heron")
    assert plan.strategy == "hierarchical" and "INDEX_STRATEGY=hierarchical" in plan.reason


@pytest.mark.django_db
def test_topics_smaller_than_index_min_cluster_size_are_not_shown_as_clusters(owner, conversation, settings):
    from memory.organizing import topic_updates, topics

    add_turns(owner, conversation, [
        "we planted tomatoes and basil in the garden",
        "the garden tomatoes need water every morning",
        "basil in the garden is flowering early",
        "the garden soil needs compost before spring",
    ])
    topics.rebuild(owner)
    settings.INDEX_STRATEGY = "clusters"
    biggest = max(t.message_count for t in topic_updates.leaves_qs(owner))
    settings.INDEX_MIN_CLUSTER_SIZE = biggest
    assert "Cluster:" in prepare_context(owner, conversation, "garden tomatoes").text
    settings.INDEX_MIN_CLUSTER_SIZE = biggest + 1
    assert "Cluster:" not in prepare_context(owner, conversation, "garden tomatoes").text


@pytest.mark.django_db
@pytest.mark.parametrize("strategy", ["clusters", "hierarchical"])
def test_topic_and_period_counts_the_model_reads_say_1_message(owner, conversation, settings, strategy):
    import re

    from memory.organizing import periods, topics

    add_turns(owner, conversation, ["we planted tomatoes and basil in the garden"])
    topics.rebuild(owner)
    periods.update_period_summaries(owner)
    settings.INDEX_STRATEGY = strategy
    settings.INDEX_MIN_CLUSTER_SIZE = 1
    text = prepare_context(owner, conversation, "garden tomatoes").text
    assert re.search(r"(?<![\d,])1 message\b", text), text
    assert not re.search(r"(?<![\d,])1 messages\b", text), text


@pytest.mark.django_db
def test_the_overview_reads_the_period_summaries_and_top_topics_the_orm_reads(owner, stranger, settings):
    import datetime as dt

    from django.utils import timezone

    from memory.context.index_builder import _overview
    from memory.models import PeriodSummary, Topic

    now = timezone.now()
    for who in (owner, stranger):
        PeriodSummary.objects.create(owner=who, period="today", message_count=3,
                                     top_topics=[{"label": f"kites of {who.username}", "count": 2}])
        PeriodSummary.objects.create(owner=who, period="older", message_count=90, top_topics=[])
        for i in range(5):
            root = Topic.objects.create(
                owner=who, label=f"root {i} of {who.username}", level=0, order=(3 - i) % 4, message_count=i,
                period_start=now - dt.timedelta(days=10 + i), period_end=now - dt.timedelta(days=i),
            )
            Topic.objects.create(owner=who, parent=root, label=f"leaf {i}", level=1, order=0, message_count=1)
    for limit in (2, 8):
        settings.TOPIC_MAX_CHILDREN = limit
        periods, top = _overview(owner)
        expected = {p.period: p for p in PeriodSummary.objects.owned_by(owner)}
        assert {k: (p.message_count, p.top_topics) for k, p in periods.items()} == {
            k: (p.message_count, p.top_topics) for k, p in expected.items()
        }
        orm = list(
            Topic.objects.owned_by(owner).filter(parent=None)
            .only("label", "message_count", "period_start", "period_end", "order").order_by("order")[:limit]
        )
        assert [t.order for t in top] == [t.order for t in orm]
        # Equal orders may come in either order, from either query; the rest is the same.
        def shown(topics):
            return [(t.pk, t.label, t.message_count, t.period_start, t.period_end)
                    for t in sorted(topics, key=lambda t: (t.order, t.pk))]

        assert shown(top) == shown(orm)
    assert periods["today"].top_topics == [{"label": "kites of " + owner.username, "count": 2}]


def _as_stored(plan) -> dict:
    import json

    return json.loads(json.dumps(plan.as_json(), default=str))


@pytest.mark.django_db
@pytest.mark.parametrize("custom", ["", "Answer in French, briefly."])
def test_a_snapshot_stores_its_plan_once_and_gives_it_back_whole(owner, conversation, small_thresholds,
                                                                  custom):
    texts = ["hello there", "we fixed the boiler on Tuesday", "hi", "thanks"]
    add_turns(owner, conversation, texts, embed=False)
    plan = prepare_context(owner, conversation, "what about the boiler?", custom_instructions=custom)
    assert plan.text and plan.hits is not None
    snap = save_snapshot(plan, owner, conversation)
    snap = ContextSnapshot.objects.get(pk=snap.pk)
    # What its own columns and the prompt hold is stored there only.
    assert not {"text", "hits", "included_ids", "query"} & snap.plan.keys()
    assert snap.whole_plan() == _as_stored(plan)
    # A snapshot stored whole (before) reads the same, keys in the order Postgres gives them.
    before = ContextSnapshot.objects.get(pk=snap.pk)
    before.pk = None
    before.plan = _as_stored(plan)
    before.save(force_insert=True)
    before = ContextSnapshot.objects.get(pk=before.pk)
    assert before.whole_plan() == snap.whole_plan()
    assert list(before.whole_plan()) == list(before.plan) == list(snap.whole_plan())


@pytest.mark.django_db
def test_a_whole_plan_without_an_index_text_is_not_the_prompt(owner, conversation):
    plan = {"custom_instructions": "Be brief.", "instructions": "You have a memory."}
    snap = ContextSnapshot(owner=owner, conversation=conversation, strategy="full",
                           text="Be brief.\n\nYou have a memory.", plan=plan)
    assert snap.whole_plan()["text"] == ""
    snap.text += "\n\nINDEX"
    assert snap.whole_plan()["text"] == "INDEX"
