"""Faults survived: after each, every message the user sent is stored, the conversation can
continue and the explorer shows what happened. The scenarios are the ones `manage.py
bench_faults` runs (config/management/commands/bench_faults.py); the server restart needs a
daphne process of its own and lives here."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect as ws_connect

from chat.models import ReplyDraft
from config.management.commands import bench_faults
from memory.models import Message
from tests.scale.conftest import ServerProcess, database_name, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def llm(scripted_llm, llm_server_instance):
    return llm_server_instance


def check(result: bench_faults.FaultResult) -> None:
    assert result.survived, result.notes
    assert result.lost == 0 and result.sent == result.stored > 0


def test_a_stream_the_provider_drops_keeps_its_partial_text(owner, conversation, llm):
    check(bench_faults.fault_llm_drops_stream(owner, conversation, llm))


def test_malformed_tool_arguments_and_unknown_tools_are_stored_as_errors(owner, conversation, llm):
    check(bench_faults.fault_bad_tool_calls(owner, conversation, llm))


def test_a_turn_survives_its_database_connections_being_terminated(owner, conversation, llm):
    check(bench_faults.fault_database_connection_lost(owner, conversation, llm))


@pytest.mark.slow
def test_a_task_killed_with_its_worker_runs_again_without_duplicate_topics(owner, conversation, llm):
    check(bench_faults.fault_worker_killed_mid_task(owner, conversation, llm))


@pytest.mark.slow
def test_a_server_killed_during_a_stream_loses_no_user_message_and_keeps_the_partial_reply(
    django_db_blocker, owner, conversation, llm_server_instance
):
    llm = llm_server_instance
    llm.state.reset()
    server = ServerProcess("restart", database_name(django_db_blocker), llm.base_url)
    server.start()
    cookie = session_cookie(owner)

    async def talk(text: str | None, *, kill_after_words: int | None = None) -> list[dict]:
        """Send `text` (None: only connect) and collect events until its reply is done."""
        events: list[dict] = []
        async with await ws_connect(
            f"{server.ws_url}/ws/chat/{conversation.pk}/",
            additional_headers={"Cookie": cookie, "Origin": server.url}, open_timeout=30,
        ) as ws:
            if text is None:
                async with asyncio.timeout(30):
                    return [json.loads(await ws.recv())]
            await ws.send(json.dumps({"type": "send", "content": text}))
            async with asyncio.timeout(120):
                while True:
                    try:
                        event = json.loads(await ws.recv())
                    except Exception:  # the server went away
                        return events
                    events.append(event)
                    words = sum(len(e["delta"].split()) for e in events if e["type"] == "token")
                    if kill_after_words is not None and words >= kill_after_words:
                        await asyncio.to_thread(server.kill)
                    if event["type"] == "reply_done":
                        return events

    try:
        llm.state.add_script("restartfault", [{"words": 400, "delay": 0.05}], False)
        # 40 words at 20 a second: the reply's draft has been saved at least once.
        cut = asyncio.run(talk("restartfault stream for a long time", kill_after_words=40))
        assert not any(e["type"] == "reply_done" for e in cut)
        streamed = "".join(e["delta"] for e in cut if e["type"] == "token")
        server.start()  # the same port, as a supervisor restarts it
        # The tab reconnects and is told what became of the reply it was watching.
        [recovered] = asyncio.run(talk(None))
        assert recovered["type"] == "reply_done" and recovered["status"] == "failed"
        assert "server stopped" in recovered["error"] and "incomplete" in recovered["html"]
        done = asyncio.run(talk("are you back after the restart?"))
        assert done[-1]["type"] == "reply_done" and done[-1]["status"] == "complete"
    finally:
        server.stop()

    rows = list(
        Message.objects.filter(conversation=conversation, is_chunk=False)
        .order_by("position").values_list("role", "content", "metadata")
    )
    assert [(role, content) for role, content, _ in rows if role == "user"] == [
        ("user", "restartfault stream for a long time"), ("user", "are you back after the restart?"),
    ]
    # The cut reply is stored with what had been saved of it, marked incomplete, before the
    # next turn, and it is the one whose id the reconnected tab was told.
    assert [role for role, _, _ in rows] == ["user", "assistant", "user", "assistant"]
    _, partial, metadata = rows[1]
    assert metadata["incomplete"] and metadata["status"] == "failed"
    assert partial.split() == [f"w{i}" for i in range(len(partial.split()))]
    assert 20 <= len(partial.split()) <= len(streamed.split())
    assert Message.objects.get(pk=recovered["message_id"]).content == partial
    assert not ReplyDraft.objects.exists()
    # The explorer shows the message whose reply was cut off by the crash, and that reply.
    from django.test import Client

    client = Client()
    client.force_login(owner)
    first = Message.objects.get(conversation=conversation, content="restartfault stream for a long time")
    assert client.get(f"/explorer/messages/{first.pk}/").status_code == 200
    page = client.get(f"/explorer/messages/{recovered['message_id']}/")
    assert page.status_code == 200 and "server stopped" in page.content.decode()
