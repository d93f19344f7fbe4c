"""One chat turn, top to bottom: `run_turn` is the whole story of what the model is sent.

1. The user message is stored and committed before anything else (a crash later loses nothing).
2. The model's context window (CHAT_CONTEXT_TOKENS) is split into zones (memory/context/budget.py);
   `prepare_context` builds the plan over the user's whole memory within its zones; it is saved
   as the turn's context snapshot, so the explorer can show exactly what the model saw.
3. The model is called with the plan's index, the recent messages of the active branch, the new
   message and the memory tools, every part fitted to its zone (a long message goes as head and
   tail, earlier tool results shrink to summaries), with the answer's zone as max_tokens. Tokens
   stream out as they arrive; each tool call is executed against memory and shown. After
   MAX_TOOL_ROUNDS rounds of tools the model must answer. A provider that still finds the
   prompt too long gets it once more with half the zones; a second refusal fails the turn.
   Calls past MAX_TOOL_CALLS_PER_ROUND / _PER_TURN, or once the turn's tool results have come to
   MAX_TOOL_RESULT_CHARS_PER_TURN characters, are answered with an error instead of being run.
   With no model configured, offline recall answers from memory search instead.
4. The assistant message is stored with the user message as its parent, with its tool calls
   (a stopped or failed stream keeps its partial text and says so).
5. Topic upkeep is queued as background work, never on this path.

Events go out through `emit` (the consumer sends them to the conversation's Channels group);
their types are listed in the README's websocket protocol.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.db import OperationalError, transaction
from django.utils import timezone

from chat import branches, drafts, llm
from chat.db import db, durable
from chat.rendering import live_tool_call_html, message_html, streaming_row_html, tool_label
from chat.replies import Reply, store_reply
from memory import tasks
from memory.context import budget, index_builder
from memory.context.tools import ToolResult, execute_tool
from memory.finding import semantic_cache
from memory.knowledge import facts
from memory.lifecycle import forgetting
from memory.models import Conversation, Message, Preferences
from memory.organizing import summaries
from memory.storage import store
from memory.storage.inserts import insert_statement, inserted
from memory.text import auto_title
from memory.timeouts import cancelled, seconds, statement_limit

logger = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], Awaitable[None]]
UNSET = object()


async def run_turn(
    owner,
    conversation: Conversation,
    *,
    emit: Emit,
    stop: asyncio.Event,
    content: str | None = None,
    parent_id: Any = UNSET,
    reply_to: Message | None = None,
    client_id: str | None = None,
) -> Message:
    """Answer `content` (a new user message) or, for a regeneration, `reply_to` again.

    parent_id: where the new user message hangs in the tree (UNSET: after the active branch's
    leaf; None: a new root; an id: a branch from that message, as "edit and regenerate" does).
    Raises memory errors (NotFound, InvalidContent) before anything is stored.
    """
    reply = Reply()
    started = reply.started
    # 1. The user message, committed first.
    if reply_to is None:
        # Its vector (the memory query's) is computed in the shared embedding batch while the
        # message is stored, unless the plan will list a small memory whole without a search
        # (for an owner this process has not planned for yet, the store step counts first), or
        # the chat is temporary (it never searches memory, and nothing of it is kept).
        listed_whole = index_builder.memory_listed_whole(owner)
        if listed_whole is False and not conversation.temporary:
            _start_embedding(content)
        # Sent after the active branch's leaf (which has no replies: see branches.active_leaf),
        # the message is its parent's only reply: no siblings to read.
        user_message, html = await db(_stored_and_rendered)(
            durable(_store_user_message), owner, conversation, content, parent_id,
            embed_query=listed_whole is None and not conversation.temporary,
            only_child=parent_id is UNSET,
        )
        await emit(
            {
                "type": "chat.message",
                "message_id": user_message.pk,
                "role": "user",
                "parent_id": user_message.parent_id,
                "client_id": client_id,
                "html": html,
                # For the consumer (not sent on): the title, so it need not read it back.
                "conversation_title": user_message.conversation.title,
            }
        )
    else:
        user_message = reply_to
    # The model picked for the conversation, as stored now (read with the message: a pick made
    # while the chat was open counts from its next turn).
    reply.model = llm.model_for(user_message._state.fields_cache.get("conversation") or conversation)
    reply.mark("stored", started)
    await emit(
        {
            "type": "chat.reply_started",
            "message_id": reply.id,
            "parent_id": user_message.pk,
            "client_id": client_id,
            "html": streaming_row_html(reply.id, user_message.pk),
        }
    )

    snapshot = None
    plan = None

    def save_snapshot() -> asyncio.Future | None:
        """Start saving the plan as this turn's snapshot, with the reply's draft (once)."""
        if reply.draft_begun is None and plan is not None:
            reply.draft_begun = asyncio.ensure_future(
                db(durable(_save_snapshot, atomic=False))(owner, conversation, user_message, reply, plan)
            )
        return reply.draft_begun

    try:
        # 2. What the model will see. It waits for the message's vector only when it searches,
        # so the embedding also overlaps its first queries. The plan is saved as this turn's
        # snapshot (with the reply's draft) once the first token is out (or the model's first
        # round is over): nothing that can wait runs before the first token. Both are written
        # before the reply is, and the draft before its first save.
        allocation = budget.allocate(budget.context_window(reply.model))
        plan = await db(durable(_prepare_context, atomic=False))(
            owner, conversation, user_message, allocation, reply.seen
        )
        if plan.strategy == "off":  # memory is off, or the chat is temporary: no index, no tools
            reply.memory = "temporary" if conversation.temporary else "off"
        reply.mark("context", started)
        reply.after_first_token = save_snapshot

        # 3. The answer.
        if not summaries.is_configured():
            await _offline_recall(owner, user_message, reply, emit, stop)
        elif settings.RESPONSE_CACHE and reply.memory == "on" and (
            cached := await db(durable(semantic_cache.cached_reply, atomic=False))(
                owner, conversation, user_message
            )
        ):
            # RESPONSE_CACHE: the same question with memory unchanged since its answer.
            reply.text, reply.cached_from = cached["text"], cached["message_id"]
            await emit({"type": "chat.token", "message_id": reply.id, "delta": reply.text})
        else:
            reply.prompt = prompt = budget.Prompt.for_message(allocation, plan, user_message)
            tools = list(getattr(plan, "tools", None) or [])
            for round_no in range(settings.MAX_TOOL_ROUNDS + 1):
                if stop.is_set():
                    reply.status = "stopped"
                    break
                reply.rounds = round_no + 1
                # The last round offers no tools, so the model has to answer with what it has.
                offered = tools if round_no < settings.MAX_TOOL_ROUNDS else None
                text_before = len(reply.text)
                end = await _stream_round(prompt, offered, reply, emit, stop)
                save_snapshot()  # a round of tool calls only had no first token
                # No tools were offered on the last round: tool calls then are not run.
                if end is None or not end.tool_calls or offered is None:
                    break
                results: list[budget.ToolResultText] = []
                for index, call in enumerate(end.tool_calls):
                    if stop.is_set():
                        break  # Stop is honoured between calls, not only while text streams
                    refusal = _refusal(index, reply)
                    if refusal:
                        outcome = _skipped_tool(call, refusal)
                        reply.tool_outcomes.append(outcome)
                        results.append(budget.ToolResultText(call.id, outcome.content(), refusal))
                        continue
                    await emit(
                        {
                            "type": "chat.tool_started",
                            "message_id": reply.id,
                            "call_id": call.id,
                            "name": call.name,
                            "arguments": call.arguments_text[:2000],
                            "label": tool_label(call.name, call.arguments_text),
                            "html": live_tool_call_html(call.id, call.name, call.arguments_text),
                        }
                    )
                    outcome = await db(durable(_execute_tool))(
                        owner, conversation, call, user_message.pk, reply.seen, user_message.timestamp
                    )
                    reply.tool_outcomes.append(outcome)
                    room = settings.MAX_TOOL_RESULT_CHARS_PER_TURN - reply.tool_result_chars
                    content = outcome.content(room)
                    reply.tool_result_chars += len(content)
                    results.append(budget.ToolResultText(call.id, content, outcome.summary))
                    await emit(
                        {
                            "type": "chat.tool_finished",
                            "message_id": reply.id,
                            "call_id": call.id,
                            "name": call.name,
                            "ok": outcome.ok,
                            "summary": outcome.summary,
                            "error": outcome.error,
                            "duration_ms": outcome.duration_ms,
                            "html": live_tool_call_html(
                                call.id, call.name, call.arguments_text, outcome
                            ),
                        }
                    )
                if stop.is_set():
                    reply.status = "stopped"
                    break
                prompt.add_round(
                    reply.text[text_before:],
                    [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments_text},
                        }
                        for c in end.tool_calls
                    ],
                    results,
                )
    except Exception:
        # A bug or a database hiccup must not lose the reply that arrived so far.
        logger.exception("chat turn failed in conversation %s", conversation.pk)
        reply.status = "failed"
        reply.error = reply.error or "Something went wrong on the server while answering."

    drafts.saver().forget(reply.id)  # streaming is over: the stored reply replaces its draft
    snapshot_saving = save_snapshot()
    if snapshot_saving is not None:
        try:
            snapshot = await snapshot_saving
        except Exception:
            # The reply matters more than the record of its context: it is stored without.
            logger.exception("could not save the context snapshot in conversation %s", conversation.pk)
    # 4. The assistant message, its tool calls, the snapshot link, the active branch.
    # A reply to the message this turn stored is its only child: no siblings to read.
    assistant, html = await db(_stored_and_rendered)(
        durable(_store_reply), owner, conversation, user_message, reply, snapshot,
        only_child=reply_to is None,
    )
    await emit(
        {
            "type": "chat.reply_done",
            "message_id": assistant.pk,
            "parent_id": user_message.pk,
            "status": reply.status,
            "error": reply.error,
            "usage": reply.usage,
            "strategy": snapshot.strategy if snapshot else None,
            "mode": reply.mode,
            "client_id": client_id,
            "html": html,
        }
    )

    # 5. Topic upkeep, in the background: queued by _store_reply once the reply is committed.
    return assistant


# --- the steps -----------------------------------------------------------------------------------


def _stored_and_rendered(
    store_step, owner, *args, only_child: bool = False, **kwargs
) -> tuple[Message, str]:
    """A store step and the stored message's html in one trip to a database thread."""
    message = store_step(owner, *args, **kwargs)
    # Rendering reads again; a dropped connection here must not lose the turn either.
    return message, durable(message_html, atomic=False)(message, owner, only_child=only_child)


def _start_embedding(content: Any):
    """Start embedding a message as the memory query (a Future, or None). Best effort: any
    failure is left to the context step, which embeds the query itself (or reports why not)."""
    if not isinstance(content, str) or not content.strip():
        return None
    try:
        from memory.embedders import get_embedder, query_text

        return get_embedder().prefetch_query([query_text(content)])
    except Exception:  # noqa: BLE001
        logger.debug("embedding prefetch failed", exc_info=True)
        return None


def _store_user_message(
    owner, conversation: Conversation, content: Any, parent_id: Any, *, embed_query: bool = False
) -> Message:
    """embed_query: start embedding the message as the memory query unless the memory is small
    enough for the plan to list it whole (a count, once the message is stored)."""
    conversation = store.get_conversation(owner, conversation.pk)
    if parent_id is UNSET:
        # No position taken yet: the conversation has no message to continue from.
        leaf = branches.active_leaf(conversation) if conversation.next_position else None
        parent_id = leaf.pk if leaf else None
    elif parent_id is not None:
        parent = store.get_message(owner, parent_id, include_deleted=True)
        if parent.conversation_id != conversation.pk or parent.is_chunk:
            raise store.NotFound("message", parent_id)
    # Its passages get their vectors from the topic upkeep the turn queues (or, failing that,
    # the owner's next embedding task): no model call and no HNSW insert on the turn's path.
    # Keyword search finds it at once, and it is in the recent window of the turns that follow.
    message = store.store_message(
        owner, conversation, "user", content, parent_id=parent_id, embed="upkeep",
        savepoint=False,  # durable: the whole step is one transaction, retried whole
    )
    message.conversation = conversation  # rendering it needs no second look-up
    if embed_query and index_builder.too_big_to_list_whole(owner):
        _start_embedding(content)
    branches.set_leaf(conversation, message)
    if not conversation.title:
        # An untitled conversation is named after its first message.
        title = auto_title(message.content)
        if Conversation.objects.filter(pk=conversation.pk, title="").update(title=title):
            conversation.title = title
    return message


def _prepare_context(
    owner, conversation: Conversation, user_message: Message, allocation: budget.Allocation,
    seen: dict[str, list[str]], *, again: bool = False,
):
    """The plan, within its zones of `allocation`: it only reads, and needs no transaction.
    The messages it shows go in `seen`, with their texts. With "Use memory in replies" off, or
    in a temporary chat, it shows this conversation only: no index, no memory tools, no facts.
    again: the plan made once more, a hit of the first having been forgotten meanwhile."""
    active_ids = branches.ancestor_ids(user_message.pk)
    prefs = Preferences.of(owner)
    if conversation.temporary or not prefs.use_memory:
        plan = index_builder.conversation_only(
            owner, conversation, user_message, zones=allocation.index_zones(),
            active_message_ids=active_ids, custom_instructions=prefs.custom_instructions,
            temporary=conversation.temporary,
        )
    else:
        try:
            with statement_limit():
                plan = index_builder.prepare_context(
                    owner,
                    conversation,
                    user_message.content,
                    user_message=user_message,
                    active_message_ids=active_ids,
                    zones=allocation.index_zones(),
                    custom_instructions=prefs.custom_instructions,
                )
        except OperationalError as exc:
            if not cancelled(exc):
                raise
            # The memory index took too long (QUERY_TIMEOUT_MS): the turn goes on with the recent
            # conversation alone, and the snapshot says why.
            logger.warning("the context plan took too long in conversation %s; answering without memory "
                           "search", conversation.pk)
            with statement_limit():
                plan = index_builder.prepare_context(
                    owner, conversation, "", active_message_ids=active_ids, zones=allocation.index_zones(),
                    custom_instructions=prefs.custom_instructions,
                )
            plan.fallbacks.append({"kind": "index_timeout", "detail": (
                f"searching memory took more than {seconds()}; this answer was written without it")})
    recent = {m.pk: [m.content] for m in plan.recent}
    shown = forgetting.read_by(owner, [[i for i in plan.included_ids if i not in recent], plan.hits])
    if not again and _forgotten_hits(plan, shown, recent):
        # A message the search found was forgotten after the search read it and before its
        # text was read here: the plan holds words the forget removed. Planned again, with a
        # search after the forget, so the model is never sent them.
        logger.info("a search hit was forgotten while the plan was made; planning again")
        return _prepare_context(owner, conversation, user_message, allocation, seen, again=True)
    seen.update(recent)
    seen.update(shown)
    return plan


def _forgotten_hits(plan, shown: dict[str, list[str]], recent: dict[str, list[str]]) -> bool:
    """Whether a message among the plan's hits is gone (`shown`: read_by's texts of what the
    plan shows, read after it was made)."""
    ids = {h["message_id"] for h in plan.hits} | {h["id"] for h in plan.hits if h["type"] == "message"}
    return bool(ids - shown.keys() - recent.keys())


def _save_snapshot(owner, conversation: Conversation, user_message: Message, reply: Reply, plan):
    """The plan as the turn's snapshot, and the reply's draft (saved as it streams), both in one
    transaction (run by `durable`, which tries it again on a dropped connection)."""
    # A temporary chat keeps no record of what its turns were shown: nothing of it is kept.
    snapshot = None
    if not conversation.temporary:
        snapshot = index_builder.snapshot_row(plan, owner, conversation, user_message)
    mode = "llm" if summaries.is_configured() else "offline_recall"
    draft = drafts.draft_row(owner, conversation, reply.id, user_message, snapshot, mode)
    rows = [row for row in (snapshot, draft) if row is not None]
    writes = [insert_statement(r) for r in rows]
    # The check of what the turn read and both writes: one round trip, Postgres' one transaction;
    # what was forgotten since the plan showed it is scrubbed from them (the snapshot keeps none
    # of its words).
    forgetting.write_checked(owner, reply.seen, writes)
    for row in rows:
        inserted(row)
    drafts.begun(draft)
    return snapshot


async def _stream_round(prompt: budget.Prompt, tools, reply: Reply, emit: Emit, stop: asyncio.Event):
    """One model response to the prompt as it stands, streamed to the browser. Returns its
    RoundEnd, or None when the person stopped it or the provider failed (reply.status says
    which). A prompt refused as too long is sent once more with its zones halved; a second
    refusal fails the turn, keeping what arrived before it."""
    text_before = len(reply.text)
    while True:
        try:
            return await _stream_once(prompt.messages(tools), tools, prompt.max_tokens, reply, emit, stop)
        except llm.ContextTooLong as exc:
            if len(reply.text) == text_before and prompt.shrink():
                reply.retried = True
                logger.warning("prompt over the model's context window; retrying with half the zones")
                continue
            reply.status = "failed"
            reply.error = (
                f"{exc} This turn's prompt did not fit the model's context window "
                f"({prompt.allocation.window:,} tokens, CHAT_CONTEXT_TOKENS) even when sent again "
                "with half the memory index, recent turns, message and tool results. What arrived "
                "before is kept; set CHAT_CONTEXT_TOKENS to the window the model really has."
            )
            return None


async def _stream_once(messages, tools, max_tokens: int, reply: Reply, emit: Emit, stop: asyncio.Event):
    async def consume():
        async for event in llm.stream_chat(messages, tools, model=reply.model, max_tokens=max_tokens):
            if isinstance(event, llm.TextDelta):
                first = not reply.text
                if first:
                    reply.mark("first_token", reply.started)
                reply.text += event.text
                await emit({"type": "chat.token", "message_id": reply.id, "delta": event.text})
                if first:
                    if reply.after_first_token is not None:
                        reply.after_first_token()
                    # Its text is saved with every other streaming reply's, once a second.
                    drafts.saver().track(reply)
            else:
                reply.add_usage(event.usage)
                return event
        return None

    streaming = asyncio.ensure_future(consume())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({streaming, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not streaming.done():
        # Stop: cancel the stream (closing the HTTP response) and keep what arrived.
        streaming.cancel()
        await asyncio.gather(streaming, return_exceptions=True)
        reply.status = "stopped"
        return None
    try:
        return streaming.result()
    except llm.ContextTooLong:
        raise
    except llm.LLMError as exc:
        reply.status = "failed"
        reply.error = str(exc)
        return None


def _execute_tool(
    owner, conversation: Conversation, call: llm.RequestedToolCall, user_message_id: str | None = None,
    seen: dict[str, list[str]] | None = None, asked_at=None,
) -> ToolResult:
    # The arguments go as the model wrote them: execute_tool reads them, and broken JSON comes
    # back as an error the model is shown (as is a call that took longer than QUERY_TIMEOUT_MS).
    # The turn's searches are asked at the message's time.
    with statement_limit():
        outcome = execute_tool(
            owner, call.name, call.arguments_text, conversation=conversation,
            exclude_message_ids=[user_message_id] if user_message_id else (), as_of=asked_at,
        )
    outcome.call_id, outcome.name = call.id, call.name or "(no name)"
    if seen is not None and outcome.ok:
        seen.update(forgetting.read_by(owner, outcome.result))
    return outcome


def _refusal(index: int, reply: Reply) -> str:
    """Why the call at `index` of this round is not run (empty: it is run)."""
    if index >= settings.MAX_TOOL_CALLS_PER_ROUND:
        return f"not run: at most {settings.MAX_TOOL_CALLS_PER_ROUND} tool calls per round"
    if len(reply.tool_outcomes) >= settings.MAX_TOOL_CALLS_PER_TURN:
        return f"not run: at most {settings.MAX_TOOL_CALLS_PER_TURN} tool calls per turn"
    if reply.tool_result_chars >= settings.MAX_TOOL_RESULT_CHARS_PER_TURN:
        return (
            f"not run: this turn's tool results already came to "
            f"{settings.MAX_TOOL_RESULT_CHARS_PER_TURN:,} characters (its tool-result budget is "
            "spent); answer with what you have"
        )
    return ""


def _skipped_tool(call: llm.RequestedToolCall, error: str) -> ToolResult:
    """A call refused by a cap (see `_refusal`): not run, and the model is told why."""
    return ToolResult(
        ok=False, error=error, summary=error,
        name=call.name or "(no name)", arguments_text=call.arguments_text, call_id=call.id,
    )


async def _offline_recall(
    owner, user_message: Message, reply: Reply, emit: Emit, stop: asyncio.Event
) -> None:
    """No model configured: answer with what memory search finds, plainly labelled (with memory
    off, or in a temporary chat, there is nothing to search: it says so)."""
    reply.mode = "offline_recall"
    if reply.memory != "on":
        await _say(reply, emit, stop, MEMORY_OFF_OFFLINE[reply.memory])
        return
    started_at = timezone.now()
    t0 = time.perf_counter()
    too_slow = False
    try:
        hits = await db(durable(_recall_hits))(owner, user_message, reply.seen)
    except OperationalError as exc:
        if not cancelled(exc):
            raise
        hits, too_slow = [], True
    reply.tool_outcomes.append(
        ToolResult(
            ok=True,
            result=[h.as_result() for h in hits],
            summary=f"{len(hits)} matching message{'s' if len(hits) != 1 else ''}",
            duration_ms=int((time.perf_counter() - t0) * 1000),
            name="search_and_retrieve",
            arguments_text=json.dumps({"query": user_message.content[:500]}),
            call_id="offline",
            started_at=started_at,
        )
    )
    lines = [
        "**Offline recall** · no language model is configured, so this answer is what "
        "memory search found for your message.",
        "",
    ]
    if too_slow:
        lines.append(f"Searching memory took too long (more than {seconds()}) and was stopped; "
                     "ask again in a moment.")
    elif not hits:
        lines.append("Nothing in memory matches it yet.")
    for hit in hits:
        snippet = " ".join(hit.snippet.split())
        # The days its words name ("last Saturday"), so the reader need not count back.
        days = "".join(
            f" · {d['text']}: {d.get('date') or d['from'] + ' to ' + d['until']}"
            for d in hit.as_result().get("dates", [])
        )
        lines.append(f"- {hit.timestamp:%Y-%m-%d %H:%M} · {hit.role} · {hit.message_id}: “{snippet}”{days}")
    await _say(reply, emit, stop, "\n".join(lines))


MEMORY_OFF_OFFLINE = {
    "off": (
        "**Offline recall** · no language model is configured, and memory is off (Settings › "
        "Use memory in replies), so there is nothing to answer from. Switch memory on, or "
        "configure a model."
    ),
    "temporary": (
        "**Offline recall** · no language model is configured, and a temporary chat does not "
        "read memory, so there is nothing to answer from. Configure a model to chat here."
    ),
}


async def _say(reply: Reply, emit: Emit, stop: asyncio.Event, text: str) -> None:
    """Stream `text` as the reply, word by word, as a model would."""
    for piece in text.split(" "):
        if stop.is_set():
            reply.status = "stopped"
            return
        delta = piece if not reply.text else " " + piece
        reply.text += delta
        await emit({"type": "chat.token", "message_id": reply.id, "delta": delta})


def _recall_hits(owner, user_message: Message, seen: dict[str, list[str]]):
    from memory.finding.search import reading_for, search

    with statement_limit(), reading_for(user_message.conversation_id):
        results = search(
            owner, user_message.content, limit=12, exclude_message_ids=[user_message.pk],
            as_of=user_message.timestamp,
        )
    ids = {h.message_id for h in results.hits}
    earlier_recalls = set(
        Message.objects.owned_by(owner)
        .filter(pk__in=ids, metadata__mode="offline_recall")
        .values_list("pk", flat=True)
    )
    hits = [
        h for h in results.hits if h.message_id != user_message.pk and h.message_id not in earlier_recalls
    ][:8]
    seen.update(forgetting.read_by(owner, [h.message_id for h in hits]))
    return hits


def _store_reply(owner, conversation: Conversation, user_message: Message, reply: Reply, snapshot) -> Message:
    # A message this turn read may have been forgotten while it ran: what it writes keeps none
    # of its words (nor does what it wrote before, its snapshot).
    gone = forgetting.gone_since_read(owner, reply.seen)
    if gone:
        reply.text = gone.scrub_text(reply.text)
        for outcome in reply.tool_outcomes:
            outcome.result = gone.scrub_value(outcome.result)
            outcome.arguments_text = gone.scrub_json_text(outcome.arguments_text)
            outcome.summary, outcome.error = gone.scrub_text(outcome.summary), gone.scrub_text(outcome.error)
    assistant = store_reply(owner, conversation, user_message, reply, snapshot)
    # "Remember that…": saved now, so the reply shows it (the rest of the facts are upkeep's).
    # A failure here costs the note under the reply, never the reply.
    try:
        with transaction.atomic():
            facts.remember_now(owner, user_message)
    except Exception:
        logger.exception("could not save what message %s asked to remember", user_message.pk)
    drafts.finish(reply.id)
    if gone:
        forgetting.scrub(owner, gone)
    if conversation.temporary:
        return assistant  # nothing of a temporary chat is embedded, indexed or titled
    # Queued in the same trip to the database, once the reply is committed (a retried attempt
    # queues nothing; queue_upkeep never fails its caller).
    ids = [user_message.pk, assistant.pk]
    transaction.on_commit(lambda: tasks.queue_upkeep(owner.pk, ids))
    if reply.mode == "llm" and reply.status == "complete" and user_message.parent_id is None:
        # The first exchange: the model names the conversation, in the background, unless the
        # person has named it meanwhile (memory.organizing.titles).
        transaction.on_commit(lambda: tasks.queue_title(owner.pk, conversation.pk))
    return assistant
