"""Deleted content is absent from every path: search, index, tools, topics, entities."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from memory import topics
from memory.index_builder import prepare_context
from memory.models import Topic
from memory.search import search
from memory.store import delete_message, forget_message
from memory.tasks import run_upkeep
from memory.tools import execute_tool
from tests.memory.conftest import add_turns

pytestmark = pytest.mark.django_db

SECRET = "The vault code is ZEBRA-4242 at Quokka Station"


@pytest.fixture
def history(owner, conversation, settings):
    settings.INDEX_FULL_MAX = 3
    settings.INDEX_RECENT_WINDOW = 2
    texts = [
        "gardening notes: tulips and roses",
        "roses need pruning in March",
        SECRET,
        "noted the vault code",
        "more about the tulips",
        "tulips done",
    ]
    msgs = add_turns(owner, conversation, texts)
    run_upkeep(owner, [m.pk for m in msgs])
    topics.rebuild(owner)
    return msgs


def every_path(owner, conversation) -> str:
    seen = [json.dumps(search(owner, "vault code ZEBRA-4242 Quokka").as_dict()["results"])]
    for strategy_max in [(100, 200, 300), (1, 200, 300), (1, 2, 300), (1, 2, 3)]:
        from django.test import override_settings

        with override_settings(
            INDEX_FULL_MAX=strategy_max[0],
            INDEX_SNIPPET_MAX=strategy_max[1],
            INDEX_CLUSTER_MAX=strategy_max[2],
        ):
            seen.append(prepare_context(owner, conversation, "what is the vault code?").text)
    calls = [
        ("vector_search", {"query": "vault code ZEBRA-4242"}),
        ("search_and_retrieve", {"query": "vault code ZEBRA-4242"}),
        ("find", {"pattern": "ZEBRA"}),
        ("get_period_messages", {"period": "this_month", "limit": 50}),
        ("memory_graph_query", {"entity": "ZEBRA-4242"}),
        ("memory_graph_query", {"entity": "tulips", "depth": 3}),
        ("view_topic", {}),
        ("show_summaries", {}),
        ("get_conversation_stats", {}),
    ]
    for t in Topic.objects.owned_by(owner):
        calls.append(("get_cluster", {"cluster_id": t.pk, "limit": 50}))
        calls.append(("view_topic", {"topic_id": t.pk}))
    for name, args in calls:
        result = execute_tool(owner, name, args)
        found = {k: v for k, v in (result.result or {}).items() if k not in ("query", "pattern")}
        seen.append(json.dumps(found))
    for t in Topic.objects.owned_by(owner):
        seen.append(f"{t.label} {t.keywords} {t.summary}")
    return "\n".join(seen)


def test_the_secret_is_found_before_it_is_deleted(owner, conversation, history):
    assert "ZEBRA-4242" in every_path(owner, conversation)


@pytest.mark.parametrize("how", ["delete", "forget"])
def test_deleted_content_is_absent_from_every_path(owner, conversation, history, how):
    secret = history[2]
    (delete_message if how == "delete" else forget_message)(owner, secret.pk)
    run_upkeep(owner, [secret.pk])
    text = every_path(owner, conversation)
    assert "ZEBRA" not in text
    assert "Quokka" not in text
    assert secret.pk not in text
    result = execute_tool(owner, "get_message_by_id", {"id": secret.pk})
    assert not result.ok


def test_deleted_content_stays_out_after_a_full_rebuild(owner, conversation, history):
    delete_message(owner, history[2].pk)
    topics.rebuild(owner)
    assert "ZEBRA" not in every_path(owner, conversation)


def test_forgetting_reaches_the_tool_results_snapshots_and_topics_that_quoted_it(
    owner, conversation, history
):
    from memory.index_builder import save_snapshot
    from memory.models import ContextSnapshot, Passage, ToolCall
    from memory.portability import export_markdown, export_memory
    from memory.store import store_tool_call

    secret = history[2]
    question, reply = add_turns(owner, conversation, ["what was that code again?", "Here it is."])
    # A later turn quoted it: a search's result stored as a tool call, and a plan that showed it.
    found = execute_tool(owner, "search_and_retrieve", {"query": "the vault code"}).result
    store_tool_call(owner, reply, "search_and_retrieve", {"query": "the vault code"}, found)
    with override_settings(INDEX_FULL_MAX=100):
        plan = prepare_context(owner, conversation, "what was that code again?", user_message=question)
    save_snapshot(plan, owner, conversation, question)

    def traces() -> str:
        rows = [
            *ToolCall.objects.owned_by(owner).values_list("result", "arguments"),
            *Passage.objects.owned_by(owner).values_list("text", "context"),
            *ContextSnapshot.objects.owned_by(owner).values_list("query", "text", "plan", "hits"),
            *Topic.objects.owned_by(owner).values_list("label", "keywords", "summary"),
        ]
        return json.dumps([list(map(str, r)) for r in rows]) + json.dumps(
            export_memory(owner), default=str
        ) + export_markdown(owner)

    assert "ZEBRA-4242" in traces() and "Quokka" in traces()
    forget_message(owner, secret.pk)
    left = traces() + every_path(owner, conversation)
    at = left.find("ZEBRA") if "ZEBRA" in left else left.find("Quokka")
    assert at < 0, left[max(0, at - 300) : at + 100]
