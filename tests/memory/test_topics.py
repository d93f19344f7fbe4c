from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from memory.lifecycle.deleting import delete_message
from memory.models import PeriodSummary, Topic, TopicMembership
from memory.organizing import topic_updates, topics
from memory.organizing.periods import update_period_summaries
from memory.storage.store import update_message
from memory.tasks import run_upkeep
from tests.memory.conftest import add_turns

pytestmark = pytest.mark.django_db

GARDEN = [
    "tulips and roses in the garden",
    "the roses need pruning",
    "garden soil and compost",
    "watering tulips every morning",
]
DATABASE = [
    "postgres index tuning for queries",
    "vacuum the postgres tables",
    "the query planner chose a seq scan",
    "add an index on postgres timestamps",
]


def test_the_tree_is_temporally_ordered_with_bounded_width(owner, conversation, settings):
    settings.TOPIC_MAX_CHILDREN = 2
    start = timezone.now() - dt.timedelta(days=3)
    for i in range(5):  # five sessions an hour apart: five leaves at least
        add_turns(
            owner,
            conversation,
            GARDEN if i % 2 else DATABASE,
            start=start + dt.timedelta(hours=i),
            embed=True,
        )
    detail = topics.rebuild(owner)
    assert detail["leaves"] >= 5
    all_topics = list(Topic.objects.owned_by(owner))
    for t in all_topics:
        assert t.children.count() <= 2
    top = list(Topic.objects.owned_by(owner).filter(parent=None).order_by("order"))
    assert len(top) <= 2
    assert [t.period_start for t in top] == sorted(t.period_start for t in top)
    leaves = Topic.objects.owned_by(owner).filter(children__isnull=True)
    assert sum(t.message_count for t in leaves) == 20
    assert TopicMembership.objects.owned_by(owner).count() == 20
    assert all(t.map_x is not None and 0 <= t.map_x <= 1 for t in all_topics)


def test_labels_are_extractive_keywords(owner, conversation):
    add_turns(owner, conversation, DATABASE)
    topics.rebuild(owner)
    leaf = Topic.objects.owned_by(owner).get(children__isnull=True)
    assert "postgres" in leaf.keywords
    # A name of 2-5 words taken from what was said, not a list of keywords.
    assert 2 <= len(leaf.label.split()) <= 5 and "," not in leaf.label
    assert leaf.label.lower() in " ".join(DATABASE).lower()
    assert leaf.summary
    assert leaf.sample_message_ids


def test_new_messages_join_the_nearest_topic(owner, conversation):
    start = timezone.now() - dt.timedelta(days=2)
    add_turns(owner, conversation, GARDEN, start=start)
    add_turns(owner, conversation, DATABASE, start=start + dt.timedelta(hours=5))
    topics.rebuild(owner)
    later = add_turns(
        owner,
        conversation,
        ["postgres index on the users table"],
        start=start + dt.timedelta(days=1),
    )
    run_upkeep(owner, [later[0].pk])
    topic = TopicMembership.objects.owned_by(owner).get(message=later[0]).topic
    assert "postgres" in " ".join(topic.keywords)


def test_topics_are_rebuilt_after_edits_and_deletes(owner, conversation):
    msgs = add_turns(
        owner,
        conversation,
        ["the marmoset eats fruit", "marmoset facts", "marmoset habitat", "marmoset diet"],
    )
    topics.rebuild(owner)
    leaf = Topic.objects.owned_by(owner).get(children__isnull=True)
    assert "marmoset" in leaf.keywords
    for m in msgs:
        update_message(owner, m.pk, f"the capybara swims, note {m.position}")
    run_upkeep(owner, [m.pk for m in msgs])
    leaf.refresh_from_db()
    assert "marmoset" not in leaf.label + leaf.summary + " ".join(leaf.keywords)
    assert "capybara" in leaf.keywords
    delete_message(owner, msgs[0].pk)
    run_upkeep(owner, [msgs[0].pk])
    leaf.refresh_from_db()
    assert leaf.message_count == 3
    assert msgs[0].pk not in leaf.sample_message_ids
    for m in msgs[1:]:
        delete_message(owner, m.pk)
    run_upkeep(owner, [m.pk for m in msgs[1:]])
    assert not Topic.objects.owned_by(owner).exists()


def test_period_summaries_cover_today_week_month_and_older(owner, conversation):
    now = timezone.now()
    add_turns(owner, conversation, ["old memory about kites"], start=now - dt.timedelta(days=90))
    add_turns(
        owner, conversation, ["fresh memory about kites"], start=now - dt.timedelta(minutes=5)
    )
    update_period_summaries(owner)
    periods = {p.period: p for p in PeriodSummary.objects.owned_by(owner)}
    assert set(periods) == {"today", "this_week", "this_month", "older"}
    assert periods["older"].message_count == 1
    assert sum(p.message_count for p in periods.values()) == 2


def test_topics_belong_to_their_owner(owner, stranger, conversation, stranger_conversation):
    add_turns(stranger, stranger_conversation, DATABASE)
    topics.rebuild(stranger)
    topics.rebuild(owner)
    assert not Topic.objects.owned_by(owner).exists()


def test_a_new_message_never_joins_an_old_leaf(owner, conversation):
    """Leaves stay in time order: a late garden note opens a leaf after the database talk
    instead of stretching the old garden leaf over it."""
    start = timezone.now() - dt.timedelta(days=2)
    add_turns(owner, conversation, GARDEN, start=start)
    add_turns(owner, conversation, DATABASE, start=start + dt.timedelta(hours=5))
    topics.rebuild(owner)
    before = {t.pk: t.period_end for t in topic_updates.leaves_qs(owner)}
    later = add_turns(owner, conversation, [GARDEN[0]], start=start + dt.timedelta(days=1))
    run_upkeep(owner, [later[0].pk])
    leaf = TopicMembership.objects.owned_by(owner).get(message=later[0]).topic
    assert leaf.pk not in before or before[leaf.pk] == max(before.values())
    for pk, end in before.items():
        if pk != leaf.pk:
            assert Topic.objects.get(pk=pk).period_end == end, "an old leaf was stretched"
    ordered = sorted(topic_updates.leaves_qs(owner), key=lambda t: (t.level, t.parent_id or "", t.order))
    for parent in {t.parent_id for t in ordered}:
        siblings = [t for t in ordered if t.parent_id == parent]
        starts = [t.period_start for t in siblings]
        assert starts == sorted(starts)


def test_index_clustering_threshold_sets_how_close_a_message_must_be_to_join_a_topic(
    owner, conversation, settings
):
    start = timezone.now() - dt.timedelta(days=2)
    add_turns(owner, conversation, GARDEN, start=start)
    topics.rebuild(owner)
    leaves = Topic.objects.owned_by(owner).filter(children__isnull=True).count()

    def place(text: str, hours: int) -> None:
        later = add_turns(owner, conversation, [text], start=start + dt.timedelta(hours=hours))
        run_upkeep(owner, [later[0].pk])

    assert leaves == 1
    settings.INDEX_CLUSTERING_THRESHOLD = 0.0  # anything joins the nearest leaf
    place("the invoice for the roof repair is overdue", 30)
    assert Topic.objects.owned_by(owner).filter(children__isnull=True).count() == 1
    settings.INDEX_CLUSTERING_THRESHOLD = 1.0  # nothing is that close: a leaf of its own
    place("tomatoes and basil in the garden again", 60)
    assert Topic.objects.owned_by(owner).filter(children__isnull=True).count() == 2


def _first_sentence_by_regex(text: str, limit: int = 160) -> str:
    """The definition first_sentence keeps: the shortest run of 20+ characters ending in . ! or ?
    before whitespace or the end (whitespace collapsed), cut to `limit` with an ellipsis."""
    import re

    flat = " ".join(text.split())
    m = re.search(r"(.{20,}?[.!?])(\s|$)", flat)
    s = m.group(1) if m else flat
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "…"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Short.",
        "This sentence is long enough. And a second one follows.",
        "Version 2.0 shipped today! Everyone cheered?  Yes.",
        "   lots\n\nof   whitespace before the end of the first sentence.  Then more.",
        " " * 5000 + "A sentence after five thousand spaces is still found. Next.",
        "word " * 400 + "end.",
        "x" * 158 + ". tail",
        "x" * 159 + ". tail",
        "x" * 160 + ". tail",
        "x" * 161 + "!",
        "no sentence end at all but quite a long text " * 5,
    ],
)
def test_first_sentence_keeps_its_definition(text):
    for limit in (160, 40, 200):
        assert topics.first_sentence(text, limit) == _first_sentence_by_regex(text, limit)


def test_first_sentence_of_a_long_text_without_a_full_stop_is_cut_quickly():
    import time

    text = "a" * 2_000_000
    started = time.perf_counter()
    assert topics.first_sentence(text) == "a" * 159 + "…"
    # The whole-text regex took minutes here (quadratic); a linear pass takes milliseconds.
    assert time.perf_counter() - started < 1.0


# Text that fed topics and entities at 6c3f2cf: offline-recall answers (older ones carry only
# their mode), and people pasting message ids and commit hashes into what they say.
ECHOED_ID = "m88dk6dhp09gb6vfxy0g4kha"
OLD_OFFLINE = (
    "**Offline recall** · no language model is configured, so this answer is what memory search "
    f"found for your message.\n\nNothing in memory matches it yet.\n- user · {ECHOED_ID}: “kayak trip”"
)
ID_LIKE = re.compile(r"(?=\w*\d)(?=\w*[^\W\d_])\w{5,}")  # a word of both digits and letters


def test_ids_and_system_words_never_name_a_topic_or_an_entity(owner, conversation):
    from memory.knowledge import entities
    from memory.models import Entity, EntityMention, Message

    start = timezone.now() - dt.timedelta(days=2)
    said = [
        f"Kayak trip on the river Tarn, see {ECHOED_ID}",
        OLD_OFFLINE,
        f"The kayak rental in Millau, ticket {ECHOED_ID} and commit 3f9c2ab7e1",
        OLD_OFFLINE,
        f"Book the kayak rental for the river Tarn trip, ref {ECHOED_ID} x7k9q2",
        OLD_OFFLINE,
    ]
    stored = add_turns(owner, conversation, said, start=start)
    offline = [m.pk for m in stored[1::2]]
    Message.objects.filter(pk__in=offline).update(metadata={"mode": "offline_recall"})
    entities.rebuild(owner)
    topics.rebuild(owner)
    assert not TopicMembership.objects.filter(message_id__in=offline).exists()
    assert not EntityMention.objects.filter(message_id__in=offline).exists()
    named = " ".join(
        f"{t.label} {' '.join(t.keywords)} {t.summary}" for t in Topic.objects.owned_by(owner)
    )
    names = " ".join(Entity.objects.filter(owner_id=owner.pk).values_list("name", flat=True))
    for text in (named, names):
        words = {w.lower() for w in re.findall(r"\w+", text)}
        assert not words & {"configured", "offline", "matches", "recall"}, text
    labels_and_keywords = " ".join(
        f"{t.label} {' '.join(t.keywords)}" for t in Topic.objects.owned_by(owner)
    )
    assert not ID_LIKE.findall(labels_and_keywords + " " + names), labels_and_keywords
    assert "kayak" in labels_and_keywords.lower()
