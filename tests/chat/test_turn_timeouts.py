"""A chat turn goes on without a leg that took too long (memory/timeouts.py): a memory tool call
that ran past QUERY_TIMEOUT_MS is answered with an error the model is shown, offline recall says
the search took too long, and a context plan whose search ran out is built without it.

Slow statements are real: another connection locks the table they read (tests.memory.test_timeouts)."""

from __future__ import annotations

import asyncio

import pytest
from django.db import connection

from chat import turn
from chat.db import db, durable
from chat.llm import RequestedToolCall
from chat.replies import Reply
from memory.context import budget, index_builder
from memory.storage.store import store_message
from tests.memory.test_timeouts import locked

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slow(settings):
    settings.QUERY_TIMEOUT_MS = 400
    settings.VECTOR_SEARCH_TIMEOUT_MS = 400
    settings.SEMANTIC_CACHE = False


def test_a_memory_tool_that_takes_too_long_is_an_error_the_model_is_shown_and_the_turn_goes_on(
    owner, conversation, slow
):
    asked = store_message(owner, conversation, "user", "When is the gardening tea?", embed=False)
    store_message(owner, conversation, "user", "The gardening tea is on Saturday.", embed=False)
    call = RequestedToolCall("c1", "vector_search", '{"query": "gardening tea"}')

    def call_then_read_on():
        outcome = turn._execute_tool(owner, conversation, call, asked.pk, {})
        with connection.cursor() as cursor:  # the turn's transaction is still usable
            cursor.execute("SELECT 1")
        return outcome

    with locked("memory_message"):
        outcome = durable(call_then_read_on)()
    assert not outcome.ok and "took too long (more than 0.4 s)" in outcome.error


async def test_offline_recall_says_the_search_took_too_long_and_the_reply_ends(owner, conversation, slow):
    await db(store_message)(owner, conversation, "user", "The gardening tea is on Saturday.", embed=False)
    question = await db(store_message)(owner, conversation, "user", "When is the gardening tea?", embed=False)
    reply, said = Reply(), []

    async def emit(event: dict) -> None:
        said.append(event)

    with locked("memory_message"):
        await turn._offline_recall(owner, question, reply, emit, asyncio.Event())
    assert "Searching memory took too long (more than 0.4 s)" in reply.text
    assert reply.status == "complete" and said


def test_a_context_plan_whose_search_runs_out_is_built_without_it(owner, conversation, slow, monkeypatch):
    question = store_message(owner, conversation, "user", "When is the gardening tea?", embed=False)
    real = index_builder.prepare_context

    def search_runs_out(owner, conversation, query, **kwargs):
        if query:  # the search of the question: a statement past its limit
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_sleep(5)")
        return real(owner, conversation, query, **kwargs)

    monkeypatch.setattr(index_builder, "prepare_context", search_runs_out)
    plan = turn._prepare_context(owner, conversation, question, budget.allocate(), {})
    assert question.pk in [m.pk for m in plan.recent]
    assert [f["kind"] for f in plan.fallbacks][-1] == "index_timeout"
