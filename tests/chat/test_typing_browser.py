"""Typing ahead in a real browser: the composer sends what the person typed when they pause,
and the server embeds it (observed in the server's own embedder: daphne runs in this process,
on a thread, so the test sees the model being asked for the text)."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest
from django.contrib.auth import get_user_model

from tests.browser import CHROMIUM, CHROMIUM_ARGS, MISSING
from tests.chat.test_browser import sign_in_and_open_chat
from tests.chat.test_typing import ModelCalls, fresh

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def daphne_here(django_db_setup):
    """daphne serving config.asgi on a thread of this process (Twisted's reactor runs once a
    process: one server for the module)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(MISSING)
    from daphne.server import Server, reactor

    from config.asgi import application

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ready = threading.Event()
    server = Server(application, endpoints=[f"tcp:port={port}:interface=127.0.0.1"],
                    signal_handlers=False, ready_callable=ready.set)
    threading.Thread(target=server.run, daemon=True).start()
    assert ready.wait(60)
    yield f"http://127.0.0.1:{port}"
    reactor.callFromThread(reactor.stop)


@pytest.fixture
def typist(transactional_db):
    get_user_model().objects.create_user("tess", password="tess-pass-12345")
    return "tess", "tess-pass-12345"


def test_pausing_in_the_composer_embeds_the_question_on_the_server(daphne_here, typist, monkeypatch):
    from playwright.sync_api import sync_playwright

    calls = ModelCalls(monkeypatch)
    question = fresh("where did we leave the canoe")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(60_000)
        sent: list[str] = []
        page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(payload)))
        sign_in_and_open_chat(page, daphne_here, typist)
        page.locator("#composer-input").press_sequentially("hi")  # too short to embed
        page.locator("#composer-input").fill("")
        page.locator("#composer-input").press_sequentially(question + "  ")
        assert calls.asked(question).wait(60), "the server was never asked to embed what was typed"
        page.evaluate("1")  # a round trip: Playwright delivers the frame events it holds
        typing = [json.loads(frame)["text"] for frame in sent if '"typing"' in frame]
        # Sent on pauses: the text as it stood then, trimmed, never the too-short "hi".
        assert typing[-1] == question and all(question.startswith(t) and len(t) >= 3 for t in typing)
        assert calls.count("hi") == 0
        # A pasted document: only what the memory query keeps is sent, not the whole paste.
        # (Its 2,000th character a space: the cut the memory query makes there is the same.)
        head = fresh("the pasted page") + " "
        pasted = head + "a" * (1999 - len(head)) + " " + "more of the page " * 200
        page.locator("#composer-input").fill(pasted)
        assert calls.asked(pasted).wait(60), "the paste's memory query was never embedded ahead"
        page.evaluate("1")
        typing = [json.loads(frame)["text"] for frame in sent if '"typing"' in frame]
        assert typing[-1] == pasted[:2000]
        browser.close()
