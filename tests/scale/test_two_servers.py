"""Beyond one process: two daphne servers share one Redis channel layer and one database.

A message sent through one server reaches a websocket client of the same conversation that is
connected to the other, with the streamed reply, and both see the same stored conversation.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from bench.launch import ServerProcess, session_cookie
from memory.models import Conversation, Message
from tests.scale.conftest import database_name
from tests.servers import events_until, open_socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def server_pair(django_db_setup, django_db_blocker, redis_server, module_llm):
    db_name = database_name(django_db_blocker)
    servers = [
        ServerProcess(f"cluster-{i}", db_name, module_llm.base_url, redis_url=redis_server.url)
        for i in (1, 2)
    ]
    try:
        for server in servers:
            server.start(wait=False)
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()


async def test_a_message_sent_through_one_server_reaches_a_client_on_the_other(
    server_pair, owner, conversation, module_llm
):
    first, second = server_pair
    cookie = await asyncio.to_thread(session_cookie, owner)
    module_llm.state.reset()
    script = [{"text": "Redis carried every word of this", "delay": 0.01}]
    module_llm.state.add_script("across", script, False)
    async with (
        await open_socket(first, cookie, conversation.pk) as here,
        await open_socket(second, cookie, conversation.pk) as there,
    ):
        await here.send(json.dumps({"type": "send", "content": "hello across servers", "client_id": "a1"}))
        sent = await events_until(here, "reply_done")
        seen = await events_until(there, "reply_done")

        assert [e["type"] for e in seen][:2] == ["message", "reply_started"]
        assert "hello across servers" in seen[0]["html"]
        assert "".join(e["delta"] for e in seen if e["type"] == "token") == "Redis carried every word of this"
        assert seen[-1]["message_id"] == sent[-1]["message_id"] and seen[-1]["status"] == "complete"

        # And the other way round, from the second server to a client of the first.
        await there.send(json.dumps({"type": "send", "content": "and back again"}))
        back = await events_until(here, "reply_done")
        assert "and back again" in back[0]["html"]
        assert back[-1]["status"] == "complete"
        await events_until(there, "reply_done")

    def stored():
        return list(
            Message.objects.filter(conversation=conversation, is_chunk=False)
            .order_by("position").values_list("role", "content")
        )

    rows = await asyncio.to_thread(stored)
    assert rows[0] == ("user", "hello across servers") and rows[2] == ("user", "and back again")
    assert [r[0] for r in rows] == ["user", "assistant", "user", "assistant"]


async def test_a_stranger_cannot_join_a_conversation_on_either_server(server_pair, stranger, conversation):
    cookie = await asyncio.to_thread(session_cookie, stranger)
    for server in server_pair:
        with pytest.raises(Exception) as refused:
            async with await open_socket(server, cookie, conversation.pk) as ws:
                await ws.recv()
        assert "4404" in str(refused.value)
    assert await asyncio.to_thread(Conversation.objects.filter(pk=conversation.pk).exists)


async def test_tokens_cross_redis_only_to_a_tab_the_writer_knows_of_which_first_gets_the_text_so_far(
    server_pair, redis_server, owner, conversation, module_llm
):
    # A listener on the conversation's group that has not said hello stands for a tab whose
    # greeting has not arrived yet: it gets every event of the turn but no token (a tab alone
    # sends its tokens through Redis to no one). Once it says hello mid-reply, it gets the text
    # so far as one token, then the rest: all of the reply, once.
    from channels_redis.core import RedisChannelLayer

    first, _ = server_pair
    cookie = await asyncio.to_thread(session_cookie, owner)
    module_llm.state.reset()
    words = [f"w{i} " for i in range(40)]
    module_llm.state.add_script("quiet", [{"text": "".join(words), "delay": 0.03}], False)
    layer = RedisChannelLayer(hosts=[redis_server.url])
    listener = await layer.new_channel()
    await layer.group_add(f"conv.{conversation.pk}", listener)
    heard: list[dict] = []

    async def listen_until(event_type: str) -> None:
        async with asyncio.timeout(60):
            while not heard or heard[-1]["type"] != event_type:
                heard.append(await layer.receive(listener))

    try:
        async with await open_socket(first, cookie, conversation.pk) as tab:
            await tab.send(json.dumps({"type": "send", "content": "quiet please"}))
            written = []
            while sum(1 for e in written if e["type"] == "token") < 5:
                written.append(json.loads(await tab.recv()))
            await listen_until("chat.reply_started")
            assert "chat.token" not in [e["type"] for e in heard]
            before = len(heard)
            await layer.group_send(f"conv.{conversation.pk}", {"type": "chat.hello", "origin": listener})
            await listen_until("chat.reply_done")
            await events_until(tab, "reply_done")
        tokens = [e for e in heard[before:] if e["type"] == "chat.token"]
        # The first is the text so far, whole; each later one says where its delta starts
        # (`at`), and the tab keeps what it has, as chat.js does.
        assert tokens[0]["text"].startswith("w0 w1 w2 w3 w4 ") and tokens[0]["at"] == 0
        text = tokens[0]["text"]
        for e in tokens[1:]:
            assert e["at"] <= len(text), "a gap in the reply"
            text = text[: e["at"]] + e["delta"] if e["at"] + len(e["delta"]) > len(text) else text
        assert text == "".join(words)
        turn_events = [e["type"] for e in heard[:before] if e["type"] not in ("chat.hello", "chat.here")]
        assert turn_events[:2] == ["chat.message", "chat.reply_started"]
    finally:
        await layer.group_discard(f"conv.{conversation.pk}", listener)
        await layer.close_pools()
