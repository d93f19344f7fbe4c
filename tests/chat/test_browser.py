"""The chat as a person sees it: Debian's Chromium through Playwright against a real daphne.

The server runs in a subprocess on the test database (RECOLLECT_DB_NAME) and talks to the
scripted LLM; screenshots are kept in test-artifacts/.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth import get_user_model

from bench import llm_server
from bench.launch import ARTIFACTS, ServerProcess
from chat import llm as chat_llm
from tests.browser import CHROMIUM, CHROMIUM_ARGS, MISSING, serious_accessibility_violations

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def browser_llm():
    server = llm_server.start_in_thread(delay=0.05)
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def live_daphne(django_db_setup, django_db_blocker, browser_llm):
    if not os.path.exists(CHROMIUM):
        pytest.fail(MISSING)
    from django.db import connection

    with django_db_blocker.unblock():
        db_name = connection.settings_dict["NAME"]
    server = ServerProcess(
        "browser", db_name, browser_llm.base_url, llm_embeddings=False,
        extra_env={"OPENAI_API_KEY": "test", "LLM_MAX_RETRIES": "3", "RECOLLECT_TESTING": "true"},
    )
    yield server.start(90).url
    server.stop()


@pytest.fixture
def page(live_daphne):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1200, "height": 900})
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.on("dialog", lambda dialog: dialog.accept())
        yield page
        browser.close()


@pytest.fixture
def person(transactional_db):
    get_user_model().objects.create_user("ada", password="ada-pass-12345")
    chat_llm._client.cache_clear()
    return "ada", "ada-pass-12345"


def sign_in_and_open_chat(page, url, person):
    page.goto(url + "/login/")
    page.fill("input[name=username]", person[0])
    page.fill("input[name=password]", person[1])
    page.click("button[type=submit]")
    page.click("text=New chat")
    page.wait_for_selector("#connection:has-text('connected')")


def send(page, text):
    page.fill("#composer-input", text)
    page.keyboard.press("Enter")


def test_a_person_sees_a_reply_stream_in_and_a_tool_call_appear(person, page, live_daphne, browser_llm):
    browser_llm.state.add_script(
        "zebra",
        [
            {"tool_calls": [{"name": "vector_search", "arguments": {"query": "zebra stripes"}}]},
            {
                "text": "Zebras have stripes, and here is **more** than one word to stream slowly",
                "delay": 0.15,
            },
        ],
        False,
    )
    sign_in_and_open_chat(page, live_daphne, person)
    send(page, "tell me about zebra stripes <script>window.pwned=1</script>")
    user_row = page.locator("li.message.user").first
    user_row.wait_for()
    assert "<script>window.pwned=1</script>" in user_row.locator(".content").inner_text()
    tool = page.locator(".tool-call").first
    tool.wait_for()
    assert "searched memory for “zebra stripes”" in tool.inner_text()
    streaming = page.locator("li.message.assistant.streaming .streaming-text")
    page.wait_for_function(
        "() => { const el = document.querySelector('li.message.streaming .streaming-text');"
        " return el && el.textContent.split(' ').length >= 3; }"
    )
    partial = streaming.inner_text()
    page.screenshot(path=str(ARTIFACTS / "chat-streaming.png"), full_page=True)
    assert partial and "one word to stream slowly" not in partial  # still arriving
    done = page.locator("li.message.assistant:not(.streaming)").first
    done.wait_for()
    assert "Zebras have stripes" in done.inner_text()
    assert done.locator("strong").inner_text() == "more"
    assert "searched memory for “zebra stripes”" in done.locator(".tool-call").inner_text()
    assert page.evaluate("window.pwned") is None
    page.screenshot(path=str(ARTIFACTS / "chat-reply-with-tool-call.png"), full_page=True)


def test_a_person_edits_deletes_undoes_and_switches_branches(person, page, live_daphne, browser_llm):
    sign_in_and_open_chat(page, live_daphne, person)
    send(page, "My cat is called Tom")
    page.locator("li.message.assistant:not(.streaming)").first.wait_for()

    # Edit in place, then open the history.
    user_row = page.locator("li.message.user").first
    user_row.hover()
    user_row.locator("[data-action=edit]").click()
    user_row.locator(".editor textarea").fill("My cat is called Felix")
    user_row.locator(".editor button[type=submit]").click()
    page.locator("li.message.user .content:has-text('Felix')").wait_for()
    page.locator("li.message.user [data-action=history]").click()
    history = page.locator(".edit-history")
    history.wait_for()
    assert "My cat is called Tom" in history.inner_text() and "Felix" in history.inner_text()
    page.screenshot(path=str(ARTIFACTS / "chat-edit-history.png"), full_page=True)

    # Delete the reply, then undo.
    reply = page.locator("li.message.assistant").first
    reply.hover()
    reply.locator("[data-action=delete]").click()
    page.locator("li.message.deleted").wait_for()
    page.screenshot(path=str(ARTIFACTS / "chat-deleted.png"), full_page=True)
    page.locator("li.message.deleted [data-action=restore]").click()
    page.locator("li.message.assistant:not(.deleted) .content:has-text('You said')").wait_for()

    # Edit the user message as a new version and get a new answer: a branch.
    user_row = page.locator("li.message.user").first
    user_row.hover()
    user_row.locator("[data-action=edit]").click()
    user_row.locator(".editor textarea").fill("My dog is called Rex")
    user_row.locator(".editor button:has-text('new version')").click()
    page.locator("li.message.assistant:not(.streaming) .content:has-text('Rex')").wait_for()
    page.reload()
    page.locator(".branch-pos:has-text('2/2')").wait_for()
    page.screenshot(path=str(ARTIFACTS / "chat-branch-2-of-2.png"), full_page=True)
    page.locator("button[aria-label='Previous version']").click()
    page.locator(".branch-pos:has-text('1/2')").wait_for()
    thread = page.locator("#thread").inner_text()
    assert "Felix" in thread and "Rex" not in thread
    page.screenshot(path=str(ARTIFACTS / "chat-branch-1-of-2.png"), full_page=True)


def test_a_new_conversation_takes_its_first_messages_name_at_once(person, page, live_daphne, browser_llm):
    sign_in_and_open_chat(page, live_daphne, person)
    assert page.input_value("#rename input[name=title]") == ""
    send(page, "Plans for the   Lisbon trip")
    page.locator("li.message.assistant:not(.streaming)").first.wait_for()
    page.wait_for_function(
        "() => document.querySelector('#rename input[name=title]').value === 'Plans for the Lisbon trip'"
    )
    assert page.locator(".conversation-row.current a").inner_text() == "Plans for the Lisbon trip"
    assert page.title().startswith("Plans for the Lisbon trip")


SLOW_REPLY = {"text": "A slow answer that is still being written when the other tab opens", "delay": 0.2}


def streamed_words(page) -> int:
    return page.evaluate(
        "() => { const el = document.querySelector('li.message.streaming .streaming-text');"
        " return el ? el.textContent.trim().split(/\\s+/).filter(Boolean).length : 0; }"
    )


def shows_the_reply_being_written(tab, at_least: int) -> None:
    """The reply's text so far, Stop offered and Send disabled, as in the tab that sent it."""
    tab.wait_for_function(
        "(n) => { const el = document.querySelector('li.message.streaming .streaming-text');"
        " return el && el.textContent.trim().split(/\\s+/).length >= n; }",
        arg=at_least,
        timeout=20_000,
    )
    assert tab.locator("#stop-button").is_visible()
    assert tab.locator("#send-button").is_disabled()
    # ... and looks it.
    assert float(tab.eval_on_selector("#send-button", "b => getComputedStyle(b).opacity")) < 0.7
    text = tab.locator("li.message.streaming .streaming-text").inner_text()
    assert text.startswith("A slow answer")
    assert text.count("A slow answer") == 1


def start_a_slow_reply(person, page, live_daphne, browser_llm) -> None:
    """Send a message whose reply streams slowly, and wait until a few words of it are in."""
    browser_llm.state.add_script("slowly", [SLOW_REPLY], False)
    sign_in_and_open_chat(page, live_daphne, person)
    send(page, "answer slowly please")
    page.wait_for_function(
        "() => { const el = document.querySelector('li.message.streaming .streaming-text');"
        " return el && el.textContent.split(' ').length >= 3; }"
    )


def test_a_tab_opened_mid_reply_shows_the_text_so_far_then_the_reply(person, page, live_daphne, browser_llm):
    start_a_slow_reply(person, page, live_daphne, browser_llm)
    # A second tab opens mid-reply: its socket missed the reply's start.
    other = page.context.new_page()
    other.goto(page.url)
    shows_the_reply_being_written(other, 3)
    done = other.locator("li.message.assistant:not(.streaming) .content:has-text('still being written')")
    done.wait_for(timeout=20_000)
    assert other.locator("li.message.user").count() == 1
    assert other.locator("li.message.assistant").count() == 1
    assert other.locator("#stop-button").is_hidden()
    assert other.locator("#send-button").is_enabled()


def test_a_tab_reloaded_mid_reply_shows_the_text_so_far_and_can_stop_it(
    person, page, live_daphne, browser_llm
):
    start_a_slow_reply(person, page, live_daphne, browser_llm)
    page.reload()
    shows_the_reply_being_written(page, 3)
    before = streamed_words(page)
    page.wait_for_function(
        "(n) => { const el = document.querySelector('li.message.streaming .streaming-text');"
        " return el && el.textContent.trim().split(/\\s+/).length > n; }",
        arg=before,
    )
    page.screenshot(path=str(ARTIFACTS / "chat-reloaded-mid-reply.png"), full_page=True)
    page.click("#stop-button")
    page.locator("li.message.assistant:not(.streaming) .badge:has-text('stopped')").wait_for(timeout=20_000)
    assert page.locator("#send-button").is_enabled()
    assert "when the other tab opens" not in page.locator("li.message.assistant .content").inner_text()


def test_a_tab_whose_connection_dropped_catches_up_when_it_reconnects(person, page, live_daphne, browser_llm):
    browser_llm.state.add_script("slowly", [SLOW_REPLY], False)
    sign_in_and_open_chat(page, live_daphne, person)
    other = page.context.new_page()
    offline = {"on": False}
    sockets = []

    def route(ws):
        if offline["on"]:
            ws.close()
            return
        ws.connect_to_server()
        sockets.append(ws)

    other.route_web_socket(re.compile(r".*/ws/chat/.*"), route)
    other.goto(page.url)
    other.wait_for_selector("#connection:has-text('connected')")
    # The connection drops: the message and the start of its reply happen meanwhile.
    offline["on"] = True
    sockets[-1].close()
    other.wait_for_selector("#connection:has-text('reconnecting')")
    send(page, "answer slowly please")
    page.locator("li.message.streaming").wait_for()
    offline["on"] = False
    other.locator("li.message.user .content:has-text('answer slowly please')").wait_for(timeout=20_000)
    other.locator("li.message.assistant:not(.streaming) .content:has-text('still being written')").wait_for(
        timeout=20_000
    )
    other.screenshot(path=str(ARTIFACTS / "chat-caught-up-after-reconnect.png"), full_page=True)


def test_a_person_pins_a_message_and_the_model_is_shown_it(person, page, live_daphne, browser_llm):
    sign_in_and_open_chat(page, live_daphne, person)
    send(page, "The spare key is under the blue flowerpot")
    page.locator("li.message.assistant:not(.streaming)").first.wait_for()
    user_row = page.locator("li.message.user").first
    user_row.get_by_role("button", name="Pin", exact=True).click()
    user_row.locator(".badge.pinned:has-text('Pinned')").wait_for()
    page.screenshot(path=str(ARTIFACTS / "chat-pinned.png"), full_page=True)
    page.reload()
    user_row = page.locator("li.message.user").first
    user_row.locator(".badge.pinned:has-text('Pinned')").wait_for()

    # The next turn's memory index marks it in its pinned section (it is recent, so its text
    # comes as chat history).
    send(page, "where is the key?")
    page.locator("li.message.assistant:not(.streaming)").nth(1).wait_for()
    with browser_llm.state.lock:
        sent = browser_llm.state.requests[-1]["messages"]
    assert "Pinned (marked important by the user" in sent[0]["content"]
    assert "(pinned; user message in the recent conversation)" in sent[0]["content"]
    assert any("blue flowerpot" in (m.get("content") or "") for m in sent[1:])

    user_row.get_by_role("button", name="Unpin").click()
    user_row.get_by_role("button", name="Pin", exact=True).wait_for()
    assert user_row.locator(".badge.pinned").count() == 0


def test_a_pin_refused_past_the_rate_limit_says_why(person, page, live_daphne, browser_llm):
    from config.limits import LimitReached
    from config.models import ActionAllowance

    sign_in_and_open_chat(page, live_daphne, person)
    send(page, "The spare key is under the blue flowerpot")
    page.locator("li.message.assistant:not(.streaming)").first.wait_for()
    def use_up_the_minute():  # as a busy person would; the ORM runs outside Playwright's loop
        owner = get_user_model().objects.get(username=person[0])
        with pytest.raises(LimitReached):
            for _ in range(1000):
                ActionAllowance.count_action(owner)

    with ThreadPoolExecutor(1) as pool:
        pool.submit(use_up_the_minute).result()
    user_row = page.locator("li.message.user").first
    user_row.get_by_role("button", name="Pin", exact=True).click()
    error = page.locator("#chat-error")
    error.wait_for()
    assert "minute" in error.inner_text()
    assert user_row.locator(".badge.pinned").count() == 0


def test_the_chat_pages_pass_axe_and_a_streamed_reply_shows_highlighted_code(
    person, page, live_daphne, browser_llm
):
    code = "Here:\n\n```python\ndef greet(name):\n    return 'hi ' + name  # friendly\n```\n"
    browser_llm.state.add_script("greeting function", [{"text": code, "delay": 0.05}], False)
    found: dict[str, list[str]] = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for name in ("login", "signup"):
            page.goto(f"{live_daphne}/{name}/")
            found[f"{name} ({scheme})"] = serious_accessibility_violations(page)
    page.emulate_media(color_scheme="light")
    sign_in_and_open_chat(page, live_daphne, person)
    thread = page.locator("#thread")
    assert thread.get_attribute("aria-live") == "polite"
    send(page, "write a greeting function")
    page.wait_for_function("() => document.getElementById('thread').getAttribute('aria-busy') === 'true'")
    reply = page.locator("li.message.assistant:not(.streaming)").first
    reply.wait_for()
    # Streamed as plain text; the stored reply that replaces it is highlighted by the server.
    assert reply.locator(".highlight span.k").first.inner_text() == "def"
    assert reply.locator(".highlight span.c1").inner_text() == "# friendly"
    assert thread.get_attribute("aria-busy") == "false"
    found["conversation"] = serious_accessibility_violations(page)
    page.emulate_media(color_scheme="dark")
    found["conversation (dark)"] = serious_accessibility_violations(page)
    page.screenshot(path=str(ARTIFACTS / "chat-highlighted-code-dark.png"), full_page=True)
    page.goto(live_daphne + "/")
    found["conversation list (dark)"] = serious_accessibility_violations(page)
    page.emulate_media(color_scheme="light")
    page.goto(live_daphne + "/")
    found["conversation list"] = serious_accessibility_violations(page)
    assert not any(found.values()), "\n".join(f"{name}: {v}" for name, vs in found.items() for v in vs)


def test_a_person_forgets_a_message_and_the_reply_that_restated_it(person, page, live_daphne, browser_llm):
    sign_in_and_open_chat(page, live_daphne, person)
    send(page, "My locker code at the swimming pool is 9911, next to the sauna")
    reply = page.locator("li.message.assistant:not(.streaming)").first
    reply.wait_for()
    assert "9911" in reply.inner_text()  # the scripted model says back what it was told
    user_row = page.locator("li.message.user").first
    user_row.hover()
    user_row.locator("[data-action=delete]").click()
    page.locator("li.message.deleted [data-action=forget-ask]").click()
    dialog = page.locator("form.forget-dialog")
    dialog.wait_for()
    assert "1 other message echoes it" in dialog.inner_text()
    # The reply repeats its rare word (the code): ticked, the word marked where it says it.
    box = dialog.locator(".forget-copies input[name=copies]")
    assert box.is_checked()
    marked = dialog.locator(".forget-copies .excerpt mark").all_inner_texts()
    assert any("9911" in piece for piece in marked)
    assert "9911" in dialog.locator(".forget-words mark").all_inner_texts()
    page.screenshot(path=str(ARTIFACTS / "chat-forget-dialog.png"), full_page=True)
    dialog.locator("button[type=submit]").click()
    page.wait_for_function("() => document.querySelectorAll('li.message').length === 0")
    page.reload()
    page.wait_for_selector("#connection:has-text('connected')")
    assert "9911" not in page.locator("body").inner_text()  # the title made from it went too


@pytest.fixture
def long_conversation(person):
    """Forty messages, the fourth of them long (made before the browser's event loop runs)."""
    from memory.models import Conversation
    from memory.storage import store

    owner = get_user_model().objects.get(username=person[0])
    conversation = Conversation.objects.create(owner=owner, title="A long one")
    items, parent = [], None
    for i in range(40):
        content = ("A very long message. " * 150) if i == 3 else f"Message number {i} of the conversation"
        role = "user" if i % 2 == 0 else "assistant"
        items.append(store.NewMessage(role=role, content=content, parent_id=parent))
        parent = items[-1].id
    store.store_messages(owner, conversation, items, embed=False)
    return conversation


def test_a_long_conversation_opens_at_its_latest_message_and_long_messages_fold(
    person, long_conversation, page, live_daphne
):
    page.goto(live_daphne + "/login/")
    page.fill("input[name=username]", person[0])
    page.fill("input[name=password]", person[1])
    page.click("button[type=submit]")
    page.goto(f"{live_daphne}/c/{long_conversation.pk}/")
    page.wait_for_selector("#connection:has-text('connected')")
    last = page.locator("li.message").last
    assert "Message number 39" in last.inner_text()
    page.wait_for_function("() => window.scrollY > 0")
    box = last.bounding_box()
    assert box["y"] < page.viewport_size["height"] and box["y"] + box["height"] > 0  # on screen

    long_row = page.locator("li.message").nth(3)
    content = long_row.locator(".content")
    folded_height = content.bounding_box()["height"]
    assert folded_height < 500
    long_row.get_by_role("button", name="Show more").click()
    assert content.bounding_box()["height"] > folded_height * 2
    long_row.get_by_role("button", name="Show less").click()
    assert content.bounding_box()["height"] == folded_height
