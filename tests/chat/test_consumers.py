"""The chat websocket against the scripted LLM, through the real openai client."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async

from memory.models import ContextSnapshot, Conversation, Message, ToolCall
from tests.chat.conftest import connect, exchange, past_the_rate_limit, receive_until, refusal_code

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def messages_of(conversation):
    return list(Message.objects.filter(conversation=conversation, is_chunk=False).order_by("position"))


@database_sync_to_async
def tool_calls_of(message_id):
    return list(ToolCall.objects.filter(message_id=message_id, is_chunk=False).order_by("timestamp"))


async def test_it_streams_a_reply_in_order_and_stores_both_messages(owner, conversation, scripted_llm):
    scripted_llm.script({"text": "one two three four five", "delay": 0.01})
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "count to five", "client_id": "c1"})
    events = await receive_until(ws, "reply_done")
    types = [e["type"] for e in events]
    assert types[0] == "message" and types[1] == "reply_started" and types[-1] == "reply_done"
    tokens = [e["delta"] for e in events if e["type"] == "token"]
    assert "".join(tokens) == "one two three four five"
    assert 1 < len(tokens) <= 5  # streamed in pieces (tokens that queue up share an event)
    stored_user, done = events[0], events[-1]
    assert stored_user["client_id"] == "c1" and "count to five" in stored_user["html"]
    assert done["status"] == "complete" and done["strategy"]
    assert done["usage"]["completion_tokens"] == 5
    rows = await messages_of(conversation)
    assert [(m.role, m.content) for m in rows] == [
        ("user", "count to five"),
        ("assistant", "one two three four five"),
    ]
    assert rows[1].parent_id == rows[0].pk and rows[1].pk == done["message_id"]
    snapshot = await database_sync_to_async(ContextSnapshot.objects.get)(message_id=rows[1].pk)
    assert snapshot.user_message_id == rows[0].pk
    await ws.disconnect()


async def test_the_model_is_sent_the_index_recent_messages_and_memory_tools(
    owner, conversation, scripted_llm
):
    ws = await connect(owner, conversation.pk)
    await exchange(ws, "first message about zebras")
    await exchange(ws, "second message")
    request = scripted_llm.requests[-1]
    roles = [m["role"] for m in request["messages"]]
    assert roles[0] == "system" and "Recollect" in request["messages"][0]["content"]
    assert roles[-1] == "user" and request["messages"][-1]["content"] == "second message"
    contents = [m["content"] for m in request["messages"][1:-1]]
    assert "first message about zebras" in contents
    assert request["tools"], "memory tools are offered"
    await ws.disconnect()


async def test_it_executes_tool_calls_and_stores_them_on_the_reply(owner, conversation, scripted_llm):
    marker = "tooltest"
    scripted_llm.script(
        {"tool_calls": [{"name": "vector_search", "arguments": {"query": "zebras"}}]},
        {"text": "Found it."},
        match=marker,
    )
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, f"{marker} what about zebras?")
    started = next(e for e in events if e["type"] == "tool_started")
    finished = next(e for e in events if e["type"] == "tool_finished")
    assert started["name"] == "vector_search" and "zebras" in started["label"]
    assert finished["ok"] is True and finished["call_id"] == started["call_id"]
    assert events.index(started) < events.index(finished)
    done = events[-1]
    assert done["status"] == "complete" and "Found it." in done["html"]
    calls = await tool_calls_of(done["message_id"])
    assert [c.tool_name for c in calls] == ["vector_search"]
    assert json.loads(calls[0].arguments) == {"query": "zebras"} and not calls[0].is_error
    # The tool result went back to the model as a tool message.
    second = [r for r in scripted_llm.requests if marker in r["last_user"]][-1]
    assert second["messages"][-1]["role"] == "tool"
    await ws.disconnect()


async def test_broken_tool_arguments_and_unknown_tools_come_back_as_errors(owner, conversation, scripted_llm):
    marker = "brokenargs"
    scripted_llm.script(
        {
            "tool_calls": [
                {"name": "vector_search", "arguments": "{not json"},
                {"name": "launch_rockets", "arguments": {}},
            ]
        },
        {"text": "Sorry, let me answer anyway."},
        match=marker,
    )
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, f"{marker} please")
    finished = [e for e in events if e["type"] == "tool_finished"]
    assert [f["ok"] for f in finished] == [False, False]
    assert "JSON" in finished[0]["error"] and "unknown tool" in finished[1]["error"]
    assert events[-1]["status"] == "complete"
    calls = await tool_calls_of(events[-1]["message_id"])
    assert [c.is_error for c in calls] == [True, True]
    await ws.disconnect()


async def test_the_tool_loop_stops_after_max_rounds(owner, conversation, scripted_llm, settings):
    settings.MAX_TOOL_ROUNDS = 2
    marker = "looping"
    scripted_llm.script(
        {"tool_calls": [{"name": "vector_search", "arguments": {"query": "again"}}]},
        match=marker,
        repeat=True,
    )
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, f"{marker} forever")
    assert len([e for e in events if e["type"] == "tool_started"]) == 2
    requests = [r for r in scripted_llm.requests if marker in r["last_user"]]
    assert len(requests) == 3 and requests[-1]["tools"] == []
    await ws.disconnect()


async def test_stop_keeps_what_arrived(owner, conversation, scripted_llm):
    scripted_llm.script({"text": " ".join(f"word{i}" for i in range(200)), "delay": 0.02})
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "talk for a long time"})
    events = await receive_until(ws, "token")
    for _ in range(3):
        events.append(await ws.receive_json_from(timeout=10))
    await ws.send_json_to({"type": "stop"})
    events += await receive_until(ws, "reply_done")
    done = events[-1]
    assert done["status"] == "stopped"
    streamed = "".join(e["delta"] for e in events if e["type"] == "token")
    rows = await messages_of(conversation)
    assert rows[-1].content == streamed and 0 < len(streamed.split()) < 200
    assert rows[-1].metadata["incomplete"] is True
    await ws.disconnect()


async def test_a_stream_cut_midway_keeps_the_partial_reply_and_says_so(owner, conversation, scripted_llm):
    scripted_llm.script({"text": "alpha beta gamma delta epsilon", "drop_after": 3})
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, "tell me")
    done = events[-1]
    assert done["status"] == "failed" and "cut" in done["error"]
    rows = await messages_of(conversation)
    assert rows[0].content == "tell me"
    assert rows[-1].content == "alpha beta gamma " and rows[-1].metadata["incomplete"] is True
    # The connection is still usable.
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from())["type"] == "pong"
    await ws.disconnect()


async def test_it_retries_a_429_and_a_500_then_answers(owner, conversation, scripted_llm):
    scripted_llm.script({"status": 429}, {"status": 500}, {"text": "made it"}, match="flaky")
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, "flaky provider")
    assert events[-1]["status"] == "complete" and "made it" in events[-1]["html"]
    assert [r["status"] for r in scripted_llm.requests if "flaky" in r["last_user"]] == [429, 500, 200]
    await ws.disconnect()


async def test_a_provider_that_stays_down_fails_clearly_and_keeps_the_user_message(
    owner, conversation, scripted_llm, settings
):
    settings.LLM_MAX_RETRIES = 1
    scripted_llm.script({"status": 500}, match="down", repeat=True)
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, "provider is down")
    assert events[-1]["status"] == "failed" and "500" in events[-1]["error"]
    rows = await messages_of(conversation)
    assert rows[0].content == "provider is down"
    await ws.disconnect()


async def test_bad_frames_get_errors_and_the_connection_stays_up(owner, conversation, scripted_llm, stranger):
    ws = await connect(owner, conversation.pk)
    await ws.send_to(text_data="this is not json")
    assert (await ws.receive_json_from())["code"] == "bad_frame"
    await ws.send_to(text_data="[1, 2]")
    assert (await ws.receive_json_from())["code"] == "bad_frame"
    await ws.send_json_to({"type": "launch"})
    assert (await ws.receive_json_from())["code"] == "unknown_type"
    await ws.send_json_to({"type": "send", "content": "   "})
    assert (await ws.receive_json_from())["code"] == "invalid"
    await ws.send_json_to({"type": "edit", "message_id": "01J00000000000000000000000", "content": "x"})
    assert (await ws.receive_json_from())["code"] == "not_found"
    await ws.send_to(bytes_data=b"\x00\x01")
    assert (await ws.receive_json_from())["code"] == "bad_frame"
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from())["type"] == "pong"
    assert await messages_of(conversation) == []
    await ws.disconnect()


async def test_a_one_megabyte_message_is_stored_whole(owner, conversation, scripted_llm):
    big = ("All work and no play makes Jack a dull boy. " * 24000)[:1_000_000]
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": big})
    events = await receive_until(ws, "reply_done", timeout=120)
    assert events[-1]["status"] == "complete"
    rows = await messages_of(conversation)
    assert rows[0].content == big
    await ws.disconnect()


async def test_two_tabs_on_one_conversation_both_see_the_reply(owner, conversation, scripted_llm):
    scripted_llm.script({"text": "shared reply here"})
    tab1 = await connect(owner, conversation.pk)
    tab2 = await connect(owner, conversation.pk)
    await tab1.send_json_to({"type": "send", "content": "hello from tab one"})
    events1 = await receive_until(tab1, "reply_done")
    events2 = await receive_until(tab2, "reply_done")
    assert [e["type"] for e in events1] == [e["type"] for e in events2]
    assert "".join(e["delta"] for e in events2 if e["type"] == "token") == "shared reply here"
    await tab1.disconnect()
    await tab2.disconnect()


def shown_text(events: list[dict]) -> str:
    """The reply's text as chat.js builds it from token events: `text` is all of it so far,
    a `delta` starts at character `at` (what the tab already has is skipped)."""
    text = ""
    for e in events:
        if e["type"] != "token":
            continue
        if "text" in e:
            text = e["text"]
        elif e["at"] <= len(text):
            text += e["delta"][len(text) - e["at"]:]
        else:
            text += e["delta"]
    return text


async def test_a_tab_heard_from_mid_reply_gets_the_text_so_far_once_then_the_rest(
    owner, conversation, scripted_llm
):
    # Alone, the writing tab sends its tokens to no one else; a tab it learns of while the
    # reply streams is sent the text so far, whole, then every later token.
    words = [f"w{i} " for i in range(30)]
    scripted_llm.script({"text": "".join(words), "delay": 0.02})
    tab1 = await connect(owner, conversation.pk)
    await tab1.send_json_to({"type": "send", "content": "a long reply please"})
    seen = []
    while sum(1 for e in seen if e["type"] == "token") < 3:
        seen.append(await tab1.receive_json_from(timeout=10))
    tab2 = await connect(owner, conversation.pk)
    events2 = await receive_until(tab2, "reply_done")
    await receive_until(tab1, "reply_done")
    tokens2 = [e for e in events2 if e["type"] == "token"]
    assert shown_text(events2) == "".join(words)
    assert tokens2[0]["text"].startswith("w0 w1 w2 ")  # the catch-up: all of it at once
    assert tokens2[0]["parent_id"]  # where the row goes, in a tab that never saw it start
    await tab1.disconnect()
    await tab2.disconnect()


async def test_a_third_tab_opened_mid_reply_gets_the_text_so_far(owner, conversation, scripted_llm):
    # Two tabs already share the tokens; a third joining later missed their start.
    words = [f"w{i} " for i in range(30)]
    scripted_llm.script({"text": "".join(words), "delay": 0.02})
    tab1 = await connect(owner, conversation.pk)
    tab2 = await connect(owner, conversation.pk)
    await tab1.send_json_to({"type": "send", "content": "a long reply please"})
    seen = []
    while sum(1 for e in seen if e["type"] == "token") < 5:
        seen.append(await tab2.receive_json_from(timeout=10))
    tab3 = await connect(owner, conversation.pk)
    events3 = await receive_until(tab3, "reply_done")
    assert shown_text(events3) == "".join(words)
    assert shown_text(seen + await receive_until(tab2, "reply_done")) == "".join(words)
    for tab in (tab1, tab2, tab3):
        await tab.disconnect()


async def test_a_reloaded_tab_gets_the_rest_of_the_reply_and_can_stop_it(owner, conversation, scripted_llm):
    # The tab that sent the message closes mid-reply (a reload): the turn runs on, and the tab
    # opened in its place is sent the text and can stop it.
    words = [f"w{i} " for i in range(60)]
    scripted_llm.script({"text": "".join(words), "delay": 0.05})
    tab1 = await connect(owner, conversation.pk)
    await tab1.send_json_to({"type": "send", "content": "a long reply please"})
    seen = []
    while sum(1 for e in seen if e["type"] == "token") < 3:
        seen.append(await tab1.receive_json_from(timeout=10))
    await tab1.disconnect()
    tab2 = await connect(owner, conversation.pk)
    events = []
    while sum(1 for e in events if e["type"] == "token") < 2:
        events.append(await tab2.receive_json_from(timeout=10))
    assert shown_text(events).startswith("w0 w1 w2 ")
    await tab2.send_json_to({"type": "stop"})
    events += await receive_until(tab2, "reply_done")
    done = events[-1]
    assert done["status"] == "stopped"
    assert "w59" not in shown_text(events)
    await tab2.disconnect()


async def test_a_new_conversation_is_named_after_its_first_message_in_every_tab(owner, scripted_llm):
    conversation = await database_sync_to_async(Conversation.objects.create)(owner=owner)
    tab1 = await connect(owner, conversation.pk)
    tab2 = await connect(owner, conversation.pk)
    await tab1.send_json_to({"type": "send", "content": "Plans for  the\ntrip to Lisbon"})
    for tab in (tab1, tab2):
        events = await receive_until(tab, "reply_done")
        named = [e for e in events if e["type"] == "conversation_updated"]
        assert named == [{"type": "conversation_updated", "title": "Plans for the trip to Lisbon"}]
    await tab1.send_json_to({"type": "send", "content": "and the hotel"})
    events = await receive_until(tab1, "reply_done")
    assert not [e for e in events if e["type"] == "conversation_updated"]  # named once
    await tab1.disconnect()
    await tab2.disconnect()


async def test_another_users_conversation_is_refused(owner, stranger_conversation):
    from channels.testing import WebsocketCommunicator

    from tests.chat.conftest import ws_app

    ws = WebsocketCommunicator(ws_app(), f"/ws/chat/{stranger_conversation.pk}/")
    ws.scope["user"] = owner
    assert await refusal_code(ws) == 4404


async def test_anonymous_users_and_foreign_origins_are_refused(conversation):
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth.models import AnonymousUser

    from config.asgi import application
    from tests.chat.conftest import ws_app

    ws = WebsocketCommunicator(ws_app(), f"/ws/chat/{conversation.pk}/")
    ws.scope["user"] = AnonymousUser()
    assert await refusal_code(ws) == 4401
    evil = WebsocketCommunicator(
        application, f"/ws/chat/{conversation.pk}/", headers=[(b"origin", b"http://evil.example")]
    )
    connected, _ = await evil.connect()
    assert not connected


async def test_frames_about_another_users_messages_answer_not_found(
    owner, conversation, stranger, stranger_conversation, scripted_llm
):
    @database_sync_to_async
    def stranger_message():
        from memory.storage.store import store_message

        return store_message(stranger, stranger_conversation, "user", "stranger's secret", embed=False)

    secret = await stranger_message()
    ws = await connect(owner, conversation.pk)
    for frame in (
        {"type": "edit", "message_id": secret.pk, "content": "mine now"},
        {"type": "delete", "message_id": secret.pk},
        {"type": "forget", "message_id": secret.pk},
        {"type": "regenerate", "message_id": secret.pk},
        {"type": "send", "content": "branch", "parent_id": secret.pk},
    ):
        await ws.send_json_to(frame)
        event = await ws.receive_json_from(timeout=10)
        assert event["code"] == "not_found", frame
        assert "secret" not in json.dumps(event)
    refreshed = await database_sync_to_async(Message.objects.get)(pk=secret.pk)
    assert refreshed.content == "stranger's secret" and not refreshed.deleted
    await ws.disconnect()


async def test_the_rate_limit_answers_with_an_error(owner, conversation, scripted_llm, settings):
    ws, event = await past_the_rate_limit(owner, conversation, settings)
    assert event["type"] == "error" and event["code"] == "rate_limited"
    assert [m.content for m in await messages_of(conversation) if m.role == "user"] == ["first"]
    await ws.disconnect()


async def test_offline_recall_answers_from_memory_when_no_model_is_configured(owner, conversation, no_llm):
    @database_sync_to_async
    def remember():
        from memory.storage.store import store_message

        return store_message(owner, conversation, "user", "My locker combination is 4417 at the gym")

    old = await remember()
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, "what is my locker combination?")
    done = events[-1]
    assert done["mode"] == "offline_recall" and "offline recall" in done["html"].lower()
    assert old.pk in done["html"] and 'href="' in done["html"]
    rows = await messages_of(conversation)
    assert "4417" in rows[-1].content
    calls = await tool_calls_of(rows[-1].pk)
    assert calls[0].tool_name == "search_and_retrieve"
    await ws.disconnect()
    await asyncio.sleep(0)


async def test_regenerate_answers_the_same_message_again_as_a_new_branch(owner, conversation, scripted_llm):
    scripted_llm.script({"text": "first answer"}, {"text": "second answer"}, match="regen me")
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "regen me please"})
    first = (await receive_until(ws, "reply_done"))[-1]
    await ws.send_json_to({"type": "regenerate", "message_id": first["message_id"]})
    events = await receive_until(ws, "reply_done")
    assert not [e for e in events if e["type"] == "message"], "no new user message"
    second = events[-1]
    rows = await messages_of(conversation)
    assert [m.role for m in rows] == ["user", "assistant", "assistant"]
    assert rows[1].parent_id == rows[2].parent_id == rows[0].pk
    assert rows[2].content == "second answer" and "2/2" in second["html"]
    await ws.disconnect()


async def test_a_streamed_row_shows_its_place_among_other_versions(owner, conversation, scripted_llm):
    """A message sent after the active leaf and the reply to it are only children (their rows
    are rendered without reading siblings); a message sent as a new branch is not."""
    ws = await connect(owner, conversation.pk)
    first = await exchange(ws, "the first version")
    assert first[0]["type"] == "message" and "branch-pos" not in first[0]["html"]
    assert "branch-pos" not in first[-1]["html"]
    followed = await exchange(ws, "after the leaf")
    assert "branch-pos" not in followed[0]["html"] and "branch-pos" not in followed[-1]["html"]
    await ws.send_json_to({"type": "send", "content": "the second version", "parent_id": None})
    events = await receive_until(ws, "reply_done")
    assert events[0]["type"] == "message" and ">2/2<" in events[0]["html"]
    assert "branch-pos" not in events[-1]["html"]  # the new message's only reply
    await ws.disconnect()


async def test_an_edited_branch_leaves_the_old_branch_out_of_the_recent_conversation(
    owner, conversation, scripted_llm
):
    ws = await connect(owner, conversation.pk)
    await exchange(ws, "my favourite colour is green")
    rows = await messages_of(conversation)
    await ws.send_json_to({"type": "send", "content": "my favourite colour is blue", "parent_id": None})
    events = await receive_until(ws, "reply_done")
    assert events[0]["type"] == "message" and events[0]["parent_id"] is None
    await exchange(ws, "what did I say?")
    sent = scripted_llm.requests[-1]["messages"]
    history = [m["content"] for m in sent if m["role"] in {"user", "assistant"}]
    assert "my favourite colour is blue" in history
    assert "my favourite colour is green" not in history and rows[0].content == "my favourite colour is green"
    await ws.disconnect()


async def test_edit_delete_restore_and_forget_through_the_socket(owner, conversation, scripted_llm):
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "the meeting is on Monday"})
    done = (await receive_until(ws, "reply_done"))[-1]
    user_id = (await messages_of(conversation))[0].pk
    await ws.send_json_to({"type": "edit", "message_id": user_id, "content": "the meeting is on Tuesday"})
    updated = await ws.receive_json_from(timeout=30)
    assert (
        updated["type"] == "message_updated" and "Tuesday" in updated["html"] and "history" in updated["html"]
    )
    await ws.send_json_to({"type": "delete", "message_id": done["message_id"]})
    deleted = await ws.receive_json_from(timeout=10)
    assert deleted["type"] == "message_deleted" and "Undo" in deleted["html"]
    await ws.send_json_to({"type": "restore", "message_id": done["message_id"]})
    assert (await ws.receive_json_from(timeout=10))["type"] == "message_restored"
    await ws.send_json_to({"type": "forget", "message_id": done["message_id"]})
    assert (await ws.receive_json_from(timeout=10))["type"] == "message_forgotten"
    rows = await messages_of(conversation)
    assert [(m.content, m.edited) for m in rows] == [("the meeting is on Tuesday", True)]
    await ws.disconnect()


async def test_editing_a_chunk_is_refused_with_a_clear_error(owner, conversation, scripted_llm, settings):
    settings.INDEX_CHUNK_THRESHOLD = 100

    @database_sync_to_async
    def long_message():
        from memory.storage.store import store_message

        message = store_message(owner, conversation, "user", "lorem ipsum dolor " * 200, embed=False)
        return message.chunks.order_by("chunk_index").first()

    chunk = await long_message()
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "edit", "message_id": chunk.pk, "content": "x"})
    event = await ws.receive_json_from(timeout=10)
    assert event["type"] == "error" and event["code"] == "invalid" and "chunk" in event["message"]
    await ws.disconnect()


async def test_tokens_that_queue_up_share_events_and_keep_their_order(owner, conversation, scripted_llm):
    # 300 words with no delay arrive faster than one socket sends them: they are merged into
    # fewer events, and nothing is lost, reordered or sent after reply_done. A second tab (the
    # group path) sees the same text.
    scripted_llm.script({"words": 300, "delay": 0})
    ws = await connect(owner, conversation.pk)
    other = await connect(owner, conversation.pk)
    events = await exchange(ws, "a burst of words")
    seen = await receive_until(other, "reply_done")
    expected = "".join(f"w{i} " for i in range(300))
    for stream in (events, seen):
        tokens = [e for e in stream if e["type"] == "token"]
        assert "".join(e["delta"] for e in tokens) == expected
        assert stream[-1]["type"] == "reply_done"
        assert stream.index(tokens[-1]) < len(stream) - 1
    await ws.disconnect()
    await other.disconnect()


def test_merge_tokens_joins_consecutive_deltas_of_one_reply():
    from chat.frames import merge_tokens

    events = [
        {"type": "chat.token", "message_id": "A", "delta": "one "},
        {"type": "chat.token", "message_id": "A", "delta": "two "},
        {"type": "chat.token", "message_id": "B", "delta": "three"},
    ]
    assert merge_tokens(events) == [
        {"type": "chat.token", "message_id": "A", "delta": "one two "},
        {"type": "chat.token", "message_id": "B", "delta": "three"},
    ]
    assert merge_tokens([]) == []


async def test_coalesced_token_frames_carry_the_same_text_as_a_frame_per_token(owner, scripted_llm, settings):
    words = " ".join(f"word{i}" for i in range(40))
    seen = {}
    for interval in (0.0, 0.05):
        settings.CHAT_TOKEN_FRAME_SECONDS = interval
        conversation = await database_sync_to_async(Conversation.objects.create)(owner=owner, title="")
        scripted_llm.script({"text": words, "delay": 0.005})
        ws = await connect(owner, conversation.pk)
        events = await exchange(ws, "say the words")
        await ws.disconnect()
        deltas = [e["delta"] for e in events if e["type"] == "token"]
        rows = await messages_of(conversation)
        # The page appends each delta to the reply's text, whatever its length.
        seen[interval] = {"page": "".join(deltas), "stored": rows[-1].content, "frames": len(deltas)}
    one_per_token, coalesced = seen[0.0], seen[0.05]
    assert one_per_token["page"] == one_per_token["stored"] == words
    assert coalesced["page"] == coalesced["stored"] == words
    assert coalesced["frames"] < len(words.split())
    assert coalesced["frames"] < one_per_token["frames"]


async def test_a_turns_messages_get_their_vectors_from_the_queued_upkeep(owner, conversation, scripted_llm):
    """No embedding on the turn's path: the upkeep the turn queues gives both messages vectors."""
    from django_tasks_db.models import DBTaskResult

    from memory.models import Passage
    from memory.tasks import run_upkeep

    scripted_llm.script({"text": "It is 1,300 metres deep."})
    ws = await connect(owner, conversation.pk)
    await exchange(ws, "How deep is the Sognefjord?")
    await ws.disconnect()
    rows = await messages_of(conversation)

    ids = [m.pk for m in rows]

    @database_sync_to_async
    def queued():
        upkeeps = DBTaskResult.objects.filter(task_path__endswith="topic_upkeep")
        return [t.args_kwargs["args"] for t in upkeeps]

    for _ in range(50):  # the upkeep is queued just after reply_done is sent
        if [owner.pk, ids] in await queued():
            break
        await asyncio.sleep(0.1)
    assert [owner.pk, ids] in await queued()

    @database_sync_to_async
    def check():
        assert not Passage.objects.filter(logical_message_id__in=ids, embedding__isnull=False).exists()
        run_upkeep(owner, ids)  # what the worker runs
        assert not Passage.objects.filter(logical_message_id__in=ids, embedding__isnull=True).exists()

    await check()


async def test_offline_recall_answers_are_shown_but_never_become_memory(owner, conversation, no_llm):
    """Recollect's own text (the offline answer and its search) feeds no search, topic or entity."""
    from memory.finding.search import search
    from memory.models import EntityMention, Passage, TopicMembership
    from memory.storage.store import store_message
    from memory.tasks import run_upkeep

    await database_sync_to_async(store_message)(
        owner, conversation, "user", "The spare key is under the blue flowerpot"
    )
    ws = await connect(owner, conversation.pk)
    await exchange(ws, "where is the spare key?")
    await ws.disconnect()
    rows = await messages_of(conversation)
    reply = rows[-1]
    assert reply.metadata["mode"] == "offline_recall" and "flowerpot" in reply.content

    @database_sync_to_async
    def memory_of_the_reply():
        run_upkeep(owner, [m.pk for m in rows])
        return (
            Passage.objects.filter(logical_message_id=reply.pk).count(),
            EntityMention.objects.filter(message_id=reply.pk).count(),
            TopicMembership.objects.filter(message_id=reply.pk).count(),
            [h.message_id for h in search(owner, "offline recall flowerpot").hits],
        )

    passages, mentions, memberships, found = await memory_of_the_reply()
    assert (passages, mentions, memberships) == (0, 0, 0)
    assert reply.pk not in found and rows[0].pk in found
    await asyncio.sleep(0)


async def test_every_change_made_through_the_socket_queues_topic_upkeep(owner, conversation, scripted_llm):
    """Edit, delete, restore and forget each queue upkeep, so no label or summary keeps old words."""
    from django_tasks_db.models import DBTaskResult

    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "the pin of the garage is 7731"})
    done = (await receive_until(ws, "reply_done"))[-1]
    user_id = (await messages_of(conversation))[0].pk

    @database_sync_to_async
    def queued_for(message_id):
        return sum(
            1
            for t in DBTaskResult.objects.filter(task_path__endswith="topic_upkeep")
            if message_id in t.args_kwargs["args"][1]
        )

    # The turn queues its own upkeep just after reply_done: let that land first.
    for _ in range(100):
        if await queued_for(done["message_id"]):
            break
        await asyncio.sleep(0.05)
    before = await queued_for(user_id), await queued_for(done["message_id"])
    assert before == (1, 1)
    await ws.send_json_to({"type": "edit", "message_id": user_id, "content": "the garage has no pin"})
    await ws.receive_json_from(timeout=30)
    for kind in ("delete", "restore", "forget"):
        await ws.send_json_to({"type": kind, "message_id": done["message_id"]})
        await ws.receive_json_from(timeout=10)
    after = await queued_for(user_id), await queued_for(done["message_id"])
    assert (after[0] - before[0], after[1] - before[1]) == (1, 3)
    await ws.disconnect()


async def test_tool_calls_past_the_per_round_cap_are_answered_not_run(
    owner, conversation, scripted_llm, settings
):
    settings.MAX_TOOL_CALLS_PER_ROUND = 3
    scripted_llm.script(
        {"tool_calls": [{"name": "vector_search", "arguments": {"query": f"q{i}"}} for i in range(7)]},
        match="many calls",
    )
    scripted_llm.script({"text": "done"}, match="")
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, "many calls please")
    assert len([e for e in events if e["type"] == "tool_started"]) == 3
    calls = await tool_calls_of(events[-1]["message_id"])
    assert len(calls) == 7 and sum(c.is_error for c in calls) == 4
    second = [r for r in scripted_llm.requests if "many calls" in r["last_user"]][-1]
    tool_messages = [m for m in second["messages"] if m.get("role") == "tool"]
    skipped = [m for m in tool_messages if "at most 3 tool calls per round" in m["content"]]
    assert len(tool_messages) == 7 and len(skipped) == 4
    await ws.disconnect()


async def test_stop_is_honoured_between_tool_calls(owner, conversation, scripted_llm, monkeypatch):
    """A stop that arrives while a tool runs ends the turn before the next of the model's five
    tool calls. The first call is held until the consumer has heard the stop: the test waits for
    that event rather than betting on how long a tool takes on a busy machine."""
    import threading

    from chat import consumers, turn

    real = turn.execute_tool
    release = threading.Event()

    def held(*args, **kwargs):
        release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(turn, "execute_tool", held)
    scripted_llm.script(
        {"tool_calls": [{"name": "vector_search", "arguments": {"query": f"q{i}"}} for i in range(5)]},
        match="slow tools",
    )
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "slow tools please"})
    events = await receive_until(ws, "tool_started")
    await ws.send_json_to({"type": "stop"})
    [stop] = consumers._running_turns[conversation.pk]
    await asyncio.wait_for(stop.wait(), 30)
    release.set()
    events += await receive_until(ws, "reply_done")
    assert events[-1]["status"] == "stopped"
    assert len([e for e in events if e["type"] == "tool_started"]) == 1
    assert len([r for r in scripted_llm.requests if "slow tools" in r["last_user"]]) == 1
    await ws.disconnect()


async def test_a_lone_surrogate_is_stored_replaced_in_a_message_and_an_edit_and_said_so(
    owner, conversation, no_llm
):
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "half an emoji \ud83d here", "client_id": "s1"})
    events = await receive_until(ws, "reply_done")
    assert events[0]["type"] == "message" and events[0]["client_id"] == "s1"
    stored = (await messages_of(conversation))[0]
    assert stored.content == "half an emoji \ufffd here"
    assert stored.metadata["surrogates_replaced"] == 1
    await ws.send_json_to({"type": "edit", "message_id": stored.pk, "content": "\udc00 both \ud800 ends"})
    updated = await receive_until(ws, "message_updated")
    assert "\ufffd both \ufffd ends" in updated[-1]["html"]
    edited = (await messages_of(conversation))[0]
    assert edited.content == "\ufffd both \ufffd ends" and edited.metadata["surrogates_replaced"] == 2
    await ws.disconnect()


async def test_a_type_that_is_not_text_or_an_id_holding_nul_answers_invalid(owner, conversation, no_llm):
    ws = await connect(owner, conversation.pk)
    await exchange(ws, "a first message")
    first = (await messages_of(conversation))[0]
    frames = [
        {"type": ["send"], "content": "x"},
        {"type": {"send": 1}, "content": "x"},
        {"type": "send", "content": "x", "parent_id": f"{first.pk}\x00"},
        {"type": "edit", "message_id": "\x00", "content": "x"},
        {"type": "delete", "message_id": f"{first.pk}\x00"},
        {"type": "regenerate", "message_id": "a\x00b"},
    ]
    for frame in frames:
        await ws.send_json_to(frame)
        answer = await ws.receive_json_from(timeout=30)
        assert (answer["type"], answer["code"]) == ("error", "invalid"), frame
    assert [m.content for m in await messages_of(conversation)][0] == "a first message"
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from(timeout=30) == {"type": "pong"}  # still open
    await ws.disconnect()


async def test_stop_while_no_reply_is_written_answers_idle_and_keeps_the_socket(owner, conversation, no_llm):
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "stop"})
    answer = await ws.receive_json_from(timeout=30)
    assert (answer["type"], answer["code"], answer["frame"]) == ("error", "idle", "stop")
    assert answer["message"] == "No reply is being written: there is nothing to stop."
    await exchange(ws, "still here?")
    await ws.send_json_to({"type": "stop"})  # the reply is done: idle again
    assert (await ws.receive_json_from(timeout=30))["code"] == "idle"
    await ws.disconnect()


async def test_a_long_parent_id_is_refused_without_being_echoed_back(owner, conversation, no_llm):
    ws = await connect(owner, conversation.pk)
    for parent_id in ["A" * 10_000, "Z" * 27]:
        await ws.send_json_to({"type": "send", "content": "hello", "parent_id": parent_id})
        answer = await ws.receive_json_from(timeout=30)
        assert (answer["type"], answer["code"]) == ("error", "invalid")
        assert answer["message"] == "parent_id is not a message id" and len(json.dumps(answer)) < 200
    # An unknown id of the right length is told as not found, and shown whole (26 characters).
    await ws.send_json_to({"type": "send", "content": "hello", "parent_id": "0" * 26})
    answer = await ws.receive_json_from(timeout=30)
    assert (answer["code"], answer["message"]) == ("not_found", f"message {'0' * 26} not found")
    assert not await messages_of(conversation)
    await ws.disconnect()


async def test_a_long_first_message_names_the_conversation_up_to_a_word_with_an_ellipsis(owner, scripted_llm):
    conversation = await database_sync_to_async(Conversation.objects.create)(owner=owner)
    tab = await connect(owner, conversation.pk)
    text = "Could you help me plan a two week walking holiday through the hills of northern Portugal"
    await tab.send_json_to({"type": "send", "content": text})
    events = await receive_until(tab, "reply_done")
    [named] = [e["title"] for e in events if e["type"] == "conversation_updated"]
    assert named == "Could you help me plan a two week walking holiday through…"
    assert len(named) <= 60
    await tab.disconnect()


async def test_editing_the_first_message_renames_a_conversation_named_after_it(owner, scripted_llm):
    conversation = await database_sync_to_async(Conversation.objects.create)(owner=owner)
    tab1 = await connect(owner, conversation.pk)
    tab2 = await connect(owner, conversation.pk)
    await tab1.send_json_to({"type": "send", "content": "Trip to Lisbon"})
    events = await receive_until(tab1, "reply_done")
    await receive_until(tab2, "reply_done")
    first = next(e["message_id"] for e in events if e["type"] == "message")
    await tab1.send_json_to({"type": "edit", "message_id": first, "content": "Trip to Porto in May"})
    for tab in (tab1, tab2):
        events = await receive_until(tab, "conversation_updated")
        assert events[-1]["title"] == "Trip to Porto in May"
    await conversation.arefresh_from_db()
    assert conversation.title == "Trip to Porto in May"

    # A title the person wrote stays through edits.
    conversation.title = "Holidays"
    await conversation.asave(update_fields=["title"])
    await tab1.send_json_to({"type": "edit", "message_id": first, "content": "Trip to Faro"})
    events = await receive_until(tab1, "message_updated")
    await conversation.arefresh_from_db()
    assert conversation.title == "Holidays"
    await tab1.send_json_to({"type": "ping"})
    assert [e["type"] for e in await receive_until(tab1, "pong")] == ["pong"]
    await tab1.disconnect()
    await tab2.disconnect()
