"""memory.organizing.topic_tree: walks of one owner's topic tree, for the explorer's topic pages."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest
from django.utils import timezone

from memory.lifecycle import deleting
from memory.models import Topic, TopicMembership
from memory.organizing import topic_tree
from memory.storage import store


@pytest.fixture
def tree(owner, conversation):
    t0 = timezone.now() - dt.timedelta(days=2)
    first = store.store_message(owner, conversation, "user", "rotate the password", timestamp=t0, embed=False)
    second = store.store_message(
        owner, conversation, "assistant", "use ALTER ROLE", timestamp=t0 + dt.timedelta(hours=1), embed=False
    )
    gone = store.store_message(
        owner, conversation, "user", "a deleted note", timestamp=t0 + dt.timedelta(hours=2), embed=False
    )
    deleting.delete_message(owner, gone.pk)
    root = Topic.objects.create(owner=owner, level=0, label="Databases", message_count=3)
    middle = Topic.objects.create(owner=owner, parent=root, level=1, label="Postgres", message_count=3)
    leaf = Topic.objects.create(
        owner=owner,
        parent=middle,
        level=2,
        label="Passwords",
        period_start=t0,
        period_end=t0 + dt.timedelta(hours=2),
        message_count=3,
    )
    for message in (second, first, gone):
        TopicMembership.objects.create(owner=owner, topic=leaf, message=message)
    return SimpleNamespace(root=root, middle=middle, leaf=leaf, first=first, second=second, gone=gone, t0=t0)


def test_descendant_ids_are_the_topic_and_everything_below_it(owner, tree):
    assert set(topic_tree.descendant_ids(owner, tree.root)) == {tree.root.pk, tree.middle.pk, tree.leaf.pk}
    assert topic_tree.descendant_ids(owner, tree.leaf) == [tree.leaf.pk]


def test_ancestors_run_from_the_root_down(owner, tree):
    assert [t.pk for t in topic_tree.ancestors(owner, tree.leaf)] == [tree.root.pk, tree.middle.pk]
    assert topic_tree.ancestors(owner, tree.root) == []


def test_topic_messages_are_the_live_members_below_it_in_time_order(owner, tree):
    messages = topic_tree.TopicMessages(owner, tree.root)
    assert [m.pk for m in messages[0:10]] == [tree.first.pk, tree.second.pk]
    assert messages.capped_count(100) == 2
    assert [m.pk for m in messages[1:2]] == [tree.second.pk]


def test_in_topic_filters_messages_to_the_topic_tree(owner, tree):
    from memory.models import Message

    found = Message.objects.visible_to(owner).filter(topic_tree.in_topic(owner, tree.middle))
    assert {m.pk for m in found} == {tree.first.pk, tree.second.pk}


def test_activity_spreads_each_leaf_over_its_period(owner, tree):
    start = tree.t0.timestamp()
    values = topic_tree.activity(owner, [tree.root.pk, tree.leaf.pk], start, start + 4 * 3600, 4)
    # Three messages over two hours: the first two of four one-hour buckets (the end bucket included).
    assert values[tree.root.pk] == values[tree.leaf.pk]
    assert sum(values[tree.root.pk]) == pytest.approx(3)
    assert values[tree.root.pk][3] == 0


def test_a_stranger_walking_the_owners_topics_gets_nothing(stranger, tree):
    assert topic_tree.descendant_ids(stranger, tree.root) == []
    assert topic_tree.ancestors(stranger, tree.leaf) == []
    messages = topic_tree.TopicMessages(stranger, tree.root)
    assert messages[0:10] == [] and messages.capped_count(100) == 0
    start = tree.t0.timestamp()
    assert topic_tree.activity(stranger, [tree.root.pk], start, start + 3600, 4) == {}
