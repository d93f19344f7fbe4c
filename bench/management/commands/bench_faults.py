"""manage.py bench_faults: inject the faults Recollect must survive, and count what was lost.

Each fault runs real turns (chat.turn.run_turn, the real openai client against the scripted test
LLM in this process) for a throwaway user, then checks: every message the user sent is stored,
the conversation can continue, and the explorer shows what happened. Prints faults injected,
faults survived and data lost (user messages sent but not stored; must be 0).

The scenarios are plain functions so tests/scale/test_faults.py runs exactly the same ones.
The command runs in a scratch database (--database, default recollect_bench_faults). Every fault
touches only what it made: the database fault terminates this process's own connections, the
worker fault locks its own messages' rows and requeues its own task.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, connections
from django.test import Client
from django.utils.crypto import get_random_string

from bench.launch import ROOT, ServerProcess, session_cookie
from bench.scratch import add_database_argument, use_database


@dataclass
class FaultResult:
    name: str
    survived: bool = False
    sent: int = 0  # user messages sent
    stored: int = 0  # of those, stored
    notes: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)  # what a test may check further

    @property
    def lost(self) -> int:
        return self.sent - self.stored


# --- helpers -------------------------------------------------------------------------------------


def run_turn(owner, conversation, content: str, *, during: Callable | None = None):
    """One turn as the websocket consumer runs it; returns (events, assistant message).
    `during(event)` is called (in a thread) for every event, to inject a fault mid-turn."""
    from chat import turn

    events: list[dict] = []

    async def emit(event: dict) -> None:
        events.append(event)
        if during is not None:
            await asyncio.to_thread(during, event)

    async def main():
        return await turn.run_turn(owner, conversation, emit=emit, stop=asyncio.Event(), content=content)

    return events, asyncio.run(main())


def stored_user_texts(conversation) -> list[str]:
    from memory.models import Message

    return list(
        Message.objects.filter(conversation=conversation, role="user", is_chunk=False)
        .order_by("position")
        .values_list("content", flat=True)
    )


def explorer_page(owner, url: str) -> str:
    client = Client()
    client.force_login(owner)
    response = client.get(url)
    if response.status_code != 200:
        raise AssertionError(f"{url} answered {response.status_code}")
    return response.content.decode()


def _finish(result: FaultResult, owner, conversation, sent: list[str]) -> FaultResult:
    """The checks every fault ends with: all sent messages stored, and a next turn completes."""
    from memory.models import Message

    _, after = run_turn(owner, conversation, f"{result.name}: are you still there?")
    sent = [*sent, f"{result.name}: are you still there?"]
    texts = stored_user_texts(conversation)
    result.sent = len(sent)
    result.stored = sum(1 for s in sent if s in texts)
    continued = Message.objects.get(pk=after.pk).metadata.get("status") == "complete"
    if not continued:
        result.notes.append("the conversation could not continue")
    result.survived = result.survived and continued and result.lost == 0
    return result


# --- the faults ----------------------------------------------------------------------------------


def fault_llm_drops_stream(owner, conversation, llm) -> FaultResult:
    """The provider cuts the connection after three words."""
    result = FaultResult("llm drops the stream")
    text = "dropfault tell me a long story"
    story = {"text": "Once upon a time there was a story", "drop_after": 3}
    llm.state.add_script("dropfault", [story], False)
    events, reply = run_turn(owner, conversation, text)
    reply.refresh_from_db()
    done = events[-1]
    kept_partial = reply.content.startswith("Once upon a")
    page = explorer_page(owner, f"/explorer/messages/{reply.pk}/")
    result.survived = (
        done["type"] == "chat.reply_done" and done["status"] == "failed" and kept_partial
        and reply.metadata.get("incomplete") is True and "Once upon a" in page
    )
    result.notes.append(f"reply {done['status']}, partial text kept: {kept_partial}")
    return _finish(result, owner, conversation, [text])


def fault_bad_tool_calls(owner, conversation, llm) -> FaultResult:
    """Malformed tool arguments and a tool that does not exist."""
    from memory.models import ToolCall

    result = FaultResult("malformed tool arguments, unknown tool")
    text = "toolfault look it up"
    llm.state.add_script(
        "toolfault",
        [
            {"tool_calls": [{"name": "vector_search", "arguments": '{"query": "unclosed'},
                            {"name": "launch_rockets", "arguments": {"count": 3}},
                            {"name": "get_message_by_id", "arguments": {"id": 42, "extra": [1]}}]},
            {"text": "I could not look that up, sorry."},
        ],
        False,
    )
    events, reply = run_turn(owner, conversation, text)
    calls = list(ToolCall.objects.filter(message=reply, is_chunk=False))
    finished = [e for e in events if e["type"] == "chat.tool_finished"]
    page = explorer_page(owner, "/explorer/tools/")
    result.survived = (
        events[-1]["status"] == "complete" and len(calls) == 3 and all(c.is_error for c in calls)
        and len(finished) == 3 and not any(e["ok"] for e in finished) and "launch_rockets" in page
    )
    result.notes.append(f"{len(calls)} failed tool calls stored and shown")
    return _finish(result, owner, conversation, [text])


def fault_database_connection_lost(owner, conversation, llm) -> FaultResult:
    """pg_terminate_backend on every database connection of this process, again and again,
    while a turn streams (the turn's own connections included)."""
    result = FaultResult("database connection lost mid-turn")
    text = "dbfault keep talking while the database goes away"
    llm.state.add_script("dbfault", [{"words": 30, "delay": 0.05}], False)
    app_name = f"recollect-fault-{os.getpid()}"
    options = connections.settings["default"].setdefault("OPTIONS", {})
    killed = 0
    stop_killing = threading.Event()

    def killer() -> None:
        nonlocal killed
        import psycopg

        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        params.pop("prepare_threshold", None)
        params["application_name"] = "recollect-fault-killer"
        with psycopg.connect(**params, autocommit=True) as conn:
            while not stop_killing.wait(0.05):
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s AND pid <> pg_backend_pid()",
                    [app_name],
                ).fetchall()
                killed += len(rows)

    options["application_name"] = app_name
    # From before the user message is stored until 1.5 s later the database keeps dropping
    # this process's connections, then it is back.
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    threading.Timer(1.5, stop_killing.set).start()
    try:
        events, reply = run_turn(owner, conversation, text)
    finally:
        stop_killing.set()
        thread.join(5)
        options.pop("application_name", None)
    reply.refresh_from_db()
    page = explorer_page(owner, f"/explorer/messages/{reply.pk}/")
    result.survived = events[-1]["type"] == "chat.reply_done" and reply.pk in page
    result.notes.append(f"{killed} connections terminated; reply {events[-1]['status']}")
    return _finish(result, owner, conversation, [text])


def _worker(db_name: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "RECOLLECT_DB_NAME": db_name,
           "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    return subprocess.Popen(
        [sys.executable, "manage.py", "db_worker", "--interval", "0.2", "--no-startup-delay", *extra],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def fault_worker_killed_mid_task(owner, conversation, llm) -> FaultResult:
    """A task worker is killed (SIGKILL) while it runs topic upkeep; a new worker runs the task
    again once it is requeued, and every message ends up in exactly one topic."""
    import datetime as dt

    import psycopg
    from django.utils import timezone
    from django_tasks import TaskResultStatus
    from django_tasks_db.models import DBTaskResult

    from memory import tasks
    from memory.models import Message, TaskLease, Topic, TopicMembership, UpkeepRun

    result = FaultResult("task worker killed mid-task")
    sent = [f"workerfault note {i} about gardening and tomatoes" for i in range(3)]
    with _immediate_upkeep_off():
        for text in sent:
            run_turn(owner, conversation, text)
    ids = list(Message.objects.filter(conversation=conversation, is_chunk=False).values_list("pk", flat=True))
    db_name = connection.settings_dict["NAME"]
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    # Hold this conversation's message rows so the worker blocks inside the task (upkeep writes
    # rows that reference them), then kill it there. Nothing else in the database waits.
    with psycopg.connect(**params) as blocker:
        blocker.execute("SELECT id FROM memory_message WHERE id = ANY(%s) FOR UPDATE", [ids])
        # Top priority: on a database with a backlog the worker takes this task first.
        task = tasks.topic_upkeep.using(priority=100).enqueue(owner.pk, ids)
        worker = _worker(db_name)
        try:
            deadline = time.time() + 60
            while DBTaskResult.objects.get(pk=task.id).status != TaskResultStatus.RUNNING:
                if time.time() > deadline:
                    raise AssertionError("the worker never picked the task up")
                time.sleep(0.1)
            time.sleep(0.5)
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
        finally:
            if worker.poll() is None:
                worker.kill()
        blocker.rollback()
    stuck = DBTaskResult.objects.get(pk=task.id).status
    # The killed worker's lease would run out by itself after TASK_LEASE_SECONDS; end it now
    # instead of waiting (a live worker's lease is renewed and never ends like this).
    TaskLease.objects.filter(task_id=task.id).update(expires_at=timezone.now())
    requeued = tasks.requeue_abandoned(older_than=dt.timedelta(0), task_ids=[task.id])
    # A new worker runs the task again (first: top priority), however long the rest of the
    # queue is (a real database may have a backlog).
    worker = _worker(db_name)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if DBTaskResult.objects.get(pk=task.id).status in (
                TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED
            ):
                break
            time.sleep(0.2)
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
    final = DBTaskResult.objects.get(pk=task.id)
    logical = set(Message.objects.filter(pk__in=ids).values_list("pk", flat=True))
    memberships = list(
        TopicMembership.objects.filter(message_id__in=logical, topic__children__isnull=True)
        .values_list("message_id", flat=True)
    )
    duplicates = len(memberships) - len(set(memberships))
    empty_leaves = Topic.objects.owned_by(owner).filter(children__isnull=True, message_count=0).count()
    stopped_runs = UpkeepRun.objects.owned_by(owner).filter(ok=False).count()
    page = explorer_page(owner, "/explorer/")
    result.survived = (
        stuck == TaskResultStatus.RUNNING and requeued >= 1 and final.status == TaskResultStatus.SUCCESSFUL
        and duplicates == 0 and set(memberships) == logical and empty_leaves == 0 and stopped_runs >= 1
        and page
    )
    result.notes.append(
        f"task left {stuck}, requeued {requeued}, then {final.status}; "
        f"{len(set(memberships))}/{len(logical)} messages in a topic, {duplicates} duplicates"
    )
    return _finish(result, owner, conversation, sent)


RESTART_QUESTION = "restartfault stream for a long time"


def fault_server_killed_mid_stream(owner, conversation, llm) -> FaultResult:
    """A daphne process is killed (SIGKILL) 40 words into a reply and started again on the same
    port, as a supervisor would. The tab reconnects: it is told the reply was cut off, what had
    been saved of it is stored (incomplete), and the next message gets a whole reply."""
    import json

    from websockets.asyncio.client import connect as ws_connect

    from chat.drafts import INTERRUPTED
    from chat.models import ReplyDraft
    from memory.models import Message

    result = FaultResult("server killed mid-stream")
    llm.state.add_script("restartfault", [{"words": 400, "delay": 0.05}], False)
    server = ServerProcess("restart", connection.settings_dict["NAME"], llm.base_url)
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
                    except Exception:  # noqa: BLE001 - the server went away
                        return events
                    events.append(event)
                    words = sum(len(e["delta"].split()) for e in events if e["type"] == "token")
                    if kill_after_words is not None and words >= kill_after_words:
                        await asyncio.to_thread(server.kill)
                    if event["type"] == "reply_done":
                        return events

    next_question = f"{result.name}: are you back after the restart?"
    try:
        server.start()
        # 40 words at 20 a second: the reply's draft has been saved at least once.
        cut = asyncio.run(talk(RESTART_QUESTION, kill_after_words=40))
        result.details["streamed"] = "".join(e["delta"] for e in cut if e["type"] == "token")
        server.start()  # the same port
        [recovered] = asyncio.run(talk(None))
        result.details["recovered"] = recovered
        done = asyncio.run(talk(next_question))
    finally:
        server.stop()
    partial = Message.objects.filter(pk=recovered.get("message_id")).first()
    killed = not any(e["type"] == "reply_done" for e in cut)
    told = recovered.get("type") == "reply_done" and recovered.get("error") == INTERRUPTED
    kept = partial is not None and bool(partial.metadata.get("incomplete")) and len(partial.content.split())
    page = explorer_page(owner, f"/explorer/messages/{partial.pk}/") if partial else ""
    continued = bool(done) and done[-1]["type"] == "reply_done" and done[-1]["status"] == "complete"
    result.survived = bool(
        killed and told and kept and continued and INTERRUPTED in page
        and not ReplyDraft.objects.filter(conversation=conversation).exists()
    )
    result.notes.append(
        f"killed after {len(result.details['streamed'].split())} words streamed; "
        f"{len(partial.content.split()) if partial else 0} words of the reply kept, marked incomplete"
    )
    sent = [RESTART_QUESTION, next_question]
    texts = stored_user_texts(conversation)
    result.sent = len(sent)
    result.stored = sum(1 for s in sent if s in texts)
    return result


@contextlib.contextmanager
def _immediate_upkeep_off():
    """Turns queue upkeep; keep the queue empty so only the task under test is there."""
    from memory import tasks

    original = tasks.queue_upkeep
    tasks.queue_upkeep = lambda owner_id, message_ids: False
    try:
        yield
    finally:
        tasks.queue_upkeep = original


FAULTS = [
    fault_llm_drops_stream,
    fault_bad_tool_calls,
    fault_database_connection_lost,
    fault_worker_killed_mid_task,
    fault_server_killed_mid_stream,
]


class Command(BaseCommand):
    help = (
        "Inject faults (LLM drops, bad tool calls, database loss, a killed worker, a killed server) "
        "and count losses."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--only", help="run only faults whose name contains this text")
        add_database_argument(parser, "faults")

    def handle(self, *args, **opts) -> None:
        try:
            import websockets  # noqa: F401 - the killed server's tab
        except ImportError:
            raise CommandError("bench_faults needs the `websockets` package (the dev extra)") from None
        from django.contrib.auth import get_user_model

        from bench import llm_server
        from chat import llm as chat_llm
        from memory.models import Conversation

        use_database(opts["database"], self.stdout)
        server = llm_server.start_in_thread()
        saved = {k: getattr(settings, k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "CHAT_MODEL")}
        settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY, settings.CHAT_MODEL = (
            server.base_url, "bench-key", "test-llm",
        )
        chat_llm._client.cache_clear()
        user = get_user_model().objects.create_user(f"bench-faults-{get_random_string(8).lower()}")
        results: list[FaultResult] = []
        try:
            for fault in FAULTS:
                if opts.get("only") and opts["only"] not in fault.__name__:
                    continue
                conversation = Conversation.objects.create(owner=user, title=fault.__name__)
                try:
                    res = fault(user, conversation, server)
                except Exception as exc:
                    res = FaultResult(fault.__name__, notes=[f"crashed: {type(exc).__name__}: {exc}"])
                    res.sent = len(stored_user_texts(conversation)) or 1
                    res.stored = len(stored_user_texts(conversation))
                results.append(res)
                mark = "survived" if res.survived else "NOT SURVIVED"
                self.stdout.write(f"{res.name:<40} {mark:<13} sent {res.sent} stored {res.stored}  "
                                  f"{'; '.join(res.notes)}")
        finally:
            user.delete()
            for k, v in saved.items():
                setattr(settings, k, v)
            chat_llm._client.cache_clear()
            server.shutdown()
        self.stdout.write(
            f"faults injected: {len(results)}  faults survived: {sum(r.survived for r in results)}  "
            f"data lost: {sum(r.lost for r in results)}"
        )
