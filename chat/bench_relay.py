"""A bare relay, for `bench_ws --baseline` only: the floor under Recollect's chat socket.

The same websocket path and client frames as the chat, served by daphne the same way, and the
same LLM client (`chat.llm.stream_chat`) and token frames (`chat.frames`); but no session, no
memory, no storage and no tools: a `send` frame's text goes to the model as the only message,
and the reply streams back as `reply_started`, `token` and `reply_done` events. What bench_ws
measures on it is the cost of websockets, the model's stream and the frames themselves, so
Recollect's figures can be read as ratios to it within one run on one machine.

Served with `python -m config.serving --application chat.bench_relay:application ...`; it is
not in any URL configuration of the site.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

import asyncio  # noqa: E402
import json  # noqa: E402
import uuid  # noqa: E402
from typing import Any  # noqa: E402

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from chat import llm  # noqa: E402
from chat.frames import TokenFrames  # noqa: E402


class RelayConsumer(AsyncWebsocketConsumer):
    # No channel layer: nothing is listened for besides the socket.
    channel_layer_alias = "bench-relay-has-none"

    async def connect(self) -> None:
        self.turn: asyncio.Task | None = None
        self.frames = TokenFrames(self._send_event)
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        frame = json.loads(text_data or "{}")
        if frame.get("type") == "send" and (self.turn is None or self.turn.done()):
            self.turn = asyncio.ensure_future(self._relay(str(frame.get("content") or "")))

    async def _send_event(self, event: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(event))

    async def _relay(self, content: str) -> None:
        reply_id = uuid.uuid4().hex
        await self._send_event({"type": "reply_started", "message_id": reply_id})
        status, error = "complete", ""
        try:
            async for event in llm.stream_chat([{"role": "user", "content": content}]):
                if isinstance(event, llm.TextDelta):
                    self.frames.add({"type": "token", "message_id": reply_id, "delta": event.text})
        except llm.LLMError as exc:
            status, error = "failed", str(exc)
        await self.frames.drain()
        await self._send_event(
            {"type": "reply_done", "message_id": reply_id, "status": status, "error": error}
        )


async def _http(scope, receive, send) -> None:
    """Any HTTP request: 200, so a benchmark can tell the server is up."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"bare relay\n"})


application = ProtocolTypeRouter(
    {
        "http": _http,
        "websocket": URLRouter([path("ws/chat/<str:conversation_id>/", RelayConsumer.as_asgi())]),
    }
)
