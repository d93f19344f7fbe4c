"""What a chat turn's plan may hold: a hit forgotten after the search read it and before the
turn read its text is never sent to the model (the turn plans again); and a plan with memory
off is remembered as one that did not search, so the next turn embeds nothing ahead."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from chat import turn
from memory.context import index_builder
from memory.lifecycle import forgetting
from memory.models import ContextSnapshot, Conversation, Message, Preferences
from tests.chat.conftest import connect, receive_until
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

pytestmark = pytest.mark.django_db(transaction=True)

LEAK = "the garden shed roof leaks again"


async def _ask(ws, text: str) -> dict:
    await ws.send_json_to({"type": "send", "content": text})
    return (await receive_until(ws, "reply_done"))[-1]


@pytest.fixture
def searched_memory(owner, settings, monkeypatch):
    settings.INDEX_FULL_MAX = 2  # the history below is searched, not listed whole
    monkeypatch.setattr(index_builder, "_WHOLE", {})  # as in a server that just started
    other = Conversation.objects.create(owner=owner, title="Notes")
    return add_turns(owner, other, EVERYDAY_TEXTS)


async def test_a_hit_forgotten_while_the_plan_is_made_is_never_sent_to_the_model(
    owner, conversation, scripted_llm, searched_memory, monkeypatch
):
    [leak] = [m for m in searched_memory if m.content == LEAK]
    searches, forgotten = [], []
    real = index_builder.search

    def search_then_forget(*args, **kwargs):
        # The forget commits after the plan's search has read the hit, before the turn reads
        # the texts of what the plan shows (forgetting.read_by): the gap the turn closes.
        results = real(*args, **kwargs)
        searches.append([h.message_id for h in results.hits])
        if not forgotten and results.hits and results.hits[0].message_id == leak.pk:
            forgotten.extend(forgetting.forget_message(owner, leak.pk))
        return results

    monkeypatch.setattr(index_builder, "search", search_then_forget)
    ws = await connect(owner, conversation.pk)
    done = await _ask(ws, "what leaks in the garden shed?")
    assert done["status"] == "complete"
    # With nothing forgotten meanwhile, a turn plans once.
    assert (await _ask(ws, "when does the train to Lisbon leave?"))["status"] == "complete"
    await ws.disconnect()
    assert forgotten == [leak.pk]  # the search found it first, then it was forgotten
    assert not await database_sync_to_async(Message.objects.filter(pk=leak.pk).exists)()
    snapshot = await database_sync_to_async(ContextSnapshot.objects.get)(user_message_id=done["parent_id"])
    assert leak.pk not in {h["message_id"] for h in snapshot.hits}
    assert LEAK not in snapshot.text and leak.pk not in snapshot.text
    request = scripted_llm.requests[0]
    sent = "\n".join(str(m.get("content") or "") for m in request["messages"])
    assert "what leaks in the garden shed?" in sent
    assert LEAK not in sent and leak.pk not in sent
    # Planned again, with a search after the forget; the next turn, once.
    assert len(searches) == 3 and leak.pk not in searches[1] and leak.pk not in searches[2]


async def test_a_plan_with_memory_off_embeds_nothing_ahead_for_the_next_turn(
    owner, conversation, scripted_llm, searched_memory, monkeypatch
):
    await database_sync_to_async(Preferences.objects.create)(owner=owner, use_memory=False)
    embedded = []
    real = turn._start_embedding

    def start_embedding(content):
        embedded.append(content)
        return real(content)

    monkeypatch.setattr(turn, "_start_embedding", start_embedding)
    ws = await connect(owner, conversation.pk)
    for question in ("when does the train to Lisbon leave?", "and the one to Porto?"):
        done = await _ask(ws, question)
        assert done["status"] == "complete"
    await ws.disconnect()
    # The first turn cannot know memory is off before its plan (the memory is too big to list
    # whole: its question is embedded ahead); the plan is remembered, and the next is not.
    assert embedded == ["when does the train to Lisbon leave?"]
    assert index_builder.memory_listed_whole(owner) is True
    snapshot = await database_sync_to_async(ContextSnapshot.objects.get)(user_message_id=done["parent_id"])
    assert snapshot.strategy == "off" and not snapshot.hits
