"""Token events of one websocket, coalesced: at most one frame per CHAT_TOKEN_FRAME_SECONDS.

A frame costs the server far more than a token's few bytes (JSON, the ASGI send, daphne's
websocket framing, a write), and a hundred replies streaming at 50 tokens a second are 5,000
tokens a second. The first token of a burst goes out at once (the time to the first token
is what a person notices); tokens that arrive within the next interval wait and go out as
one frame whose delta is their text joined. The page appends a delta to the reply's text
whatever its length, so it shows the same text either way.

Any other event of the socket waits for `drain`, which sends what is waiting at once, so
events keep their order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

Deliver = Callable[[dict[str, Any]], Awaitable[None]]


def merge_tokens(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive token events of one reply as one event with their deltas joined."""
    merged: list[dict[str, Any]] = []
    parts: list[list[str]] = []
    for event in events:
        if merged and merged[-1]["message_id"] == event["message_id"]:
            parts[-1].append(event["delta"])
        else:
            merged.append(event)
            parts.append([event["delta"]])
    return [
        {**event, "delta": "".join(p)} if len(p) > 1 else event
        for event, p in zip(merged, parts, strict=True)
    ]


class TokenFrames:
    def __init__(self, deliver: Deliver, interval: float | None = None) -> None:
        self.deliver = deliver
        self.interval = settings.CHAT_TOKEN_FRAME_SECONDS if interval is None else interval
        self.pending: list[dict[str, Any]] = []
        self.sender: asyncio.Task | None = None
        self.sleeping = False  # the sender waits out the interval (nothing of the batch sent)
        self.next_at = 0.0  # loop time before which no token frame goes out
        self.frames = 0  # token frames sent (for tests and benchmarks)

    def add(self, event: dict[str, Any]) -> None:
        """Queue a token event; never waits."""
        self.pending.append(event)
        if self.sender is None or self.sender.done():
            self.sender = asyncio.ensure_future(self._send())

    async def drain(self) -> None:
        """Send the waiting tokens now and return when they are out."""
        while self.sender is not None and not self.sender.done():
            if self.sleeping:
                # Only waiting: nothing of its batch is sent yet, so it can go out from here.
                self.sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self.sender
                break
            await asyncio.shield(self.sender)
        if self.pending:
            await self._flush()

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        while self.pending:
            wait = self.next_at - loop.time()
            if wait > 0:
                self.sleeping = True
                try:
                    await asyncio.sleep(wait)
                finally:
                    self.sleeping = False
            await self._flush()

    async def _flush(self) -> None:
        self.next_at = asyncio.get_running_loop().time() + self.interval
        batch, self.pending = self.pending, []
        for event in merge_tokens(batch):
            self.frames += 1
            await self.deliver(event)
