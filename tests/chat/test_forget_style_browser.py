"""A destructive action looks the same wherever it is: the chat's "Forget permanently" and the
explorer's are the one red button, readable (axe) in light and dark. Debian's Chromium against a
real daphne; screenshots in test-artifacts/."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from bench.launch import ARTIFACTS
from tests.browser import serious_accessibility_violations
from tests.chat import test_browser as chat
from tests.chat.test_browser import browser_llm, live_daphne, page, person  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BACKGROUND = "(el) => getComputedStyle(el).backgroundColor"


def test_forget_permanently_is_the_same_red_in_the_chat_and_the_explorer(  # noqa: F811
    person, page, live_daphne, browser_llm, monkeypatch  # noqa: F811
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop runs in this thread
    chat.sign_in_and_open_chat(page, live_daphne, person)
    chat.send(page, "The spare key is under the blue flower pot")
    page.locator("li.message.assistant:not(.streaming)").first.wait_for()
    row = page.locator("li.message.user").first
    row.hover()
    row.locator("[data-action=delete]").click()
    page.locator("li.message.deleted [data-action=forget-ask]").click()
    chat_button = page.locator("form.forget-dialog button[type=submit]")
    chat_button.wait_for()
    colours = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        colours[("chat", scheme)] = chat_button.evaluate(BACKGROUND)
        page.screenshot(path=str(ARTIFACTS / f"chat-forget-dialog-{scheme}.png"), full_page=True)
        assert serious_accessibility_violations(page) == [], scheme

    from memory.models import Message

    owner = get_user_model().objects.get(username=person[0])
    message = Message.objects.filter(owner=owner, role="user").first()
    page.goto(f"{live_daphne}/explorer/messages/{message.pk}/forget/")
    explorer_button = page.locator("form button.danger-bg")
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        colours[("explorer", scheme)] = explorer_button.evaluate(BACKGROUND)
        assert serious_accessibility_violations(page) == [], scheme
    assert colours[("chat", "light")] == colours[("explorer", "light")] == "rgb(192, 57, 43)"  # --danger
    assert colours[("chat", "dark")] == colours[("explorer", "dark")] == "rgb(255, 138, 122)"
