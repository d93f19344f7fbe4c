"""The window's zones (seed 003 A1) and the prompt fitted to them (issue 13 §2)."""

from __future__ import annotations

import pytest

from memory.context import budget
from memory.context.budget import Prompt, ToolResultText, allocate, context_window, head, tail
from memory.context.index_builder import prepare_context
from memory.storage.store import store_message
from memory.tokens import count_tokens
from tests.memory.conftest import add_turns


@pytest.mark.parametrize("window", [1024, 2048, 4096, 8192, 32_768, 128_000, 1_047_576])
def test_the_zones_add_up_to_at_most_the_window(window):
    zones = allocate(window).zones
    assert set(zones) == {z.name for z in budget.ZONES}
    assert sum(zones.values()) <= window
    assert sum(zones.values()) >= window - len(zones)  # rounding aside, the window is used


@pytest.mark.parametrize("window", [2048, 4096, 8192, 128_000])
def test_every_zone_gets_at_least_its_minimum(window):
    zones = allocate(window).zones
    for z in budget.ZONES:
        assert zones[z.name] >= z.min, z.name


def test_a_window_below_the_minimums_shrinks_them_in_proportion():
    zones = allocate(1024).zones
    assert all(0 < v < z.min for z, v in zip(budget.ZONES, zones.values(), strict=True))


def test_capped_zones_stop_growing_and_the_turns_get_the_rest(settings):
    settings.INDEX_MAX_TOKENS = 10_000
    settings.CHAT_ANSWER_MAX_TOKENS = 4096
    big = allocate(128_000)
    assert big["index"] == 10_000
    assert big["answer"] == 4096
    assert big["tools"] == 4000
    # What the capped zones leave goes to recent turns, the message and tool results.
    assert big["recent"] > 0.15 * 128_000
    assert big["current"] > 0.12 * 128_000
    assert big["tool_results"] > 0.16 * 128_000


def test_a_small_window_gets_its_preferred_shares():
    a = allocate(4096)
    assert a["index"] == 1024
    assert a["answer"] == 410
    assert a["current"] == round(0.12 * 4096) or abs(a["current"] - 0.12 * 4096) <= 1


def test_the_window_comes_from_the_model_when_not_set(settings):
    settings.CHAT_CONTEXT_TOKENS = 0
    settings.CHAT_MODEL = "gpt-4o-mini"
    assert context_window() == 128_000
    assert context_window("llama3:8b") == 8192
    assert context_window("llama3.1:70b") == 131_072
    assert context_window("openai/gpt-4") == 8192
    assert context_window("some-new-model") == budget.DEFAULT_WINDOW
    settings.CHAT_CONTEXT_TOKENS = 4096
    assert context_window() == 4096
    assert allocate().window == 4096


def test_shrinking_halves_index_recent_current_and_tool_results_only():
    a = allocate(8192)
    b = a.shrink()
    assert b.shrunk and not a.shrunk
    for name, value in a.zones.items():
        expected = value // 2 if name in budget.SHRINKABLE else value
        assert b[name] == expected, name


def test_head_and_tail_fit_their_tokens_and_keep_whole_characters():
    text = "naïve café 東京 " * 500 + "THE END"
    for n in (1, 7, 50, 333):
        h, t = head(text, n), tail(text, n)
        assert count_tokens(h) <= n and count_tokens(t) <= n
        assert text.startswith(h) and text.endswith(t)
        assert count_tokens(h) >= n - 4  # nearly all of the allowance is used
    assert tail(text, 5).endswith("THE END")
    assert head("short", 100) == "short"


# --- the prompt ---------------------------------------------------------------------------------


def _prompt(owner, conversation, text: str, window: int) -> Prompt:
    allocation = allocate(window)
    message = store_message(owner, conversation, "user", text, embed=False)
    plan = prepare_context(
        owner, conversation, text, user_message=message, zones=allocation.index_zones()
    )
    return Prompt.for_message(allocation, plan, message)


def _sent(messages, tools=()) -> int:
    return budget.PRIMING + sum(budget.message_tokens(m) for m in messages) + budget.tools_tokens(
        list(tools)
    )


@pytest.mark.django_db
def test_a_message_over_its_zone_goes_as_head_and_tail_with_a_note_how_to_read_it(owner, conversation):
    words = [f"word{i}" for i in range(60_000)]
    text = "BEGINNING " + " ".join(words) + " FINALE"
    prompt = _prompt(owner, conversation, text, 4096)
    messages = prompt.messages(prompt.plan.tools)
    sent = messages[-1]["content"]
    assert sent.startswith("BEGINNING ") and sent.endswith(" FINALE")
    assert prompt.message_id in sent
    assert f'get_message_by_id(id="{prompt.message_id}", offset=' in sent
    assert f'get_message_with_chunks(id="{prompt.message_id}", offset=0)' in sent
    # The offset in the note is where the head stops: reading on from it misses nothing.
    offset = int(sent.split(f'get_message_by_id(id="{prompt.message_id}", offset=')[1].split(")")[0])
    assert text[:offset] == sent[:offset]
    assert prompt.used["current"] <= prompt.allocation["current"]
    assert _sent(messages, prompt.plan.tools) == sum(prompt.used.values())
    assert sum(prompt.used.values()) + prompt.max_tokens <= 4096
    assert prompt.report()["current_message_cut"] is True


@pytest.mark.django_db
def test_a_message_within_its_zone_goes_whole(owner, conversation):
    prompt = _prompt(owner, conversation, "what did we plant in the garden?", 4096)
    assert prompt.messages()[-1]["content"] == "what did we plant in the garden?"
    assert prompt.report()["current_message_cut"] is False


@pytest.mark.django_db
def test_recent_turns_are_trimmed_oldest_first_to_their_zone(owner, conversation):
    texts = [f"turn {i}: " + "the garden shed roof leaks again " * 30 for i in range(10)]
    add_turns(owner, conversation, texts, embed=False)
    prompt = _prompt(owner, conversation, "and the roof?", 4096)
    prompt.messages()
    shown = [m for m in prompt.messages() if m["role"] in {"user", "assistant"}][:-1]
    assert shown, "some recent turns fit"
    assert prompt.used["recent"] <= prompt.allocation["recent"]
    # What is kept is the newest turns, in order.
    assert shown[-1]["content"].startswith("turn 9:")
    numbers = [int(m["content"].split(":")[0].split()[1]) for m in shown]
    assert numbers == list(range(10 - len(numbers), 10))
    before = len(shown)
    prompt.shrink()
    shown = [m for m in prompt.messages() if m["role"] in {"user", "assistant"}][:-1]
    assert len(shown) < before and shown[-1]["content"].startswith("turn 9:")


def _round(prompt: Prompt, n: int, size: int) -> None:
    call_id = f"call_{n}"
    prompt.add_round(
        "",
        [{"id": call_id, "type": "function", "function": {"name": "find", "arguments": '{"pattern": "x"}'}}],
        [ToolResultText(call_id, f"result {n} " + "lorem ipsum dolor " * size, f"summary of round {n}")],
    )


@pytest.mark.django_db
def test_earlier_tool_results_shrink_to_summaries_and_the_newest_gets_the_rest(owner, conversation):
    prompt = _prompt(owner, conversation, "search my notes", 4096)
    _round(prompt, 1, 20)  # small: fits in full
    messages = prompt.messages()
    assert messages[-1]["content"].startswith("result 1 lorem")
    assert not messages[-1]["content"].endswith("call it again]")
    for n in range(2, 6):
        _round(prompt, n, 3000)
    messages = prompt.messages()
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert len(results) == 5
    # The newest result is shown (cut to what is left); big earlier ones are summaries.
    assert results[-1].startswith("result 5 lorem") and "cut to fit the context window" in results[-1]
    for n, text in zip(range(2, 5), results[1:4], strict=True):
        assert f"summary of round {n}" in text
    assert prompt.used["tool_results"] <= prompt.allocation["tool_results"]
    assert prompt.report()["results_shown_as_summaries"] >= 3
    assert sum(prompt.used.values()) + prompt.max_tokens <= 4096


@pytest.mark.django_db
def test_the_newest_result_keeps_room_when_earlier_summaries_would_fill_the_zone(owner, conversation):
    prompt = _prompt(owner, conversation, "search my notes", 4096)
    for n in range(1, 9):  # long summaries: together they would take the whole zone
        call_id = f"call_{n}"
        prompt.add_round(
            "",
            [{"id": call_id, "type": "function", "function": {"name": "find", "arguments": "{}"}}],
            [ToolResultText(call_id, f"result {n} " + "lorem ipsum " * 3000, f"summary {n} " + "word " * 60)],
        )
    results = [m["content"] for m in prompt.messages() if m["role"] == "tool"]
    # The newest result, the one the model just asked for, is shown (cut), not left out:
    # the oldest earlier ones became stubs to make room for it.
    assert results[-1].startswith("result 8 lorem") and "cut to fit the context window" in results[-1]
    assert results[0].startswith("[result left out to fit the context window")
    assert prompt.used["tool_results"] <= prompt.allocation["tool_results"]


@pytest.mark.django_db
def test_the_snapshot_report_has_every_zone_allocated_and_used(owner, conversation):
    prompt = _prompt(owner, conversation, "hello there", 8192)
    prompt.messages(prompt.plan.tools)
    report = prompt.report(completion_tokens=12)
    assert set(report["zones"]) == {z.name for z in budget.ZONES}
    assert report["zones"]["answer"] == {"allocated": prompt.max_tokens, "used": 12}
    assert report["zones"]["tools"]["used"] == budget.tools_tokens(prompt.plan.tools) > 0
    assert report["prompt_tokens"] == sum(prompt.used.values())
    assert report["window"] == 8192 and report["shrunk"] is False
