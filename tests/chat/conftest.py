"""Chat fixtures: the scripted test LLM, websocket communicators, a live daphne for browsers."""

from __future__ import annotations

import json
import urllib.request

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from bench import llm_server
from chat import llm as chat_llm
from chat.routing import websocket_urlpatterns


class ScriptedLLM:
    """Handle on the running test LLM server: queue scripts, read what it was sent."""

    def __init__(self, server: llm_server.LLMServer) -> None:
        self.server = server
        self.base_url = server.base_url

    def script(self, *steps: dict, match: str | None = None, repeat: bool = False) -> None:
        self.server.state.add_script(match, list(steps), repeat)

    @property
    def requests(self) -> list[dict]:
        with self.server.state.lock:
            return list(self.server.state.requests)

    def post(self, path: str, payload: dict) -> None:
        root = self.base_url.removesuffix("/v1")
        req = urllib.request.Request(
            root + path, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(req, timeout=5).read()


@pytest.fixture(scope="session")
def llm_server_instance():
    server = llm_server.start_in_thread()
    yield server
    server.shutdown()


@pytest.fixture
def scripted_llm(llm_server_instance, settings):
    """The chat talks to the scripted LLM for this test (with fast retries)."""
    llm_server_instance.state.reset()
    settings.OPENAI_BASE_URL = llm_server_instance.base_url
    settings.OPENAI_API_KEY = "test-key"
    settings.CHAT_MODEL = "test-llm"
    # A large model's window unless a test gives it another (tests/chat/test_window.py does):
    # "test-llm" is in no table, and the default window would cut the larger tool results.
    settings.CHAT_CONTEXT_TOKENS = 128_000
    settings.LLM_TIMEOUT_SECONDS = 10.0
    chat_llm._client.cache_clear()
    yield ScriptedLLM(llm_server_instance)
    chat_llm._client.cache_clear()


@pytest.fixture
def no_llm(settings):
    settings.OPENAI_BASE_URL = ""
    settings.OPENAI_API_KEY = ""
    chat_llm._client.cache_clear()


def ws_app():
    return URLRouter(websocket_urlpatterns)


async def connect(user, conversation_id: str) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(ws_app(), f"/ws/chat/{conversation_id}/")
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def refusal_code(communicator: WebsocketCommunicator) -> int | None:
    """The close code a refused socket gets: it is accepted, then closed with the code (a
    socket closed before it is accepted is refused with a bare HTTP 403 instead)."""
    connected, _ = await communicator.connect()
    assert connected, "refused before it was accepted: the client sees HTTP 403, not a close code"
    closing = await communicator.receive_output(30)
    assert closing["type"] == "websocket.close"
    return closing.get("code")


async def receive_until(
    communicator: WebsocketCommunicator, event_type: str, timeout: float = 30
) -> list[dict]:
    """All events up to and including the first of `event_type`."""
    events = []
    while True:
        event = await communicator.receive_json_from(timeout=timeout)
        events.append(event)
        if event["type"] == event_type:
            return events


async def exchange(communicator: WebsocketCommunicator, content: str) -> list[dict]:
    """Send a message and wait for its reply: the events up to and including reply_done."""
    await communicator.send_json_to({"type": "send", "content": content})
    return await receive_until(communicator, "reply_done")


async def past_the_rate_limit(user, conversation, settings) -> tuple[WebsocketCommunicator, dict]:
    """At one message a minute: "first" is answered, then "second" is sent; the open socket and
    the event that answers "second"."""
    settings.CHAT_RATE_LIMIT_PER_MINUTE = 1
    ws = await connect(user, conversation.pk)
    await exchange(ws, "first")
    await ws.send_json_to({"type": "send", "content": "second"})
    return ws, await ws.receive_json_from(timeout=10)


@pytest.fixture(scope="session", autouse=True)
def warm_embedder():
    """Load the embedding model once, before any timed websocket exchange."""
    from memory.embedders import get_embedder

    get_embedder().embed(["warm up"])
