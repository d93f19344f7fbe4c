"""Typing ahead: the composer's `typing` frame embeds the question's memory query while the
person types, so the `send` that follows finds its vector cached. Real websockets, the real
embedder (its model calls recorded), no sleeps: the tests wait for the model call itself."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from channels.db import database_sync_to_async

from config.models import ActionAllowance
from memory.embedders import get_embedder, query_text, text_hash
from memory.models import Message
from tests.chat.conftest import connect, exchange

pytestmark = pytest.mark.django_db(transaction=True)


class ModelCalls:
    """The texts the embedder's model is asked for (query texts carry e5's query tag); `gate`
    (when set up) holds the first call until released."""

    def __init__(self, monkeypatch, *, hold_first: bool = False) -> None:
        self.embedder = get_embedder()
        self.texts: list[str] = []
        self.seen: dict[str, threading.Event] = {}
        self.gate = threading.Event()
        if not hold_first:
            self.gate.set()
        self.lock = threading.Lock()
        real = self.embedder._embed_batch

        def recording(texts: list[str]):
            with self.lock:
                self.texts.extend(texts)
                for text in texts:
                    self.seen.setdefault(text, threading.Event()).set()
            self.gate.wait(30)
            return real(texts)

        monkeypatch.setattr(self.embedder, "_embed_batch", recording)

    def tagged(self, text: str) -> str:
        """The text the model embeds for `text` as the memory query."""
        return getattr(self.embedder, "QUERY_TAG", "") + query_text(text)

    def count(self, text: str) -> int:
        with self.lock:
            return self.texts.count(self.tagged(text))

    def asked(self, text: str) -> threading.Event:
        """Set once the model is asked to embed `text` as the memory query."""
        with self.lock:
            return self.seen.setdefault(self.tagged(text), threading.Event())

    async def wait_for(self, text: str) -> bool:
        return await asyncio.to_thread(self.asked(text).wait, 30)

    def known(self, text: str) -> bool:
        """Cached or being embedded."""
        key = text_hash(self.tagged(text))
        return key in self.embedder._cache or key in self.embedder._inflight


def fresh(words: str) -> str:
    """A question no earlier test embedded (the embedder's cache lives for the process)."""
    return f"{words} {uuid.uuid4().hex[:8]}"


async def ping(ws) -> None:
    """Frames are handled in order: after the pong, every frame before it has been."""
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from(timeout=10))["type"] == "pong"


@database_sync_to_async
def rows(conversation) -> tuple[int, int]:
    return Message.objects.filter(conversation=conversation).count(), ActionAllowance.objects.count()


async def test_typing_embeds_the_question_so_its_send_finds_the_vector_cached(
    owner, conversation, scripted_llm, monkeypatch
):
    question = fresh("what did I say about the lighthouse keeper")
    calls = ModelCalls(monkeypatch)
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "typing", "text": "  " + question + "\n"})
    await ping(ws)  # the first answer is the pong's: typing answers nothing
    assert await calls.wait_for(question), "the typing frame did not embed the question"
    await exchange(ws, question)
    # Embedded once, ahead of the send: the turn (and any later query of it) is a cache hit.
    get_embedder().embed_query(query_text(question))
    assert calls.count(question) == 1
    await ws.disconnect()


async def test_malformed_typing_frames_are_invalid_and_the_socket_works_on(
    owner, conversation, scripted_llm
):
    ws = await connect(owner, conversation.pk)
    for frame in ({"type": "typing"}, {"type": "typing", "text": 42}, {"type": "typing", "text": ["a b c"]},
                  {"type": "typing", "text": None}):
        await ws.send_json_to(frame)
        error = await ws.receive_json_from(timeout=10)
        assert error == {"type": "error", "code": "invalid", "message": "text must be a string",
                         "frame": "typing"}
    events = await exchange(ws, "still here?")
    assert events[-1]["status"] == "complete"
    await ws.disconnect()


async def test_typing_stores_nothing_and_counts_against_no_limit(
    owner, conversation, scripted_llm, settings, monkeypatch
):
    settings.CHAT_RATE_LIMIT_PER_MINUTE = 1
    calls = ModelCalls(monkeypatch)
    ws = await connect(owner, conversation.pk)
    before = await rows(conversation)
    drafts = [fresh("tell me about the") for _ in range(5)]
    for text in drafts:
        await ws.send_json_to({"type": "typing", "text": text})
    await ping(ws)
    assert await rows(conversation) == before
    assert await calls.wait_for(drafts[-1])  # the newest draft is embedded all the same
    # The one action of the minute is still there for the message itself.
    assert (await exchange(ws, drafts[-1]))[-1]["status"] == "complete"
    await ws.disconnect()


async def test_short_texts_and_the_setting_off_embed_nothing(owner, conversation, settings, monkeypatch):
    calls = ModelCalls(monkeypatch)
    ws = await connect(owner, conversation.pk)
    short = " a b "  # two non-space characters
    await ws.send_json_to({"type": "typing", "text": short})
    settings.CHAT_PREFETCH_TYPING = False
    off = fresh("when is the dentist appointment")
    await ws.send_json_to({"type": "typing", "text": off})
    await ping(ws)
    assert not calls.known(short) and not calls.known(off)
    assert calls.count(short) == 0 and calls.count(off) == 0
    settings.CHAT_PREFETCH_TYPING = True
    await ws.send_json_to({"type": "typing", "text": off})
    await ping(ws)
    assert calls.known(off)  # the same frame, with the setting on
    await ws.disconnect()


async def test_a_fast_typist_has_one_embedding_in_flight_and_only_the_newest_text_follows(
    owner, conversation, monkeypatch
):
    calls = ModelCalls(monkeypatch, hold_first=True)
    ws = await connect(owner, conversation.pk)
    first, *between, last = [fresh(f"draft number {i} of the question") for i in range(5)]
    try:
        await ws.send_json_to({"type": "typing", "text": first})
        assert await calls.wait_for(first)  # the model is busy with it (held)
        for text in [*between, last]:
            await ws.send_json_to({"type": "typing", "text": text})
        await ping(ws)
        # Nothing more was handed to the embedder while the first runs.
        assert not any(calls.known(text) for text in [*between, last])
    finally:
        calls.gate.set()
    assert await calls.wait_for(last)
    assert all(calls.count(text) == 0 for text in between)
    await ws.disconnect()
