"""What a person controls (issue 36 §1), through real turns against the scripted LLM: the memory
switches, custom instructions, temporary chats, the model picker and the model's titles."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from django.urls import reverse
from django_tasks_db.models import DBTaskResult

from memory import tasks
from memory.context.index_builder import MEMORY_OFF, TEMPORARY
from memory.knowledge import facts
from memory.models import NOT_REMEMBERED, ContextSnapshot, Conversation, Fact, Message, Preferences
from memory.storage.store import store_message
from tests.chat.conftest import connect, receive_until
from tests.chat.test_forgetting import rows_containing

pytestmark = pytest.mark.django_db(transaction=True)

LISBON = "I live in Lisbon, and my sister Ana keeps bees on the roof of her flat in Porto."


async def _ask(ws, text: str) -> dict:
    await ws.send_json_to({"type": "send", "content": text})
    return (await receive_until(ws, "reply_done"))[-1]


@database_sync_to_async
def _remembered_elsewhere(owner) -> None:
    """Memory from an earlier conversation, with its facts drawn."""
    earlier = Conversation.objects.create(owner=owner, title="Earlier")
    store_message(owner, earlier, "user", LISBON)
    facts.extract_messages(owner)
    assert Fact.objects.owned_by(owner).exists()


@database_sync_to_async
def _set(owner, **values) -> None:
    prefs = Preferences.of(owner)
    for name, value in values.items():
        setattr(prefs, name, value)
    prefs.save()


@database_sync_to_async
def _run_queued_tasks(path_end: str = "") -> None:
    """What the task worker does with what the turns queued (or only tasks named `path_end`)."""
    queued = DBTaskResult.objects.filter(status="READY", task_path__endswith=path_end)
    for result in queued.order_by("enqueued_at"):
        task = getattr(tasks, result.task_path.rsplit(".", 1)[1])
        task.call(*result.args_kwargs["args"], **result.args_kwargs["kwargs"])
        result.delete()


def _chat_requests(llm) -> list[dict]:
    return [r for r in llm.requests if r["stream"]]


async def test_with_use_memory_off_a_turn_gets_no_index_no_tools_and_no_facts(
    owner, conversation, scripted_llm
):
    await _remembered_elsewhere(owner)
    ws = await connect(owner, conversation.pk)
    await _ask(ws, "where does my sister live?")
    on = _chat_requests(scripted_llm)[-1]
    assert on["tools"] and "Lisbon" in on["messages"][0]["content"]  # memory on: the fact is shown

    await _set(owner, use_memory=False)
    done = await _ask(ws, "where does my sister live, again?")
    await ws.disconnect()
    off = _chat_requests(scripted_llm)[-1]
    system = off["messages"][0]["content"]
    assert off["tools"] == []
    assert MEMORY_OFF in system and "Lisbon" not in system and "Porto" not in system
    # Its own conversation is still there: the turn before, and its reply.
    assert "where does my sister live?" in [m["content"] for m in off["messages"][1:]]
    reply = await database_sync_to_async(Message.objects.get)(pk=done["message_id"])
    assert reply.metadata["memory"] == "off"
    snapshot = await database_sync_to_async(ContextSnapshot.objects.get)(message_id=reply.pk)
    assert snapshot.strategy == "off" and snapshot.tools_offered == [] and "Lisbon" not in snapshot.text


async def test_offline_with_memory_off_the_chat_says_so(owner, conversation, no_llm):
    await _remembered_elsewhere(owner)
    await _set(owner, use_memory=False)
    ws = await connect(owner, conversation.pk)
    await _ask(ws, "where does my sister live?")
    await ws.disconnect()
    reply = await database_sync_to_async(
        lambda: Message.objects.filter(conversation=conversation, role="assistant").get()
    )()
    assert "memory is off" in reply.content and "Lisbon" not in reply.content


async def test_custom_instructions_go_with_every_turn_counted_and_shown(
    owner, conversation, scripted_llm, client
):
    about = "I'm vegetarian. Answer briefly, in British English."
    await _set(owner, custom_instructions=about)
    ws = await connect(owner, conversation.pk)
    first = await _ask(ws, "what should I cook tonight?")
    await _set(owner, use_memory=False)
    await _ask(ws, "and tomorrow?")
    await ws.disconnect()
    for request in _chat_requests(scripted_llm)[-2:]:
        assert about in request["messages"][0]["content"]  # memory on and off alike

    @database_sync_to_async
    def inspected():
        snapshot = ContextSnapshot.objects.get(message_id=first["message_id"])
        client.force_login(owner)
        page = client.get(reverse("explorer:context", args=[snapshot.pk])).content.decode()
        return snapshot, page

    snapshot, page = await inspected()
    tokens = snapshot.tokens_by_zone["custom_instructions"]
    assert tokens > 10 and snapshot.plan["window"]["custom_instructions_tokens"] == tokens
    assert about in snapshot.text
    assert 'id="custom-instructions"' in page and "vegetarian" in page and f"({tokens} tokens)" in page


async def test_a_chat_started_with_remember_new_chats_off_stays_out_of_memory(
    owner, scripted_llm, client
):
    await _set(owner, remember_chats=False)

    @database_sync_to_async
    def new_chat() -> Conversation:
        client.force_login(owner)
        client.post(reverse("chat:new_conversation"))
        return Conversation.objects.get(owner=owner)

    private = await new_chat()
    assert not private.remembered and not private.temporary
    ws = await connect(owner, private.pk)
    await _ask(ws, LISBON)
    await ws.disconnect()
    await _run_queued_tasks()
    stored = await database_sync_to_async(lambda: list(Message.objects.filter(conversation=private)))()
    assert stored and all(m.metadata.get(NOT_REMEMBERED) for m in stored)
    assert not await database_sync_to_async(Fact.objects.owned_by(owner).exists)()

    # Another conversation's model searches memory and finds nothing of it.
    elsewhere = await database_sync_to_async(Conversation.objects.create)(owner=owner, title="Elsewhere")
    scripted_llm.script(
        {"tool_calls": [{"name": "search_and_retrieve", "arguments": {"query": "sister Ana keeps bees"}}]},
        match="beesearch",
    )
    ws = await connect(owner, elsewhere.pk)
    done = await _ask(ws, "beesearch: where does Ana keep bees?")
    await ws.disconnect()
    request = _chat_requests(scripted_llm)[-1]
    results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    assert results and not any("Porto" in r for r in results)
    assert "Porto" not in json.dumps(request["messages"])
    assert done["status"] == "complete"


async def test_a_temporary_chat_reads_no_memory_and_leaves_no_row_once_left(owner, scripted_llm, client):
    await _remembered_elsewhere(owner)
    marker = "TEMPMARK-4471"

    @database_sync_to_async
    def new_temporary() -> Conversation:
        client.force_login(owner)
        client.post(reverse("chat:new_conversation"), {"temporary": "1"})
        return Conversation.objects.get(owner=owner, temporary=True)

    chat = await new_temporary()
    assert not chat.remembered
    ws = await connect(owner, chat.pk)
    await _ask(ws, f"My locker code is {marker}, keep it to yourself.")
    await _ask(ws, f"What is {marker} again?")
    await ws.disconnect()
    request = _chat_requests(scripted_llm)[-1]
    assert request["tools"] == [] and TEMPORARY in request["messages"][0]["content"]
    assert "Lisbon" not in request["messages"][0]["content"]
    assert not await database_sync_to_async(
        DBTaskResult.objects.filter(task_path__endswith="topic_upkeep").exists
    )()
    assert not await database_sync_to_async(ContextSnapshot.objects.filter(conversation=chat).exists)()
    assert await database_sync_to_async(rows_containing)(marker)  # while it lasts

    @database_sync_to_async
    def leave() -> int:
        return client.post(reverse("chat:leave_temporary_chat", args=[chat.pk])).status_code

    assert await leave() == 204
    await _run_queued_tasks()
    assert await database_sync_to_async(rows_containing)(marker) == {}
    assert not await database_sync_to_async(Conversation.objects.filter(pk=chat.pk).exists)()
    assert await database_sync_to_async(Fact.objects.owned_by(owner).count)() == 1  # memory untouched


async def test_the_picked_model_answers_and_the_window_follows_it(
    owner, conversation, scripted_llm, client, settings
):
    settings.CHAT_MODELS = ["test-llm", "gpt-4"]
    settings.CHAT_CONTEXT_TOKENS = 0  # the window is the picked model's

    @database_sync_to_async
    def pick(model: str) -> int:
        client.force_login(owner)
        return client.post(reverse("chat:set_model", args=[conversation.pk]), {"model": model}).status_code

    assert await pick("gpt-5-imaginary") == 400
    assert await pick("gpt-4") == 302
    ws = await connect(owner, conversation.pk)
    done = await _ask(ws, "hello there")
    assert await pick("test-llm") == 302
    await _ask(ws, "and again")
    await ws.disconnect()
    first, second = _chat_requests(scripted_llm)[-2:]
    assert first["model"] == "gpt-4" and second["model"] == "test-llm"
    reply = await database_sync_to_async(Message.objects.get)(pk=done["message_id"])
    assert reply.metadata["model"] == "gpt-4"
    snapshot = await database_sync_to_async(ContextSnapshot.objects.get)(message_id=reply.pk)
    assert snapshot.plan["window"]["window"] == 8_192  # gpt-4's


async def test_the_model_titles_a_conversation_after_its_first_reply_and_every_tab_hears(
    owner, conversation, scripted_llm
):
    await database_sync_to_async(Conversation.objects.filter(pk=conversation.pk).update)(title="")
    scripted_llm.script({"text": "Thanks, noted."}, match="sourdough")
    ws = await connect(owner, conversation.pk)
    await _ask(ws, "My sourdough starter smells of acetone after three days, what is going on with it?")
    scripted_llm.script({"text": "“Sourdough starter troubles.”"}, match="sourdough")
    await _run_queued_tasks("title_conversation")
    updated = await receive_until(ws, "conversation_updated")
    await ws.disconnect()
    assert updated[-1]["title"] == "Sourdough starter troubles"
    fresh = await database_sync_to_async(Conversation.objects.get)(pk=conversation.pk)
    assert fresh.title == "Sourdough starter troubles" and fresh.titled_by_model
    title_request = [r for r in scripted_llm.requests if not r["stream"]][-1]
    assert "sourdough starter" in title_request["messages"][1]["content"]


async def test_a_name_the_person_gave_is_kept_and_offline_the_first_message_names_it(
    owner, conversation, scripted_llm, client
):
    await database_sync_to_async(Conversation.objects.filter(pk=conversation.pk).update)(title="")
    ws = await connect(owner, conversation.pk)
    await _ask(ws, "Let us plan the garden beds for spring and what to sow in each of them")

    @database_sync_to_async
    def rename():
        client.force_login(owner)
        client.post(reverse("chat:rename_conversation", args=[conversation.pk]), {"title": "Garden 2025"})

    await rename()
    await _run_queued_tasks("title_conversation")
    await ws.disconnect()
    assert (await database_sync_to_async(Conversation.objects.get)(pk=conversation.pk)).title == "Garden 2025"
    assert not [r for r in scripted_llm.requests if not r["stream"]]  # the model was not asked


async def test_offline_no_title_is_asked_for(owner, conversation, no_llm):
    await database_sync_to_async(Conversation.objects.filter(pk=conversation.pk).update)(title="")
    ws = await connect(owner, conversation.pk)
    await _ask(ws, "Notes on the boiler service, which is due in October before the cold sets in")
    await ws.disconnect()
    assert not await database_sync_to_async(
        DBTaskResult.objects.filter(task_path__endswith="title_conversation").exists
    )()
    title = (await database_sync_to_async(Conversation.objects.get)(pk=conversation.pk)).title
    assert title == "Notes on the boiler service, which is due in October…"  # cut at a word


async def test_forgetting_the_first_message_takes_the_models_title_with_it(owner, conversation, scripted_llm):
    await database_sync_to_async(Conversation.objects.filter(pk=conversation.pk).update)(title="")
    ws = await connect(owner, conversation.pk)
    first = await _ask(ws, "The code for the Quokka Station vault is QX-7731, remember it")
    await _ask(ws, "Something else entirely: bread recipes")
    scripted_llm.script({"text": "Quokka Station vault"}, match="Quokka")
    await _run_queued_tasks("title_conversation")
    titled = await database_sync_to_async(Conversation.objects.get)(pk=conversation.pk)
    assert titled.title == "Quokka Station vault"

    @database_sync_to_async
    def forget_first_exchange():
        from memory.lifecycle.forgetting import forget_message

        reply = Message.objects.get(pk=first["message_id"])
        forget_message(owner, reply.parent_id, copies=[reply.pk])
        return Conversation.objects.get(pk=conversation.pk)

    fresh = await forget_first_exchange()
    await ws.disconnect()
    assert "Quokka" not in fresh.title and not fresh.titled_by_model
    assert await database_sync_to_async(rows_containing)("Quokka") == {}
