"""The storage API: store, chunk, embed, read and edit messages and tool calls.

Deleting, restoring and forgetting, which reach what was made from a message (topics,
entities, summaries, copies of its words), are memory.lifecycle's.

Every function takes the owner and only ever touches that owner's rows; an id of someone
else's row is reported exactly like an unknown id.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from memory import signals
from memory.dates import mentioned_periods
from memory.embedders import get_embedder, text_hash
from memory.errors import ChunkEditError, DeletedMessageError, InvalidContent, NotFound
from memory.models import (
    NOT_REMEMBERED,
    Conversation,
    Message,
    Passage,
    Role,
    SemanticCacheEntry,
    ToolCall,
    is_system_text,
    new_ulid,
)
from memory.storage import versions
from memory.storage.inserts import insert_statement, inserted
from memory.tokens import count_tokens, token_windows

logger = logging.getLogger(__name__)

NUL_REPLACEMENT = "\u2400"  # ␀, shown where the text held a NUL byte Postgres cannot store
SURROGATE_REPLACEMENT = "\ufffd"  # �, where it held half of a UTF-16 surrogate pair
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


# --- validation --------------------------------------------------------------------------------


def clean_content(content: object, *, allow_empty: bool = False) -> tuple[str, dict[str, Any]]:
    """Return the text to store and notes for its metadata; raise InvalidContent if unusable."""
    if not isinstance(content, str):
        raise InvalidContent(f"message content must be text, got {type(content).__name__}")
    notes: dict[str, Any] = {}
    if "\x00" in content:
        notes["nul_bytes_replaced"] = content.count("\x00")
        content = content.replace("\x00", NUL_REPLACEMENT)
    if not content.isascii() and _LONE_SURROGATE.search(content):
        # Half of a UTF-16 pair (JSON allows "\ud800" alone) has no UTF-8 form, so Postgres
        # cannot take it: the character is replaced and the message kept, as a NUL is.
        content, replaced = _LONE_SURROGATE.subn(SURROGATE_REPLACEMENT, content)
        notes["surrogates_replaced"] = replaced
    if not allow_empty and not content.strip():
        raise InvalidContent("message is empty")
    if len(content) > settings.MAX_MESSAGE_CHARS:
        raise InvalidContent(
            f"message is {len(content):,} characters; the limit is {settings.MAX_MESSAGE_CHARS:,} "
            "(MAX_MESSAGE_CHARS)"
        )
    return content, notes


def clean_role(role: object) -> str:
    if role not in Role.values:
        raise InvalidContent(f"role must be one of {', '.join(Role.values)}, got {role!r}")
    return str(role)


def make_snippet(text: str, length: int | None = None) -> str:
    length = length or settings.INDEX_SNIPPET_LENGTH
    flat = " ".join(text[: length * 4].split())
    if len(flat) <= length:
        return flat
    return flat[: length - 1].rstrip() + "…"


# The end of the turn a message replies to, searched and embedded with the message's first
# passage: a short reply is found by the subject of what it answers. Measured on real long
# conversations (eval_recall): keyword recall@10 rose from ~61% to ~72% with it.
CONTEXT_PARENT_CHARS = 300
# The speaker an import recorded ("Melanie:"), searched with each of the message's passages.
CONTEXT_SPEAKER = True


def passage_context(message: Message, parent_text: str | None, *, first: bool) -> str:
    """The context of a message's passage (Passage.context): for its first passage the end of
    the live message it replies to, and for every passage the speaker an import recorded."""
    parts = []
    if first and parent_text and CONTEXT_PARENT_CHARS > 0:
        parts.append(parent_text[-CONTEXT_PARENT_CHARS:].strip())
    speaker = (message.metadata or {}).get("speaker") if CONTEXT_SPEAKER else None
    if isinstance(speaker, str) and speaker.strip():
        parts.append(f"{speaker.strip()[:100]}:")
    return "\n".join(p for p in parts if p)


def chunk_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the chunks of `text`, or [] when it needs none."""
    if count_tokens(text) <= settings.INDEX_CHUNK_THRESHOLD:
        return []
    return token_windows(text, settings.INDEX_CHUNK_THRESHOLD, settings.INDEX_CHUNK_OVERLAP)


# --- positions ---------------------------------------------------------------------------------


def take_positions(conversation_id: str, count: int) -> int:
    """Reserve `count` consecutive positions in a conversation; return the first.

    One UPDATE ... RETURNING: concurrent writers queue on the row lock, so positions stay
    unique and ordered however many turns are written at the same moment.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_conversation SET next_position = next_position + %s, updated_at = now() "
            "WHERE id = %s RETURNING next_position - %s",
            [count, conversation_id, count],
        )
        row = cursor.fetchone()
    if row is None:
        raise NotFound("conversation", conversation_id)
    return int(row[0])


# --- storing -----------------------------------------------------------------------------------


@dataclass
class NewMessage:
    role: str
    content: str
    timestamp: dt.datetime | None = None
    parent_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    external_id: str | None = None
    id: str = field(default_factory=new_ulid)
    allow_empty: bool = False


def get_conversation(owner, conversation_id: str) -> Conversation:
    try:
        return Conversation.objects.owned_by(owner).get(pk=str(conversation_id))
    except (Conversation.DoesNotExist, ValueError):
        raise NotFound("conversation", conversation_id) from None


def store_message(
    owner,
    conversation: Conversation,
    role: str,
    content: str,
    *,
    parent_id: str | None = None,
    timestamp: dt.datetime | None = None,
    metadata: dict[str, Any] | None = None,
    external_id: str | None = None,
    allow_empty: bool = False,
    embed: bool | str | None = None,
    savepoint: bool = True,
) -> Message:
    """Store one message (chunked above the threshold) and its passages; return it.

    embed=None embeds inline up to EMBED_INLINE_MAX_PASSAGES passages and leaves a longer text
    to background work; embed=False always leaves it to background work (keyword search finds
    the text at once either way); embed=True always embeds inline; embed="upkeep" queues no
    embedding work because the caller's topic upkeep (memory.tasks.run_upkeep) embeds it (any
    owner's later embedding task catches it up too).
    """
    [message] = store_messages(
        owner,
        conversation,
        [NewMessage(role=role, content=content, parent_id=parent_id, timestamp=timestamp,
                    metadata=metadata or {}, external_id=external_id, allow_empty=allow_empty)],
        embed=embed,
        savepoint=savepoint,
    )
    return message


def store_messages(
    owner,
    conversation: Conversation,
    items: Sequence[NewMessage],
    *,
    embed: bool | str | None = True,
    savepoint: bool = True,
) -> list[Message]:
    """Store several messages of one conversation in order, in one transaction.

    savepoint=False: inside the caller's transaction without a savepoint of its own (two round
    trips fewer), for a caller that rolls back the whole transaction on any error (a chat turn)."""
    if conversation.owner_id != owner.pk:
        raise NotFound("conversation", conversation.pk)
    prepared = []
    for item in items:
        content, notes = clean_content(item.content, allow_empty=item.allow_empty)
        prepared.append((item, clean_role(item.role), content, notes))
    parent_ids = {i.parent_id for i in items if i.parent_id} - {i.id for i in items}
    # The parents must be the owner's (deleted ones too); the live ones' text gives the
    # passages their context. One query for both.
    parent_texts: dict[str, str] = {}
    if parent_ids:
        rows = (
            Message.objects.owned_by(owner).filter(pk__in=parent_ids, is_chunk=False)
            .values_list("pk", "deleted", "content", "metadata")
        )
        found = set()
        for pk, deleted, text, metadata in rows:
            found.add(pk)
            if not deleted and not is_system_text(metadata):
                parent_texts[pk] = text
        missing = parent_ids - found
        if missing:
            raise NotFound("message", sorted(missing)[0])
    parent_texts.update({i.id: c for i, _, c, _ in prepared if not is_system_text(i.metadata)})

    now = timezone.now()
    # A conversation memory does not keep marks every message of it (memory.models.NOT_REMEMBERED).
    private = {} if getattr(conversation, "remembered", True) else {NOT_REMEMBERED: True}
    with transaction.atomic(savepoint=savepoint):
        first = take_positions(conversation.pk, len(prepared))
        messages: list[Message] = []
        chunks: list[Message] = []
        for offset, (item, role, content, notes) in enumerate(prepared):
            message = Message(
                id=item.id,
                owner_id=owner.pk,
                conversation_id=conversation.pk,
                role=role,
                content=content,
                snippet=make_snippet(content),
                timestamp=item.timestamp or now,
                parent_id=item.parent_id,
                token_count=count_tokens(content),
                metadata={**item.metadata, **notes, **private},
                external_id=item.external_id,
                position=first + offset,
            )
            messages.append(message)
            chunks.extend(_chunk_rows(message))
        chunks_by_parent: dict[str, list[Message]] = {}
        for chunk in chunks:
            chunks_by_parent.setdefault(chunk.chunk_parent_id, []).append(chunk)
        passages = []
        for message in messages:
            units = chunks_by_parent.get(message.pk) or [message]
            parent_text = parent_texts.get(message.parent_id) if message.parent_id else None
            for unit in units:
                passages.extend(_message_passages(message, unit, parent_text))
        _prepare_passages(passages, embed=embed)
        # The rows and the version's bump in one round trip (the ORM took one for each).
        writes = [
            insert_statement(batch)
            for rows, size in ((messages, 500), (chunks, 200), (passages, 500))
            for batch in _batches(rows, size)
        ]
        if len(writes) > WRITES_TOGETHER:
            # A large store (an import): each batch its own message, as bulk_create sent them,
            # so no message holds every row at once.
            with connection.cursor() as cursor:
                for sql, params in writes:
                    cursor.execute(sql, params)
            writes = []
        version = versions.bump(owner.pk, after=writes)
        inserted(messages + chunks)
    for message in messages:
        message.memory_version = version  # what a cached reply is checked against
    return messages


# At most this many INSERTs (batches of rows) go in one message with the version's bump: a
# message, its chunks and its passages (a chat turn's), not an import's thousands of rows.
WRITES_TOGETHER = 3


def _batches(rows: list, size: int) -> list[list]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def _live_texts(owner, message_ids) -> dict[str, str]:
    """The content of those of `message_ids` that are live (not deleted) messages of owner,
    written by a person or a model (not Recollect's own system text)."""
    if not message_ids:
        return {}
    rows = (
        Message.objects.visible_to(owner).filter(pk__in=list(message_ids), is_chunk=False)
        .values_list("pk", "content", "metadata")
    )
    return {pk: content for pk, content, metadata in rows if not is_system_text(metadata)}


def _chunk_rows(message: Message) -> list[Message]:
    spans = chunk_spans(message.content)
    rows = []
    for index, (start, end) in enumerate(spans):
        text = message.content[start:end]
        rows.append(
            Message(
                owner_id=message.owner_id,
                conversation_id=message.conversation_id,
                role=message.role,
                content=text,
                snippet=make_snippet(text) if index == 0 else "",
                timestamp=message.timestamp,
                parent_id=message.parent_id,
                token_count=count_tokens(text),
                metadata={"char_start": start, "char_end": end},
                is_chunk=True,
                chunk_index=index,
                chunk_parent_id=message.pk,
                position=message.position,
                deleted=message.deleted,
                deleted_at=message.deleted_at,
            )
        )
    return rows


def _split_passages(text: str, logical: Message, **fields: Any) -> list[Passage]:
    """One unsaved Passage of the logical message `logical`, with `fields`, per piece the
    embedder splits `text` into."""
    return [
        Passage(
            **fields,
            conversation_id=logical.conversation_id,
            logical_message_id=logical.pk,
            role=logical.role,
            deleted=logical.deleted,
            index=i,
            start_char=start,
            end_char=end,
            text=text[start:end],
        )
        for i, (start, end) in enumerate(get_embedder().passages(text))
    ]


def _message_passages(logical: Message, unit: Message, parent_text: str | None = None) -> list[Passage]:
    if is_system_text(logical.metadata):
        return []
    first_unit = unit is logical or not unit.is_chunk or unit.chunk_index == 0
    passages = _split_passages(
        unit.content,
        logical,
        owner_id=logical.owner_id,
        kind=Passage.Kind.MESSAGE,
        message_id=unit.pk,
        timestamp=logical.timestamp,
    )
    said_at = timezone.localtime(logical.timestamp)
    for i, passage in enumerate(passages):
        passage.context = passage_context(logical, parent_text, first=first_unit and i == 0)
        passage.periods = mentioned_periods(passage.text, said_at)
    return passages


def _tool_call_passages(call: ToolCall, message: Message) -> list[Passage]:
    if is_system_text(message.metadata):
        return []  # offline recall's own search: its results quote memory, they are not memory
    return _split_passages(
        call.embedding_text(),
        message,
        owner_id=call.owner_id,
        kind=Passage.Kind.TOOL_CALL,
        tool_call_id=call.pk,
        timestamp=call.timestamp,
    )


def _save_passages(passages: list[Passage], *, embed: bool | str | None) -> None:
    _prepare_passages(passages, embed=embed)
    Passage.objects.bulk_create(passages, batch_size=500)


def _prepare_passages(passages: list[Passage], *, embed: bool | str | None) -> None:
    """What a passage gets before it is written: its text's hash, and its vector when embedded
    inline (else the embedding work is queued once the transaction commits)."""
    for p in passages:
        p.text_hash = text_hash(p.text)
    if embed is None:
        embed = len(passages) <= settings.EMBED_INLINE_MAX_PASSAGES
    if embed is False and passages:
        owner_id = passages[0].owner_id
        transaction.on_commit(lambda: queue_embedding(owner_id))
    if embed is True and passages:
        embedder = get_embedder()
        vectors = embedder.embed([p.embedding_input for p in passages])
        for p, vec in zip(passages, vectors, strict=True):
            p.embedding = vec
            p.embedding_model = embedder.name


def store_tool_call(
    owner,
    message: Message,
    tool_name: str,
    arguments: Any,
    result: Any,
    *,
    timestamp: dt.datetime | None = None,
    is_error: bool = False,
    duration_ms: int | None = None,
    embed: bool | None = None,
) -> ToolCall:
    """Store a tool call of `message` (CALLED_BY); a large result is chunked like a message."""
    if message.owner_id != owner.pk:
        raise NotFound("message", message.pk)
    if message.is_chunk:
        raise InvalidContent("tool calls belong to whole messages, not chunks")
    args_text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    result_text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    args_text = args_text.replace("\x00", NUL_REPLACEMENT)
    result_text = result_text.replace("\x00", NUL_REPLACEMENT)
    now = timestamp or timezone.now()
    with transaction.atomic():
        call = ToolCall.objects.create(
            owner_id=owner.pk,
            message=message,
            tool_name=str(tool_name)[:100],
            arguments=args_text,
            result=result_text,
            timestamp=now,
            token_count=count_tokens(result_text),
            is_error=is_error,
            duration_ms=duration_ms,
        )
        units: list[ToolCall] = [call]
        chunks = _tool_call_chunks(call)
        if chunks:
            units = ToolCall.objects.bulk_create(chunks)
        passages = []
        for unit in units:
            passages.extend(_tool_call_passages(unit, message))
        _save_passages(passages, embed=embed)
        versions.bump(owner.pk)
    return call


def _tool_call_chunks(call: ToolCall) -> list[ToolCall]:
    return [
        ToolCall(
            owner_id=call.owner_id,
            message_id=call.message_id,
            tool_name=call.tool_name,
            arguments=call.arguments,
            result=call.result[s:e],
            timestamp=call.timestamp,
            token_count=count_tokens(call.result[s:e]),
            is_error=call.is_error,
            is_chunk=True,
            chunk_index=i,
            chunk_parent_id=call.pk,
        )
        for i, (s, e) in enumerate(chunk_spans(call.result))
    ]


def derive_rows(
    message: Message, calls: Sequence[ToolCall] = (), parent_text: str | None = None
) -> tuple[list[Message], list[ToolCall], list[Passage]]:
    """The chunks and passages of a logical message and of its tool calls, built but not saved
    (passages without vectors): what store_messages and store_tool_call write, for callers
    that write many rows in bulk, such as an import. parent_text: the content of the live
    message it replies to (None when deleted or none)."""
    chunks = _chunk_rows(message)
    passages: list[Passage] = []
    for unit in chunks or [message]:
        passages.extend(_message_passages(message, unit, parent_text))
    call_chunks: list[ToolCall] = []
    for call in calls:
        parts = _tool_call_chunks(call)
        call_chunks.extend(parts)
        for unit in parts or [call]:
            passages.extend(_tool_call_passages(unit, message))
    for p in passages:
        p.text_hash = text_hash(p.text)
    return chunks, call_chunks, passages


def queue_upkeep_on_commit(owner_id: int, message_ids: Sequence[str]) -> None:
    """Once this transaction commits, topic upkeep re-derives what quoted these messages (labels,
    keywords, summaries, samples, entity mentions). Every edit, delete, restore and forget
    calls this, whichever view, socket frame or tool made it."""
    ids = [str(i) for i in message_ids if i]
    if ids:
        transaction.on_commit(lambda: signals.messages_changed.send(None, owner_id=owner_id, message_ids=ids))


def queue_embedding(owner_id: int) -> None:
    """Ask background work to embed what was stored without vectors; never fails the caller."""
    try:
        signals.passages_unembedded.send(None, owner_id=owner_id)
    except Exception:  # noqa: BLE001 - the passages stay findable by keyword; reembed catches up
        logger.exception("could not queue embedding work")


def embed_pending(owner=None, *, message_ids: Sequence[str] | None = None, batch: int = 256,
                  progress=None, deadline: float | None = None) -> int:
    """Give a vector to every passage that has none (or one of another model); with message_ids,
    only those logical messages' passages. Returns how many were embedded. With `deadline`
    (time.monotonic()), it stops after the batch that passes it (at least one batch is done, so
    a caller that goes on later always gets further; 0 means nothing is left).

    Two index-backed queries (no vector yet; another model's vector), so a turn's background
    work finds its few passages among a million without scanning them all. Outside a caller's
    transaction each batch is its own short write, so a long re-embedding locks few rows for
    little time and search by meaning finds what it wrote at once."""
    embedder = get_embedder()
    base = Passage.objects.all()
    if owner is not None:
        base = base.owned_by(owner)
    if message_ids is not None:
        base = base.filter(logical_message_id__in=list(message_ids))
    pending = [
        base.filter(embedding__isnull=True),
        base.filter(embedding__isnull=False).filter(
            Q(embedding_model__lt=embedder.name) | Q(embedding_model__gt=embedder.name)
        ),
    ]
    done = 0
    for qs in pending:
        while True:
            # Each batch is written before the next is read, so no order or offset is needed.
            rows = list(qs.only("id", "text", "context")[:batch])
            if not rows:
                break
            vectors = embedder.embed([r.embedding_input for r in rows])
            for r, v in zip(rows, vectors, strict=True):
                r.embedding = v
                r.embedding_model = embedder.name
            Passage.objects.bulk_update(rows, ["embedding", "embedding_model"])
            done += len(rows)
            if progress:
                progress(len(rows))
            if deadline is not None and time.monotonic() >= deadline:
                return done
    return done


# --- reading -----------------------------------------------------------------------------------


def get_message(owner, message_id: str, *, include_deleted: bool = False) -> Message:
    qs = Message.objects.owned_by(owner)
    if not include_deleted:
        qs = qs.visible()
    try:
        return qs.get(pk=str(message_id))
    except (Message.DoesNotExist, ValueError):
        raise NotFound("message", message_id) from None


def get_message_with_chunks(owner, message_id: str) -> tuple[Message, list[Message]]:
    """The logical message (a chunk id leads to its parent) and its chunks in order."""
    message = get_message(owner, message_id)
    if message.is_chunk:
        message = get_message(owner, message.chunk_parent_id)
    chunks = list(message.chunks.order_by("chunk_index"))
    return message, chunks


def get_tool_call(owner, call_id: str) -> ToolCall:
    try:
        return ToolCall.objects.owned_by(owner).visible().select_related("message").get(pk=str(call_id))
    except (ToolCall.DoesNotExist, ValueError):
        raise NotFound("tool call", call_id) from None


# --- changing ----------------------------------------------------------------------------------


def lock_whole_message(owner, message_id: str) -> Message:
    """The owner's message `message_id`, locked until the transaction ends, for a change that
    only a whole message takes (a chunk is changed through its message)."""
    try:
        message = Message.objects.owned_by(owner).select_for_update().get(pk=str(message_id))
    except (Message.DoesNotExist, ValueError):
        raise NotFound("message", message_id) from None
    if message.is_chunk:
        raise ChunkEditError(message.pk, message.chunk_parent_id)
    return message


def update_message(owner, message_id: str, new_content: str) -> Message:
    """Edit a message in place: same id, history kept, re-chunked and re-embedded."""
    with transaction.atomic():
        message = lock_whole_message(owner, message_id)
        if message.deleted:
            raise DeletedMessageError(f"message {message.pk} is deleted; restore it before editing")
        content, notes = clean_content(new_content, allow_empty=False)
        if content == message.content:
            return message
        message.edit_history, dropped = bounded_history(
            [
                *message.edit_history,
                {
                    "timestamp": timezone.now().isoformat(),
                    "previous_content": message.content,
                    "previous_token_count": message.token_count,
                },
            ]
        )
        if dropped:
            notes["edit_history_dropped"] = int(message.metadata.get("edit_history_dropped", 0)) + dropped
        message.content = content
        message.snippet = make_snippet(content)
        message.token_count = count_tokens(content)
        message.edited = True
        message.metadata = {**message.metadata, **notes}
        message.save(
            update_fields=["content", "snippet", "token_count", "edited", "edit_history", "metadata"]
        )
        memory_changed(owner, message)
        # Old chunks (and with them their passages) go; the text is re-chunked either way, so
        # crossing the threshold in either direction is handled by the same path.
        message.chunks.all().delete()
        Passage.objects.filter(message_id=message.pk).delete()
        chunks = _chunk_rows(message)
        if chunks:
            Message.objects.bulk_create(chunks)
        parent_text = _live_texts(owner, [message.parent_id]).get(message.parent_id)
        passages = []
        for unit in chunks or [message]:
            passages.extend(_message_passages(message, unit, parent_text))
        _save_passages(passages, embed=None)
        refresh_reply_context(owner, message.pk)
        queue_upkeep_on_commit(owner.pk, [message.pk])
    return message


# A message keeps its newest versions while they fit both bounds; the oldest go first (counted
# in metadata["edit_history_dropped"]). Every edit stores the whole previous text, so an
# unbounded history let one message grow without end.
EDIT_HISTORY_MAX_VERSIONS = 50
EDIT_HISTORY_MAX_CHARS = 2_000_000


def bounded_history(history: list[dict]) -> tuple[list[dict], int]:
    """The newest versions of `history` that fit the bounds, and how many older ones went.
    The newest version is always kept, however long."""
    kept: list[dict] = []
    chars = 0
    for entry in reversed(history):
        size = len(entry.get("previous_content") or "")
        if kept and (len(kept) >= EDIT_HISTORY_MAX_VERSIONS or chars + size > EDIT_HISTORY_MAX_CHARS):
            break
        kept.append(entry)
        chars += size
    kept.reverse()
    return kept, len(history) - len(kept)


def memory_changed(owner, message: Message) -> None:
    """An edit, delete, restore or forget of `message`, in its transaction: the memory version
    moves on (no cache answers from before it), cached results go, and the change is announced
    (signals.memory_changed: the conversation's rolling summary drops the blocks from the one
    covering it onwards)."""
    versions.bump(owner.pk)
    # Cached results and replies may quote it: none is reused past this version, and none is
    # kept either (a forgotten message's words must not stay in any row).
    SemanticCacheEntry.objects.filter(owner_id=owner.pk).delete()
    signals.memory_changed.send(
        Message, owner_id=owner.pk, conversation_id=message.conversation_id, position=message.position
    )


def rebuild_tool_call_passages(owner, calls: Sequence[ToolCall]) -> None:
    """The passages of tool calls whose text changed (a forget scrubbed them), made again."""
    for call in ToolCall.objects.filter(pk__in=[c.pk for c in calls]).select_related("message"):
        Passage.objects.filter(tool_call_id=call.pk).delete()
        if not call.message.deleted:
            _save_passages(_tool_call_passages(call, call.message), embed=False)


def refresh_reply_context(owner, message_id: str | None, *, reply_ids: Sequence[str] = ()) -> int:
    """Re-derive the context of the replies to `message_id` (or of `reply_ids`) after that
    message changed: edited, deleted, restored or forgotten. Their changed passages get new
    vectors (inline when few, else from background work). Returns passages changed."""
    replies = Message.objects.owned_by(owner).filter(is_chunk=False)
    replies = replies.filter(pk__in=list(reply_ids)) if message_id is None else replies.filter(
        parent_id=message_id
    )
    replies = list(replies.only("id", "parent_id", "metadata"))
    if not replies:
        return 0
    parents = _live_texts(owner, {r.parent_id for r in replies if r.parent_id})
    changed = []
    for reply in replies:
        passages = Passage.objects.filter(logical_message_id=reply.pk, kind=Passage.Kind.MESSAGE)
        for p in passages.select_related("message").only(
            "id", "index", "context", "text", "message__is_chunk", "message__chunk_index"
        ):
            first = p.index == 0 and (not p.message.is_chunk or p.message.chunk_index == 0)
            context = passage_context(reply, parents.get(reply.parent_id), first=first)
            if context != p.context:
                p.context = context
                p.embedding = None
                p.embedding_model = ""
                changed.append(p)
    if not changed:
        return 0
    if len(changed) <= settings.EMBED_INLINE_MAX_PASSAGES:
        embedder = get_embedder()
        for p, vec in zip(changed, embedder.embed([p.embedding_input for p in changed]), strict=True):
            p.embedding = vec
            p.embedding_model = embedder.name
    else:
        transaction.on_commit(lambda: queue_embedding(owner.pk))
    Passage.objects.bulk_update(changed, ["context", "embedding", "embedding_model"])
    return len(changed)


def iter_owner_messages(owner) -> Iterable[Message]:
    return Message.objects.visible_to(owner).logical().order_by("timestamp", "position")
