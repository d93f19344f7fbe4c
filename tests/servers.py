"""Websocket helpers for tests that talk to a daphne process (bench.launch.ServerProcess)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.launch import ServerProcess


async def open_socket(server: ServerProcess, cookie: str, conversation_id: str):
    """A signed-in websocket to a conversation on `server`. max_size=None: the server echoes a
    long message back as its rendered HTML."""
    from websockets.asyncio.client import connect as ws_connect

    return await ws_connect(
        f"{server.ws_url}/ws/chat/{conversation_id}/",
        additional_headers={"Cookie": cookie, "Origin": server.url},
        open_timeout=30, max_size=None,
    )


async def events_until(ws, event_type: str, timeout: float = 120) -> list[dict]:
    """The events a socket receives up to and including the first of `event_type`."""
    events: list[dict] = []
    async with asyncio.timeout(timeout):
        while True:
            event = json.loads(await ws.recv())
            events.append(event)
            if event["type"] == event_type:
                return events
