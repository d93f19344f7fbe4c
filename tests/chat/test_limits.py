"""Abuse and cost limits, through the websocket as a person (or a script) meets them: every
action counts against the per-user rate limit, turns running at once are capped across tabs and
server processes, and one turn's tool results have a total size budget."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket

import pytest
from channels.db import database_sync_to_async

from memory.models import Conversation, Message, ToolCall
from tests.chat.conftest import connect, exchange, past_the_rate_limit, receive_until

pytestmark = pytest.mark.django_db(transaction=True)

SLOW = {"text": " ".join(f"word{i}" for i in range(40)), "delay": 0.05}  # about two seconds


@database_sync_to_async
def new_conversation(owner) -> Conversation:
    return Conversation.objects.create(owner=owner, title="another tab")


@database_sync_to_async
def replies_in(conversation) -> list[Message]:
    return list(
        Message.objects.filter(conversation=conversation, role="assistant", is_chunk=False).order_by(
            "position"
        )
    )


@database_sync_to_async
def user_messages_in(conversation) -> list[str]:
    return list(
        Message.objects.filter(conversation=conversation, role="user", is_chunk=False)
        .order_by("position")
        .values_list("content", flat=True)
    )


async def first_answer(ws) -> dict:
    """The first event a frame gets: an error, or the stored message of a turn that started."""
    return await ws.receive_json_from(timeout=30)


async def tabs(owner, n: int) -> list:
    """n sockets of one user, each on a conversation of its own (as n browser tabs)."""
    return [await connect(owner, (await new_conversation(owner)).pk) for _ in range(n)]


async def start_turns_at_once(sockets: list, content: str) -> list[dict]:
    await asyncio.gather(*[ws.send_json_to({"type": "send", "content": content}) for ws in sockets])
    return list(await asyncio.gather(*[first_answer(ws) for ws in sockets]))


async def ping(ws) -> None:
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from(timeout=10))["type"] == "pong"


# --- the rate limit counts every action ----------------------------------------------------------


async def test_regenerating_past_the_limit_is_rate_limited(owner, conversation, scripted_llm, settings):
    settings.CHAT_RATE_LIMIT_PER_MINUTE = 3
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "answer me"})
    first = (await receive_until(ws, "reply_done"))[-1]
    for _ in range(2):
        await ws.send_json_to({"type": "regenerate", "message_id": first["message_id"]})
        assert (await receive_until(ws, "reply_done"))[-1]["status"] == "complete"
    await ws.send_json_to({"type": "regenerate", "message_id": first["message_id"]})
    refused = await ws.receive_json_from(timeout=10)
    assert refused["type"] == "error" and refused["code"] == "rate_limited"
    assert refused["frame"] == "regenerate" and "3 messages and changes a minute" in refused["message"]
    assert "try again in" in refused["message"]
    assert len(await replies_in(conversation)) == 3
    await ping(ws)  # the connection stays open
    await ws.disconnect()


async def test_edits_deletes_restores_and_forgets_count_against_the_limit(
    owner, conversation, scripted_llm, settings
):
    settings.CHAT_RATE_LIMIT_PER_MINUTE = 4
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "the meeting is on Monday"})
    done = (await receive_until(ws, "reply_done"))[-1]
    user_id = done["parent_id"]
    await ws.send_json_to({"type": "edit", "message_id": user_id, "content": "the meeting is on Tuesday"})
    assert (await ws.receive_json_from(timeout=30))["type"] == "message_updated"
    await ws.send_json_to({"type": "delete", "message_id": done["message_id"]})
    assert (await ws.receive_json_from(timeout=10))["type"] == "message_deleted"
    await ws.send_json_to({"type": "restore", "message_id": done["message_id"]})
    assert (await ws.receive_json_from(timeout=10))["type"] == "message_restored"
    # Four actions in this minute: the fifth, of any kind, is refused and changes nothing.
    for frame in (
        {"type": "forget", "message_id": done["message_id"]},
        {"type": "edit", "message_id": user_id, "content": "the meeting is on Friday"},
        {"type": "delete", "message_id": done["message_id"]},
        {"type": "send", "content": "one more"},
    ):
        await ws.send_json_to(frame)
        refused = await ws.receive_json_from(timeout=10)
        assert (refused["type"], refused["code"], refused["frame"]) == (
            "error",
            "rate_limited",
            frame["type"],
        )
    assert await user_messages_in(conversation) == ["the meeting is on Tuesday"]
    [reply] = await replies_in(conversation)
    assert not reply.deleted
    await ping(ws)
    await ws.disconnect()


async def test_the_limit_frees_up_as_its_minute_passes(owner, conversation, scripted_llm, settings):
    from config.models import ActionAllowance

    ws, refused = await past_the_rate_limit(owner, conversation, settings)
    assert refused["code"] == "rate_limited"

    @database_sync_to_async
    def a_minute_passes():
        allowance = ActionAllowance.objects.get(user=owner)
        allowance.recent_actions = [t - dt.timedelta(seconds=61) for t in allowance.recent_actions]
        allowance.save()

    await a_minute_passes()
    await ws.send_json_to({"type": "send", "content": "third"})
    assert (await receive_until(ws, "reply_done"))[-1]["status"] == "complete"
    assert await user_messages_in(conversation) == ["first", "third"]
    await ws.disconnect()


async def test_tabs_racing_for_the_last_actions_of_the_minute_get_only_what_is_left(
    owner, scripted_llm, settings
):
    settings.CHAT_RATE_LIMIT_PER_MINUTE = 3
    settings.CHAT_MAX_CONCURRENT_TURNS = 10
    sockets = await tabs(owner, 6)
    answers = await start_turns_at_once(sockets, "all at once")
    started = [ws for ws, a in zip(sockets, answers, strict=True) if a["type"] == "message"]
    refused = [a for a in answers if a["type"] == "error"]
    assert len(started) == 3 and len(refused) == 3
    assert {a["code"] for a in refused} == {"rate_limited"}
    for ws in started:
        assert (await receive_until(ws, "reply_done"))[-1]["status"] == "complete"
    for ws in sockets:
        await ws.disconnect()


# --- turns running at once -----------------------------------------------------------------------


async def test_a_tab_past_the_concurrent_cap_is_told_busy(owner, scripted_llm, settings):
    """Three tabs start a turn at the same moment: two run (the default cap), one is refused.

    The replies wait at a gate until every tab has its answer: a turn that ran to its end
    before the last tab's frame was read (a busy machine) would give its slot back, and the
    test would be measuring the machine's speed, not the cap."""
    held = {"text": " ".join(f"word{i}" for i in range(8)), "pause_after": 2, "gate": "cap"}
    scripted_llm.script(held, match="all three at once", repeat=True)
    sockets = await tabs(owner, 3)
    answers = await start_turns_at_once(sockets, "slow, all three at once")
    scripted_llm.post("/_gates", {"open": "cap"})
    refused = [a for a in answers if a["type"] == "error"]
    assert len(refused) == 1 and refused[0]["code"] == "busy" and refused[0]["frame"] == "send"
    assert "another tab" in refused[0]["message"]
    for ws, answer in zip(sockets, answers, strict=True):
        if answer["type"] == "message":
            assert (await receive_until(ws, "reply_done"))[-1]["status"] == "complete"
        else:
            await ping(ws)  # still connected
    for ws in sockets:
        await ws.disconnect()


async def test_the_slot_of_a_finished_turn_is_free_as_soon_as_its_reply_is_done(
    owner, scripted_llm, settings
):
    settings.CHAT_MAX_CONCURRENT_TURNS = 1
    scripted_llm.script(SLOW, match="slow", repeat=True)
    first, second = await tabs(owner, 2)
    await first.send_json_to({"type": "send", "content": "slow one"})
    await receive_until(first, "reply_started")
    await second.send_json_to({"type": "send", "content": "quick one"})
    assert (await second.receive_json_from(timeout=10))["code"] == "busy"
    await receive_until(first, "reply_done")
    await second.send_json_to({"type": "send", "content": "quick one again"})
    assert (await receive_until(second, "reply_done"))[-1]["status"] == "complete"
    await first.disconnect()
    await second.disconnect()


async def test_a_turn_that_fails_gives_its_slot_back(owner, scripted_llm, settings):
    settings.CHAT_MAX_CONCURRENT_TURNS = 1
    scripted_llm.script(SLOW, match="slow", repeat=True)
    first, second = await tabs(owner, 2)
    # The turn fails before anything is stored: the message it branches from does not exist.
    await first.send_json_to({"type": "send", "content": "branch", "parent_id": "01J00000000000000000000000"})
    assert (await first.receive_json_from(timeout=10))["code"] == "not_found"
    # Its slot is free: the next turn runs, and holds the only slot while it does.
    await first.send_json_to({"type": "send", "content": "slow after a failure"})
    await receive_until(first, "reply_started")
    await second.send_json_to({"type": "send", "content": "meanwhile"})
    assert (await second.receive_json_from(timeout=10))["code"] == "busy"
    await receive_until(first, "reply_done")
    await first.disconnect()
    await second.disconnect()


async def test_a_turn_whose_socket_dropped_holds_its_slot_until_its_reply_is_stored(
    owner, scripted_llm, settings
):
    settings.CHAT_MAX_CONCURRENT_TURNS = 1
    scripted_llm.script(SLOW, match="slow", repeat=True)
    conversation = await new_conversation(owner)
    leaving = await connect(owner, conversation.pk)
    await leaving.send_json_to({"type": "send", "content": "slow, then the tab closes"})
    await receive_until(leaving, "reply_started")
    await leaving.disconnect()  # the turn carries on without its tab
    [other] = await tabs(owner, 1)
    await other.send_json_to({"type": "send", "content": "from another tab"})
    assert (await other.receive_json_from(timeout=10))["code"] == "busy"
    for _ in range(100):
        if await replies_in(conversation):
            break
        await asyncio.sleep(0.1)
    [reply] = await replies_in(conversation)
    assert reply.metadata["status"] == "complete"
    # The slot is given back just after the reply is stored.
    for _ in range(20):
        await other.send_json_to({"type": "send", "content": "from another tab, again"})
        answer = await other.receive_json_from(timeout=10)
        if answer.get("code") != "busy":
            break
        await asyncio.sleep(0.1)
    assert answer["type"] == "message"
    assert (await receive_until(other, "reply_done"))[-1]["status"] == "complete"
    await other.disconnect()


async def test_a_long_turn_keeps_its_slot_past_the_hold_time(owner, scripted_llm, settings):
    """A running turn renews its slot, so only a dead server's slot lapses."""
    settings.CHAT_MAX_CONCURRENT_TURNS = 1
    settings.CHAT_TURN_HOLD_SECONDS = 0.6
    scripted_llm.script({"text": " ".join(f"w{i}" for i in range(30)), "delay": 0.1}, match="long")
    first, second = await tabs(owner, 2)
    await first.send_json_to({"type": "send", "content": "a long answer please"})
    await receive_until(first, "reply_started")
    await asyncio.sleep(1.5)  # more than twice the hold time
    await second.send_json_to({"type": "send", "content": "meanwhile"})
    assert (await second.receive_json_from(timeout=10))["code"] == "busy"
    assert (await receive_until(first, "reply_done"))[-1]["status"] == "complete"
    await first.disconnect()
    await second.disconnect()


async def test_a_turn_running_on_another_server_counts_until_its_slot_lapses(
    owner, conversation, scripted_llm, settings
):
    from chat.models import RunningTurn

    settings.CHAT_MAX_CONCURRENT_TURNS = 1

    @database_sync_to_async
    def elsewhere(process: str, renewed_seconds_ago: float) -> None:
        from django.utils import timezone

        RunningTurn.objects.all().delete()
        RunningTurn.objects.create(
            user=owner, process=process, renewed_at=timezone.now() - dt.timedelta(seconds=renewed_seconds_ago)
        )

    ws = await connect(owner, conversation.pk)
    # A turn another server process is running, and renewing.
    await elsewhere("other-host:4242:1234", 5)
    await ws.send_json_to({"type": "send", "content": "while the other server answers"})
    refused = await ws.receive_json_from(timeout=10)
    assert refused["code"] == "busy"
    # That server died: its slot lapses once it has not been renewed for the hold time.
    await elsewhere("other-host:4242:1234", settings.CHAT_TURN_HOLD_SECONDS + 1)
    await ws.send_json_to({"type": "send", "content": "after the other server died"})
    assert (await receive_until(ws, "reply_done"))[-1]["status"] == "complete"
    # A dead process on this host (its pid now names another process) frees its slot at once.
    await elsewhere(f"{socket.gethostname()}:{os.getpid()}:not-this-process", 1)
    await ws.send_json_to({"type": "send", "content": "after a restart here"})
    assert (await receive_until(ws, "reply_done"))[-1]["status"] == "complete"
    await ws.disconnect()


# --- tool results have a budget per turn ---------------------------------------------------------


async def test_tool_calls_past_the_turns_result_budget_are_answered_not_run(
    owner, conversation, scripted_llm, settings
):
    from memory.storage.store import store_message

    settings.MAX_TOOL_RESULT_CHARS_PER_TURN = 10_000
    notes = await new_conversation(owner)
    long = await database_sync_to_async(store_message)(
        owner, notes, "user", "The lighthouse log says the lamp was lit. " * 180, embed=False
    )
    read = {"name": "get_message_by_id", "arguments": {"id": long.pk}}
    scripted_llm.script(
        {"tool_calls": [read]},
        {"tool_calls": [read, read, read]},
        {"text": "Here is what the log says."},
        match="lighthouse budget",
    )
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, "lighthouse budget: read it again and again")
    assert len([e for e in events if e["type"] == "tool_started"]) == 2
    done = events[-1]
    assert done["status"] == "complete" and "Here is what the log says." in done["html"]

    last = [r for r in scripted_llm.requests if "lighthouse budget" in r["last_user"]][-1]
    results = [m["content"] for m in last["messages"] if m.get("role") == "tool"]
    assert len(results) == 4
    assert "lamp was lit" in results[0] and "budget is spent" not in results[0]
    assert "lamp was lit" in results[1] and "tool-result budget is spent" in results[1]
    assert all("not run" in r and "budget is spent" in r for r in results[2:])
    assert sum(len(r) for r in results[:2]) <= 10_000 + 100

    @database_sync_to_async
    def stored():
        calls = ToolCall.objects.filter(message_id=done["message_id"], is_chunk=False).order_by("timestamp")
        reply = Message.objects.get(pk=done["message_id"])
        return [c.is_error for c in calls], reply.content

    errors, content = await stored()
    assert errors == [False, False, True, True] and content == "Here is what the log says."
    await ws.disconnect()


def test_a_turn_that_waited_for_the_lock_counts_the_slot_taken_meanwhile(owner, settings):
    """Two turns of one user race for the last slot: the second waits for the first's lock on
    the allowance, and must then count the slot the first took (READ COMMITTED does not re-read
    the rows a locking query joined, so reading the slots in that query missed it)."""
    import threading
    import time

    from django.db import connection, connections, transaction

    from chat.models import RunningTurn
    from config.limits import LimitReached
    from config.models import ActionAllowance

    settings.CHAT_MAX_CONCURRENT_TURNS = 1
    with transaction.atomic():
        ActionAllowance.locked(owner)  # the row both will lock
    took, commit, outcome = threading.Event(), threading.Event(), {}

    def first():
        try:
            with transaction.atomic():
                outcome["first"] = RunningTurn.start(owner)
                took.set()
                commit.wait(60)
        finally:
            connections.close_all()

    def second():
        try:
            outcome["second"] = RunningTurn.start(owner)
        except LimitReached as exc:
            outcome["second"] = exc.code
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert took.wait(60)
    threads.append(threading.Thread(target=second))
    threads[1].start()
    deadline = time.monotonic() + 60
    with connection.cursor() as cursor:  # until the second turn waits for the first's lock
        while True:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
            if cursor.fetchone()[0] or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    commit.set()
    for t in threads:
        t.join(60)
    assert outcome["second"] == "busy"
    RunningTurn.release(outcome["first"].pk)
