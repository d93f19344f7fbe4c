"""The prompt fits the model (issue 13 §2), through real chat turns: the scripted LLM is given a
context window and refuses, as OpenAI does, any request over it."""

from __future__ import annotations

import random

import pytest
from channels.db import database_sync_to_async

from memory.models import ContextSnapshot, Conversation, Message, ToolCall
from tests.chat.conftest import connect, receive_until

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = [
    "harbour", "lantern", "copper", "meadow", "violet", "engine", "sparrow", "ledger", "quartz", "tundra"
]


def prose(chars: int, seed: int) -> str:
    rng = random.Random(seed)
    out, size = [], 0
    while size < chars:
        word = f"{rng.choice(WORDS)}{rng.randint(0, 999)}"
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


@database_sync_to_async
def store_note(owner, text: str) -> Message:
    from memory.storage.store import store_message

    notes = Conversation.objects.create(owner=owner, title="notes")
    return store_message(owner, notes, "user", text, embed=False)


@database_sync_to_async
def stored_turn(reply_id: str):
    reply = Message.objects.get(pk=reply_id)
    snapshot = ContextSnapshot.objects.get(message_id=reply_id)
    calls = list(ToolCall.objects.filter(message_id=reply_id, is_chunk=False).order_by("timestamp"))
    return reply, snapshot, calls


async def test_a_million_character_message_and_five_rounds_of_big_results_fit_a_4k_window(
    owner, conversation, scripted_llm, settings
):
    settings.CHAT_CONTEXT_TOKENS = 4096
    scripted_llm.post("/_config", {"context_window": 4096})
    note = await store_note(owner, prose(120_000, seed=1))
    rounds = [
        {"tool_calls": [{"name": "get_message_by_id", "arguments": {"id": note.pk, "offset": 20_000 * i}}]}
        for i in range(5)
    ]
    scripted_llm.script(*rounds, {"text": "I have read all of it."}, match="WINDOW-4K")
    content = "WINDOW-4K please read my note. " + prose(1_000_000, seed=2) + " THE LAST WORDS"
    assert len(content) > 1_000_000

    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": content})
    events = await receive_until(ws, "reply_done", timeout=120)
    done = events[-1]
    assert done["status"] == "complete", done["error"]
    assert len([e for e in events if e["type"] == "tool_started"]) == 5

    sent = [r for r in scripted_llm.requests if "WINDOW-4K" in r["last_user"]]
    assert len(sent) == 6
    for request in sent:
        # Every request was under the model's window, its answer reserve included.
        assert request["status"] == 200
        assert request["max_tokens"] and request["prompt_tokens"] + request["max_tokens"] <= 4096
    user_message = next(e for e in events if e["type"] == "message" and e["role"] == "user")
    shown = sent[0]["last_user"]
    assert shown.startswith("WINDOW-4K please read my note.") and shown.endswith("THE LAST WORDS")
    assert f'get_message_by_id(id="{user_message["message_id"]}", offset=' in shown
    # Each round's result is a 20,000-character page: by the last request, the earlier ones
    # are their summaries and the newest is cut to what is left.
    results = [m["content"] for m in sent[-1]["messages"] if m["role"] == "tool"]
    assert len(results) == 5
    assert all("shrunk to its summary" in r or "left out" in r for r in results[:4])
    assert "cut to fit the context window" in results[-1]

    reply, snapshot, calls = await stored_turn(done["message_id"])
    assert reply.content == "I have read all of it." and len(calls) == 5
    window = snapshot.plan["window"]
    assert window["window"] == 4096 and window["current_message_cut"] is True
    assert window["prompt_tokens"] + window["max_tokens"] <= 4096
    for zone in ("system", "tools", "index", "recent", "current", "tool_results", "answer", "margin"):
        assert window["zones"][zone]["allocated"] > 0, zone
    assert 0 < window["zones"]["current"]["used"] <= window["zones"]["current"]["allocated"]
    assert 0 < window["zones"]["tool_results"]["used"] <= window["zones"]["tool_results"]["allocated"]
    await ws.disconnect()


async def test_a_context_length_refusal_is_retried_once_with_half_the_zones(
    owner, conversation, scripted_llm, settings
):
    settings.CHAT_CONTEXT_TOKENS = 8192
    scripted_llm.script(
        {"context_length_exceeded": True}, {"text": "It fits now."}, match="RETRY-SMALLER"
    )
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "RETRY-SMALLER " + prose(40_000, seed=3)})
    events = await receive_until(ws, "reply_done", timeout=60)
    done = events[-1]
    assert done["status"] == "complete" and "It fits now." in done["html"]

    first, second = [r for r in scripted_llm.requests if "RETRY-SMALLER" in r["last_user"]]
    assert first["status"] == 400 and second["status"] == 200
    assert second["prompt_tokens"] < first["prompt_tokens"]
    assert len(second["last_user"]) < len(first["last_user"])

    reply, snapshot, _ = await stored_turn(done["message_id"])
    assert reply.content == "It fits now."
    window = snapshot.plan["window"]
    assert window["retried"] is True and window["shrunk"] is True
    from memory.context.budget import allocate

    full = allocate(8192)
    for zone in ("index", "recent", "current", "tool_results"):
        assert window["zones"][zone]["allocated"] == full[zone] // 2
    assert window["zones"]["answer"]["allocated"] == full["answer"]
    # The zones recorded are of the request that was answered, within its halved zones.
    assert 0 < window["zones"]["current"]["used"] <= window["zones"]["current"]["allocated"]
    assert window["prompt_tokens"] == second["prompt_tokens"]
    await ws.disconnect()


async def test_a_second_refusal_fails_the_turn_clearly_and_keeps_what_arrived(
    owner, conversation, scripted_llm, settings
):
    settings.CHAT_CONTEXT_TOKENS = 8192
    search = {"name": "search_and_retrieve", "arguments": {"query": "harbour"}}
    scripted_llm.script(
        {"text": "Let me look that up.", "tool_calls": [search]},
        {"context_length_exceeded": True},
        {"context_length_exceeded": True},
        {"text": "never sent"},
        match="TWICE-TOO-LONG",
    )
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "TWICE-TOO-LONG what about the harbour?"})
    events = await receive_until(ws, "reply_done", timeout=60)
    done = events[-1]
    assert done["status"] == "failed"
    assert "context window" in done["error"] and "CHAT_CONTEXT_TOKENS" in done["error"]
    assert len([r for r in scripted_llm.requests if "TWICE-TOO-LONG" in r["last_user"]]) == 3

    reply, snapshot, calls = await stored_turn(done["message_id"])
    assert reply.content == "Let me look that up."
    assert reply.metadata["status"] == "failed" and reply.metadata["incomplete"] is True
    assert "context window" in reply.metadata["error"]
    assert [c.tool_name for c in calls] == ["search_and_retrieve"]
    assert snapshot.plan["window"]["retried"] is True
    await ws.disconnect()


async def test_a_window_set_larger_than_the_model_has_ends_in_a_clear_error(
    owner, conversation, scripted_llm, settings
):
    # The app believes the model has 128k tokens; the server has 4k and refuses both tries.
    settings.CHAT_CONTEXT_TOKENS = 128_000
    scripted_llm.post("/_config", {"context_window": 4096})
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "MIS-SET " + prose(300_000, seed=4)})
    events = await receive_until(ws, "reply_done", timeout=60)
    done = events[-1]
    assert done["status"] == "failed" and "CHAT_CONTEXT_TOKENS" in done["error"]
    sent = [r for r in scripted_llm.requests if "MIS-SET" in r["last_user"]]
    assert [r["status"] for r in sent] == [400, 400]
    assert sent[1]["prompt_tokens"] < sent[0]["prompt_tokens"] and sent[0]["prompt_tokens"] > 4096
    # The message itself is stored whole.
    user_message = next(e for e in events if e["type"] == "message" and e["role"] == "user")

    @database_sync_to_async
    def stored_length():
        return len(Message.objects.get(pk=user_message["message_id"]).content)

    assert await stored_length() == len("MIS-SET ") + 300_000
    await ws.disconnect()
