"""What memory does not keep (issue 36 §1): a conversation started while "Remember new chats"
was off, or a temporary chat, is chat history only. No fact, entity or topic is drawn from it,
and no other conversation finds it (search, the whole-memory listing, the levels, the tools);
its own conversation still reads it. Forget everything leaves no row; expired temporary chats go."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memory.context import index_builder
from memory.context.tools import execute_tool
from memory.finding.search import reading_for, search
from memory.knowledge import entities, facts
from memory.lifecycle import erasing
from memory.models import NOT_REMEMBERED, Conversation, Entity, Fact, Message, Preferences, TopicMembership
from memory.organizing import topics
from memory.storage import store
from tests.chat.test_forgetting import rows_containing

pytestmark = pytest.mark.django_db

PRIVATE = "I live in Lisbon now, and my neighbour Quentin keeps bees on the roof of our building."
OPEN = "I work at Globex, and my colleague Priya runs the Tuesday climbing club."


@pytest.fixture
def chats(owner):
    remembered = Conversation.objects.create(owner=owner, title="Remembered")
    private = Conversation.objects.create(owner=owner, title="Private", remembered=False)
    kept = store.store_message(owner, remembered, "user", OPEN, embed=True)
    hidden = store.store_message(owner, private, "user", PRIVATE, embed=True)
    return remembered, private, kept, hidden


def test_every_message_of_a_conversation_memory_does_not_keep_is_marked(chats):
    _, _, kept, hidden = chats
    assert hidden.metadata[NOT_REMEMBERED] is True and not hidden.feeds_memory
    assert NOT_REMEMBERED not in kept.metadata and kept.feeds_memory


def test_no_fact_entity_or_topic_is_drawn_from_it(owner, chats):
    _, _, kept, hidden = chats
    facts.extract_messages(owner)
    entities.rebuild(owner)
    topics.rebuild(owner)
    assert Fact.objects.filter(message=kept).exists()
    assert not Fact.objects.filter(message=hidden).exists()
    names = set(Entity.objects.owned_by(owner).values_list("normalized", flat=True))
    assert "priya" in names and "quentin" not in names and "lisbon" not in names
    assert not TopicMembership.objects.filter(message=hidden).exists()


def test_other_conversations_never_find_it_and_its_own_does(owner, chats):
    remembered, private, kept, hidden = chats
    with reading_for(remembered.pk):
        found = {h.message_id for h in search(owner, "neighbour who keeps bees in Lisbon").hits}
    assert hidden.pk not in found
    with reading_for(private.pk):
        found = {h.message_id for h in search(owner, "neighbour who keeps bees in Lisbon").hits}
    assert hidden.pk in found
    # The explorer's search and `recall` read for no conversation: it is not memory there either.
    assert hidden.pk not in {h.message_id for h in search(owner, "Quentin bees").hits}
    assert kept.pk in {h.message_id for h in search(owner, "Priya climbing club").hits}


def test_the_tools_of_another_conversation_leave_it_out(owner, chats):
    remembered, private, _, hidden = chats
    for name, args in [
        ("find", {"pattern": "Quentin"}),
        ("search_and_retrieve", {"query": "Quentin keeps bees"}),
        ("get_period_messages", {"period": "today"}),
    ]:
        elsewhere = execute_tool(owner, name, args, conversation=remembered)
        assert elsewhere.ok and hidden.pk not in str(elsewhere.result), name
    mine = execute_tool(owner, "find", {"pattern": "Quentin"}, conversation=private)
    assert hidden.pk in str(mine.result)


def test_the_whole_memory_listing_shows_it_only_to_its_own_conversation(owner, chats, settings):
    settings.INDEX_FULL_MAX = 100  # a small memory is listed whole, without a search
    remembered, private, kept, hidden = chats
    asker = Conversation.objects.create(owner=owner, title="Asking")
    question = store.store_message(owner, asker, "user", "who keeps bees?", embed=False)
    plan = index_builder.prepare_context(owner, asker, question.content, user_message=question)
    assert plan.whole is not None
    assert {m.pk for m in plan.whole} == {kept.pk, question.pk}
    assert "Priya" in plan.system_prompt() and "Quentin" not in plan.system_prompt()
    again = store.store_message(owner, private, "user", "who keeps bees?", embed=False)
    plan = index_builder.prepare_context(owner, private, again.content, user_message=again)
    assert {m.pk for m in plan.whole} == {kept.pk, hidden.pk, question.pk, again.pk}


def test_forget_everything_leaves_no_row_of_the_person_and_keeps_their_settings(owner, stranger, chats):
    facts.extract_messages(owner)
    topics.rebuild(owner)
    Preferences.objects.create(owner=owner, custom_instructions="Answer briefly.")
    theirs = Conversation.objects.create(owner=stranger, title="Stranger's")
    store.store_message(stranger, theirs, "user", "Priya runs the Tuesday climbing club too.", embed=False)
    done = erasing.forget_everything(owner)
    assert done["messages"] == 2 and done["conversations"] == 2 and done["facts"] >= 1
    assert rows_containing("Quentin") == {}
    assert set(rows_containing("Priya")) == {"memory_message", "memory_passage"}  # the stranger's
    assert not Message.objects.owned_by(owner).exists()
    assert Preferences.of(owner).custom_instructions == "Answer briefly."
    # Memory starts again from nothing.
    fresh = Conversation.objects.create(owner=owner)
    assert store.store_message(owner, fresh, "user", "A new start.").position == 0


def test_a_temporary_chat_goes_when_it_expires_and_not_before(owner, settings):
    settings.TEMPORARY_CHAT_HOURS = 24
    old = Conversation.objects.create(owner=owner, temporary=True, remembered=False)
    Conversation.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(hours=25))
    fresh = Conversation.objects.create(owner=owner, temporary=True, remembered=False)
    lasting = Conversation.objects.create(owner=owner)
    Conversation.objects.filter(pk=lasting.pk).update(created_at=timezone.now() - dt.timedelta(days=3))
    store.store_message(owner, old, "user", "Temporary words that must go.", embed=False)
    assert erasing.end_expired_temporary_chats() == 1
    assert set(Conversation.objects.values_list("pk", flat=True)) == {fresh.pk, lasting.pk}
    assert rows_containing("Temporary words that must go") == {}
    # Leaving ends only a temporary chat.
    assert not erasing.end_temporary_chat(owner, lasting.pk)
    assert erasing.end_temporary_chat(owner, fresh.pk)
    assert list(Conversation.objects.values_list("pk", flat=True)) == [lasting.pk]


def test_a_turn_shown_no_memory_reads_more_of_its_own_conversation(owner, settings):
    from memory.context import budget

    settings.INDEX_RECENT_WINDOW = 4
    chat = Conversation.objects.create(owner=owner)
    for i in range(30):
        store.store_message(owner, chat, "user" if i % 2 == 0 else "assistant", f"turn {i} about the garden",
                            embed=False)
    question = store.store_message(owner, chat, "user", "what did we say first?", embed=False)
    allocation = budget.allocate(8192)
    plan = index_builder.conversation_only(owner, chat, question, zones=allocation.index_zones())
    assert plan.strategy == "off" and plan.text == "" and plan.tools == []
    assert len(plan.recent) == 30  # not only the INDEX_RECENT_WINDOW: the index's room is its
    sent = budget.Prompt.for_message(allocation, plan, question).messages(None)
    assert "turn 0 about the garden" in [m["content"] for m in sent]
    assert sent[0]["content"].count(index_builder.MEMORY_OFF) == 1
