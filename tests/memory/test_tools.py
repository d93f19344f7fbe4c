from __future__ import annotations

import json

import pytest

from memory.context.tools import TOOLS, execute_tool, select_tools, tool_schemas
from memory.knowledge.entities import index_messages
from memory.models import Topic
from memory.organizing import topics
from memory.storage.store import store_message, store_tool_call
from tests.memory.conftest import add_turns

pytestmark = pytest.mark.django_db


@pytest.fixture
def stranger_memory(stranger, stranger_conversation):
    msgs = add_turns(
        stranger,
        stranger_conversation,
        ["stranger private note: vault code OCELOT-5150", "noted OCELOT-5150"],
    )
    call = store_tool_call(stranger, msgs[1], "vector_search", {"query": "vault"}, "OCELOT-5150")
    index_messages(stranger, msgs)
    topics.rebuild(stranger)
    topic = Topic.objects.owned_by(stranger).first()
    return {
        "message": msgs[0].pk,
        "tool_call": call.pk,
        "topic": topic.pk,
        "conversation": stranger_conversation.pk,
    }


@pytest.fixture
def own_memory(owner, conversation):
    msgs = add_turns(owner, conversation, ["I planted tulips on Tuesday", "Tulips like sun"])
    index_messages(owner, msgs)
    return msgs


STRANGER_CALLS = [
    ("get_message_by_id", {"id": "message"}),
    ("get_messages_by_ids", {"ids": ["message"]}),
    ("get_message_with_chunks", {"id": "message"}),
    ("get_conversation_thread", {"message_id": "message"}),
    ("get_session", {"message_id": "message"}),
    ("get_tool_call", {"id": "tool_call"}),
    ("get_tool_calls_by_message", {"message_id": "message"}),
    ("get_cluster", {"cluster_id": "topic"}),
    ("get_topic_messages", {"topic": "topic"}),
    ("view_topic", {"topic_id": "topic"}),
    ("vector_search", {"query": "vault", "conversation_id": "conversation"}),
    ("search_and_retrieve", {"query": "vault", "conversation_id": "conversation"}),
    ("get_period_messages", {"period": "this_month", "conversation_id": "conversation"}),
    ("find", {"pattern": "OCELOT", "conversation_id": "conversation"}),
    ("find", {"pattern": "OCELOT", "start": "message"}),
    ("show_summaries", {"start": "message"}),
    ("get_conversation_stats", {"conversation_id": "conversation"}),
    ("expand_node", {"id": "message"}),
    ("expand_node", {"id": "topic"}),
]


@pytest.mark.parametrize(("name", "template"), STRANGER_CALLS)
def test_every_tool_refuses_a_strangers_ids(owner, own_memory, stranger_memory, name, template):
    args = {
        k: ([stranger_memory[x] for x in v] if isinstance(v, list) else stranger_memory.get(v, v))
        for k, v in template.items()
    }
    result = execute_tool(owner, name, args)
    assert not result.ok, result.result
    assert "not found" in result.error
    assert "OCELOT" not in json.dumps(result.as_dict())


def test_every_tool_is_covered_by_a_stranger_test():
    needs_ids = {
        n
        for n, t in TOOLS.items()
        if any(k.endswith("id") or k in {"ids", "topic", "start"} for k in t.parameters)
    }
    assert needs_ids <= {name for name, _ in STRANGER_CALLS}


@pytest.mark.parametrize(
    "name", ["vector_search", "search_and_retrieve", "find", "memory_graph_query"]
)
def test_searching_tools_never_return_a_strangers_content(owner, own_memory, stranger_memory, name):
    args = {
        "vector_search": {"query": "vault code OCELOT-5150"},
        "search_and_retrieve": {"query": "vault code OCELOT-5150"},
        "find": {"pattern": "OCELOT"},
        "memory_graph_query": {"entity": "OCELOT-5150"},
    }[name]
    result = execute_tool(owner, name, args)
    # The query is echoed back; what was found must not hold the stranger's words.
    found = {k: v for k, v in (result.result or {}).items() if k not in ("query", "pattern")}
    assert "OCELOT" not in json.dumps(found)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"query": "tulips"', "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ({}, "missing required argument"),
        ({"query": "tulips", "colour": "red"}, "unexpected argument"),
        ({"query": 42}, "must be a string"),
        ({"query": "tulips", "limit": 0}, "at least 1"),
        ({"query": "tulips", "limit": "5"}, "must be an integer"),
        ({"query": "tulips", "limit": True}, "must be an integer"),
        ({"query": "tulips", "role": "robot"}, "must be one of"),
        ({"query": "tulips", "start": "last tuesday-ish"}, "cannot read"),
    ],
)
def test_bad_arguments_get_a_clear_error(owner, own_memory, arguments, message):
    result = execute_tool(owner, "vector_search", arguments)
    assert not result.ok
    assert message in result.error


def test_a_huge_limit_is_capped_not_refused(owner, own_memory):
    result = execute_tool(
        owner, "get_period_messages", {"period": "this_month", "limit": 1_000_000}
    )
    assert result.ok
    assert len(result.result["messages"]) <= 50


def test_an_unknown_tool_is_an_error_not_an_exception(owner):
    result = execute_tool(owner, "rm_rf", {})
    assert not result.ok and "unknown tool" in result.error


def test_periods_that_do_not_parse_are_refused(owner, own_memory):
    for period in ["someday", "2024-13-45", "2024-05-10..2024-05-01"]:
        result = execute_tool(owner, "get_period_messages", {"period": period})
        assert not result.ok, period


def test_periods_by_name_date_and_range(owner, own_memory):
    day = own_memory[0].timestamp.date().isoformat()
    for period in ["today", "this_week", "this_month", day, f"{day}..{day}", day[:7]]:
        result = execute_tool(owner, "get_period_messages", {"period": period})
        assert result.ok, (period, result.error)
    result = execute_tool(owner, "get_period_messages", {"period": day})
    assert {m["id"] for m in result.result["messages"]} >= {m.pk for m in own_memory}


def test_find_is_bounded_against_catastrophic_patterns(owner, conversation):
    store_message(owner, conversation, "user", "a" * 5000 + "!", embed=False)
    result = execute_tool(owner, "find", {"pattern": "(a+)+$b"})
    # Either Postgres' automaton answers quickly or the statement timeout stops it.
    assert result.ok or "longer than" in result.error
    assert result.duration_ms < 5000
    bad = execute_tool(owner, "find", {"pattern": "(unclosed"})
    assert not bad.ok and "invalid regular expression" in bad.error


def test_find_in_the_chats_transaction_leaves_no_statement_timeout_behind(owner, conversation):
    from django.db import connection, transaction

    store_message(owner, conversation, "user", "the OCELOT sleeps", embed=False)

    def timeout():
        with connection.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            return cursor.fetchone()[0]

    before = timeout()
    with transaction.atomic():  # as the chat runs a tool call
        assert execute_tool(owner, "find", {"pattern": "OCELOT"}).result["matches"]
        assert timeout() == before


def test_find_between_two_positions(owner, conversation):
    msgs = add_turns(owner, conversation, ["alpha 1", "alpha 2", "alpha 3", "alpha 4"], embed=False)
    result = execute_tool(
        owner, "find", {"pattern": "alpha [0-9]", "start": msgs[1].pk, "end": msgs[2].pk}
    )
    assert [m["id"] for m in result.result["matches"]] == [msgs[1].pk, msgs[2].pk]


def test_get_message_with_chunks_pages_through_a_long_message(owner, conversation, settings):
    settings.INDEX_CHUNK_THRESHOLD = 100
    settings.INDEX_CHUNK_OVERLAP = 10
    long = store_message(
        owner, conversation, "user", " ".join(f"word{i}" for i in range(600)), embed=False
    )
    first = execute_tool(owner, "get_message_with_chunks", {"id": long.pk, "limit": 2})
    assert first.ok and first.result["chunk_count"] > 2
    assert first.result["next_offset"] == 2
    second = execute_tool(
        owner, "get_message_with_chunks", {"id": long.pk, "offset": 2, "limit": 2}
    )
    assert second.result["chunks"][0]["chunkIndex"] == 2


def test_the_graph_query_walks_co_occurring_entities(owner, conversation):
    msgs = add_turns(
        owner,
        conversation,
        [
            "Dr. Elena Rostova leads Project Vanguard",
            "Project Vanguard needs 850 million euros",
        ],
        embed=False,
    )
    index_messages(owner, msgs)
    one = execute_tool(owner, "memory_graph_query", {"entity": "Elena Rostova", "depth": 1})
    assert one.ok
    names = {n["name"] for n in one.result["nodes"]}
    assert "Project Vanguard" in names and "850 million euros" not in names
    two = execute_tool(owner, "memory_graph_query", {"entity": "Elena Rostova", "depth": 2})
    assert "850 million euros" in {n["name"] for n in two.result["nodes"]}
    assert not execute_tool(owner, "memory_graph_query", {"entity": "x", "depth": 4}).ok


def test_tool_filtering_keeps_recent_tools_and_fits_the_budget():
    everything = sum(len(json.dumps(s)) for s in tool_schemas())
    assert everything > 0
    chosen, used = select_tools(
        "when did we talk about this last week?", 400, recently_used=["memory_graph_query"]
    )
    names = [c["function"]["name"] for c in chosen]
    assert "memory_graph_query" in names
    assert used <= 400
    none, used = select_tools("x", 0)
    assert none == [] and used == 0


def test_results_have_a_one_line_summary(owner, own_memory):
    result = execute_tool(owner, "vector_search", {"query": "tulips"})
    assert result.ok and result.summary.startswith('searched memory for "tulips"')
    assert "\n" not in result.summary


def test_periods_and_bounds_that_run_to_the_calendars_last_day_are_clamped(owner, own_memory):
    everything = {m.pk for m in own_memory}
    for period in ["2000-01-01..9999-12-31", "2000-01..9999-12", "9999-12", "9999-12-31"]:
        result = execute_tool(owner, "get_period_messages", {"period": period})
        assert result.ok, (period, result.error)
        found = {m["id"] for m in result.result["messages"]}
        assert found == (set() if period.startswith("9999") else everything), period
    bounds = {"start": "2000-01-01", "end": "9999-12-31"}
    search = execute_tool(owner, "vector_search", {"query": "tulips", **bounds})
    assert search.ok, search.error
    assert {h["id"] for h in search.result["results"]} & everything
    find = execute_tool(owner, "find", {"pattern": "ulips", "end": "9999-12-31"})
    assert find.ok, find.error
    assert {m["id"] for m in find.result["matches"]} == everything


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("get_message_by_id", {"id": "01J\x00"}),
        ("get_messages_by_ids", {"ids": ["01J\x00"]}),
        ("vector_search", {"query": "tulips\x00"}),
        ("vector_search", {"query": "tulips \ud800"}),
        ("get_tool_call", {"id": "\x00"}),
        ("view_topic", {"topic_id": "\x00"}),
        ("expand_node", {"id": "\udc00"}),
        ("vector_search", {"query": "tulips", "start": "\x00"}),
    ],
)
def test_text_postgres_cannot_read_in_an_argument_is_a_clear_error(owner, own_memory, name, arguments):
    result = execute_tool(owner, name, arguments)
    assert not result.ok and "internal error" not in result.error
    assert "NUL" in result.error or "surrogate" in result.error
    assert execute_tool(owner, "vector_search", {"query": "tulips"}).ok  # the next call still works


def test_it_searches_for_the_start_of_a_query_over_2000_characters(owner, own_memory):
    query = "tulips " + "and more words about the garden " * 100
    for name in ("search_and_retrieve", "vector_search"):
        result = execute_tool(owner, name, {"query": query})
        assert result.ok, result.error
        assert result.result["query"] == query[: len(result.result["query"])]
        assert 1000 < len(result.result["query"]) <= 2000
        assert not result.result["query"].endswith(" ")
    assert "shorten" not in json.dumps(tool_schemas())


def test_it_shows_escaped_tool_text_as_the_characters_it_stands_for():
    from memory.context.tools import readable_json

    assert readable_json('{"query": "\\u00bfC\\u00f3mo est\\u00e1s?"}') == '{"query": "¿Cómo estás?"}'
    assert readable_json('{"q": "a \\ud83d\\ude00 and cut \\u00e9t') == '{"q": "a 😀 and cut ét'  # cut short
    assert readable_json('{"path": "C:\\\\u0041"}') == '{"path": "C:\\\\u0041"}'  # an escaped backslash
    assert readable_json('{"nul": "\\u0000"}') == '{"nul": "\\u0000"}'
