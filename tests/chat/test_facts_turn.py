"""The facts of a scripted life in a chat turn: the index gives the model what holds now about
the people the message names (with what it replaced), and get_facts gives it the superseded facts
with the dates each held."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async

from memory.knowledge import facts
from tests.chat.conftest import connect, exchange
from tests.memory.test_facts import tell

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def _a_life_in_memory(owner, conversation):
    tell(owner, conversation)
    facts.extract_messages(owner)  # what background upkeep does after the turns


def _facts_section(system: str) -> list[str]:
    lines = system.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("FACTS ("))
    section = []
    for line in lines[start + 1:]:
        if not (line.startswith("- ") or line.endswith(":")):
            break
        section.append(line)
    return section


async def test_a_turn_is_shown_the_current_facts_and_can_ask_what_they_replaced(
    owner, conversation, scripted_llm
):
    await _a_life_in_memory(owner, conversation)
    marker = "factstest"
    scripted_llm.script(
        {"tool_calls": [{"name": "get_facts", "arguments": {"subject": "me", "include_superseded": True}}]},
        {"text": "You live in Hamburg now."},
        match=marker,
    )
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, f"{marker} where do I live these days, and is the trip still on?")
    await ws.disconnect()
    assert events[-1]["status"] == "complete"
    first, second = [r for r in scripted_llm.requests if marker in r["last_user"]]
    section = _facts_section(first["messages"][0]["content"])
    assert section[0] == "the user:"
    text = "\n".join(section)
    assert "- the user lives in Hamburg (since 2024-05-10; was: Munich) [msg " in text
    trip = ("- the user's trip is planned for July 2 (since 2024-04-01; about 2024-07-02..2024-07-03; "
            "was: 10 June)")
    assert f"{trip} [msg " in text
    assert "- the user works at Globex (since 2024-03-10; was: Acme Bank)" in text
    assert "London" not in text and "Acme Bank as" not in text  # superseded: not current
    result = json.loads(second["messages"][-1]["content"])
    lives = [(f["fact"], f["valid_from"][:10], (f.get("valid_to") or "")[:10], f["current"])
             for f in result["facts"] if f["attribute"] == "lives in"]
    assert lives == [
        ("the user lives in Hamburg", "2024-05-10", "", True),
        ("the user lives in Munich", "2024-05-09", "2024-05-10", False),
        ("the user lives in Berlin", "2024-03-01", "2024-05-09", False),
        ("the user lives in London", "2024-01-10", "2024-03-01", False),
    ]


async def test_remember_that_is_saved_at_once_and_shown_under_the_reply(owner, conversation, scripted_llm):
    from memory.models import Fact

    marker = "Peanutstest"
    scripted_llm.script({"text": "Noted."}, match=marker)
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, f"{marker}. I'm allergic to peanuts, please remember that.")
    await ws.disconnect()
    done = events[-1]
    assert done["type"] == "reply_done" and done["status"] == "complete"
    assert "Saved to memory:" in done["html"] and "You&#x27;re allergic to peanuts." in done["html"]
    fact = await Fact.objects.aget(owner=owner, kind="remember")
    assert fact.wording == "I'm allergic to peanuts." and fact.statement == "the user is allergic to peanuts."
    assert f'#fact-{fact.pk}"' in done["html"] and "Undo" in done["html"]


async def test_a_reply_to_a_message_without_a_request_to_remember_saves_nothing(
    owner, conversation, scripted_llm
):
    from memory.models import Fact

    marker = "plaintest"
    scripted_llm.script({"text": "Sure."}, match=marker)
    ws = await connect(owner, conversation.pk)
    events = await exchange(ws, f"{marker} what's a good name for a cat?")
    await ws.disconnect()
    assert "Saved to memory" not in events[-1]["html"]
    assert not await Fact.objects.filter(owner=owner).aexists()
