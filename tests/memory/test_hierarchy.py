"""Seed 004's levels (FULL / SUMMARY / META / ARCHIVE), its tools and pinned messages."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memory.context.index_builder import prepare_context, save_snapshot
from memory.context.tools import execute_tool
from memory.lifecycle.deleting import delete_message, restore_message
from memory.models import Conversation, Message, Topic, TopicMembership
from memory.storage.store import store_message, store_tool_call
from memory.tokens import count_tokens
from tests.memory.conftest import add_turns

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_levels(settings):
    settings.HIERARCHY_RECENT_NODES = 2
    settings.HIERARCHY_SUMMARY_THRESHOLD = 4
    settings.HIERARCHY_META_THRESHOLD = 6
    settings.HIERARCHY_ARCHIVE_THRESHOLD = 12


def _topic(owner, label, messages, *, parent=None, summary=""):
    t = Topic.objects.create(
        owner=owner,
        parent=parent,
        level=1 if parent else 0,
        label=label,
        summary=summary or f"All about {label}.",
        period_start=messages[0].timestamp,
        period_end=messages[-1].timestamp,
        message_count=len(messages),
    )
    for m in messages:
        TopicMembership.objects.create(owner=owner, topic=t, message=m)
    return t


@pytest.fixture
def history(owner, small_levels):
    """Eighteen messages in three sessions, oldest first: sourdough (ARCHIVE), bicycles (META),
    taxes (ages 0-5: FULL then SUMMARY); a topic tree over the two older sessions."""
    conv = Conversation.objects.create(owner=owner, title="history")
    now = timezone.now()
    old = add_turns(
        owner, conv, [f"Sourdough note {i}. The starter needs feeding." for i in range(6)],
        start=now - dt.timedelta(days=30), embed=False,
    )
    mid = add_turns(
        owner, conv, [f"Bicycle note {i}. The chain needs oil." for i in range(6)],
        start=now - dt.timedelta(days=10), embed=False,
    )
    new = add_turns(
        owner, conv, [f"Tax note {i}. The form is due in April." for i in range(6)],
        start=now - dt.timedelta(days=1), embed=False,
    )
    # A top-level "baking" topic whose only child is the sourdough leaf; bicycles is a leaf.
    baking = Topic.objects.create(
        owner=owner, label="baking", summary="Baking bread at home.", level=0, order=0,
        period_start=old[0].timestamp, period_end=old[-1].timestamp, message_count=6,
    )
    sourdough = _topic(owner, "sourdough", old, parent=baking)
    bicycles = _topic(owner, "bicycles", mid)
    return {"conv": conv, "old": old, "mid": mid, "new": new, "baking": baking,
            "sourdough": sourdough, "bicycles": bicycles}


def _ids(result):
    return [n["id"] for n in result.result["items"]]


def test_a_messages_level_follows_how_far_back_it_is(owner, history):
    new, mid, old = history["new"], history["mid"], history["old"]
    full = execute_tool(owner, "browse_hierarchy", {"level": "FULL"})
    summary = execute_tool(owner, "browse_hierarchy", {"level": "SUMMARY"})
    assert _ids(full) == [m.pk for m in new[-2:]]
    assert _ids(summary) == [m.pk for m in new[:4]]
    assert all(n["summary"].startswith("Tax note") for n in summary.result["items"])
    # The levels of single messages agree with the listings.
    for m, level in [(new[-1], "FULL"), (new[0], "SUMMARY"), (mid[0], "META"), (old[-1], "ARCHIVE")]:
        assert execute_tool(owner, "expand_node", {"id": m.pk}).result["level"] == level
    stats = execute_tool(owner, "get_conversation_stats", {}).result
    assert stats["compression_levels"] == {"FULL": 2, "SUMMARY": 4, "META": 6, "ARCHIVE": 6}


def test_meta_lists_topic_groups_and_archive_the_coarsest_old_topics(owner, history):
    meta = execute_tool(owner, "browse_hierarchy", {"level": "META"})
    archive = execute_tool(owner, "browse_hierarchy", {"level": "ARCHIVE"})
    assert _ids(meta) == [history["bicycles"].pk]
    # The sourdough leaf is inside an all-archived parent: the parent stands for it.
    assert _ids(archive) == [history["baking"].pk]
    assert archive.result["items"][0]["level"] == "ARCHIVE"


def test_below_the_summary_threshold_everything_is_full(owner, conversation, small_levels):
    msgs = add_turns(owner, conversation, ["one note here.", "two notes here.", "three notes."], embed=False)
    full = execute_tool(owner, "browse_hierarchy", {"level": "FULL"})
    assert _ids(full) == [m.pk for m in msgs]
    summary = execute_tool(owner, "browse_hierarchy", {"level": "SUMMARY"})
    assert summary.result["items"] == [] and "every message is FULL" in summary.result["note"]


def test_browse_hierarchy_pages_and_refuses_wrong_levels(owner, history):
    first = execute_tool(owner, "browse_hierarchy", {"level": "SUMMARY", "limit": 3})
    assert len(first.result["items"]) == 3 and first.result["next_offset"] == 3
    rest = execute_tool(owner, "browse_hierarchy", {"level": "SUMMARY", "limit": 3, "offset": 3})
    assert _ids(rest) == [history["new"][3].pk] and "next_offset" not in rest.result
    for args, error in [
        ({"level": "MIDDLE"}, "level must be one of FULL, SUMMARY, META, ARCHIVE"),
        ({"level": 2}, "level must be a string"),
        ({}, "missing required argument(s): level"),
        ({"level": "META", "depth": 2}, "unexpected argument"),
    ]:
        result = execute_tool(owner, "browse_hierarchy", args)
        assert not result.ok and error in result.error, result.error


def test_the_plan_shows_older_memory_at_coarser_levels(owner, history, settings):
    settings.INDEX_FULL_MAX = 2  # 18 messages: the snippets strategy
    turn = Conversation.objects.create(owner=owner, title="today")
    plan = prepare_context(owner, turn, "what is due in April?", max_index_tokens=4000)
    assert plan.strategy == "snippets"
    text = plan.text
    archive, meta, summary = text.index("ARCHIVE ("), text.index("META ("), text.index("SUMMARY (")
    assert archive < meta < summary  # oldest first
    assert f'topic {history["baking"].pk} "baking"' in text[archive:meta]
    assert history["sourdough"].pk not in text  # shown through its archived parent
    assert f'topic {history["bicycles"].pk} "bicycles"' in text[meta:summary]
    summary_part = text[summary:]
    for m in history["new"][:4]:
        assert f"- {m.pk} [" in summary_part
    for m in history["new"][4:]:
        assert m.pk not in summary_part  # FULL, not summarised
    assert plan.levels["shown"] == {"ARCHIVE": 1, "META": 1, "SUMMARY": 4}
    assert sum(v for k, v in plan.tokens_by_zone.items() if k != "reserve") <= plan.budget
    # With room for tools, the tool the levels point to is offered.
    assert "expand_node" in prepare_context(owner, turn, "what is due in April?").tool_names


def test_the_levels_section_leaves_out_the_recent_conversation(owner, history, settings):
    settings.INDEX_FULL_MAX = 2
    settings.INDEX_RECENT_WINDOW = 4
    plan = prepare_context(owner, history["conv"], "taxes", max_index_tokens=4000)
    recent = {m.pk for m in plan.recent}
    assert recent and not any(f"- {pk} [" in plan.text[plan.text.index("Memory Levels"):] for pk in recent)


def test_expand_node_opens_a_message_with_its_chunks_tool_calls_and_summary(owner, conversation, settings):
    settings.INDEX_CHUNK_THRESHOLD = 100
    settings.INDEX_CHUNK_OVERLAP = 0
    long_text = "Kestrels hover over the meadow. " + " ".join(f"word{i}" for i in range(900))
    m = store_message(owner, conversation, "assistant", long_text, embed=False)
    call = store_tool_call(owner, m, "vector_search", {"query": "kestrel"}, "two hits", embed=False)
    first = execute_tool(owner, "expand_node", {"id": m.pk, "limit": 2})
    assert first.ok, first.error
    node = first.result
    assert node["node_type"] == "message" and node["summary"] == "Kestrels hover over the meadow."
    assert node["message"]["content"].startswith("Kestrels hover")
    parts = node["components"]
    assert parts["chunk_count"] >= 3 and len(parts["chunks"]) == 2
    assert [c["chunkIndex"] for c in parts["chunks"]] == [0, 1]
    assert parts["tool_calls"] == [
        {"id": call.pk, "toolName": "vector_search", "isError": False, "result": "two hits"}
    ]
    assert node["next_offset"] == 2
    more = execute_tool(owner, "expand_node", {"id": m.pk, "limit": 2, "offset": 2}).result
    assert more["components"]["chunks"][0]["chunkIndex"] == 2


def test_expand_node_opens_a_topic_with_its_children(owner, history):
    top = execute_tool(owner, "expand_node", {"id": history["baking"].pk}).result
    assert top["node_type"] == "topic" and top["summary"] == "Baking bread at home."
    assert [c["id"] for c in top["children"]] == [history["sourdough"].pk]
    leaf = execute_tool(owner, "expand_node", {"id": history["sourdough"].pk, "limit": 4}).result
    assert leaf["parent"]["id"] == history["baking"].pk
    assert [c["id"] for c in leaf["children"]] == [m.pk for m in history["old"][:4]]
    assert leaf["children"][0]["node_type"] == "message" and leaf["next_offset"] == 4


def test_expand_node_says_not_found_for_unknown_deleted_and_strangers_ids(
    owner, stranger, conversation, stranger_conversation
):
    mine = store_message(owner, conversation, "user", "a note to delete", embed=False)
    theirs = store_message(stranger, stranger_conversation, "user", "stranger secret OCELOT", embed=False)
    delete_message(owner, mine.pk)
    for ident in (mine.pk, theirs.pk, "01JUNKNOWN0000000000000000"):
        result = execute_tool(owner, "expand_node", {"id": ident})
        assert not result.ok and result.error == f"node {ident} not found"
        assert "OCELOT" not in result.content()


def _plan_turn(owner, conversation, text):
    """A turn as the chat makes it: the user message, then its plan saved as a snapshot."""
    user = store_message(owner, conversation, "user", text, embed=False)
    plan = prepare_context(owner, conversation, text, user_message=user)
    save_snapshot(plan, owner, conversation, user)
    return user, plan


def test_stats_measure_the_tokens_saved_on_each_turns_snapshot(owner, conversation, settings):
    settings.INDEX_FULL_MAX = 2
    add_turns(owner, conversation, [f"note {i} about the garden shed roof " * 20 for i in range(12)],
              embed=False)
    expected_history = expected_sent = 0
    for text in ("what about the roof?", "and the shed?"):
        before = sum(
            Message.objects.visible_to(owner).logical().values_list("token_count", flat=True)
        )
        _, plan = _plan_turn(owner, conversation, text)
        expected_history += before
        expected_sent += plan.tokens_by_zone["memory"] + plan.tokens_by_zone["history"]
    stats = execute_tool(owner, "get_conversation_stats", {}).result
    assert stats["turns_measured"] == 2
    assert stats["history_tokens_at_turns"] == expected_history
    assert stats["context_tokens_sent"] == expected_sent
    assert stats["total_tokens_saved"] == expected_history - expected_sent > 0
    assert stats["compression_ratio"] == round(expected_history / expected_sent, 2)
    assert stats["last_turn"]["sent_tokens"] == plan.tokens_by_zone["memory"] + plan.tokens_by_zone["history"]


def test_stats_without_turns_measure_nothing(owner, conversation):
    add_turns(owner, conversation, ["a", "b"], embed=False)
    stats = execute_tool(owner, "get_conversation_stats", {"conversation_id": conversation.pk}).result
    assert stats["turns_measured"] == 0 and stats["total_tokens_saved"] == 0
    assert stats["compression_ratio"] is None


def test_a_pinned_message_always_reaches_the_plan_until_deleted_or_unpinned(
    owner, stranger, conversation, stranger_conversation, settings, small_levels
):
    settings.INDEX_FULL_MAX = 2
    settings.INDEX_RECENT_WINDOW = 2
    old = add_turns(owner, conversation, ["The gate code is KESTREL-42, keep it safe."],
                    start=timezone.now() - dt.timedelta(days=400), embed=False)[0]
    add_turns(owner, conversation, [f"bicycle chain note {i} " * 30 for i in range(40)], embed=False)
    theirs = store_message(stranger, stranger_conversation, "user", "stranger pin OCELOT", embed=False)
    theirs.set_pinned(True)

    plan = prepare_context(owner, conversation, "bicycle chain", max_index_tokens=1200)
    assert "KESTREL-42" not in plan.text  # not pinned: an old, unrelated message does not fit

    old.set_pinned(True)
    plan = prepare_context(owner, conversation, "bicycle chain", max_index_tokens=1200)
    assert plan.pinned_ids == [old.pk] and old.pk in plan.included_ids
    pinned = plan.text.index("Pinned (marked important")
    assert plan.text.index("KESTREL-42") > pinned and "OCELOT" not in plan.text

    delete_message(owner, old.pk)
    plan = prepare_context(owner, conversation, "bicycle chain", max_index_tokens=1200)
    assert "KESTREL-42" not in plan.text and plan.pinned_ids == []

    restore_message(owner, old.pk)
    Message.objects.get(pk=old.pk).set_pinned(False)
    plan = prepare_context(owner, conversation, "bicycle chain", max_index_tokens=1200)
    assert "Pinned (" not in plan.text and plan.pinned_ids == []


def test_every_pinned_message_gets_in_even_when_they_would_fill_the_index(owner, conversation, settings):
    settings.INDEX_FULL_MAX = 2
    long_notes = add_turns(
        owner, conversation, [f"Pinned essay {i}: " + "the tide rises and falls. " * 150 for i in range(8)],
        start=timezone.now() - dt.timedelta(days=50), embed=False,
    )
    add_turns(owner, conversation, [f"recent chatter {i}" for i in range(12)], embed=False)
    for m in long_notes:
        m.set_pinned(True)
    plan = prepare_context(owner, conversation, "tides", max_index_tokens=1500)
    assert sorted(plan.pinned_ids) == sorted(m.pk for m in long_notes)
    assert all(f"[{m.pk}]" in plan.text for m in long_notes)
    pinned_part = plan.text[: plan.text.index("Recent Conversation")]
    # Past half the memory zone, pinned messages come as short quotes: the rest keeps room.
    assert plan.text.count("(pinned; read with get_message_by_id)") >= 2
    assert count_tokens(pinned_part) < plan.tokens_by_zone["memory"]


def test_the_boundaries_are_those_of_the_whole_walk_of_the_newest_messages(owner, history):
    from django.conf import settings
    from django.db.models.fields.json import KeyTextTransform
    from django.db.models.functions import Left

    from memory.organizing import hierarchy

    aside = store_message(owner, history["conv"], "user", "An aside, deleted: no level shows it.")
    delete_message(owner, aside.pk)
    # Nor what memory does not keep (a chat started with "Remember new chats" off), the newest.
    kept_out = Conversation.objects.create(owner=owner, title="not kept", remembered=False)
    store_message(owner, kept_out, "user", "Not kept in memory: no level shows it.", embed=False)
    for size in (4, 5, 8, 13, 30):
        settings.HIERARCHY_ARCHIVE_THRESHOLD = size
        settings.HIERARCHY_META_THRESHOLD = min(6, size - 1)
        walk = hierarchy._live(owner).order_by("-timestamp", "-id")
        keys = list(walk.values_list("timestamp", "id")[: size + 1])
        assert hierarchy.boundaries(owner) == hierarchy.boundaries_of(keys)
        with_lines = walk.annotate(
            head=Left("content", 1000), written=KeyTextTransform("summary", "metadata")
        ).values_list("timestamp", "id", "role", "head", "written")[: size + 1]
        expected = hierarchy.boundaries_of(list(with_lines), lines=True)
        assert hierarchy.boundaries(owner, lines=True) == expected
    assert expected.active and len(expected.summary_lines) == 4


def test_the_levels_topics_are_those_topics_at_finds_oldest_first(owner, history, settings):
    from memory.organizing import hierarchy

    # A second leaf under baking, and an old root of its own: ARCHIVE holds both roots' trees.
    extra = _topic(owner, "rye", history["old"][:2], parent=history["baking"])
    lone = _topic(owner, "lone", history["old"][2:4])
    for limit in (1, 8):
        settings.TOPIC_MAX_CHILDREN = limit
        rows = hierarchy.level_rows(owner)
        b = rows.boundaries
        for level in (hierarchy.Level.ARCHIVE, hierarchy.Level.META):
            expected = list(
                hierarchy.topics_at(owner, b, level).order_by("-period_end")[: limit * 2]
            )[::-1]
            assert [t.pk for t in rows.topics[level]] == [t.pk for t in expected]
            for shown, t in zip(rows.topics[level], expected, strict=True):
                line = (shown.label, shown.summary, shown.message_count)
                assert line == (t.label, t.summary, t.message_count)
                assert (shown.period_start, shown.period_end) == (t.period_start, t.period_end)
    assert {t.pk for t in rows.topics[hierarchy.Level.ARCHIVE]} >= {history["baking"].pk, lone.pk}
    assert extra.pk not in {t.pk for level in rows.topics.values() for t in level}
    assert [t.pk for t in rows.topics[hierarchy.Level.META]] == [history["bicycles"].pk]


def test_the_pinned_rows_are_those_of_the_whole_pinned_query(
    owner, stranger, conversation, stranger_conversation, settings
):
    from memory.organizing import hierarchy

    settings.INDEX_PINNED_MAX = 4
    messages = add_turns(owner, conversation, [f"pinned note {i}" for i in range(7)], embed=False)
    kept_out = Conversation.objects.create(owner=owner, title="not kept")
    aside = store_message(owner, kept_out, "user", "not kept in memory", embed=False,
                          metadata={"not_remembered": True})
    theirs = store_message(stranger, stranger_conversation, "user", "a stranger's pin", embed=False)
    for m in [*messages, aside, theirs]:
        m.set_pinned(True)
    delete_message(owner, messages[1].pk)
    # Two pinned at the same moment: the newer message first.
    Message.objects.filter(pk__in=[messages[5].pk, messages[6].pk]).update(pinned_at=messages[0].pinned_at)

    def whole_query():
        return list(
            hierarchy._live(owner).pinned().order_by("-pinned_at", "-timestamp")[: settings.INDEX_PINNED_MAX]
        )

    for limit in (4, 20):
        settings.INDEX_PINNED_MAX = limit
        rows, expected = hierarchy.pinned_rows(owner), whole_query()
        assert [m.pk for m in rows] == [m.pk for m in expected]
        assert [(m.content, m.timestamp, m.role, m.pinned_at) for m in rows] == [
            (m.content, m.timestamp, m.role, m.pinned_at) for m in expected
        ]
    assert aside.pk not in {m.pk for m in rows} and theirs.pk not in {m.pk for m in rows}
    assert messages[1].pk not in {m.pk for m in rows} and len(rows) == 6
