"""The chat websocket: one connection per open conversation, `ws/chat/<conversation id>/`.

Authentication (the session cookie) is required, the Origin must be an allowed host, and a
conversation of someone else is refused exactly like one that does not exist (close 4404;
4401 when signed out). Every frame and event is a JSON object with a "type".

Client frames:
  send        {content, parent_id?, client_id?}  a message; parent_id absent: after the active
                                                 branch; null: a new root; an id: a branch
  stop        {}                                 stop the reply being written (any tab); with
                                                 none being written: error "idle"
  edit        {message_id, content}              edit in place (history kept, re-embedded)
  delete      {message_id}                       soft delete (undo with restore)
  restore     {message_id}
  forget      {message_id, copies?: [ids],       permanent; copies: messages echoing it, forgotten
               keep?: [keys]}                    too; keep: echoes listed by its dialog that keep
                                                 its rare words ("toolcall:<id>", "topic:<id>"...)
  regenerate  {message_id}                       answer a user message (or a reply's) again
  ping        {}                                 answered with pong
  typing      {text}                             the composer's text while the person types: its
                                                 memory query is embedded ahead (3+ non-space
                                                 characters, CHAT_PREFETCH_TYPING), so the send
                                                 that follows finds the vector cached. Answers
                                                 nothing (`invalid` if text is not a string),
                                                 stores and logs nothing, counts against no
                                                 limit; one embedding in flight per socket, a
                                                 newer text replacing the one waiting for it

Server events (sent to every socket on the conversation):
  message          {message_id, role, parent_id, client_id, html}   user message stored
  reply_started    {message_id, parent_id, client_id, html}   html: the streaming row
  token            {message_id, delta, at}   at: where the delta starts in the reply; a tab that
                   joins mid-reply is first sent {text, parent_id}: all of the reply so far
  tool_started     {message_id, call_id, name, arguments, label, html}   html: its running box
  tool_finished    {message_id, call_id, name, ok, summary, error, duration_ms, html}
  reply_done       {message_id, parent_id, status (complete|stopped|failed), error, usage,
                    strategy, mode (llm|offline_recall), client_id, html}
  message_updated / message_deleted / message_restored  {message_id, html}
  message_forgotten {message_id}
  conversation_updated {title}  an untitled conversation was named after its first message
                   (or that message was edited)
  error            {code, message, frame}  codes: bad_frame, unknown_type, invalid, not_found,
                   busy, idle, rate_limited, server_error. The connection stays open.

Limits, per user and held in the database (so across tabs and server processes): every send,
regenerate, edit, delete, restore and forget counts against CHAT_RATE_LIMIT_PER_MINUTE
(`rate_limited` past it), and at most CHAT_MAX_CONCURRENT_TURNS turns run at once (`busy`
past it; one socket runs one turn at a time).

The tab that started a turn gets its events directly; other tabs get them through the
conversation's Channels group. Tokens go through the group only while another tab is known
(sockets greet each other on connect: `hello` / `here` / `bye`); a tab that becomes known
while a reply streams is first sent the reply's text so far, so it misses nothing. Other
events go through the group whenever another tab is known and, with Redis, always: a tab that
has just opened on another server may not have been heard from yet.
A `token` event carries whatever text arrived since the last one: a socket gets at most one
token frame per CHAT_TOKEN_FRAME_SECONDS (~15 ms), the tokens that arrived meanwhile joined
(chat/frames.py), so a busy server sends fewer, larger frames instead of falling behind; the
other tabs get theirs through the group at most every CHAT_GROUP_TOKEN_FRAME_SECONDS (~100 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db.models import Exists, OuterRef

from chat import drafts, turn
from chat.db import db, durable
from chat.frames import TokenFrames
from chat.models import ReplyDraft, RunningTurn
from chat.processes import PROCESS
from chat.rendering import message_html
from config.limits import LimitReached
from config.models import ActionAllowance
from memory.embedders import get_embedder, query_text
from memory.errors import MemoryStoreError, NotFound
from memory.lifecycle import deleting, forgetting
from memory.models import Conversation, Message
from memory.storage import store

logger = logging.getLogger(__name__)

CLIENT_FRAMES = {"send", "stop", "edit", "delete", "restore", "forget", "regenerate", "ping", "typing"}

# Non-space characters a composer's text needs before it is embedded ahead (`typing`).
TYPED_AHEAD_MIN_CHARS = 3


# The stop signals of the turns this process runs, by conversation: Stop from a tab opened after
# the turn's own tab closed (a reload) reaches them although group events no longer do.
_running_turns: dict[str, set[asyncio.Event]] = {}


def tell_tabs_of_title(sender, owner_id: int, conversation_id: str, title: str, **kwargs) -> None:
    """The model titled a conversation (memory.signals.conversation_titled, from background
    work): its open tabs show the new title. Best effort: a tab opened later reads it anyway."""
    layer = get_channel_layer()
    if layer is None:
        return
    event = {"type": "chat.conversation_updated", "title": title, "origin": "titles"}
    try:
        async_to_sync(layer.group_send)(f"conv.{conversation_id}", event)
    except Exception:
        logger.warning("could not tell the tabs of conversation %s its new title", conversation_id)


class FrameError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _check_id(name: str, value: str) -> None:
    # Postgres cannot compare text holding NUL; no id holds one, nor is longer than a ULID (and
    # a long one is not echoed back).
    if "\x00" in value or len(value) > ID_CHARS:
        raise FrameError("invalid", f"{name} is not a message id")


ID_CHARS = Message._meta.get_field("id").max_length


def _turn_elsewhere(user) -> bool:
    """Whether another server process runs one of the user's turns (which a stop reaches through
    the conversation's group)."""
    return RunningTurn.objects.filter(user=user).exclude(process=PROCESS).exists()


def _get_conversation(user, conversation_id: str) -> Conversation | None:
    """The user's conversation (None for another's or an unknown id), with `has_drafts`: whether
    a reply draft is left in it (one query for both)."""
    return (
        Conversation.objects.owned_by(user)
        .filter(pk=conversation_id)
        .annotate(has_drafts=Exists(ReplyDraft.objects.filter(conversation=OuterRef("pk"))))
        .first()
    )


def _message_in(
    user, conversation: Conversation, message_id: Any, *, include_deleted: bool = True
) -> Message:
    """A message of this conversation owned by the user, or NotFound (also for others' ids)."""
    if not isinstance(message_id, str) or not message_id:
        raise FrameError("invalid", "message_id is required")
    _check_id("message_id", message_id)
    message = store.get_message(user, message_id, include_deleted=include_deleted)
    if message.conversation_id != conversation.pk:
        raise NotFound("message", message_id)
    return message


def _edit(user, conversation, message_id, content) -> tuple[str, str, str | None]:
    """The edited message's id and row, and the conversation's new title when it was named
    after this message."""
    message = _message_in(user, conversation, message_id, include_deleted=True)
    updated = store.update_message(user, message.pk, content)
    title = conversation.retitle_after_edit(updated, message.content)
    return updated.pk, message_html(updated, user), title


def _set_deleted(user, conversation, message_id, deleted: bool) -> tuple[str, str]:
    message = _message_in(user, conversation, message_id)
    change = deleting.delete_message if deleted else deleting.restore_message
    changed = change(user, message.pk)
    return changed.pk, message_html(changed, user)


def _forget(user, conversation, message_id, copies, keep) -> list[str]:
    """Forget the message and the `copies` the dialog ticked (other messages echoing it, in any
    of the user's conversations), keeping its rare words in the echoes it left unticked
    (`keep`); the ids forgotten."""
    message = _message_in(user, conversation, message_id)
    copies = [] if copies is None else copies
    keep = [] if keep is None else keep
    if not isinstance(copies, list) or not all(isinstance(c, str) for c in copies):
        raise FrameError("invalid", "copies must be a list of message ids")
    if not isinstance(keep, list) or not all(isinstance(k, str) and len(k) <= 60 for k in keep):
        raise FrameError("invalid", "keep must be a list of the dialog's echo keys")
    if len(copies) > forgetting.MAX_COPIES_LISTED or len(keep) > 10 * forgetting.MAX_COPIES_LISTED:
        raise FrameError("invalid", f"at most {forgetting.MAX_COPIES_LISTED} copies at once")
    return forgetting.forget_message(user, message.pk, copies=copies, keep=keep)


def _title(conversation_id: str) -> str:
    return Conversation.objects.filter(pk=conversation_id).values_list("title", flat=True).first() or ""


def _recover_drafts(user, conversation) -> list[tuple[str, str, str]]:
    if not conversation.reply_drafts.exists():  # read again: another socket may have stored them
        return []
    return [(m.pk, m.parent_id, message_html(m, user)) for m in drafts.recover_quietly(conversation)]


def _regeneration_target(user, conversation, message_id) -> Message:
    """The user message to answer again: the message itself, or an assistant reply's parent."""
    message = _message_in(user, conversation, message_id, include_deleted=False)
    if message.role == "assistant":
        if not message.parent_id:
            raise FrameError("invalid", "this reply has no message to answer again")
        message = _message_in(user, conversation, message.parent_id, include_deleted=False)
    if message.role != "user":
        raise FrameError("invalid", "only a user message or a reply can be regenerated")
    message.conversation = store.get_conversation(user, conversation.pk)  # its model, as picked now
    return message


async def _keep_renewed(slot: str) -> None:
    """Renew a running turn's slot until cancelled, so it does not lapse while the turn runs."""
    while True:
        await asyncio.sleep(settings.CHAT_TURN_HOLD_SECONDS / 3)
        try:
            await db(RunningTurn.renew)(slot)
        except Exception:
            logger.warning("could not renew turn slot %s", slot)


class ChatConsumer(AsyncWebsocketConsumer):
    async def dispatch(self, message) -> None:
        """Channels' dispatch without its `aclose_old_connections` before every handler (a hop
        to the process's one shared sync thread for every frame and group event): this consumer
        reaches the database only through chat.db's threads, which close stale connections
        around each call themselves."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        self.user = self.scope.get("user")
        self.turn_task: asyncio.Task | None = None
        self.stop_event = asyncio.Event()
        self.reply_id: str | None = None
        self.busy = False  # from a send until its reply is done (upkeep queueing may follow)
        # Typing ahead: the embedding of the composer's text in flight, and the newest text
        # waiting for it to finish (frame_typing).
        self.typing_task: asyncio.Task | None = None
        self.typing_next: str | None = None
        self.token_frames = TokenFrames(self._send_tokens)  # to this socket
        # To the other tabs, through the channel layer: fewer, larger frames (with Redis each
        # is a few round trips out, and one back in for every socket of the conversation).
        self.group_tokens = TokenFrames(self._tell_group, settings.CHAT_GROUP_TOKEN_FRAME_SECONDS)
        if self.user is None or not self.user.is_authenticated:
            await self._refuse(4401)
            return
        conversation_id = self.scope["url_route"]["kwargs"]["conversation_id"]
        # An id holding NUL names nothing (and Postgres cannot compare one).
        self.conversation = (
            None if "\x00" in conversation_id else await db(_get_conversation)(self.user, conversation_id)
        )
        if self.conversation is None:
            # Someone else's conversation looks exactly like one that does not exist.
            await self._refuse(4404)
            return
        self.group = f"conv.{self.conversation.pk}"
        self.peers: set[str] = set()  # other sockets on this conversation (other tabs)
        # Presence is exact within one process; across servers (Redis) a tab that has just
        # opened may not be known yet, so there every event but tokens goes through the group
        # (a tab heard from later is sent the text so far: see chat_hello).
        self.events_to_group = not isinstance(self.channel_layer, InMemoryChannelLayer)
        self.streamed: list[str] = []  # the text of this socket's reply sent so far
        self.streamed_chars = 0  # its length, the `at` of the next token
        self.reply_parent: str | None = None
        # The socket closed while its turn runs on (a reload): every event of the turn goes to
        # the conversation's group, where the reloaded tab listens.
        self.detached = False
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.channel_layer.group_send(self.group, {"type": "chat.hello", "origin": self.channel_name})
        # Replies a stopped server left half-written: stored now, and shown to a tab that was
        # watching them stream (it reconnects after the restart).
        recovered = (
            await db(_recover_drafts)(self.user, self.conversation)
            if getattr(self.conversation, "has_drafts", True)
            else []
        )
        for message_id, parent_id, html in recovered:
            await self._relay(
                {
                    "type": "chat.reply_done", "message_id": message_id, "parent_id": parent_id,
                    "status": "failed", "error": drafts.INTERRUPTED, "usage": {}, "strategy": None,
                    "mode": None, "client_id": None, "html": html,
                },
                force=True,
            )

    async def _refuse(self, code: int) -> None:
        """Accept, then close with `code`: closed before it is accepted, a socket is refused
        with a bare HTTP 403 and the page could not tell "sign in" from "no such chat"."""
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            self.detached = self.busy
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.channel_layer.group_send(self.group, {"type": "chat.bye", "origin": self.channel_name})
        # A running turn carries on: its reply is stored and shows up on the next visit.

    # --- client frames ---------------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        frame_type = None
        try:
            if text_data is None:
                raise FrameError("bad_frame", "frames must be JSON text")
            try:
                frame = json.loads(text_data)
            except json.JSONDecodeError:
                raise FrameError("bad_frame", "frame is not valid JSON") from None
            except RecursionError:
                raise FrameError("bad_frame", "frame is nested too deeply") from None
            if not isinstance(frame, dict):
                raise FrameError("bad_frame", "frame must be a JSON object")
            frame_type = frame.get("type")
            if isinstance(frame_type, (list, dict)):
                frame_type = None
                raise FrameError("invalid", "type must be text")
            if frame_type not in CLIENT_FRAMES:
                raise FrameError("unknown_type", f"unknown frame type {str(frame_type)[:40]!r}")
            await getattr(self, f"frame_{frame_type}")(frame)
        except (FrameError, LimitReached) as exc:
            await self._send_error(exc.code, exc.message, frame_type)
        except NotFound as exc:
            await self._send_error("not_found", str(exc), frame_type)
        except MemoryStoreError as exc:
            await self._send_error("invalid", str(exc), frame_type)
        except Exception:
            logger.exception("chat frame %r failed", frame_type)
            await self._send_error("server_error", "The server could not handle that frame.", frame_type)

    async def frame_ping(self, frame: dict) -> None:
        await self.send(text_data=json.dumps({"type": "pong"}))

    async def frame_typing(self, frame: dict) -> None:
        """Embed the composer's text as the memory query ahead of its send. Never waited for:
        the embedding runs on the embedder's threads, and a socket has one in flight at most
        (a frame arriving meanwhile replaces the text waiting for it: only the newest is
        embedded next, the ones in between never)."""
        text = frame.get("text")
        if not isinstance(text, str):
            raise FrameError("invalid", "text must be a string")
        if not settings.CHAT_PREFETCH_TYPING:
            return
        query = query_text(text)
        if len("".join(query.split())) < TYPED_AHEAD_MIN_CHARS:
            return
        if self.typing_task is not None and not self.typing_task.done():
            self.typing_next = query
            return
        self.typing_next = None
        self.typing_task = asyncio.ensure_future(self._type_ahead(query))

    async def _type_ahead(self, query: str) -> None:
        while query is not None:
            try:
                pending = get_embedder().prefetch_query([query])  # None: cached or in flight
                if pending is not None:
                    await asyncio.wrap_future(pending)
            except Exception:  # noqa: BLE001 - best effort: the turn embeds the query itself
                logger.debug("typing-ahead embedding failed")  # no text: it is a draft
            query, self.typing_next = self.typing_next, None

    async def frame_send(self, frame: dict) -> None:
        content = frame.get("content")
        if not isinstance(content, str) or not content.strip():
            raise FrameError("invalid", "message is empty")
        if len(content) > settings.MAX_MESSAGE_CHARS:
            raise FrameError("invalid", f"message is longer than {settings.MAX_MESSAGE_CHARS:,} characters")
        parent_id = frame.get("parent_id", turn.UNSET)
        if parent_id is not turn.UNSET and parent_id is not None and not isinstance(parent_id, str):
            raise FrameError("invalid", "parent_id must be a message id or null")
        if isinstance(parent_id, str):
            _check_id("parent_id", parent_id)
        await self._start_turn(frame, content=content, parent_id=parent_id)

    async def frame_regenerate(self, frame: dict) -> None:
        target = await db(_regeneration_target)(self.user, self.conversation, frame.get("message_id"))
        await self._start_turn(frame, reply_to=target)

    async def frame_stop(self, frame: dict) -> None:
        if not _running_turns.get(self.conversation.pk) and not await db(_turn_elsewhere)(self.user):
            raise FrameError("idle", "No reply is being written: there is nothing to stop.")
        # Any tab may stop the conversation's running reply.
        await self.channel_layer.group_send(self.group, {"type": "chat.stop", "origin": self.channel_name})
        self.stop_event.set()
        # A turn whose tab was reloaded hears no group event any more: stopped here directly.
        for event in _running_turns.get(self.conversation.pk, ()):
            event.set()

    async def frame_edit(self, frame: dict) -> None:
        content = frame.get("content")
        if not isinstance(content, str):
            raise FrameError("invalid", "content must be text")
        await self._count_action()
        message_id, html, title = await db(_edit)(
            self.user, self.conversation, frame.get("message_id"), content
        )
        await self._broadcast({"type": "chat.message_updated", "message_id": message_id, "html": html})
        if title:
            self.conversation.title = title
            await self._deliver(
                {"type": "chat.conversation_updated", "title": title, "origin": self.channel_name}
            )

    async def frame_delete(self, frame: dict) -> None:
        await self._count_action()
        message_id, html = await db(_set_deleted)(self.user, self.conversation, frame.get("message_id"), True)
        await self._broadcast({"type": "chat.message_deleted", "message_id": message_id, "html": html})

    async def frame_restore(self, frame: dict) -> None:
        await self._count_action()
        message_id, html = await db(_set_deleted)(
            self.user, self.conversation, frame.get("message_id"), False
        )
        await self._broadcast({"type": "chat.message_restored", "message_id": message_id, "html": html})

    async def frame_forget(self, frame: dict) -> None:
        await self._count_action()
        forgotten = await db(_forget)(
            self.user, self.conversation, frame.get("message_id"), frame.get("copies"), frame.get("keep")
        )
        for message_id in forgotten:
            await self._broadcast({"type": "chat.message_forgotten", "message_id": message_id})

    async def _count_action(self) -> None:
        """Count a change to memory against the user's rate limit (raises LimitReached)."""
        await db(durable(ActionAllowance.count_action, atomic=False))(self.user)

    # --- turns -----------------------------------------------------------------------------------

    async def _start_turn(self, frame: dict, **kwargs: Any) -> None:
        if self.busy:
            raise FrameError("busy", "A reply is still being written; stop it or wait for it to finish.")
        # Counted, and one of the user's turn slots taken, in one locked transaction: of two
        # tabs racing for the last slot, one gets it and the other is told "busy".
        held = await db(durable(RunningTurn.start, atomic=False))(self.user)
        client_id = frame.get("client_id") if isinstance(frame.get("client_id"), str) else None
        self.stop_event = asyncio.Event()
        _running_turns.setdefault(self.conversation.pk, set()).add(self.stop_event)
        self.busy = True
        self.turn_task = asyncio.ensure_future(
            self._run_turn(held.pk, client_id=client_id[:100] if client_id else None, **kwargs)
        )

    async def _run_turn(self, slot: str, **kwargs: Any) -> None:
        released = False

        async def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            renewing.cancel()
            try:
                # Shielded: cancelling the turn must not skip giving its slot back.
                await asyncio.shield(db(durable(RunningTurn.release, atomic=False))(slot))
            except Exception:
                logger.warning("could not release turn slot %s; it lapses on its own", slot)

        async def emit(event: dict[str, Any]) -> None:
            # The slot is free before any tab learns the reply is done and sends the next message.
            if event["type"] == "chat.reply_done":
                await release()
            await self._broadcast(event)

        renewing = asyncio.ensure_future(_keep_renewed(slot))
        error: tuple[str, str] | None = None
        try:
            await turn.run_turn(self.user, self.conversation, emit=emit, stop=self.stop_event, **kwargs)
        except NotFound as exc:
            error = ("not_found", str(exc))
        except MemoryStoreError as exc:
            error = ("invalid", str(exc))
        except Exception:
            logger.exception("chat turn crashed")
            error = ("server_error", "The reply could not be produced.")
        finally:
            await release()
            # A later turn of this socket may already be running (it started at reply_done).
            if self.turn_task is None or self.turn_task is asyncio.current_task():
                self.busy = False
            stops = _running_turns.get(self.conversation.pk)
            if stops is not None:
                stops.discard(self.stop_event)
                if not stops:
                    _running_turns.pop(self.conversation.pk, None)
        # Told only now, so a tab that answers the error at once finds its slot free.
        if error is not None:
            await self._send_error(*error, "send")

    async def _broadcast(self, event: dict[str, Any]) -> None:
        """Send an event to this socket at once, and to the conversation's other sockets.

        Tokens are coalesced (chat/frames.py): at most one token frame per
        CHAT_TOKEN_FRAME_SECONDS to this socket, and one per CHAT_GROUP_TOKEN_FRAME_SECONDS to
        the other tabs. Any other event first sends the waiting tokens, so events keep their
        order."""
        event = {**event, "origin": self.channel_name}
        if event["type"] == "chat.token":
            self.token_frames.add(event)
            return
        await self.token_frames.drain()
        await self.group_tokens.drain()
        if event["type"] == "chat.reply_started":
            self.reply_id = event["message_id"]
            self.reply_parent = event.get("parent_id")
            self.streamed = []
            self.streamed_chars = 0
        elif event["type"] == "chat.reply_done":
            self.reply_id = None
            self.busy = False
            self.streamed = []  # the stored reply's row replaces what streamed
            self.streamed_chars = 0
        known_title = event.pop("conversation_title", None)
        await self._deliver(event)
        if event["type"] == "chat.message" and not self.conversation.title:
            # The turn names an untitled conversation after its first message: every tab shows
            # the new title in its header and conversation list.
            title = known_title or await db(_title)(self.conversation.pk)
            if title:
                self.conversation.title = title
                await self._deliver(
                    {"type": "chat.conversation_updated", "title": title, "origin": self.channel_name}
                )

    async def _deliver(self, event: dict[str, Any]) -> None:
        await self._relay(event, force=True)
        # Alone on the conversation (presence is exact with the in-process layer), there is no
        # one else to tell: the event would only come back to this socket, to be dropped.
        if self.peers or self.events_to_group or self.detached:
            await self._tell_group(event)

    async def _send_tokens(self, event: dict[str, Any]) -> None:
        # `at`: where the delta starts in the reply (characters), so a tab that was sent the
        # text so far (chat_hello) skips what it already has.
        event = {**event, "at": self.streamed_chars}
        await self._relay(event, force=True)
        self.streamed.append(event["delta"])
        self.streamed_chars += len(event["delta"])
        # Alone on the conversation (the usual case), the group has no one else to tell; a tab
        # heard from later gets the text so far then (chat_hello).
        if self.peers or self.detached:
            self.group_tokens.add(event)

    async def _tell_group(self, event: dict[str, Any]) -> None:
        if self.detached and event["type"] == "chat.token" and event["message_id"] == self.reply_id:
            # No hello reaches a closed socket: a reloaded tab is sent the whole text each time.
            event = {**event, "text": "".join(self.streamed), "parent_id": self.reply_parent}
        try:
            await self.channel_layer.group_send(self.group, event)
        except Exception:
            # The other tabs miss this event (they catch up on reload); this tab and the
            # stored reply do not depend on the channel layer.
            logger.warning("could not relay %s to the conversation's other tabs", event["type"])

    # --- group events (type "chat.x" → handler chat_x) -------------------------------------------

    async def _relay(self, event: dict[str, Any], *, force: bool = False) -> None:
        if not force and event.get("origin") == self.channel_name:
            return
        payload = {k: v for k, v in event.items() if k != "origin"}
        payload["type"] = event["type"].removeprefix("chat.")
        # The socket may have closed while a turn was still running.
        with contextlib.suppress(Exception):
            await self.send(text_data=json.dumps(payload))

    async def _send_error(self, code: str, message: str, frame_type: str | None) -> None:
        await self._relay(
            {"type": "chat.error", "code": code, "message": message, "frame": frame_type},
            force=True,
        )

    # Presence: each socket learns which other sockets share its conversation.
    async def chat_hello(self, event: dict) -> None:
        origin = event["origin"]
        if origin == self.channel_name:
            return
        if self.reply_id is not None and self.streamed:
            # The new tab (opened or reloaded mid-reply) missed the reply's start: it is sent the
            # text so far, whole, with the reply's place; the tokens that follow say where they
            # start (`at`), so the tab skips what this already gave it.
            snapshot = {
                "type": "chat.token", "message_id": self.reply_id, "parent_id": self.reply_parent,
                "delta": "", "at": 0, "text": "".join(self.streamed), "origin": self.channel_name,
            }
            self.peers.add(origin)
            with contextlib.suppress(Exception):
                await self.channel_layer.send(origin, snapshot)
        self.peers.add(origin)
        await self.channel_layer.send(origin, {"type": "chat.here", "origin": self.channel_name})

    async def chat_here(self, event: dict) -> None:
        self.peers.add(event["origin"])

    async def chat_bye(self, event: dict) -> None:
        self.peers.discard(event["origin"])

    async def chat_stop(self, event: dict) -> None:
        if event.get("origin") != self.channel_name:
            self.stop_event.set()

    chat_message = chat_reply_started = chat_token = chat_tool_started = chat_tool_finished = _relay
    chat_reply_done = chat_message_updated = chat_message_deleted = chat_message_restored = _relay
    chat_message_forgotten = chat_conversation_updated = chat_error = _relay
