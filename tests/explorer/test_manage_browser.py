"""The person's own pages in Debian's Chromium (issue 36 §1-2): the conversation list at 200
conversations (groups, search by title and content, the row menu, Archived, one-line titles on a
phone), and the Facts page as "manage memory" (search, Download my data, Forget everything).
Every page passes axe in light and dark; screenshots at 1280 and 390 px in
test-artifacts/controls/."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from bench.launch import ARTIFACTS
from memory.knowledge import facts
from memory.models import Conversation, Fact, Message
from memory.storage import store
from tests.browser import accessibility_in_both_themes, screenshots
from tests.chat.test_forgetting import rows_containing
from tests.explorer.test_browser import page  # noqa: F401 - the page fixture, signed in as owner
from tests.memory.test_facts import tell

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = ARTIFACTS / "controls"


def two_hundred(owner) -> list[Conversation]:
    """200 conversations a day and a half apart (the newest now), titled like a real list; one
    holds a message about lasagne."""
    subjects = ["Moving house checklist", "Half marathon training plan", "Lasagne for eight",
                "React dashboard state bug", "Thesis chapter three outline", "Car warning light",
                "Birthday present ideas for Ana",
                "Tax return questions and the deadlines that apply to freelancers"]
    now = timezone.now()
    made = Conversation.objects.bulk_create(
        [Conversation(owner=owner, title=f"{subjects[i % len(subjects)]} ({i})") for i in range(200)]
    )
    for i, c in enumerate(made):  # today, yesterday, then every day and a half
        c.updated_at = now - dt.timedelta(hours=24 * i if i < 2 else 36 * i)
    Conversation.objects.bulk_update(made, ["updated_at"])
    store.store_message(owner, made[5], "user", "Could we try the ricotta lasagne place near Sintra?",
                        embed=False)
    Conversation.objects.filter(pk=made[5].pk).update(updated_at=now - dt.timedelta(hours=36 * 5))
    return made


def test_the_conversation_list_at_200_groups_searches_archives_and_fits_a_phone(page, owner):  # noqa: F811
    made = two_hundred(owner)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(page.base + reverse("chat:home"))
    headings = page.locator(".group-label").all_text_contents()  # (shown in capitals)
    assert headings[:4] == ["Today", "Yesterday", "Previous 7 days", "Previous 30 days"]
    assert len(headings) > 4 and page.locator(".conversation-row").count() == 100
    found = accessibility_in_both_themes(page)
    screenshots(page, SHOTS, "conversations", full_page=False)

    # Search by title, then by a word inside a message (a prefix), with where it was said.
    search = page.get_by_role("searchbox", name="Search chats")
    search.fill("birthday")
    page.wait_for_function("() => document.querySelectorAll('.conversation-row').length === 25")
    assert all("Birthday" in t for t in page.locator(".conversation-title").all_inner_texts())
    search.fill("ricotta lasag")
    page.locator(".conversation-snippet", has_text="ricotta lasagne place near Sintra").wait_for()
    assert page.locator(".conversation-row").count() == 1
    screenshots(page, SHOTS, "conversations-search", full_page=False)
    search.fill("")
    page.wait_for_function("() => document.querySelectorAll('.conversation-row').length === 100")

    # Show more: the next hundred, under the groups they belong to.
    page.get_by_role("button", name="Show more").click()
    page.wait_for_function("() => document.querySelectorAll('.conversation-row').length === 200")

    # The row menu: rename, then archive; the Archived view has it.
    target = made[1]
    row = page.locator(f"#conv-{target.pk}")
    row.locator("summary").click()
    row.get_by_label("Rename").fill("Training for the Lisbon half")
    row.get_by_role("button", name="Save").click()
    page.locator(f"#conv-{target.pk} .conversation-title", has_text="Training for the Lisbon half").wait_for()
    row = page.locator(f"#conv-{target.pk}")
    row.locator("summary").click()
    found += [f"menu {v}" for v in accessibility_in_both_themes(page)]
    screenshots(page, SHOTS, "conversations-row-menu", full_page=False)
    row.get_by_role("button", name="Archive").click()
    row.wait_for(state="detached")
    assert Conversation.objects.get(pk=target.pk).archived_at is not None
    page.goto(page.base + reverse("chat:archived"))
    assert page.locator(".conversation-title").all_inner_texts() == ["Training for the Lisbon half"]
    found += [f"archived {v}" for v in accessibility_in_both_themes(page)]
    screenshots(page, SHOTS, "archived")

    # On a phone: one line per title, ellipsis, nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(page.base + reverse("chat:home"))
    sizes = page.evaluate(
        """() => [...document.querySelectorAll('.conversation-title')].slice(0, 40).map(el => ({
             lines: el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight),
             cut: el.scrollWidth > el.clientWidth, text: el.textContent }))"""
    )
    assert all(s["lines"] < 1.5 for s in sizes), [s for s in sizes if s["lines"] >= 1.5]
    assert any(s["cut"] for s in sizes)  # the long titles end in an ellipsis
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    menu = page.locator(".row-menu summary").first
    assert menu.is_visible() and menu.bounding_box()["x"] + menu.bounding_box()["width"] <= 390
    assert not page.js_errors
    assert not found, "\n".join(found)


def test_manage_memory_search_download_and_forget_everything(page, owner, conversation):  # noqa: F811
    tell(owner, conversation)
    facts.extract_messages(owner)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(page.base + reverse("explorer:facts"))
    assert page.get_by_role("heading", name="What Recollect remembers about you").is_visible()
    assert page.get_by_role("link", name="Facts").get_attribute("aria-current") == "page"
    found = accessibility_in_both_themes(page)
    screenshots(page, SHOTS, "facts")
    page.get_by_role("searchbox").fill("globex")
    page.wait_for_function("() => document.querySelectorAll('#facts-current .memory-item').length === 1")
    assert "Globex" in page.locator("#facts-current").inner_text()

    with page.expect_download() as download:
        page.get_by_role("link", name="Download everything (JSON)").click()
    data = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    said = [m["content"] for c in data["conversations"] for m in c["messages"]]
    assert "I live in London." in said
    with page.expect_download() as download:
        page.get_by_role("link", name="Download the conversations as text (Markdown)").click()
    assert "I live in London." in Path(download.value.path()).read_text(encoding="utf-8")

    confirm = page.get_by_label("To confirm, type forget everything")
    confirm.fill("yes please")
    page.get_by_role("button", name="Forget everything").click()
    page.get_by_role("alert").filter(has_text="Nothing was forgotten").wait_for()
    assert Message.objects.owned_by(owner).exists()
    found += [f"refused {v}" for v in accessibility_in_both_themes(page)]
    page.get_by_label("To confirm, type forget everything").fill("forget everything")
    page.get_by_role("button", name="Forget everything").click()
    page.wait_for_url("**/explorer/")
    assert "Everything is forgotten" in page.locator(".flash").inner_text()
    screenshots(page, SHOTS, "memory-after-forget-everything")
    assert not Message.objects.owned_by(owner).exists() and not Fact.objects.owned_by(owner).exists()
    assert rows_containing("Acme Bank") == {} and rows_containing("Hamburg") == {}
    page.goto(page.base + reverse("explorer:facts"))
    assert "Nothing yet." in page.locator("#facts-current").inner_text()
    assert not page.js_errors
    assert not found, "\n".join(found)
