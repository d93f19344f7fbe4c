"""Replies being written are saved as drafts; a draft whose server is gone becomes a stored,
incomplete reply when the conversation is next opened (the kill -9 test is in tests/scale)."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys

import pytest
from django.utils import timezone

from chat import drafts, processes
from chat.models import ReplyDraft
from memory.storage.store import store_message
from tests.chat.test_consumers import connect, receive_until

pytestmark = pytest.mark.django_db(transaction=True)


def _dead_process() -> str:
    """The identity a process on this host had, once it has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = f"{processes.HOST}:{proc.pid}:{processes.start_time(proc.pid)}"
    proc.wait()
    return identity


def _draft(owner, conversation, process: str, *, text: str = "half of an answ", age_s: float = 0):
    question = store_message(owner, conversation, "user", "tell me a long story", embed=False)
    stamp = timezone.now() - dt.timedelta(seconds=age_s)
    return ReplyDraft.objects.create(
        id=f"01DRAFT{abs(hash((process, age_s))) % 10**19:019d}", owner=owner, conversation=conversation,
        parent=question, text=text, process=process, started_at=stamp, updated_at=stamp,
    )


def test_a_dead_servers_draft_is_stored_as_an_incomplete_reply_when_the_page_opens(
    client, owner, conversation
):
    draft = _draft(owner, conversation, _dead_process())
    client.force_login(owner)
    page = client.get(f"/c/{conversation.pk}/").content.decode()
    assert "half of an answ" in page and "incomplete" in page
    reply = conversation.messages.get(pk=draft.pk)
    assert reply.role == "assistant" and reply.parent_id == draft.parent_id
    assert reply.metadata["incomplete"] and reply.metadata["error"] == drafts.INTERRUPTED
    assert not ReplyDraft.objects.exists()
    # Opening the page again stores nothing twice.
    client.get(f"/c/{conversation.pk}/")
    assert conversation.messages.filter(role="assistant").count() == 1


def test_drafts_still_being_written_are_left_alone(owner, conversation):
    # This process, writing it right now.
    mine = _draft(owner, conversation, processes.PROCESS)
    drafts._live.add(mine.pk)
    # Another host's server that saved it a moment ago.
    elsewhere = _draft(owner, conversation, "other-host:4242:123456", age_s=5)
    try:
        assert drafts.recover(conversation) == []
    finally:
        drafts._live.discard(mine.pk)
    assert ReplyDraft.objects.count() == 2
    # Once this process no longer writes it, and once the other host has been silent too long.
    ReplyDraft.objects.filter(pk=elsewhere.pk).update(updated_at=timezone.now() - dt.timedelta(hours=1))
    assert sorted(m.pk for m in drafts.recover(conversation)) == sorted([mine.pk, elsewhere.pk])


def test_process_identity_tells_a_reused_pid_apart():
    assert not processes.is_dead(processes.PROCESS)
    host, pid, started = processes.PROCESS.rsplit(":", 2)
    assert processes.is_dead(f"{host}:{pid}:{int(started) + 1}")
    assert not processes.is_dead(f"another-host:{pid}:1")  # not ours to judge: staleness decides


async def test_a_finished_turn_leaves_no_draft_and_a_reconnecting_tab_learns_of_a_recovered_reply(
    owner, conversation, scripted_llm
):
    from channels.db import database_sync_to_async

    scripted_llm.script({"text": "a whole reply", "delay": 0.01})
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "hello"})
    await receive_until(ws, "reply_done")
    await ws.disconnect()
    assert await database_sync_to_async(ReplyDraft.objects.count)() == 0

    draft = await database_sync_to_async(_draft)(owner, conversation, _dead_process())
    ws = await connect(owner, conversation.pk)
    event = await ws.receive_json_from(timeout=10)
    assert event["type"] == "reply_done" and event["message_id"] == draft.pk
    assert event["status"] == "failed" and "half of an answ" in event["html"]
    await ws.disconnect()


async def test_the_draft_follows_the_reply_while_it_streams(owner, conversation, scripted_llm, settings):
    from channels.db import database_sync_to_async

    settings.REPLY_DRAFT_SAVE_SECONDS = 0.1
    scripted_llm.script({"words": 40, "delay": 0.03})
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "stream slowly"})
    streamed = ""
    while len(streamed.split()) < 25:
        event = await ws.receive_json_from(timeout=10)
        streamed += event.get("delta", "") if event["type"] == "token" else ""
    draft = await database_sync_to_async(ReplyDraft.objects.get)()
    assert draft.process == processes.PROCESS and draft.snapshot_id
    assert len(draft.text.split()) >= 10 and streamed.startswith(draft.text)
    await receive_until(ws, "reply_done")
    await ws.disconnect()
    assert await database_sync_to_async(ReplyDraft.objects.count)() == 0


async def test_the_snapshot_and_draft_are_written_after_the_first_token_not_before_it(
    owner, conversation, scripted_llm
):
    # Nothing that can wait runs before the first token: while the model has not answered yet,
    # the turn's snapshot and draft are not written; the stored reply has both (the draft
    # replaced by the reply, the snapshot linked to it).
    from channels.db import database_sync_to_async

    from memory.models import ContextSnapshot

    scripted_llm.script({"text": "after a pause", "hang": 1.0})
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "take your time"})
    events = await receive_until(ws, "reply_started")
    while not scripted_llm.requests:  # the model has been asked and holds its answer
        await asyncio.sleep(0.02)
    drafts_written = await database_sync_to_async(ReplyDraft.objects.count)()
    snapshots = ContextSnapshot.objects.filter(conversation=conversation)
    snapshots_written = await database_sync_to_async(snapshots.count)()
    assert (drafts_written, snapshots_written) == (0, 0)
    events = await receive_until(ws, "reply_done")
    assert events[-1]["status"] == "complete"
    snapshot = await database_sync_to_async(ContextSnapshot.objects.get)(conversation=conversation)
    assert snapshot.message_id == events[-1]["message_id"]
    assert not await database_sync_to_async(ReplyDraft.objects.exists)()
    await ws.disconnect()


async def test_the_replies_streaming_at_once_are_saved_together_once_a_second(
    owner, conversation, scripted_llm, settings, monkeypatch
):
    # One UPDATE per REPLY_DRAFT_SAVE_SECONDS for every reply the server streams, not one per
    # reply: while two replies stream, their drafts are saved in the same calls, and what a
    # draft holds mid-stream is the start of its reply.
    from channels.db import database_sync_to_async

    from memory.models import Conversation

    settings.REPLY_DRAFT_SAVE_SECONDS = 0.2
    calls: list[dict[str, str]] = []
    seen_mid_stream: dict[str, str] = {}
    real_save_many = drafts.save_many

    def recording(texts):
        calls.append(dict(texts))
        real_save_many(texts)
        for draft in ReplyDraft.objects.filter(pk__in=list(texts)):
            seen_mid_stream[draft.pk] = draft.text

    monkeypatch.setattr(drafts, "save_many", recording)
    words = "".join(f"w{i} " for i in range(40))
    scripted_llm.script({"text": words, "delay": 0.03}, match="[slow]", repeat=True)
    other = await database_sync_to_async(Conversation.objects.create)(owner=owner, title="other")
    tabs = [await connect(owner, conversation.pk), await connect(owner, other.pk)]
    for tab in tabs:
        await tab.send_json_to({"type": "send", "content": "[slow] a reply please"})
    done = [(await receive_until(tab, "reply_done"))[-1] for tab in tabs]
    assert [d["status"] for d in done] == ["complete", "complete"]
    reply_ids = {d["message_id"] for d in done}
    assert any(set(call) == reply_ids for call in calls), calls  # both in one statement
    assert len(calls) <= 2 * 40 * 0.03 / 0.2 + 2  # about one call per interval, not per reply
    assert set(seen_mid_stream) == reply_ids
    assert all(words.startswith(text) and text for text in seen_mid_stream.values())
    assert not await database_sync_to_async(ReplyDraft.objects.exists)()
    for tab in tabs:
        await tab.disconnect()


def test_the_turns_check_snapshot_and_draft_go_in_one_statement_and_are_written_as_the_orm_writes_them(
    owner, conversation, settings
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from chat import turn
    from chat.replies import Reply
    from memory.context import budget, index_builder
    from memory.models import ContextSnapshot

    settings.INDEX_FULL_MAX = 100
    store_message(owner, conversation, "user", "the spare key hangs behind the blue door", embed=False)
    question = store_message(owner, conversation, "user", "where is the spare key?", embed=False)
    reply = Reply()
    plan = turn._prepare_context(owner, conversation, question, budget.allocate(), reply.seen)
    assert reply.seen
    try:
        with CaptureQueriesContext(connection) as statements:
            snapshot = turn._save_snapshot(owner, conversation, question, reply, plan)
        # No BEGIN nor COMMIT: one message, which Postgres runs as one transaction.
        [sent] = [q["sql"] for q in statements.captured_queries]
        # The check takes the person's turn lock, no message row's lock (memory.lifecycle.turn_lock).
        assert "pg_advisory_xact_lock_shared" in sent and "FOR KEY SHARE" not in sent
        assert sent.count("INSERT INTO") == 2
        assert reply.id in drafts._live and not snapshot._state.adding
    finally:
        drafts._live.discard(reply.id)
    draft = ReplyDraft.objects.get(pk=reply.id)
    assert (draft.snapshot_id, draft.parent_id) == (snapshot.pk, question.pk)
    assert draft.process == processes.PROCESS
    # The same row as the ORM's save() writes.
    by_orm = index_builder.save_snapshot(plan, owner, conversation, question)
    fields = [f.attname for f in ContextSnapshot._meta.concrete_fields]
    fields = [name for name in fields if name not in ("id", "created_at")]
    rows = ContextSnapshot.objects.values(*fields)
    written, saved = rows.get(pk=snapshot.pk), rows.get(pk=by_orm.pk)
    assert written == saved and "spare key" in written["text"]
    assert ContextSnapshot.objects.get(pk=snapshot.pk).whole_plan()["text"] == plan.text
    assert ContextSnapshot.objects.get(pk=snapshot.pk).created_at == snapshot.created_at
