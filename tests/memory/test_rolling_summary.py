"""The rolling summary of a conversation beyond its recent window (seed 003 A4): digested in the
background, shown in the plan's history zone, never keeping deleted or edited-away words."""

from __future__ import annotations

import pytest

from memory.context import rolling_summary
from memory.context.index_builder import prepare_context
from memory.lifecycle.deleting import delete_message
from memory.lifecycle.forgetting import forget_message
from memory.models import ConversationSummary, Message
from memory.storage.store import store_message, update_message
from tests.chat.conftest import llm_server_instance, scripted_llm  # noqa: F401 - fixtures
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_window(settings):
    settings.INDEX_RECENT_WINDOW = 2
    settings.CONVERSATION_SUMMARY_EVERY = 1  # a block per turn (two messages)
    settings.OPENAI_API_KEY = settings.OPENAI_BASE_URL = ""


def _conversation(owner, conversation):
    return add_turns(owner, conversation, EVERYDAY_TEXTS, linked=True, embed=False)


def _plan(owner, conversation, messages, text="what about the garden?"):
    asked = store_message(owner, conversation, "user", text, parent_id=messages[-1].pk, embed=False)
    ids = [m.pk for m in messages] + [asked.pk]
    return prepare_context(owner, conversation, text, user_message=asked, active_message_ids=ids)


def test_upkeep_digests_the_messages_older_than_the_recent_window(owner, conversation, small_window):
    messages = _conversation(owner, conversation)
    result = rolling_summary.update_for_messages(owner, [messages[-1].pk])
    assert result == {"conversations": 1, "blocks_added": 3}
    blocks = ConversationSummary.objects.get(conversation=conversation).blocks
    # Eight messages, two in the window: three blocks of two, oldest first.
    assert [(b["first_id"], b["last_id"]) for b in blocks] == [
        (messages[0].pk, messages[1].pk), (messages[2].pk, messages[3].pk), (messages[4].pk, messages[5].pk)
    ]
    assert "heron" in blocks[0]["text"] and blocks[0]["source"] == "extractive"
    # Incremental: nothing new to digest, nothing written; a new turn's worth adds one block.
    assert rolling_summary.update(owner, conversation.pk)["added"] == 0
    more = add_turns(owner, conversation, ["a question on kites", "an answer on kites"], embed=False)
    Message.objects.filter(pk=more[0].pk).update(parent_id=messages[-1].pk)
    Message.objects.filter(pk=more[1].pk).update(parent_id=more[0].pk)
    assert rolling_summary.update(owner, conversation.pk, more[1].pk)["added"] == 1


def test_the_plan_shows_the_summary_before_the_recent_window_and_says_what_it_covers(
    owner, conversation, small_window
):
    messages = _conversation(owner, conversation)
    plan = _plan(owner, conversation, messages)
    assert plan.summary == ""  # no summary yet: nothing said
    rolling_summary.update_for_messages(owner, [messages[-1].pk])
    plan = _plan(owner, conversation, messages)
    covers = f"the first 6 messages of this conversation ({messages[0].pk} to {messages[5].pk})"
    assert plan.summary.startswith(f"Conversation Summary: {covers}")
    assert "heron nests" in plan.summary and "sourdough" in plan.summary
    assert plan.summary in plan.system_prompt()
    assert plan.summary_covers["messages"] == 6 and plan.as_json()["summary"] == plan.summary
    assert [m.pk for m in plan.recent][-1] == messages[-1].pk
    assert plan.tokens_by_zone["history"] > sum(m.token_count for m in plan.recent)  # counted there


def test_a_short_conversation_gets_no_summary(owner, conversation, small_window, settings):
    settings.INDEX_RECENT_WINDOW = 10
    messages = _conversation(owner, conversation)
    rolling_summary.update_for_messages(owner, [messages[-1].pk])
    assert ConversationSummary.objects.get(conversation=conversation).blocks == []
    assert _plan(owner, conversation, messages).summary == ""


@pytest.mark.parametrize("change", ["delete", "edit", "forget"])
def test_a_change_drops_the_digests_from_the_one_covering_it(owner, conversation, small_window, change):
    messages = _conversation(owner, conversation)
    rolling_summary.update_for_messages(owner, [messages[-1].pk])
    target = messages[2]  # "we planted tomatoes and basil in the garden", in the second block
    {"delete": lambda: delete_message(owner, target.pk),
     "edit": lambda: update_message(owner, target.pk, "we planted leeks"),
     "forget": lambda: forget_message(owner, target.pk)}[change]()
    blocks = ConversationSummary.objects.get(conversation=conversation).blocks
    assert [b["last_id"] for b in blocks] == [messages[1].pk]
    assert "tomatoes" not in _plan(owner, conversation, messages).system_prompt()
    # The next upkeep writes them again, without the removed words.
    rolling_summary.update(owner, conversation.pk, messages[-1].pk)
    text = " ".join(b["text"] for b in ConversationSummary.objects.get(conversation=conversation).blocks)
    assert "tomatoes" not in text and "sourdough" in text


def test_the_model_writes_the_digests_when_one_is_configured(
    owner, conversation, small_window, scripted_llm, settings  # noqa: F811
):
    settings.SUMMARY_MODEL = "summary-model"
    digest = {"text": "They talked about herons and bikes."}
    scripted_llm.script(digest, match=rolling_summary.PROMPT, repeat=True)
    messages = _conversation(owner, conversation)
    rolling_summary.update_for_messages(owner, [messages[-1].pk])
    blocks = ConversationSummary.objects.get(conversation=conversation).blocks
    assert {b["source"] for b in blocks} == {"llm"}
    assert blocks[0]["text"] == "They talked about herons and bikes."
    request = scripted_llm.requests[0]
    assert request["model"] == "summary-model"
    assert "heron nests by the lake" in request["messages"][-1]["content"]


def test_a_long_chain_merges_its_oldest_digests(owner, conversation, small_window, settings):
    settings.CONVERSATION_SUMMARY_MAX_TOKENS = 60
    messages = _conversation(owner, conversation)
    result = rolling_summary.update(owner, conversation.pk, messages[-1].pk)
    assert result["merged"] >= 1
    blocks = ConversationSummary.objects.get(conversation=conversation).blocks
    assert blocks[0]["first_id"] == messages[0].pk and blocks[-1]["last_id"] == messages[5].pk
    assert sum(b["count"] for b in blocks) == 6


def test_offline_answers_stay_out_of_the_digest_even_those_marked_only_by_their_mode(
    owner, conversation, small_window
):
    messages = _conversation(owner, conversation)
    # Offline-recall answers written before they were marked system_text carry only their mode.
    offline = "Offline recall: no language model is configured; nothing in memory matches it yet."
    Message.objects.filter(pk__in=[m.pk for m in messages[1:6:2]]).update(
        content=offline, metadata={"mode": "offline_recall"}
    )
    rolling_summary.update(owner, conversation.pk)
    digests = " ".join(b["text"] for b in ConversationSummary.objects.get(conversation=conversation).blocks)
    assert "heron" in digests and "tomatoes" in digests  # what the person said is digested
    for word in ("configured", "offline", "matches"):
        assert word not in digests.lower(), digests


def test_the_plan_reads_no_summary_of_another_persons_conversation(
    owner, stranger, conversation, small_window
):
    messages = _conversation(owner, conversation)
    rolling_summary.update_for_messages(owner, [messages[-1].pk])
    mine = rolling_summary.for_plan(owner, conversation, window_start=messages[-2].position,
                                    active_message_ids=None, allowance=2000)
    assert mine[0].startswith("Conversation Summary:") and mine[1]["blocks"] == 3
    assert rolling_summary.for_plan(stranger, conversation, window_start=messages[-2].position,
                                    active_message_ids=None, allowance=2000) == ("", {})
