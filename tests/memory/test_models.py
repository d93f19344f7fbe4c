"""Memory must not feed on itself: text that only repeats memory (Recollect's offline-recall
answers, replies pasting what a memory tool returned) is kept and shown, but topics, labels,
entities and summaries are never drawn from it (Message.objects.sources())."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.utils import timezone

from memory.context import rolling_summary
from memory.knowledge import entities
from memory.models import (
    ConversationSummary,
    EntityMention,
    Message,
    Topic,
    TopicMembership,
    quoted_share,
    repeats_memory,
)
from memory.organizing import topics
from memory.storage.store import NewMessage, store_messages, store_tool_call
from memory.tasks import run_upkeep

pytestmark = pytest.mark.django_db

OFFLINE = (
    "**Offline recall** · no language model is configured, so this answer is what memory search "
    "found for your message.\n\nNothing in memory matches it yet.\n"
    "- 2024-05-01 10:00 · user · 01JD4Q8ZK3N5V7X9B2C4D6F8GH: “Zanzibar Quartet tickets for Saturday”"
)
TOOL_RESULT = (
    "Zanzibar Quartet plays the Harbour Hall on Saturday at eight; the tickets cost forty euros "
    "each and the box office closes at six on Friday evening, message m88dk6dhp09gb6vfxy0g4kha"
)
PASTE = (
    "Here is what memory says: Zanzibar Quartet plays the Harbour Hall on Saturday at eight; the "
    "tickets cost forty euros each and the box office closes at six on Friday evening."
)


def _chat(owner, conversation, pairs, start):
    """Store (user text, reply text, reply metadata) turns, each reply answering its question."""
    stored = []
    for i, (question, answer, metadata) in enumerate(pairs):
        at = start + dt.timedelta(minutes=2 * i)
        parent = stored[-1].pk if stored else None
        [q] = store_messages(
            owner, conversation, [NewMessage(role="user", content=question, timestamp=at, parent_id=parent)]
        )
        [a] = store_messages(
            owner,
            conversation,
            [NewMessage(role="assistant", content=answer, timestamp=at + dt.timedelta(seconds=30),
                        parent_id=q.pk, metadata=metadata)],
        )
        stored += [q, a]
    return stored


def test_text_that_only_repeats_memory_is_not_a_source():
    assert repeats_memory({"system_text": True})
    assert repeats_memory({"mode": "offline_recall"})  # older offline answers carry only their mode
    assert repeats_memory({"quotes_memory": True})
    assert not repeats_memory({"mode": "llm"}) and not repeats_memory(None)


def test_sources_leave_out_offline_answers_and_flagged_quotes(owner, conversation):
    start = timezone.now() - dt.timedelta(hours=1)
    stored = _chat(owner, conversation, [
        ("when is the concert", OFFLINE, {"mode": "offline_recall", "system_text": True}),
        ("and the old answers", OFFLINE, {"mode": "offline_recall"}),
        ("what did it say", PASTE, {"mode": "llm", "quotes_memory": True}),
        ("thanks, and the drive?", "It takes two hours by train.", {"mode": "llm"}),
    ], start)
    sources = set(Message.objects.owned_by(owner).sources().values_list("pk", flat=True))
    assert sources == {m.pk for m in stored[::2]} | {stored[-1].pk}
    assert [m.is_source for m in stored[1::2]] == [False, False, False, True]


def test_a_share_of_five_word_runs_found_in_the_quoted_text():
    assert quoted_share(PASTE, [TOOL_RESULT]) > 0.8
    assert quoted_share("It takes two hours by train to get there.", [TOOL_RESULT]) == 0.0
    assert quoted_share("too short", [TOOL_RESULT]) == 0.0


def test_offline_answers_feed_no_topic_label_entity_or_summary(owner, conversation):
    start = timezone.now() - dt.timedelta(days=1)
    questions = [
        "Zanzibar Quartet tickets for Saturday at the Harbour Hall",
        "Is the Zanzibar Quartet concert sold out?",
        "Which seats did we pick for the Zanzibar Quartet?",
        "How do we get to the Harbour Hall?",
    ]
    stored = _chat(owner, conversation, [
        (q, OFFLINE, {"mode": "offline_recall", "system_text": True}) for q in questions
    ], start)
    entities.rebuild(owner)
    topics.rebuild(owner)
    offline = [m.pk for m in stored[1::2]]
    assert not TopicMembership.objects.filter(message_id__in=offline).exists()
    assert not EntityMention.objects.filter(message_id__in=offline).exists()
    said = " ".join(
        f"{t.label} {' '.join(t.keywords)} {t.summary}".lower() for t in Topic.objects.owned_by(owner)
    )
    for word in ("configured", "offline", "matches", "01jd4q8zk3n5v7x9b2c4d6f8gh", "recall"):
        assert word not in said, word
    assert "zanzibar" in said


def test_a_reply_pasting_its_tool_results_is_flagged_and_feeds_nothing(owner, conversation, settings):
    settings.INDEX_RECENT_WINDOW = 2
    settings.CONVERSATION_SUMMARY_EVERY = 1
    settings.OPENAI_API_KEY = settings.OPENAI_BASE_URL = ""
    start = timezone.now() - dt.timedelta(hours=3)
    stored = _chat(owner, conversation, [
        ("What do we know about the Zanzibar Quartet concert?", PASTE, {"mode": "llm"}),
        ("Great, and how long is the drive to the Harbour Hall?", "About two hours by car.", {"mode": "llm"}),
        ("Then we leave at five.", "Five it is, with a stop for dinner.", {"mode": "llm"}),
    ], start)
    store_tool_call(owner, stored[1], "search_and_retrieve", json.dumps({"query": "Zanzibar"}),
                    [{"snippet": TOOL_RESULT}], embed=False)
    run_upkeep(owner, [m.pk for m in stored])
    stored[1].refresh_from_db()
    assert stored[1].metadata.get("quotes_memory") is True
    assert not stored[1].is_source
    assert not TopicMembership.objects.filter(message=stored[1]).exists()
    assert not EntityMention.objects.filter(message=stored[1]).exists()
    assert TopicMembership.objects.filter(message=stored[3]).exists()  # an answer of its own is memory
    labels = " ".join(Topic.objects.owned_by(owner).values_list("label", flat=True)).lower()
    assert "box office" not in labels
    # The rolling summary digests the question, never the pasted answer.
    rolling_summary.update(owner, conversation.pk)
    digests = " ".join(b["text"] for b in ConversationSummary.objects.get(conversation=conversation).blocks)
    assert "Zanzibar Quartet concert" in digests and "box office" not in digests
