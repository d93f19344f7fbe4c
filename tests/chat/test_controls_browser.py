"""What a person controls, in Debian's Chromium against a real daphne and the scripted LLM
(issue 36 §1): the memory switches (Settings and the chat's menu), a temporary chat that leaves
no row, copy buttons. Every new page passes axe in light and dark; screenshots at 1280 and 390
px land in test-artifacts/controls/."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from bench.launch import ARTIFACTS, ServerProcess
from memory.knowledge import facts
from memory.models import Conversation, Fact, Preferences
from memory.storage.store import store_message
from tests.browser import CHROMIUM, MISSING, accessibility_in_both_themes, screenshots
from tests.chat.test_browser import browser_llm, page, person, send  # noqa: F401
from tests.chat.test_forgetting import rows_containing
from tests.dump import dump_holds

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SHOTS = ARTIFACTS / "controls"
MODELS = ["gpt-4o-mini", "gpt-4o"]  # CHAT_MODEL first: the default


@pytest.fixture(scope="module")
def live_daphne(django_db_setup, django_db_blocker, browser_llm):  # noqa: F811
    """The chat's server, offering two models (CHAT_MODELS), so the header has a picker."""
    import os

    from django.db import connection

    if not os.path.exists(CHROMIUM):
        pytest.fail(MISSING)
    with django_db_blocker.unblock():
        db_name = connection.settings_dict["NAME"]
    server = ServerProcess(
        "browser-controls", db_name, browser_llm.base_url, llm_embeddings=False,
        extra_env={"OPENAI_API_KEY": "test", "LLM_MAX_RETRIES": "3", "RECOLLECT_TESTING": "true",
                   "CHAT_MODEL": MODELS[0], "CHAT_MODELS": ",".join(MODELS)},
    )
    yield server.start(90).url
    server.stop()


@pytest.fixture(autouse=True)
def orm_beside_the_browser(monkeypatch):
    """Playwright's sync API runs an event loop in this thread; these tests' ORM calls are plain
    synchronous code, allowed while the browser runs."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def sign_in(page, url, person):  # noqa: F811 - a browser page, not the fixture
    page.goto(url + "/login/")
    page.fill("input[name=username]", person[0])
    page.fill("input[name=password]", person[1])
    page.click("button[type=submit]")
    page.wait_for_url(url + "/")


def reply_done(page, count: int) -> None:  # noqa: F811 - a browser page, not the fixture
    page.wait_for_function(
        "(n) => document.querySelectorAll('li.message.assistant:not(.streaming)').length >= n", arg=count
    )


def remembered(person) -> None:  # noqa: F811 - the person's name and password
    """An earlier conversation with a fact about the person."""
    owner = get_user_model().objects.get(username=person[0])
    earlier = Conversation.objects.create(owner=owner, title="Earlier")
    store_message(owner, earlier, "user", "I live in Lisbon, by the river.")
    facts.extract_messages(owner)
    assert Fact.objects.owned_by(owner).exists()


def test_memory_switches_in_settings_and_the_chat_menu_decide_what_a_turn_is_sent(
    person, page, live_daphne, browser_llm  # noqa: F811
):
    remembered(person)
    sign_in(page, live_daphne, person)
    page.goto(live_daphne + reverse("chat:settings"))
    found = accessibility_in_both_themes(page)
    screenshots(page, SHOTS, "settings")
    page.get_by_label("Use memory in replies").uncheck()
    page.get_by_label("Custom instructions").fill("I'm vegetarian. Answer briefly.")
    page.get_by_role("button", name="Save settings").click()
    page.get_by_text("Settings saved.").wait_for()
    prefs = Preferences.of(get_user_model().objects.get(username=person[0]))
    assert not prefs.use_memory and prefs.custom_instructions == "I'm vegetarian. Answer briefly."

    page.goto(live_daphne + "/")
    page.get_by_role("button", name="New chat", exact=True).click()
    page.wait_for_selector("#connection:has-text('connected')")
    notice = page.locator("#memory-notice")
    assert notice.is_visible() and "Memory is off" in notice.inner_text()
    send(page, "where do I live?")
    reply_done(page, 1)
    sent = browser_llm.state.requests[-1]
    assert sent["tools"] == [] and "Lisbon" not in sent["messages"][0]["content"]
    assert "vegetarian" in sent["messages"][0]["content"]
    assert page.locator("li.message.assistant .badge", has_text="memory off").is_visible()

    # The chat's menu switches it back on: the notice goes, and the next turn has its memory.
    page.locator("#chat-menu > summary").click()
    switch = page.get_by_role("switch", name="Use memory in replies")
    assert switch.get_attribute("aria-checked") == "false"
    found += [f"menu {v}" for v in accessibility_in_both_themes(page)]
    screenshots(page, SHOTS, "chat-menu-memory-off")
    switch.click()
    page.get_by_role("switch", name="Use memory in replies", checked=True).wait_for()
    notice.wait_for(state="hidden")
    page.keyboard.press("Escape")
    send(page, "where do I live, with memory?")
    reply_done(page, 2)
    sent = browser_llm.state.requests[-1]
    assert sent["tools"] and "Lisbon" in sent["messages"][0]["content"]
    assert not found, "\n".join(found)


def test_a_temporary_chat_is_marked_reads_no_memory_and_leaves_no_row_once_left(
    person, page, live_daphne, browser_llm  # noqa: F811
):
    remembered(person)
    marker = "TEMPMARK-5209"
    sign_in(page, live_daphne, person)
    page.get_by_role("button", name="Temporary chat").first.click()
    page.wait_for_selector("#connection:has-text('connected')")
    assert "Temporary chat." in page.locator(".temporary-notice").inner_text()
    send(page, f"My locker code is {marker}; where do I live?")
    reply_done(page, 1)
    sent = browser_llm.state.requests[-1]
    assert sent["tools"] == [] and "Lisbon" not in sent["messages"][0]["content"]
    chat = Conversation.objects.get(temporary=True)
    found = accessibility_in_both_themes(page)
    screenshots(page, SHOTS, "temporary-chat")
    assert rows_containing(marker) and dump_holds(marker)
    # Not in the list of chats, while it lasts.
    assert page.locator(f"#conv-{chat.pk}").count() == 0

    page.get_by_role("link", name="Chats", exact=True).click()  # leaving it
    page.wait_for_url(live_daphne + "/")
    deadline = time.monotonic() + 60
    while Conversation.objects.filter(pk=chat.pk).exists() and time.monotonic() < deadline:
        time.sleep(0.2)  # the page's beacon reaches the server as it goes
    assert not Conversation.objects.filter(pk=chat.pk).exists()
    assert rows_containing(marker) == {}
    assert not dump_holds(marker)
    assert Fact.objects.filter(statement__icontains="Lisbon").exists()  # memory untouched
    assert not found, "\n".join(found)


COPY_REPLY = "Run this:\n\n```python\nprint('copied')\n```\n\nThat is all."


def test_copy_buttons_copy_a_message_and_a_code_block(person, page, live_daphne, browser_llm):  # noqa: F811
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_daphne)
    browser_llm.state.add_script("copytest", [{"text": COPY_REPLY}], False)
    sign_in(page, live_daphne, person)
    page.get_by_role("button", name="New chat", exact=True).click()
    page.wait_for_selector("#connection:has-text('connected')")
    send(page, "copytest: how do I print?")
    reply_done(page, 1)
    reply = page.locator("li.message.assistant").first
    reply.hover()
    reply.get_by_role("button", name="Copy the reply").click()
    reply.get_by_role("button", name="Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == COPY_REPLY
    code = reply.locator(".code-block")
    code.get_by_role("button", name="Copy code").click()
    assert page.evaluate("navigator.clipboard.readText()").strip() == "print('copied')"
    mine = page.locator("li.message.user").first
    mine.hover()
    mine.get_by_role("button", name="Copy your message").click()
    assert page.evaluate("navigator.clipboard.readText()") == "copytest: how do I print?"
    screenshots(page, SHOTS, "chat-copy-buttons")


def test_the_model_picker_sets_who_answers_and_each_reply_names_its_model(
    person, page, live_daphne, browser_llm  # noqa: F811
):
    sign_in(page, live_daphne, person)
    page.get_by_role("button", name="New chat", exact=True).click()
    page.wait_for_selector("#connection:has-text('connected')")
    picker = page.get_by_label("Model", exact=True)
    assert [o.strip() for o in picker.locator("option").all_inner_texts()] == MODELS
    assert picker.input_value() == MODELS[0]
    send(page, "hello, default model")
    reply_done(page, 1)
    assert browser_llm.state.requests[-1]["model"] == MODELS[0]

    with page.expect_response(lambda r: "/model/" in r.url and r.request.method == "POST") as picked:
        picker.select_option(MODELS[1])
    assert picked.value.status == 204
    send(page, "hello, bigger model")
    reply_done(page, 2)
    assert browser_llm.state.requests[-1]["model"] == MODELS[1]
    names = page.locator("li.message.assistant .model-name").all_inner_texts()
    assert names == MODELS, names
    chat = Conversation.objects.get(owner__username=person[0])
    assert chat.model == MODELS[1]
    page.reload()
    page.wait_for_selector("#connection:has-text('connected')")
    assert page.get_by_label("Model", exact=True).input_value() == MODELS[1]
    assert page.locator("li.message.assistant .model-name").all_inner_texts() == MODELS
    found = accessibility_in_both_themes(page)
    screenshots(page, SHOTS, "chat-model-picker")
    assert not found, "\n".join(found)
