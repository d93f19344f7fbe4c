"""The explorer as a person sees it, in Debian's Chromium driven by Playwright.

Screenshots of every step are kept in test-artifacts/explorer/.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from memory.context.tools import execute_tool
from memory.models import Message, ToolCall, Topic
from memory.storage.store import store_tool_call
from tests.browser import CHROMIUM, CHROMIUM_ARGS, MISSING, serious_accessibility_violations
from tests.explorer.conftest import build_memory
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(settings.BASE_DIR) / "test-artifacts" / "explorer"
ARGS = CHROMIUM_ARGS

if not Path(CHROMIUM).exists():  # pragma: no cover - `make test` installs it
    pytest.fail(MISSING, pytrace=False)


@pytest.fixture
def mem_live(owner, conversation):
    return build_memory(owner, conversation)


@pytest.fixture
def page(live_server, owner, monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls of these tests are
    # still plain synchronous code. Allowed while the browser runs, for this fixture only.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    client = Client()
    client.force_login(owner)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1200, "height": 900})
        host = live_server.url.split("//")[1].split(":")[0]
        context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": session, "domain": host, "path": "/"}]
        )
        pg = context.new_page()
        pg.base = live_server.url
        errors: list[str] = []
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.js_errors = errors
        yield pg
        context.close()
        browser.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def explorer_pages(m) -> dict[str, tuple[str, str]]:
    """Every explorer page: its URL and a text it shows."""
    return {
        "overview": (reverse("explorer:overview"), "People, places and things"),
        "advanced": (reverse("explorer:advanced"), "The next turn would use the"),
        "topics": (reverse("explorer:topics"), "Map of level 0"),
        "topic": (reverse("explorer:topic", args=[m.root.pk]), "Subtopics"),
        "timeline": (reverse("explorer:timeline"), "Messages per day"),
        "message": (reverse("explorer:message", args=[m.answer.pk]), "Edit history"),
        "tool-calls": (reverse("explorer:tool_calls"), "search_memory"),
        "tool-call": (reverse("explorer:tool_call", args=[m.big_call.pk]), "Chunk 1 of"),
        "contexts": (reverse("explorer:contexts"), "Context inspector"),
        "context": (reverse("explorer:context", args=[m.snapshot.pk]), "What the model was shown"),
        "search": (reverse("explorer:search") + "?q=rotate+password", "How do we rotate"),
        "entities": (reverse("explorer:entities"), "Postgres"),
        "entity": (reverse("explorer:entity", args=[m.pg.pk]), "Neighbours"),
        "forget": (reverse("explorer:forget", args=[m.answer.pk]), "Forget this message for good?"),
    }


def test_every_page_opens_with_its_content(page, mem_live):
    m = mem_live
    for name, (url, text) in explorer_pages(m).items():
        page.goto(page.base + url)
        assert page.locator("main").get_by_text(text).locator("visible=true").first.is_visible(), name
        shot(page, f"page-{name}")
    # The XSS payload is on screen as text, and never ran.
    page.goto(page.base + reverse("explorer:message", args=[m.question.pk]))
    assert page.locator(".content").first.inner_text().count('<script>alert("xss")</script>') == 1
    assert page.js_errors == []


def test_click_into_a_topic_from_the_map_and_the_list(page, mem_live):
    page.goto(page.base + reverse("explorer:topics"))
    page.locator('.topic-map a[data-label="Databases"]').click()
    page.wait_for_url("**/topics/*/")
    assert page.locator("h1.topic-title").inner_text() == "Databases"
    page.get_by_role("link", name="Password rotation").first.click()
    page.wait_for_url(f"**/topics/{mem_live.leaf.pk}/")
    assert page.locator("#topic-messages").get_by_text("How do we rotate").is_visible()
    assert page.locator(".crumbs").get_by_text("Databases").is_visible()
    shot(page, "topic-leaf")


def map_labels(page, owner, topics: list[tuple[str, int, float, float]]) -> dict:
    """Open the map of `topics` (label, message count, map_x, map_y) at level 0; the map's size
    and each drawn label's box as the browser lays it out (its text, full label, edges)."""
    for i, (label, count, x, y) in enumerate(topics):
        Topic.objects.create(
            owner=owner, level=0, order=i, label=label, message_count=count, map_x=x, map_y=y
        )
    page.goto(page.base + reverse("explorer:topics"))
    return page.evaluate(
        """() => {
          const svg = document.querySelector('svg.topic-map');
          const [, , w, h] = svg.getAttribute('viewBox').split(' ').map(Number);
          return {w, h, boxes: [...svg.querySelectorAll('.topic-labels text')].map(t => {
            const b = t.getBBox();
            return {text: t.textContent, full: t.dataset.label, x: b.x, y: b.y, r: b.x + b.width,
                    b: b.y + b.height};
          })};
        }"""
    )


def test_topic_map_labels_stay_inside_the_map(page, owner):
    # Long labels on big circles at the map's four corners and edges.
    corners = [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (0.0, 0.5), (1.0, 0.5), (0.5, 0.0), (0.5, 1.0)]
    labels = [(f"WWW Monitoring dashboards and alerts {i}", 50, x, y) for i, (x, y) in enumerate(corners)]
    drawn = map_labels(page, owner, labels)
    shot(page, "topic-map-edges")
    assert len(drawn["boxes"]) == len(corners)
    for box in drawn["boxes"]:
        assert box["x"] >= 0 and box["y"] >= 0 and box["r"] <= drawn["w"] and box["b"] <= drawn["h"], box


def test_topic_map_labels_never_overlap_as_drawn(page, owner):
    # Thirty topics with long labels crowded into one corner of the layout, ten more on a line.
    party = "Planning the garden party number {} with friends"
    crowded = [(party.format(i), 40 - i, 0.001 * i, 0.0) for i in range(30)]
    line = [(f"Kayak trip {i}", 5, i / 9, 1.0) for i in range(10)]
    drawn = map_labels(page, owner, crowded + line)
    shot(page, "topic-map-crowded")
    boxes = drawn["boxes"]
    assert len(boxes) >= 12, boxes
    for i, a in enumerate(boxes):
        assert a["x"] >= 0 and a["y"] >= 0 and a["r"] <= drawn["w"] and a["b"] <= drawn["h"], a
        assert a["text"] == a["full"] or a["full"].startswith(a["text"].removesuffix("…")), a
        for b in boxes[i + 1 :]:
            apart = a["r"] <= b["x"] or b["r"] <= a["x"] or a["b"] <= b["y"] or b["b"] <= a["y"]
            assert apart, (a, b)


def test_every_map_label_is_in_or_beside_its_circle_and_small_circles_name_themselves_on_hover(page, owner):
    # Sixty topics of a real spread of sizes (1 to 400 messages) scattered over the layout.
    import random

    rng = random.Random(3)
    subjects = ["Garden roses", "Moving house", "Marathon training", "React dashboard", "Thesis chapter",
                "Sourdough starter", "Trip to Lisbon", "Invoice parser", "Kayak trip", "Tax return"]
    topics = [(f"{subjects[i % 10]} {i}", int(400 * rng.random() ** 3) + 1, rng.random(), rng.random())
              for i in range(60)]
    map_labels(page, owner, topics)
    shot(page, "topic-map-scattered")
    drawn = page.evaluate(
        """() => [...document.querySelectorAll('svg.topic-map a.topic-dot')].map(a => {
          const c = a.querySelector('circle');
          const label = [...document.querySelectorAll('.topic-labels text')]
            .find(t => t.dataset.label === a.dataset.label);
          const b = label && label.getBBox();
          return {label: a.dataset.label, cx: +c.getAttribute('cx'), cy: +c.getAttribute('cy'),
                  r: +c.getAttribute('r'), box: b && {x: b.x, y: b.y, r: b.x + b.width, b: b.y + b.height},
                  text: label && label.textContent};
        })"""
    )
    assert len(drawn) == 60
    labelled = [d for d in drawn if d["box"]]
    assert len(labelled) >= 30, len(labelled)
    for d in labelled:
        box = d["box"]
        # The box's nearest point to the centre is inside the circle or within a few units of its edge.
        nx, ny = min(max(d["cx"], box["x"]), box["r"]), min(max(d["cy"], box["y"]), box["b"])
        assert ((d["cx"] - nx) ** 2 + (d["cy"] - ny) ** 2) ** 0.5 <= d["r"] + 6, d
    # A circle left without a label is too small to hold even its first word ...
    unlabelled = [d for d in drawn if not d["box"]]
    for d in unlabelled:
        first = d["label"].split(" ")[0] + "…"
        width = page.evaluate(
            """(t) => { const svg = document.querySelector('svg.topic-map');
                 const el = document.createElementNS('http://www.w3.org/2000/svg', 'text');
                 el.textContent = t; svg.querySelector('.topic-labels').appendChild(el);
                 const w = el.getBBox().width; el.remove(); return w; }""",
            first,
        )
        assert width > 2 * d["r"], d
    # ... and shows its name when pointed at.
    if unlabelled:
        small = unlabelled[0]
        dot = page.locator(f'.topic-map a[data-label="{small["label"]}"]')
        hover = dot.locator("text.hover-label")
        assert not hover.is_visible()
        dot.hover(force=True)
        assert hover.is_visible() and hover.text_content() == small["label"]


def test_on_a_phone_the_map_keeps_readable_labels_and_scrolls_in_its_own_box(page, owner):
    page.set_viewport_size({"width": 390, "height": 844})
    line = [(f"Kayak trip {i}", 5 + i, i / 9, (i % 3) / 2) for i in range(10)]
    map_labels(page, owner, line)
    shot(page, "topic-map-phone")
    seen = page.evaluate(
        """() => {
          const box = document.querySelector('.map-box');
          const svg = box.querySelector('svg.topic-map');
          const text = svg.querySelector('.topic-labels text').getBoundingClientRect();
          return {boxRight: box.getBoundingClientRect().right, svgWidth: svg.getBoundingClientRect().width,
                  boxWidth: box.clientWidth, textHeight: text.height, width: window.innerWidth};
        }"""
    )
    assert seen["textHeight"] >= 9, seen  # about 11 px text, not the 5 px of a map squeezed to fit
    assert seen["svgWidth"] > seen["boxWidth"], seen  # the map is wider than its box: it scrolls there
    assert seen["boxRight"] <= seen["width"], seen  # and the box itself fits on the screen


def test_click_a_timeline_bar_to_list_that_days_messages(page, mem_live):
    page.goto(page.base + reverse("explorer:timeline"))
    bar = page.locator('.bars a.bar[data-count="4"]').first  # 4 visible messages that day
    bar.click()
    page.locator("#period-messages").get_by_text("How do we rotate").wait_for()
    assert page.locator("#period-messages .msg-row").count() == 4
    shot(page, "timeline-day")


def test_open_a_messages_edit_diff(page, mem_live):
    page.goto(page.base + reverse("explorer:message", args=[mem_live.answer.pk]))
    page.get_by_text("Show changes →").click()
    page.locator("#edit-diff del").first.wait_for()
    assert page.locator("#edit-diff del").first.inner_text() == "USER"
    assert page.locator("#edit-diff ins").first.inner_text() == "ROLE"
    assert "Version 1 → 2 (current)" in page.locator("#edit-diff h3").inner_text()
    shot(page, "message-edit-diff")


def test_restore_a_deleted_message(page, mem_live):
    page.goto(page.base + reverse("explorer:message", args=[mem_live.gone.pk]))
    assert page.locator(".deleted-banner").is_visible()
    shot(page, "message-deleted")
    page.get_by_role("button", name="Restore").click()
    page.get_by_text("Restored: the assistant can recall this message again.").wait_for()
    assert page.get_by_role("button", name="Delete (can be undone)").is_visible()
    assert page.locator(".deleted-banner").count() == 0
    assert Message.objects.get(pk=mem_live.gone.pk).deleted is False
    shot(page, "message-restored")


def test_open_the_context_inspector_of_a_turn(page, mem_live):
    page.goto(page.base + reverse("explorer:message", args=[mem_live.answer.pk]))
    page.get_by_text("What the model was shown for this turn →").click()
    page.wait_for_url(f"**/context/{mem_live.snapshot.pk}/")
    assert page.locator("h2", has_text="Strategy:").get_by_text("full").is_visible()
    assert page.locator("#budget").get_by_text("500 of 10,000 tokens").is_visible()
    assert page.locator("#budget svg rect").count() == 3
    assert page.locator("#hits").get_by_text("0.0327").is_visible()
    assert page.locator("#fallbacks").get_by_text("vector_timeout").is_visible()
    assert page.locator("#called").get_by_role("link", name="search_memory").is_visible()
    assert '<script>alert("xss")</script>' in page.locator(".index-text").inner_text()
    shot(page, "context-inspector")


def test_pin_and_unpin_a_message(page, mem_live):
    page.goto(page.base + reverse("explorer:message", args=[mem_live.question.pk]))
    page.get_by_role("button", name="Pin (always show to the assistant)").click()
    page.locator("#pin-state .badge.pinned:has-text('Pinned')").wait_for()
    assert Message.objects.get(pk=mem_live.question.pk).pinned is True
    shot(page, "message-pinned")
    page.get_by_role("button", name="Unpin").click()
    page.get_by_role("button", name="Pin (always show to the assistant)").wait_for()
    assert Message.objects.get(pk=mem_live.question.pk).pinned is False
    assert not page.js_errors


def test_every_page_passes_axe_with_no_serious_violations(page, mem_live):
    found = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for name, (url, _) in explorer_pages(mem_live).items():
            page.goto(page.base + url)
            found[f"{name} ({scheme})"] = serious_accessibility_violations(page)
    assert not any(found.values()), "\n".join(f"{name}: {v}" for name, vs in found.items() for v in vs)


def test_the_timeline_bars_and_the_topic_map_are_links_a_screen_reader_reaches(page, mem_live):
    page.goto(page.base + reverse("explorer:timeline"))
    chart = page.get_by_role("group", name="Messages per period")
    bar = chart.get_by_role("link", name=re.compile(r": 4 messages$")).first
    bar.click()
    page.locator("#period-messages .msg-row").first.wait_for()
    assert page.locator("#period-messages .msg-row").count() == 4
    page.goto(page.base + reverse("explorer:topics"))
    page.get_by_role("group", name="Map of topics at level 0").get_by_role(
        "link", name=re.compile(r"^Databases \(\d+ messages\)$")
    ).click()
    page.wait_for_url("**/topics/*/")
    assert page.locator("h1.topic-title").inner_text() == "Databases"


def test_no_page_scrolls_sideways_on_a_phone(page, mem_live, conversation):
    """At 390 px every page is one column; long content scrolls in its own box."""
    page.set_viewport_size({"width": 390, "height": 844})
    pages = {
        "chats": reverse("chat:home"),
        "conversation": reverse("chat:conversation", args=[conversation.pk]),
        **{name: url for name, (url, _) in explorer_pages(mem_live).items()},
    }
    wide = {}
    for name, url in pages.items():
        page.goto(page.base + url)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        if width > 390:
            wide[name] = width
        shot(page, f"phone-{name}")
    assert not wide, f"wider than the screen: {wide}"
    # The chat's conversation list is folded above it, one tap away.
    page.goto(page.base + pages["conversation"])
    assert not page.locator("#sidebar-list").evaluate("d => d.open")
    chat_box = page.locator("#chat").bounding_box()
    assert chat_box["width"] <= 390


def test_the_forget_page_offers_the_echoes_ticked_with_the_rare_word_marked(page, owner, conversation):
    """Issue 32: a reply and a later search that repeat a forgotten message's rare word are
    offered ticked, the word marked; a person unticks the search, and only it keeps the word."""
    secret = add_turns(owner, conversation, ["Our cabin is in Vexmorrant, two hours north."])[0]
    add_turns(owner, conversation, EVERYDAY_TEXTS)
    _, reply, _, echo = add_turns(owner, conversation, [
        "Which town is the cabin in?", "Two hours north; I found it in your notes.",
        "Thanks!", "Enjoy Vexmorrant, and take warm clothes!",
    ])
    found = execute_tool(owner, "search_and_retrieve", {"query": "vexmorrant cabin"}).result
    call = store_tool_call(owner, reply, "search_and_retrieve", {"query": "vexmorrant cabin"}, found)
    page.goto(page.base + reverse("explorer:forget", args=[secret.pk]))
    assert "Forgetting removes the message and its embeddings permanently." in page.inner_text("main")
    copy = page.locator(f".forget-copies input[value='{echo.pk}']")
    assert copy.is_checked()
    marks = page.locator(".forget-copies .excerpt mark").all_inner_texts()
    assert [m.lower() for m in marks] == ["vexmorrant"]
    search_box = page.locator(f".forget-echoes input[name=echoes][value='toolcall:{call.pk}']")
    assert search_box.is_checked()
    assert "vexmorrant" in [m.lower() for m in page.locator(".forget-echoes .excerpt mark").all_inner_texts()]
    assert not serious_accessibility_violations(page)
    shot(page, "forget-echoes")
    search_box.uncheck()
    page.locator("input[name=confirm]").check()
    page.locator("form button.primary").click()
    page.wait_for_url(re.compile(r"/explorer/timeline/"))
    assert not Message.objects.filter(pk__in=[secret.pk, echo.pk]).exists()
    assert json.loads(ToolCall.objects.get(pk=call.pk).arguments) == {"query": "vexmorrant cabin"}
    assert page.js_errors == []
