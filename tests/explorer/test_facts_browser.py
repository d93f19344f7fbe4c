"""Correct, pin and forget a fact on the Memory overview, in Debian's Chromium (see
tests/explorer/test_browser.py for the page fixture)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory.knowledge import facts
from memory.models import Fact
from tests.explorer.test_browser import page, shot  # noqa: F401 - the page fixture
from tests.memory.test_facts import tell

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_correct_pin_and_forget_a_fact(page, owner, conversation):  # noqa: F811
    tell(owner, conversation)
    facts.extract_messages(owner)
    globex = Fact.objects.get(value="Globex")
    page.goto(page.base + reverse("explorer:overview"))
    row = page.locator(f"#fact-{globex.pk}")
    # Pin, Forget and Correct: three bordered buttons of one size on one line, Forget in red.
    actions = [row.get_by_role("button", name="Pin"), row.get_by_role("button", name="Forget"),
               row.locator("summary", has_text="Correct")]
    boxes = [a.bounding_box() for a in actions]
    assert len({round(b["y"]) for b in boxes}) == 1 and len({round(b["height"]) for b in boxes}) == 1, boxes
    borders = {a.evaluate("(el) => getComputedStyle(el).borderTopStyle") for a in actions}
    assert borders == {"solid"}, borders
    assert actions[1].evaluate("(el) => getComputedStyle(el).color") == "rgb(192, 57, 43)"  # --danger
    row.locator("summary", has_text="Correct").click()
    row.locator("textarea").fill("the user works at Globex as head of design")
    row.get_by_role("button", name="Save correction").click()
    page.locator(f"#fact-{globex.pk}:has-text('as head of design') .badge:has-text('corrected')").wait_for()
    assert Fact.objects.get(pk=globex.pk).corrected == "the user works at Globex as head of design"

    page.locator(f"#fact-{globex.pk}").get_by_role("button", name="Pin").click()
    page.locator(f"#fact-{globex.pk} .badge.pinned").wait_for()
    assert Fact.objects.get(pk=globex.pk).pinned
    shot(page, "fact-corrected-and-pinned")

    hamburg = Fact.objects.get(value="Hamburg")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"#fact-{hamburg.pk}").get_by_role("button", name="Forget").click()
    page.locator(f"#fact-{hamburg.pk}").wait_for(state="detached")
    # A forgotten fact keeps a wordless row only, so its message is not read for it again.
    assert not Fact.objects.filter(pk=hamburg.pk, kind=Fact.FORGOTTEN).exclude(statement="").exists()
    assert not Fact.objects.live().filter(pk=hamburg.pk).exists()
    page.reload()
    assert page.locator("#facts-current .fact-text", has_text="live in Munich").is_visible()  # it holds again
    assert not page.js_errors


def test_the_facts_sections_pass_axe_with_no_serious_violations(page, owner, conversation):  # noqa: F811
    from memory.models import Entity
    from tests.browser import serious_accessibility_violations

    tell(owner, conversation)
    facts.extract_messages(owner)
    sam = Entity.objects.create(owner=owner, name="Sam", normalized="sam", kind="name")
    found = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for url in (reverse("explorer:overview"), reverse("explorer:facts"),
                    reverse("explorer:entity", args=[sam.pk])):
            page.goto(page.base + url)
            found[f"{url} ({scheme})"] = serious_accessibility_violations(page)
    assert not any(found.values()), "\n".join(f"{name}: {v}" for name, vs in found.items() for v in vs)
