"""Faults survived: after each, every message the user sent is stored, the conversation can
continue and the explorer shows what happened. The scenarios are the ones `manage.py
bench_faults` runs (bench/management/commands/bench_faults.py)."""

from __future__ import annotations

import pytest

from bench.management.commands import bench_faults
from chat.models import ReplyDraft
from memory.models import Message

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
    owner, conversation, llm
):
    llm.state.reset()
    result = bench_faults.fault_server_killed_mid_stream(owner, conversation, llm)
    check(result)
    recovered, streamed = result.details["recovered"], result.details["streamed"]
    # The reconnected tab was told what became of the reply it watched.
    assert recovered["type"] == "reply_done" and recovered["status"] == "failed"
    assert "server stopped" in recovered["error"] and "incomplete" in recovered["html"]
    rows = list(
        Message.objects.filter(conversation=conversation, is_chunk=False)
        .order_by("position").values_list("pk", "role", "content", "metadata")
    )
    # The cut reply is stored in its place, before the next turn, with what had been saved.
    assert [role for _, role, _, _ in rows] == ["user", "assistant", "user", "assistant"]
    assert rows[0][2] == bench_faults.RESTART_QUESTION
    pk, _, partial, metadata = rows[1]
    assert pk == recovered["message_id"]
    assert metadata["incomplete"] and metadata["status"] == "failed"
    assert partial.split() == [f"w{i}" for i in range(len(partial.split()))]
    assert 20 <= len(partial.split()) <= len(streamed.split())
    assert not ReplyDraft.objects.exists()
