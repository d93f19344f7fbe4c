"""Long messages through the real daphne, and in the browser.

daphne drops a websocket that sends more than its `--websocket-max-message-size` (or a frame
over `--websocket-max-frame-size`), 1 MiB unless told otherwise, before the chat sees it.
Recollect starts daphne with limits derived from MAX_MESSAGE_CHARS (config/serving.py), so every
message the chat would accept arrives, and a longer one is refused with an error event on a
socket that stays open. The page checks the same limit before sending and keeps the composer's
text until the message is stored.
"""

from __future__ import annotations

import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from websockets.exceptions import ConnectionClosed

from bench import llm_server
from bench.launch import ARTIFACTS, ServerProcess, session_cookie
from config.serving import websocket_max_frame_bytes, websocket_max_message_bytes
from memory.models import Message
from tests.browser import CHROMIUM, CHROMIUM_ARGS, MISSING
from tests.servers import events_until, open_socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ONE_MIB = 1024 * 1024
SMALL_LIMIT = 100_000  # MAX_MESSAGE_CHARS of the second server: frames up to 1.2 MiB, messages 3.6


@pytest.fixture(scope="module")
def big_llm():
    server = llm_server.start_in_thread()
    yield server
    server.shutdown()


def _database_name(django_db_blocker) -> str:
    from django.db import connection

    with django_db_blocker.unblock():
        return connection.settings_dict["NAME"]


@pytest.fixture(scope="module")
def servers(django_db_setup, django_db_blocker, big_llm):
    """Two daphne servers as the project starts them: default settings, and MAX_MESSAGE_CHARS
    lowered to SMALL_LIMIT (to reach the limit without sending megabytes)."""
    db_name = _database_name(django_db_blocker)
    started = {
        "default": ServerProcess("big-messages", db_name, big_llm.base_url),
        "small": ServerProcess(
            "small-limit", db_name, big_llm.base_url, extra_env={"MAX_MESSAGE_CHARS": str(SMALL_LIMIT)}
        ),
    }
    try:
        for server in started.values():
            server.start(wait=False)
        for server in started.values():
            server.wait_ready()
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture
def default_server(servers) -> ServerProcess:
    return servers["default"]


@pytest.fixture
def small_server(servers) -> ServerProcess:
    return servers["small"]


def long_text(chars: int) -> str:
    """`chars` characters of varied prose, some of them outside ASCII."""
    line = "Zeile {:07d}: a long paste, with ünïcödé and a 🦓 to count right.\n"
    text = "".join(line.format(i) for i in range(chars // len(line.format(0)) + 1))
    return text[:chars]


async def test_a_message_over_one_mib_is_stored_through_daphne(default_server, owner, conversation):
    content = long_text(1_500_000)
    frame = json.dumps({"type": "send", "content": content, "client_id": "big-1"}, ensure_ascii=False)
    assert len(frame.encode()) > ONE_MIB  # more than daphne's default limit
    cookie = await asyncio.to_thread(session_cookie, owner)
    async with await open_socket(default_server, cookie, conversation.pk) as ws:
        await ws.send(frame)
        events = await events_until(ws, "reply_done", timeout=300)

    stored = events[0]
    assert stored["type"] == "message" and stored["client_id"] == "big-1"
    assert events[-1]["status"] == "complete"
    message = await Message.objects.aget(pk=stored["message_id"])
    assert message.role == "user" and len(message.content) == 1_500_000 and message.content == content


async def test_a_message_at_the_limit_fits_however_its_json_is_escaped(
    small_server, owner, conversation, big_llm
):
    # Every character outside the Basic Multilingual Plane, escaped as a surrogate pair (12
    # bytes each, as Python's json.dumps writes it): the largest frame a message can make. The
    # server's answer carries it back as HTML, twice (rendered and raw), 2.4 MB.
    content = "🦓" * SMALL_LIMIT
    frame = json.dumps({"type": "send", "content": content, "client_id": "zebras"})
    assert len(frame) > 12 * SMALL_LIMIT > ONE_MIB
    big_llm.state.reset()
    big_llm.state.add_script(None, [{"text": "So many zebras."}], False)  # not an echo of it
    cookie = await asyncio.to_thread(session_cookie, owner)
    async with await open_socket(small_server, cookie, conversation.pk) as ws:
        await ws.send(frame)
        events = await events_until(ws, "reply_done", timeout=300)

    assert events[0]["type"] == "message" and events[0]["client_id"] == "zebras"
    assert len(json.dumps(events[0])) > 2 * 12 * SMALL_LIMIT
    assert events[-1]["status"] == "complete"
    message = await Message.objects.aget(pk=events[0]["message_id"])
    assert message.content == content


async def test_a_message_over_the_limit_gets_an_error_and_the_socket_stays_open(
    small_server, owner, conversation
):
    cookie = await asyncio.to_thread(session_cookie, owner)
    async with await open_socket(small_server, cookie, conversation.pk) as ws:
        await ws.send(json.dumps({"type": "send", "content": "x" * (SMALL_LIMIT + 1), "client_id": "long"}))
        [error] = await events_until(ws, "error")
        assert error["code"] == "invalid" and error["frame"] == "send"
        assert error["message"] == "message is longer than 100,000 characters"

        await ws.send(json.dumps({"type": "ping"}))
        assert (await events_until(ws, "pong"))[-1] == {"type": "pong"}
        await ws.send(json.dumps({"type": "send", "content": "a short one after that", "client_id": "short"}))
        events = await events_until(ws, "reply_done")

    assert events[0]["type"] == "message" and events[0]["client_id"] == "short"
    contents = [m async for m in Message.objects.filter(conversation=conversation, role="user").values_list(
        "content", flat=True
    )]
    assert contents == ["a short one after that"]


async def test_only_a_frame_no_accepted_message_could_make_is_closed_as_too_big(
    small_server, owner, conversation
):
    limit = websocket_max_frame_bytes(SMALL_LIMIT)
    padding = " " * (limit - len(json.dumps({"type": "ping"})))  # JSON allows whitespace anywhere
    cookie = await asyncio.to_thread(session_cookie, owner)
    async with await open_socket(small_server, cookie, conversation.pk) as ws:
        await ws.send('{"type": "ping"}' + padding)  # exactly at the limit: read and answered
        assert (await events_until(ws, "pong"))[-1] == {"type": "pong"}
        await ws.send('{"type": "ping"}' + padding + " ")  # one byte over
        with pytest.raises(ConnectionClosed):  # dropped, without a closing handshake
            await events_until(ws, "pong", timeout=30)


def test_make_run_serves_with_the_same_limits_as_the_tests(monkeypatch):
    from daphne.cli import CommandLineInterface
    from django.core.management import call_command

    started = []
    monkeypatch.setattr(CommandLineInterface, "run", lambda self, argv: started.append(argv))
    call_command("serve", "--no-worker", "--port", "8123")  # what `make run` runs

    options = CommandLineInterface().parser.parse_args(started[0])
    assert options.port == 8123
    assert options.application == "config.asgi:application"
    frame = settings.MAX_MESSAGE_CHARS * 12 + 64 * 1024  # 96,065,536 bytes at the default
    assert options.websocket_max_frame_size == websocket_max_frame_bytes() == frame
    assert options.websocket_max_message_size == websocket_max_message_bytes() == 3 * frame


# --- in the browser ------------------------------------------------------------------------------
# Playwright runs an event loop in the test's thread, so the ORM is used from another one.

def in_thread(func, *args):
    def call():
        from django.db import connections

        try:
            return func(*args)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


def user_messages(conversation) -> list[str]:
    return list(
        Message.objects.filter(conversation=conversation, role="user", is_chunk=False)
        .order_by("timestamp").values_list("content", flat=True)
    )


@pytest.fixture
def owner_cookie(owner) -> str:
    return session_cookie(owner)


@pytest.fixture
def browser(owner_cookie, conversation):
    if not os.path.exists(CHROMIUM):
        pytest.fail(MISSING)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def open_chat(browser, server: ServerProcess, cookie: str, conversation):
    """The conversation's page in a tab signed in with `cookie`, its socket connected."""
    name, value = cookie.split("=", 1)
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    context.add_cookies([{"name": name, "value": value, "url": server.url}])
    page = context.new_page()
    page.set_default_timeout(60_000)
    # What the composer held (its length) at the moment each frame left for the server.
    page.add_init_script(
        "const send = WebSocket.prototype.send; window.composerAtSend = [];"
        "WebSocket.prototype.send = function (data) {"
        "  const box = document.getElementById('composer-input');"
        "  window.composerAtSend.push(box ? box.value.length : null);"
        "  return send.call(this, data); };"
    )
    page.goto(f"{server.url}/c/{conversation.pk}/")
    page.wait_for_selector("#connection:has-text('connected')")
    return page


def paste(page, text: str) -> None:
    # Typing a million characters through the keyboard would take minutes.
    page.evaluate("text => { document.getElementById('composer-input').value = text; }", text)


def composer(page) -> str:
    return page.input_value("#composer-input")


def test_a_person_is_told_a_message_is_too_long_and_keeps_it(
    browser, small_server, owner_cookie, conversation, big_llm
):
    big_llm.state.reset()
    big_llm.state.add_script(None, [{"text": "Received."}], False)  # the default quotes it: too long
    page = open_chat(browser, small_server, owner_cookie, conversation)
    too_long = "y" * SMALL_LIMIT + "🦓"  # one character over (the zebra is two UTF-16 units)
    page.fill("#composer-input", too_long)
    page.keyboard.press("Enter")

    error = page.locator("#chat-error")
    error.wait_for()
    assert error.inner_text() == (
        "This message is 100,001 characters long; the limit is 100,000. Shorten it or send it in parts."
    )
    assert composer(page) == too_long
    assert page.evaluate("window.composerAtSend") == []  # refused in the page: nothing sent
    page.screenshot(path=str(ARTIFACTS / "chat-message-too-long.png"))

    # At the limit exactly, counted as the server counts (code points), it goes.
    at_limit = "y" * (SMALL_LIMIT - 1) + "🦓"
    page.fill("#composer-input", at_limit)
    page.keyboard.press("Enter")
    page.locator("li.message.user").wait_for()
    page.wait_for_function("() => document.getElementById('composer-input').value === ''")
    assert error.is_hidden()
    assert in_thread(user_messages, conversation) == [at_limit]
    page.locator("li.message.assistant:not(.streaming) .content:has-text('Received.')").wait_for()


def test_a_message_over_one_mib_leaves_the_composer_once_stored(
    browser, default_server, owner_cookie, conversation, big_llm
):
    big_llm.state.reset()
    big_llm.state.add_script(None, [{"text": "Received."}], False)  # the default quotes it: 1.2 MB
    page = open_chat(browser, default_server, owner_cookie, conversation)
    content = long_text(1_200_000)
    paste(page, content)
    page.click("#send-button")

    page.locator("li.message.user").wait_for(timeout=120_000)
    page.wait_for_function("() => document.getElementById('composer-input').value === ''")
    # When the frame left, the text was still in the composer: the server's "stored" clears
    # it, not sending.
    assert page.evaluate("window.composerAtSend") == [len(content.encode("utf-16-le")) // 2]
    assert in_thread(user_messages, conversation) == [content]
    # The turn goes on after the message is stored: its reply is waited for, so the test's
    # database is not emptied under the server's last writes.
    reply = page.locator("li.message.assistant:not(.streaming) .content:has-text('Received.')")
    reply.wait_for(timeout=120_000)


def test_a_message_the_server_refuses_stays_in_the_composer(
    browser, small_server, owner_cookie, conversation
):
    page = open_chat(browser, small_server, owner_cookie, conversation)
    # A page that believes in a higher limit than the server's (opened before the server was
    # restarted with a lower MAX_MESSAGE_CHARS): the server's refusal must not lose the text.
    page.evaluate("() => { document.getElementById('chat').dataset.maxMessageChars = '100000000'; }")
    refused = "z" * (SMALL_LIMIT + 1)
    paste(page, refused)
    page.click("#send-button")
    page.locator("#chat-error:has-text('message is longer than 100,000 characters')").wait_for()
    assert composer(page) == refused
    assert not page.is_disabled("#send-button")

    # Larger than any message the server reads (Chromium sends it in several frames): it drops
    # the connection. The person is told, keeps the text, and the page reconnects.
    too_big = "z" * (websocket_max_message_bytes(SMALL_LIMIT) + 1)
    paste(page, too_big)
    page.click("#send-button")
    page.locator("#chat-error:has-text('before your message was stored')").wait_for()
    page.screenshot(path=str(ARTIFACTS / "chat-message-too-big-for-the-socket.png"))
    assert composer(page) == too_big
    page.wait_for_selector("#connection:has-text('connected')")
    assert not page.is_disabled("#send-button")
    assert in_thread(user_messages, conversation) == []
