"""Issue 13 §1: every character of a message, chunk or tool result is readable through the
reading tools, page by page, within MAX_RESULT_CHARS per result."""

from __future__ import annotations

import io
import json
import random

import pytest
from django.core.management import call_command

from memory.context.tools import MAX_RESULT_CHARS, execute_tool, tool_schemas
from memory.lifecycle.deleting import delete_message
from memory.lifecycle.forgetting import forget_message
from memory.models import Message, ToolCall
from memory.storage.store import store_message, store_tool_call

pytestmark = pytest.mark.django_db


def long_text(size: int = 50_000, seed: int = 1) -> str:
    """Prose with what JSON escapes (newlines, quotes, backslashes) and what it keeps (accents)."""
    rng = random.Random(seed)
    words = ["alpha", "beta", 'say "hi"', "naïve", "café", "back\\slash", "tab\there", "Zürich"]
    parts, length = [], 0
    while length < size:
        part = " ".join(rng.choices(words, k=8)) + rng.choice([". ", ".\n", "!\n\n"])
        parts.append(part)
        length += len(part)
    return "x" + "".join(parts)[: size - 2] + "y"


def read_all(owner, name: str, key: str, **args) -> tuple[str, list]:
    """Follow next_offset from 0 to the end; return the text read and every result."""
    text, offset, results = "", 0, []
    while offset is not None:
        outcome = execute_tool(owner, name, {**args, "offset": offset})
        assert outcome.ok, outcome.error
        assert len(outcome.content()) <= MAX_RESULT_CHARS
        page = outcome.result
        assert page["offset"] == offset and page["total_chars"] >= len(text)
        text += page[key]
        results.append(page)
        offset = page["next_offset"]
    return text, results


@pytest.fixture
def unchunked(settings):
    settings.INDEX_CHUNK_THRESHOLD = 1_000_000


def test_a_long_unchunked_message_reads_back_exactly_page_by_page(owner, conversation, unchunked):
    text = long_text()
    m = store_message(owner, conversation, "user", text, embed=False)
    assert not m.chunks.exists()
    read, pages = read_all(owner, "get_message_by_id", "content", id=m.pk)
    assert read == text
    assert len(pages) > 2 and pages[0]["total_chars"] == 50_000
    assert pages[-1]["next_offset"] is None and pages[-1]["remaining_chars"] == 0
    assert "offset=" in pages[0]["note"]


def test_a_long_chunked_message_reads_back_exactly_whole_and_chunk_by_chunk(owner, conversation):
    text = long_text()
    m = store_message(owner, conversation, "user", text, embed=False)
    chunks = list(m.chunks.order_by("chunk_index"))
    assert len(chunks) > 1, "50,000 characters are over the default chunk threshold"
    read, _ = read_all(owner, "get_message_by_id", "content", id=m.pk)
    assert read == text

    # Chunk by chunk: get_message_with_chunks, then a chunk's own pages when it is cut.
    seen, offset = [], 0
    while offset is not None:
        outcome = execute_tool(owner, "get_message_with_chunks", {"id": m.pk, "offset": offset})
        assert outcome.ok and len(outcome.content()) <= MAX_RESULT_CHARS
        result = outcome.result
        assert result["chunk_count"] == len(chunks)
        for item in result["chunks"]:
            body = item["content"]
            if item["next_offset"] is not None:
                body, _ = read_all(owner, "get_message_by_id", "content", id=item["id"])
            seen.append((item["chunkIndex"], body))
        offset = result["next_offset"]
    assert seen == [(c.chunk_index, c.content) for c in chunks]
    assert text.startswith(seen[0][1]) and text.endswith(seen[-1][1])


def test_several_messages_page_together_from_one_offset(owner, conversation, unchunked):
    short = store_message(owner, conversation, "user", "a short note", embed=False)
    text = long_text(30_000)
    long = store_message(owner, conversation, "user", text, embed=False)
    first = execute_tool(owner, "get_messages_by_ids", {"ids": [short.pk, long.pk]})
    assert first.ok and len(first.content()) <= MAX_RESULT_CHARS
    by_id = {m["id"]: m for m in first.result["messages"]}
    assert by_id[short.pk]["content"] == "a short note" and by_id[short.pk]["next_offset"] is None
    read = by_id[long.pk]["content"]
    at = by_id[long.pk]["next_offset"]
    while at is not None:
        page = execute_tool(owner, "get_messages_by_ids", {"ids": [short.pk, long.pk], "offset": at})
        assert page.ok, page.error
        items = {m["id"]: m for m in page.result["messages"]}
        assert items[short.pk]["content"] == "" and "past its end" in items[short.pk]["note"]
        read += items[long.pk]["content"]
        at = items[long.pk]["next_offset"]
    assert read == text


def test_a_long_tool_result_reads_back_exactly(owner, conversation):
    text = long_text(seed=2)
    reply = store_message(owner, conversation, "assistant", "I fetched it", embed=False)
    call = store_tool_call(owner, reply, "fetch", {"url": "https://example.org"}, text, embed=False)
    read, pages = read_all(owner, "get_tool_call", "result", id=call.pk)
    assert read == text and pages[0]["total_chars"] == len(text) and len(pages) > 2

    # Found through its message, then read on from where the list left off.
    listed = execute_tool(owner, "get_tool_calls_by_message", {"message_id": reply.pk})
    item = listed.result["tool_calls"][0]
    assert item["id"] == call.pk and item["total_chars"] == len(text)
    rest, _ = read_all(owner, "get_tool_call", "result", id=call.pk)
    assert item["result"] + rest[item["next_offset"] :] == text

    # A chunk of the result pages the same way.
    chunk = ToolCall.objects.filter(chunk_parent=call).order_by("chunk_index").first()
    assert chunk is not None
    read_chunk, _ = read_all(owner, "get_tool_call", "result", id=chunk.pk)
    assert read_chunk == chunk.result


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("get_message_by_id", {"offset": -1}, "at least 0"),
        ("get_message_by_id", {"offset": "10"}, "must be an integer"),
        ("get_message_by_id", {"offset": 2.5}, "must be an integer"),
        ("get_message_by_id", {"offset": True}, "must be an integer"),
        ("get_message_by_id", {"offset": 1000}, "past the end"),
        ("get_message_by_id", {"offset": 10**30}, "past the end"),
        ("get_messages_by_ids", {"offset": 1000}, "past the end"),
        ("get_messages_by_ids", {"offset": -5}, "at least 0"),
        ("get_message_with_chunks", {"offset": 3}, "no chunks"),
        ("get_tool_call", {"offset": 1000}, "past the end"),
        ("get_tool_call", {"offset": -1}, "at least 0"),
        ("get_tool_call", {"offset": [1]}, "must be an integer"),
    ],
)
def test_bad_offsets_get_a_clear_error(owner, conversation, name, args, message):
    m = store_message(owner, conversation, "assistant", "twelve chars", embed=False)
    call = store_tool_call(owner, m, "fetch", {}, "a short result", embed=False)
    ident = {"get_tool_call": {"id": call.pk}, "get_messages_by_ids": {"ids": [m.pk]}}
    outcome = execute_tool(owner, name, {**ident.get(name, {"id": m.pk}), **args})
    assert not outcome.ok
    assert message in outcome.error


def test_an_offset_past_the_last_chunk_is_refused(owner, conversation):
    m = store_message(owner, conversation, "user", long_text(), embed=False)
    total = m.chunks.count()
    outcome = execute_tool(owner, "get_message_with_chunks", {"id": m.pk, "offset": total})
    assert not outcome.ok and "past the last chunk" in outcome.error


def test_a_non_number_in_json_is_an_error_not_an_exception(owner, conversation):
    m = store_message(owner, conversation, "user", "hello there", embed=False)
    for raw in ('{"id": "%s", "offset": NaN}', '{"id": "%s", "offset": Infinity}'):
        outcome = execute_tool(owner, "get_message_by_id", raw % m.pk)
        assert not outcome.ok and "must be an integer" in outcome.error


def test_the_last_character_is_the_last_offset(owner, conversation):
    m = store_message(owner, conversation, "user", "abcdef", embed=False)
    outcome = execute_tool(owner, "get_message_by_id", {"id": m.pk, "offset": 5})
    assert outcome.ok and outcome.result["content"] == "f"
    assert outcome.result["next_offset"] is None and outcome.result["total_chars"] == 6


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("get_message_by_id", "id"),
        ("get_messages_by_ids", "ids"),
        ("get_message_with_chunks", "id"),
        ("get_tool_call", "id"),
    ],
)
def test_a_strangers_ids_stay_not_found_at_any_offset(
    owner, stranger, stranger_conversation, name, key
):
    secret = "OCELOT-5150 " * 3000
    m = store_message(stranger, stranger_conversation, "user", secret, embed=False)
    call = store_tool_call(stranger, m, "fetch", {}, secret, embed=False)
    ident = call.pk if name == "get_tool_call" else m.pk
    for offset in (0, 1, 20_000):
        args = {key: [ident] if key == "ids" else ident, "offset": offset}
        if name == "get_message_with_chunks":
            args["offset"] = min(offset, 1)
        outcome = execute_tool(owner, name, args)
        assert not outcome.ok and "not found" in outcome.error
        assert "OCELOT" not in json.dumps(outcome.as_dict())


def test_a_deleted_or_forgotten_message_is_unreadable_at_any_offset(owner, conversation):
    text = long_text()
    gone = store_message(owner, conversation, "user", text, embed=False)
    call = store_tool_call(owner, gone, "fetch", {}, text, embed=False)
    chunk = gone.chunks.first()
    delete_message(owner, gone.pk)
    attempts = [
        ("get_message_by_id", {"id": gone.pk, "offset": 20_000}),
        ("get_message_by_id", {"id": chunk.pk, "offset": 10}),
        ("get_messages_by_ids", {"ids": [gone.pk], "offset": 100}),
        ("get_message_with_chunks", {"id": chunk.pk, "offset": 1}),
        ("get_tool_call", {"id": call.pk, "offset": 20_000}),
    ]
    for name, args in attempts:
        outcome = execute_tool(owner, name, args)
        assert not outcome.ok and "not found" in outcome.error, name
    forget_message(owner, gone.pk)
    assert not Message.objects.filter(pk=gone.pk).exists()
    for name, args in attempts:
        assert not execute_tool(owner, name, args).ok, name


def test_the_schemas_tell_the_model_how_to_page():
    schemas = {s["function"]["name"]: s["function"] for s in tool_schemas()}
    for name in ("get_message_by_id", "get_messages_by_ids", "get_tool_call"):
        offset = schemas[name]["parameters"]["properties"]["offset"]
        assert offset["type"] == "integer" and offset["minimum"] == 0
        assert "maximum" not in offset, "a capped offset would show the wrong page"
        assert "next_offset" in offset["description"]
    assert "next_offset" in schemas["get_message_by_id"]["description"]
    assert "chunk" in schemas["get_message_with_chunks"]["parameters"]["properties"]["offset"][
        "description"
    ]


def test_bench_retrievability_quick_finds_every_sentence():
    out = io.StringIO()
    call_command("bench_retrievability", quick=True, user="retrievability-test", database="", stdout=out)
    text = out.getvalue()
    assert "sentences found through the tools: 15/15 (100%)" in text, text
    assert "tool calls per sentence" in text
    assert not Message.objects.filter(owner__username="retrievability-test").exists()
