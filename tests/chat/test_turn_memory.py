"""Seed 003 A3-A5 through chat turns: the rolling summary the next turn is shown, the semantic
cache of the model's memory searches, and the optional response cache."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from django_tasks_db.models import DBTaskResult

from memory import tasks
from memory.finding import semantic_cache
from memory.lifecycle.deleting import delete_message
from memory.models import Message, ToolCall
from memory.storage.store import store_message
from tests.chat.conftest import connect, receive_until

pytestmark = pytest.mark.django_db(transaction=True)

SUBJECTS = ["herons by the lake", "a new bike chain", "tomatoes and basil", "the overdue roof invoice"]


async def _ask(ws, text: str) -> dict:
    await ws.send_json_to({"type": "send", "content": text})
    return (await receive_until(ws, "reply_done"))[-1]


@database_sync_to_async
def _run_queued_upkeep():
    """What the task worker does with the topic upkeep the turns queued."""
    # Newest first: upkeep that runs late or out of order must not shrink the summary.
    for result in DBTaskResult.objects.filter(task_path__endswith="topic_upkeep").order_by("-enqueued_at"):
        tasks.topic_upkeep.call(*result.args_kwargs["args"])
        result.delete()


async def test_the_turn_after_upkeep_is_shown_the_conversation_summary(
    owner, conversation, scripted_llm, settings
):
    settings.INDEX_RECENT_WINDOW = 2
    settings.CONVERSATION_SUMMARY_EVERY = 1
    settings.SUMMARY_MODEL = "summary-model"
    digest = {"text": "Earlier they discussed herons and a bike chain."}
    scripted_llm.script(digest, match="Conversation excerpt", repeat=True)
    ws = await connect(owner, conversation.pk)
    for subject in SUBJECTS:
        await _ask(ws, f"tell me about {subject}")
    await _run_queued_upkeep()  # in the background, never on a turn's path
    await _ask(ws, "and what did we start with?")
    await ws.disconnect()
    chat_requests = [r for r in scripted_llm.requests if r["model"] != "summary-model"]
    system = chat_requests[-1]["messages"][0]["content"]
    assert "Conversation Summary: the first 6 messages of this conversation" in system
    assert "Earlier they discussed herons and a bike chain." in system
    # The summarized turns are not sent again verbatim; the recent window is.
    sent = [m["content"] for m in chat_requests[-1]["messages"][1:]]
    assert "tell me about herons by the lake" not in sent
    assert "tell me about the overdue roof invoice" in sent


async def test_a_repeated_memory_search_in_a_turn_reuses_the_results(owner, conversation, scripted_llm):
    fact = "the train to Lisbon leaves at nine"
    await database_sync_to_async(store_message)(owner, conversation, "user", fact)

    def search(query: str) -> dict:
        return {"tool_calls": [{"name": "vector_search", "arguments": {"query": query}}]}

    scripted_llm.script(
        search("When does the train to Lisbon leave?"),
        search("when does the train to Lisbon leave"),  # near-identical: cosine above 0.95
        {"text": "At nine."},
        match="cachetest",
    )
    ws = await connect(owner, conversation.pk)
    done = await _ask(ws, "cachetest: the Lisbon train?")
    await ws.disconnect()
    calls = await database_sync_to_async(
        lambda: list(ToolCall.objects.filter(message_id=done["message_id"]).order_by("timestamp"))
    )()
    first, second = (json.loads(c.result)["results"] for c in calls)
    assert first == second and first
    stats = await database_sync_to_async(semantic_cache.stats)(owner)
    assert stats["search"] == {"hits": 1, "misses": 1, "rate": 0.5}


async def test_the_response_cache_answers_a_repeated_question_while_memory_is_unchanged(
    owner, conversation, scripted_llm, settings
):
    settings.RESPONSE_CACHE = True
    scripted_llm.script({"text": "The Sognefjord is 1,308 metres deep."}, match="Sognefjord")
    ws = await connect(owner, conversation.pk)
    first = await _ask(ws, "How deep is the Sognefjord?")
    asked = len(scripted_llm.requests)
    again = await _ask(ws, "how deep is the Sognefjord")
    assert len(scripted_llm.requests) == asked  # the model was not asked again
    assert "1,308 metres" in again["html"] and again["status"] == "complete"
    reply = await database_sync_to_async(Message.objects.get)(pk=again["message_id"])
    assert reply.content == "The Sognefjord is 1,308 metres deep."
    assert reply.metadata["cached_from"] == first["message_id"]
    # Memory changed (a message deleted): the question goes to the model again.
    await database_sync_to_async(delete_message)(owner, first["message_id"])
    await _ask(ws, "How deep is the Sognefjord?")
    assert len(scripted_llm.requests) == asked + 1
    await ws.disconnect()
    stats = await database_sync_to_async(semantic_cache.stats)(owner)
    assert stats["response"] == {"hits": 1, "misses": 2, "rate": 1 / 3}


async def test_without_response_cache_every_question_goes_to_the_model(
    owner, conversation, scripted_llm, settings
):
    assert not settings.RESPONSE_CACHE  # off by default
    ws = await connect(owner, conversation.pk)
    await _ask(ws, "How deep is the Sognefjord?")
    await _ask(ws, "How deep is the Sognefjord?")
    await ws.disconnect()
    assert len(scripted_llm.requests) == 2
