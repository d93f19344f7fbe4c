"""'Saved to memory' as a person sees it (issue 34): they ask the chat to remember something, the
reply shows what was saved with a link to it, and Undo takes it back."""

from __future__ import annotations

import pytest

from tests.chat import test_browser as chat_browser
from tests.chat.test_browser import send, sign_in_and_open_chat

# The chat's browser fixtures: the scripted LLM, daphne, a signed-up person and their tab.
browser_llm, live_daphne, page, person = (
    chat_browser.browser_llm, chat_browser.live_daphne, chat_browser.page, chat_browser.person
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_person_sees_what_was_saved_under_the_reply_and_can_undo_it(person, page, live_daphne):  # noqa: F811
    sign_in_and_open_chat(page, live_daphne, person)
    send(page, "I'm allergic to peanuts, please remember that.")
    saved = page.locator("li.message.assistant:not(.streaming) .saved-fact")
    saved.wait_for()
    assert saved.inner_text().startswith("Saved to memory: You're allergic to peanuts.")
    href = saved.locator("a").get_attribute("href")
    assert href.startswith("/explorer/facts/#fact-")
    saved.locator("button:has-text('Undo')").click()
    page.locator(".saved-fact.undone:has-text('Removed from memory.')").wait_for()
    page.goto(live_daphne + href)
    page.locator("#facts").wait_for()
    assert "allergic to peanuts" not in page.locator("#facts").inner_text()
