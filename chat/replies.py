"""A turn's reply and how it is stored: the assistant message, its tool calls and the turn's
snapshot. The turn (chat.turn) fills a Reply as the model streams; a reply draft left by a
server that died (chat.drafts) is stored the same way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import F, JSONField, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Coalesce

from chat import branches
from memory.context import budget
from memory.context.tools import ToolResult
from memory.finding import semantic_cache
from memory.models import ContextSnapshot, Conversation, Message, new_ulid
from memory.storage import store


def prefetch_related_objects_from(instance, name: str, objects: list) -> None:
    """Set `instance.<name>.all()` to `objects` (as prefetch_related would), with no query."""
    queryset = getattr(instance, name).all()
    queryset._result_cache = list(objects)
    queryset._prefetch_done = True
    cache = getattr(instance, "_prefetched_objects_cache", {})
    instance._prefetched_objects_cache = {**cache, name: queryset}


@dataclass
class Reply:
    id: str = field(default_factory=new_ulid)
    text: str = ""
    status: str = "complete"  # complete | stopped | failed
    error: str = ""
    mode: str = "llm"  # llm | offline_recall
    model: str = ""  # the model asked (the conversation's pick of CHAT_MODELS; empty: CHAT_MODEL)
    memory: str = "on"  # on | off (the person switched it off) | temporary: what the turn was shown
    cached_from: str = ""  # the earlier reply reused (RESPONSE_CACHE)
    tool_outcomes: list[ToolResult] = field(default_factory=list)
    tool_result_chars: int = 0  # of tool results sent to the model (MAX_TOOL_RESULT_CHARS_PER_TURN)
    usage: dict[str, int] = field(default_factory=dict)
    rounds: int = 0
    started: float = field(default_factory=time.perf_counter)
    timings_ms: dict[str, float] = field(default_factory=dict)
    prompt: budget.Prompt | None = None  # what the model is sent, zone by zone
    retried: bool = False  # the prompt was refused as too long once and sent again, halved
    draft_begun: asyncio.Future | None = None  # the draft's row is written (with the snapshot)
    after_first_token: Callable[[], object] | None = None  # run once the first token is out
    # The messages this turn read (id -> their texts): what it writes loses the words of any
    # forgotten while it ran (memory.lifecycle.forgetting.gone_since_read).
    seen: dict[str, list[str]] = field(default_factory=dict)

    def mark(self, name: str, since: float) -> None:
        """Milliseconds from the start of the turn to a step (kept in the reply's metadata)."""
        self.timings_ms.setdefault(name, round((time.perf_counter() - since) * 1000, 1))

    def add_usage(self, usage: dict[str, int]) -> None:
        for key, value in usage.items():
            self.usage[key] = self.usage.get(key, 0) + int(value or 0)


def store_reply(owner, conversation: Conversation, user_message: Message, reply: Reply, snapshot) -> Message:
    """The assistant message answering `user_message`, with its tool calls, linked to the turn's
    snapshot and made the active branch's leaf. The caller deletes the reply's draft in the
    same transaction (drafts.finish)."""
    metadata = {
        "status": reply.status,
        "mode": reply.mode,
        "model": (reply.model or settings.CHAT_MODEL) if reply.mode == "llm" else None,
        "usage": reply.usage,
        "rounds": reply.rounds,
        "timings_ms": reply.timings_ms,
    }
    if reply.status != "complete":
        metadata["incomplete"] = True
    if reply.error:
        metadata["error"] = reply.error
    if snapshot is not None:
        metadata["strategy"] = snapshot.strategy
    if reply.cached_from:
        metadata["cached_from"] = reply.cached_from
    if reply.memory != "on":
        metadata["memory"] = reply.memory
    if reply.mode == "offline_recall":
        # Quotes of memory and how-to-configure text: not memory itself.
        metadata["system_text"] = True
    [assistant] = store.store_messages(
        owner,
        conversation,
        [
            store.NewMessage(
                id=reply.id,
                role="assistant",
                content=reply.text,
                parent_id=user_message.pk,
                metadata=metadata,
                allow_empty=True,
            )
        ],
        # The reply's vectors come from the topic upkeep both callers queue next (memory.tasks
        # .run_upkeep embeds first); keyword search finds it at once.
        embed="upkeep",
        # Both callers run this in one transaction of their own (chat.db.durable).
        savepoint=False,
    )
    if reply.status == "complete" and reply.mode == "llm" and reply.memory == "on":
        semantic_cache.remember_reply(owner, conversation, user_message, assistant, reply.text)
    calls = []
    for outcome in reply.tool_outcomes:
        call = store.store_tool_call(
            owner,
            assistant,
            outcome.name,
            outcome.arguments_text,
            outcome.result if outcome.ok else {"error": outcome.error},
            timestamp=outcome.started_at,
            is_error=not outcome.ok,
            duration_ms=int(outcome.duration_ms),
            embed=False,
        )
        calls.append(call)
    # Its row is rendered next: the tool calls just stored are what it would read back.
    prefetch_related_objects_from(assistant, "tool_calls", calls)
    if snapshot is not None:
        snapshot.message = assistant
        changes: dict[str, Any] = {"message": assistant}
        if reply.prompt is not None:
            # What the model was sent, zone by zone: allocated and used (the largest request).
            report = reply.prompt.report(
                completion_tokens=reply.usage.get("completion_tokens"), retried=reply.retried
            )
            snapshot.plan = {**(snapshot.plan or {}), "window": report}
            # Merged into the stored plan in SQL: the plan held here may predate a forget that
            # scrubbed the stored one.
            changes["plan"] = CombinedExpression(
                Coalesce(F("plan"), Value({}, JSONField())), "||", Value({"window": report}, JSONField())
            )
        ContextSnapshot.objects.filter(pk=snapshot.pk).update(**changes)
    assistant.conversation = conversation
    branches.set_leaf(conversation, assistant)
    return assistant
