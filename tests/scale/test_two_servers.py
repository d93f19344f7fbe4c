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
        assert "4404" in str(refused.value) or "403" in str(refused.value)
    assert await asyncio.to_thread(Conversation.objects.filter(pk=conversation.pk).exists)
