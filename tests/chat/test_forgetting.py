"""Forgetting reaches every copy (issue 24 §1): after offline turns that find a message,
`build_topics`, model turns that call the memory tools, and a turn still streaming while it is
forgotten, the message's marker is in no row of any table of the database."""

from __future__ import annotations

import re

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.db import connection
from django.urls import reverse
from django_tasks_db.models import DBTaskResult

from chat import llm as chat_llm
from memory import tasks
from memory.context.tools import execute_tool
from memory.models import Conversation, Message
from tests.chat.conftest import connect, receive_until

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "QXMARK-7731"
SECRET = (
    f"Note for later: the vault code for Quokka Station is {MARKER}, and the spare key hangs "
    "behind the blue door in the boathouse."
)


def rows_containing(text: str) -> dict[str, int]:
    """Every table of the database (whoever added it) whose rows hold `text`, ignoring case,
    with how many rows do: each row is read whole, as text."""
    found = {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        )
        for schema, table in cursor.fetchall():
            name = f"{connection.ops.quote_name(schema)}.{connection.ops.quote_name(table)}"
            cursor.execute(f"SELECT count(*) FROM {name} AS t WHERE t::text ILIKE %s", [f"%{text}%"])
            count = cursor.fetchone()[0]
            if count:
                found[table] = count
    return found


def test_the_check_finds_text_in_any_table(owner, conversation):
    from django_tasks_db.models import DBTaskResult  # noqa: F401 - a table of another app

    assert "memory_conversation" in rows_containing("test conversation")
    assert rows_containing("nothing holds this") == {}


async def _ask(ws, text: str) -> dict:
    await ws.send_json_to({"type": "send", "content": text})
    return (await receive_until(ws, "reply_done"))[-1]


@database_sync_to_async
def _run_queued_upkeep() -> None:
    """What the task worker does with the work the turns and the forget queued."""
    while True:
        queued = list(DBTaskResult.objects.filter(status="READY").order_by("enqueued_at"))
        if not queued:
            return
        for result in queued:
            task = getattr(tasks, result.task_path.rsplit(".", 1)[1])  # every task memory queues
            args = result.args_kwargs
            task.call(*args["args"], **args["kwargs"])
            result.status = "SUCCESSFUL"
            result.save(update_fields=["status"])


def _offline(settings) -> None:
    settings.OPENAI_BASE_URL = ""
    settings.OPENAI_API_KEY = ""
    chat_llm._client.cache_clear()


def _online(settings, llm) -> None:
    settings.OPENAI_BASE_URL = llm.base_url
    settings.OPENAI_API_KEY = "test-key"
    chat_llm._client.cache_clear()


def _calls(*calls: tuple[str, dict]) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in calls]}


async def test_a_forgotten_message_leaves_no_copy_in_any_table(owner, scripted_llm, settings, client):
    settings.INDEX_RECENT_WINDOW = 2
    settings.CONVERSATION_SUMMARY_EVERY = 1
    settings.REPLY_DRAFT_SAVE_SECONDS = 0.05
    await database_sync_to_async(client.force_login)(owner)

    # Offline turns: the message names its conversation, and recall quotes it twice.
    _offline(settings)
    notes = await database_sync_to_async(Conversation.objects.create)(owner=owner)
    ws = await connect(owner, notes.pk)
    await _ask(ws, SECRET)
    await _ask(ws, "which code opens the vault at Quokka Station?")
    await _ask(ws, "where is the spare key hanging?")
    await ws.disconnect()
    await _run_queued_upkeep()
    await database_sync_to_async(call_command)("build_topics", user=owner.username)

    # Model turns in another conversation that search memory and quote what they find.
    _online(settings, scripted_llm)
    chat = await database_sync_to_async(Conversation.objects.create)(owner=owner, title="Chat")
    scripted_llm.script(
        _calls(("search_and_retrieve", {"query": "vault code Quokka Station"})),
        _calls(("find", {"pattern": "spare key"}), ("vector_search", {"query": "the vault code"})),
        _calls(("search_and_retrieve", {"query": "vault code at Quokka Station"})),  # the cache
        match="toolturn",
    )
    ws = await connect(owner, chat.pk)
    await _ask(ws, "toolturn: what do you know about the boathouse?")
    await _ask(ws, "and the key?")
    await _run_queued_upkeep()

    # A turn that searched for it is still streaming its answer when it is forgotten.
    restated = (
        "As you told me: the vault code for Quokka Station is QXMARK-7731, and the spare key "
        "hangs behind the blue door in the boathouse."
    )
    scripted_llm.script(
        _calls(("search_and_retrieve", {"query": "the Quokka Station vault"})),
        {"text": restated, "pause_after": 3, "gate": "forget"},
        match="racetest",
    )
    await ws.send_json_to({"type": "send", "content": "racetest: tell me the boathouse details again"})
    await receive_until(ws, "token")
    secret = await database_sync_to_async(Message.objects.get)(owner=owner, content=SECRET)
    url = reverse("explorer:forget", args=[secret.pk])
    page = (await database_sync_to_async(client.get)(url)).content.decode()
    copies = re.findall(r'name="copies" value="(\w+)" checked', page)  # what it ticks
    assert copies, "the dialog lists the replies that quote it"
    response = await database_sync_to_async(client.post)(url, {"confirm": "forget", "copies": copies})
    assert response.status_code == 302
    scripted_llm.post("/_gates", {"open": "forget"})
    done = (await receive_until(ws, "reply_done"))[-1]
    assert done["status"] == "complete"
    await ws.disconnect()
    await _run_queued_upkeep()

    assert await database_sync_to_async(rows_containing)(MARKER) == {}
    assert await database_sync_to_async(rows_containing)("behind the blue door in the boathouse") == {}
    # The first conversation was named after it (60 characters, the marker cut off).
    assert await database_sync_to_async(rows_containing)("vault code for Quokka Station") == {}
    for name, args in [
        ("find", {"pattern": "QXMARK"}),
        ("search_and_retrieve", {"query": "vault code Quokka Station"}),
        ("vector_search", {"query": "the vault code"}),
    ]:
        outcome = await database_sync_to_async(execute_tool)(owner, name, args)
        assert MARKER not in str(outcome.result)


async def test_the_socket_forgets_the_ticked_copies_with_it_and_refuses_a_bad_list(
    owner, conversation, client
):
    @database_sync_to_async
    def stored():
        from memory.storage.store import store_message

        secret = store_message(owner, conversation, "user", SECRET)
        recall = store_message(
            owner, conversation, "assistant", f"**Offline recall** · {secret.pk}: “{SECRET[:70]}”",
            metadata={"mode": "offline_recall", "system_text": True},
        )
        client.force_login(owner)
        dialog = client.get(reverse("chat:forget_dialog", args=[secret.pk])).content.decode()
        return secret, recall, dialog

    secret, recall, dialog = await stored()
    assert f'name="copies" value="{recall.pk}" checked' in dialog and f'data-forget="{secret.pk}"' in dialog
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "forget", "message_id": secret.pk, "copies": "not a list"})
    refused = await ws.receive_json_from(timeout=10)
    assert refused["type"] == "error" and refused["code"] == "invalid"
    await ws.send_json_to({"type": "forget", "message_id": secret.pk, "copies": [recall.pk]})
    events = [await ws.receive_json_from(timeout=30) for _ in range(2)]
    assert {(e["type"], e["message_id"]) for e in events} == {
        ("message_forgotten", secret.pk), ("message_forgotten", recall.pk)
    }
    assert not await database_sync_to_async(Message.objects.filter(owner=owner).exists)()
    await ws.disconnect()


async def test_a_stranger_gets_404_for_the_chat_forget_dialog(owner, stranger, conversation, client):
    @database_sync_to_async
    def ask():
        from memory.storage.store import store_message

        secret = store_message(owner, conversation, "user", SECRET)
        client.force_login(stranger)
        return client.get(reverse("chat:forget_dialog", args=[secret.pk])).status_code

    assert await ask() == 404


def test_a_reply_draft_loses_the_words_of_a_message_forgotten_while_it_streams(owner, conversation):
    from chat.models import ReplyDraft
    from memory.lifecycle.forgetting import forget_message
    from memory.storage.store import store_message

    secret = store_message(owner, conversation, "user", SECRET)
    question = store_message(owner, conversation, "user", "where is the key?")
    draft = ReplyDraft.objects.create(
        id="01JDRAFT000000000000000000", owner=owner, conversation=conversation, parent=question,
        text="You said the spare key hangs behind the blue door in the boathouse", process="test",
    )
    forget_message(owner, secret.pk)
    draft.refresh_from_db()
    assert "boathouse" not in draft.text and draft.text.startswith("You said")


def test_a_snapshot_saved_after_a_forget_keeps_none_of_what_its_plan_showed(owner, conversation, settings):
    from chat import turn
    from chat.replies import Reply
    from memory.context import budget
    from memory.lifecycle.forgetting import forget_message
    from memory.models import ContextSnapshot
    from memory.storage.store import store_message

    settings.INDEX_FULL_MAX = 100  # the whole memory is listed: the plan shows the secret
    secret = store_message(owner, conversation, "user", SECRET)
    question = store_message(owner, conversation, "user", "where is the spare key?")
    reply = Reply()
    plan = turn._prepare_context(owner, conversation, question, budget.allocate(), reply.seen)
    assert MARKER in plan.system_prompt() and secret.pk in reply.seen
    forget_message(owner, secret.pk)  # while the first token was on its way
    snapshot = turn._save_snapshot(owner, conversation, question, reply, plan)
    assert rows_containing(MARKER) == {}
    assert ContextSnapshot.objects.filter(pk=snapshot.pk).exists()


def test_a_turns_writes_go_in_one_message_only_while_all_it_read_is_there(owner, conversation):
    from django.db import transaction

    from memory.lifecycle.forgetting import forget_message, written_if_none_gone
    from memory.models import ContextSnapshot
    from memory.storage.inserts import insert_statement
    from memory.storage.store import store_message

    secret = store_message(owner, conversation, "user", SECRET)
    question = store_message(owner, conversation, "user", "where is the spare key?")
    seen = {secret.pk: [SECRET], question.pk: [question.content]}

    def snapshot():
        return ContextSnapshot(owner=owner, conversation=conversation, strategy="full", text=SECRET)

    first = snapshot()
    assert written_if_none_gone(owner, seen, [insert_statement(first)])
    assert ContextSnapshot.objects.filter(pk=first.pk).exists()
    # Inside a transaction (whose statements a failed check would abort) it leaves the write to
    # the caller's own transaction.
    inside = snapshot()
    with transaction.atomic():
        assert not written_if_none_gone(owner, seen, [insert_statement(inside)])
    forget_message(owner, secret.pk)
    late = snapshot()
    assert not written_if_none_gone(owner, seen, [insert_statement(late)])
    assert not ContextSnapshot.objects.filter(pk__in=[inside.pk, late.pk]).exists()
