"""The README's screenshots, taken as a person sees the product: a chat with a model (the
scripted one), and the Memory page of someone who has talked about their life for a while.

Always written to test-artifacts/readme/; with RECOLLECT_README_SCREENSHOTS=1 also to
docs/images/, where the README shows them (commit them after a change to what they show)."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from bench.launch import ARTIFACTS
from memory.knowledge import facts
from memory.models import Conversation
from memory.organizing import topics
from memory.storage.store import NewMessage, store_messages
from memory.tasks import run_upkeep
from tests.chat.test_browser import (  # noqa: F401 - fixtures: the scripted LLM, daphne, a tab
    browser_llm,
    live_daphne,
    page,
    person,
    send,
    sign_in_and_open_chat,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
SHOTS = ARTIFACTS / "readme"

# A few weeks of someone's life, as they told it to the assistant.
LIFE = [
    ("Moving", 40, [
        "We're moving to a flat in Lisbon next month, near the Estrela garden.",
        "Moving house with two cats: book the removal van for the 14th and pack the books first.",
        "The new flat in Lisbon has a balcony, so the tomato plants come with us.",
    ]),
    ("Marathon", 26, [
        "My marathon training plan has a long run of 26 km on Sundays.",
        "Marathon training this week: 3 x 8 km tempo and the long run along the river.",
        "I ran the long run in 2 h 31, my knee held up after the physio exercises.",
    ]),
    ("Dinner at Ana's", 12, [
        "I'm allergic to peanuts, and my sister Ana lives in Porto.",
        "Ana invited us for dinner in Porto on Saturday; she is making a Thai curry.",
        "Ana's Thai curry recipe uses coconut milk and cashews instead of peanuts.",
    ]),
    ("Thesis", 5, [
        "The thesis chapter on related work needs the Lewis 2020 paper and two more citations.",
        "My supervisor Dr. Okafor wants the thesis chapter draft by the end of May.",
        "Finished the related work section of the thesis chapter, 4,200 words.",
    ]),
]


def _remember_a_life(owner) -> None:
    now = timezone.now()
    for title, days_ago, texts in LIFE:
        conversation = Conversation.objects.create(owner=owner, title=title)
        start = now - dt.timedelta(days=days_ago)
        said = store_messages(owner, conversation, [
            NewMessage(role="user", content=text, timestamp=start + dt.timedelta(hours=i * 20))
            for i, text in enumerate(texts)
        ])
        run_upkeep(owner, [m.pk for m in said])
    topics.rebuild(owner)
    facts.extract_messages(owner)


def _keep(tab, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS / f"{name}.png"))
    if os.environ.get("RECOLLECT_README_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SHOTS / f"{name}.png", IMAGES / f"{name}.png")


def test_the_readme_screenshots_of_a_chat_and_of_the_memory_page(person, page, live_daphne,  # noqa: F811
                                                                   browser_llm, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop runs in this thread
    owner = get_user_model().objects.get(username=person[0])
    _remember_a_life(owner)
    browser_llm.state.add_script("Ana's dinner", [
        {"tool_calls": [{"name": "search_and_retrieve", "arguments": {"query": "Ana dinner allergy"}}]},
        {"text": "Ana is making her **Thai curry** on Saturday, and she already swapped the peanuts "
                 "for cashews, since you're allergic to peanuts. A bottle of vinho verde or something "
                 "for the new flat's balcony would fit: she knows you're moving to Lisbon next month."},
    ], False)
    page.set_viewport_size({"width": 1280, "height": 800})
    sign_in_and_open_chat(page, live_daphne, person)
    send(page, "What should I bring to Ana's dinner?")
    page.locator("li.message.assistant:not(.streaming) .content").last.get_by_text("vinho verde").wait_for()
    _keep(page, "chat")
    page.goto(live_daphne + "/explorer/")
    page.get_by_role("heading", name="People, places and things").wait_for()
    assert page.get_by_text("Ana").first.is_visible()
    page.set_viewport_size({"width": 1280, "height": 1000})
    _keep(page, "memory")
