"""A user's whole memory back in: a Recollect export (memory.transfer.export writes it),
checked field by field, then imported in one transaction. Other apps' exports (ChatGPT,
Claude) and JSON Lines are read by memory.transfer.importers.

Chunks and passages are not in the file: the import rebuilds them from the text and embeds
with the target's model, whatever the source used.

Ids are kept when they are free in the target (ULIDs are global); an id already taken there
gets a new one derived from it and the importing user, consistently, everywhere it is
referenced; so importing the same file twice adds nothing either way.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory import models
from memory.embedders import get_embedder
from memory.errors import MemoryStoreError
from memory.lifecycle import forgetting, tombstones
from memory.storage import versions
from memory.storage.store import (
    NUL_REPLACEMENT,
    clean_content,
    derive_rows,
    make_snippet,
    queue_embedding,
)
from memory.tokens import count_tokens
from memory.transfer.export import FORMAT, VERSION

EMBED_BATCH = 256

# progress(stage, done, total): stages are "messages" and "embed".
ProgressFn = Callable[[str, int, int], None]


class InvalidExport(MemoryStoreError, ValueError):
    """A file that is not a Recollect export, or one with a bad field (named in the message)."""


# --- validation --------------------------------------------------------------------------------


class _Checker:
    """Reads one field after another of an untrusted document, naming the path on error."""

    def __init__(self, path: str, data: Any) -> None:
        self.path = path
        if not isinstance(data, dict):
            raise InvalidExport(f"{path}: expected an object, got {type(data).__name__}")
        self.data = data

    def fail(self, key: str, why: str) -> InvalidExport:
        return InvalidExport(f"{self.path}.{key}: {why}")

    def get(self, key: str, kind: type | tuple[type, ...], *, required: bool = False, default: Any = None):
        if key not in self.data or self.data[key] is None:
            if required:
                raise self.fail(key, "is missing")
            return default
        value = self.data[key]
        if isinstance(value, bool) and kind in (int, float, (int, float)):
            raise self.fail(key, f"must be a number, got {value!r}")
        if not isinstance(value, kind):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise self.fail(key, f"must be {names}, got {type(value).__name__}")
        return value

    def text(self, key: str, *, required: bool = False, default: str | None = "",
             max_length: int | None = None):
        value = self.get(key, str, required=required, default=default)
        if value is not None and max_length and len(value) > max_length:
            raise self.fail(key, f"is {len(value)} characters; at most {max_length} allowed")
        return value

    def when(self, key: str, *, required: bool = False) -> dt.datetime | None:
        value = self.get(key, str, required=required)
        if value is None:
            return None
        try:
            parsed = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise self.fail(key, f"{value!r} is not an ISO-8601 date and time") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)

    def items(self, key: str) -> list:
        return self.get(key, list, default=[])


def _check_message(c: _Checker, m_index: int, position_default: int) -> dict:
    role = c.get("role", str, required=True)
    if role not in models.Role.values:
        raise c.fail("role", f"must be one of {', '.join(models.Role.values)}, got {role!r}")
    content = c.get("content", str, required=True)
    try:
        content, _ = clean_content(content, allow_empty=True)
    except MemoryStoreError as exc:
        raise c.fail("content", str(exc)) from None
    history = c.items("edit_history")
    for i, entry in enumerate(history):
        if not isinstance(entry, dict) or not isinstance(entry.get("previous_content"), str):
            raise InvalidExport(f"{c.path}.edit_history[{i}]: expected an object with previous_content text")
    calls = []
    for k, raw in enumerate(c.items("tool_calls")):
        t = _Checker(f"{c.path}.tool_calls[{k}]", raw)
        calls.append({
            "id": t.text("id", default=None, max_length=26),
            "tool_name": t.text("tool_name", required=True, max_length=100),
            "arguments": t.text("arguments", default="{}").replace("\x00", NUL_REPLACEMENT),
            "result": t.text("result").replace("\x00", NUL_REPLACEMENT),
            "timestamp": t.when("timestamp", required=True),
            "is_error": t.get("is_error", bool, default=False),
            "duration_ms": t.get("duration_ms", int),
            "chunks": t.get("chunks", int),
        })
    chunks = c.items("chunks")
    if not all(isinstance(s, list) and len(s) == 2 and all(isinstance(x, int) for x in s) for s in chunks):
        raise c.fail("chunks", "must be a list of [start, end] pairs")
    position = c.get("position", int, default=position_default)
    if position < 0:
        raise c.fail("position", "must not be negative")
    return {
        "id": c.text("id", default=None, max_length=26),
        "role": role,
        "content": content,
        "timestamp": c.when("timestamp", required=True),
        "parent_id": c.text("parent_id", default=None),
        "position": position,
        "external_id": c.text("external_id", default=None, max_length=200),
        "metadata": c.get("metadata", dict, default={}),
        "edited": c.get("edited", bool, default=bool(history)),
        "edit_history": history,
        "deleted": c.get("deleted", bool, default=False),
        "deleted_at": c.when("deleted_at"),
        "pinned": c.get("pinned", bool, default=False),
        "pinned_at": c.when("pinned_at"),
        "chunks": chunks if "chunks" in c.data else None,
        "tool_calls": calls,
    }


def validate_export(data: Any) -> dict:
    """Check a Recollect export; return it with dates parsed and defaults filled in."""
    root = _Checker("export", data)
    fmt = data.get("format")
    if fmt != FORMAT:
        if isinstance(data, dict) and "conversations" in data and fmt is None:
            raise InvalidExport(f'export.format: is missing; a Recollect export says "format": "{FORMAT}"')
        raise InvalidExport(f"export.format: expected {FORMAT!r}, got {fmt!r}")
    version = root.get("version", int, required=True)
    if version > VERSION or version < 1:
        raise InvalidExport(
            f"export.version: {version} is not supported (this Recollect reads version {VERSION})"
        )
    conversations = []
    message_ids: set[str] = set()
    external_ids: set[str] = set()
    for i, raw in enumerate(root.items("conversations")):
        c = _Checker(f"conversations[{i}]", raw)
        messages = []
        positions: set[int] = set()
        for j, raw_m in enumerate(c.items("messages")):
            mc = _Checker(f"conversations[{i}].messages[{j}]", raw_m)
            m = _check_message(mc, j, (max(positions) + 1) if positions else 0)
            if m["position"] in positions:
                raise mc.fail("position", f"{m['position']} is used twice in this conversation")
            positions.add(m["position"])
            if m["id"] is not None:
                if m["id"] in message_ids:
                    raise mc.fail("id", f"{m['id']!r} appears twice in the file")
                message_ids.add(m["id"])
            else:
                m["id"] = models.new_ulid()
                message_ids.add(m["id"])
            if m["external_id"] is not None:
                if m["external_id"] in external_ids:
                    raise mc.fail("external_id", f"{m['external_id']!r} appears twice in the file")
                external_ids.add(m["external_id"])
            messages.append(m)
        conversations.append({
            "id": c.text("id", default=None, max_length=26),
            "title": c.text("title", default="", max_length=200),
            "created_at": c.when("created_at"),
            "updated_at": c.when("updated_at"),
            "next_position": c.get("next_position", int, default=0),
            "messages": messages,
        })
    topics = []
    topic_ids: set[str] = set()
    for i, raw in enumerate(root.items("topics")):
        t = _Checker(f"topics[{i}]", raw)
        tid = t.text("id", default=None, max_length=26) or models.new_ulid()
        if tid in topic_ids:
            raise t.fail("id", f"{tid!r} appears twice in the file")
        topic_ids.add(tid)
        members = []
        for k, raw_m in enumerate(t.items("members")):
            mc = _Checker(f"topics[{i}].members[{k}]", raw_m)
            members.append({"message_id": mc.text("message_id", required=True),
                            "score": float(mc.get("score", (int, float), default=0.0))})
        samples = t.items("sample_message_ids")
        if not all(isinstance(s, str) for s in samples):
            raise t.fail("sample_message_ids", "must be a list of message ids")
        topics.append({
            "id": tid,
            "parent_id": t.text("parent_id", default=None),
            "level": t.get("level", int, default=0),
            "order": t.get("order", int, default=0),
            "label": t.text("label", required=True, max_length=200),
            "keywords": t.items("keywords"),
            "summary": t.text("summary"),
            "summary_source": t.text("summary_source", default="extractive", max_length=16),
            "period_start": t.when("period_start"),
            "period_end": t.when("period_end"),
            "message_count": t.get("message_count", int, default=0),
            "token_count": t.get("token_count", int, default=0),
            "sample_message_ids": samples,
            "map_x": t.get("map_x", (int, float)),
            "map_y": t.get("map_y", (int, float)),
            "created_at": t.when("created_at"),
            "updated_at": t.when("updated_at"),
            "members": members,
        })
    by_id = {t["id"]: t for t in topics}
    for i, t in enumerate(topics):
        seen = {t["id"]}
        parent = t["parent_id"]
        while parent is not None:
            if parent not in by_id:
                raise InvalidExport(f"topics[{i}].parent_id: {parent!r} is not a topic in the file")
            if parent in seen:
                raise InvalidExport(f"topics[{i}].parent_id: the topic tree has a cycle through {parent!r}")
            seen.add(parent)
            parent = by_id[parent]["parent_id"]
    periods = []
    for i, raw in enumerate(root.items("period_summaries")):
        p = _Checker(f"period_summaries[{i}]", raw)
        periods.append({
            "period": p.text("period", required=True, max_length=32),
            "start": p.when("start"),
            "end": p.when("end"),
            "message_count": p.get("message_count", int, default=0),
            "summary": p.text("summary"),
            "top_topics": p.items("top_topics"),
        })
    entities = []
    for i, raw in enumerate(root.items("entities")):
        e = _Checker(f"entities[{i}]", raw)
        mentions = []
        for k, raw_m in enumerate(e.items("mentions")):
            mc = _Checker(f"entities[{i}].mentions[{k}]", raw_m)
            mentions.append({"message_id": mc.text("message_id", required=True),
                             "count": mc.get("count", int, default=1)})
        entities.append({
            "name": e.text("name", required=True, max_length=300),
            "normalized": e.text("normalized", required=True, max_length=300),
            "kind": e.text("kind", required=True, max_length=32),
            "mention_count": e.get("mention_count", int, default=0),
            "first_seen": e.when("first_seen"),
            "last_seen": e.when("last_seen"),
            "mentions": mentions,
        })
    edges = []
    for i, raw in enumerate(root.items("entity_edges")):
        e = _Checker(f"entity_edges[{i}]", raw)
        source, target = e.get("source", int, required=True), e.get("target", int, required=True)
        for key, value in (("source", source), ("target", target)):
            if not 0 <= value < len(entities):
                raise e.fail(key, f"{value} is not the index of an entity in the file")
        edges.append({"source": source, "target": target, "weight": e.get("weight", int, default=1)})
    return {
        "embedding_model": root.text("embedding_model", default=""),
        "conversations": conversations,
        "topics": topics,
        "period_summaries": periods,
        "entities": entities,
        "entity_edges": edges,
    }


# --- import ------------------------------------------------------------------------------------


@dataclass
class ImportReport:
    conversations: int = 0
    messages: int = 0
    tool_calls: int = 0
    topics: int = 0
    memberships: int = 0
    entities: int = 0
    passages: int = 0
    embedded: int = 0
    skipped_conversations: int = 0
    skipped_topics: int = 0
    new_ids: int = 0
    rechunked: int = 0
    source_model: str = ""
    target_model: str = ""
    warnings: list[str] = field(default_factory=list)
    left_out: tombstones.LeftOut = field(default_factory=tombstones.LeftOut)  # forgotten since

    @property
    def model_changed(self) -> bool:
        return bool(self.source_model) and self.source_model != self.target_model

    def summary(self) -> str:
        text = (
            f"imported {self.conversations} conversations, {self.messages} messages, "
            f"{self.tool_calls} tool calls, {self.topics} topics, {self.entities} entities; "
            f"skipped {self.skipped_conversations} conversations and {self.skipped_topics} topics "
            f"already present; {self.new_ids} ids were taken and got new ones; "
            f"{self.embedded} of {self.passages} passages embedded with {self.target_model}"
        )
        if self.model_changed:
            text += f" (the export was embedded with {self.source_model})"
        if self.rechunked:
            text += f"; {self.rechunked} texts were chunked differently under this instance's settings"
        if self.left_out.count:
            text += f"; {self.left_out.sentence()}"
        return text


CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def derived_id(original: str, owner_pk: object) -> str:
    """The id a row gets in `owner`'s memory when its own id is taken: a ULID with the same
    time part and a random part hashed from (owner, original id), so a second import of the
    same file finds what the first one stored."""
    digest = hashlib.sha256(f"{owner_pk}:{original}".encode("utf-8", "surrogatepass")).digest()
    bits = int.from_bytes(digest[:16], "big")
    hashed = "".join(CROCKFORD[(bits >> (5 * i)) & 31] for i in range(26))
    head = original[:10].upper()
    if len(original) != 26 or not all(ch in CROCKFORD for ch in head):
        head = "0" + hashed[16:25]
    return head + hashed[:16]


def _existing(queryset, ids: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(ids), 5000):
        found.update(queryset.filter(pk__in=ids[start:start + 5000]).values_list("pk", flat=True))
    return found


def _owned(model, owner, ids: Iterable[str | None]) -> dict[str, str]:
    """original id -> the row the owner already has for it (the id itself, or the id an earlier
    import gave it)."""
    candidates = {i: (i, derived_id(i, owner.pk)) for i in ids if i}
    found = _existing(model.objects.owned_by(owner), [c for pair in candidates.values() for c in pair])
    return {i: next(c for c in pair if c in found) for i, pair in candidates.items()
            if pair[0] in found or pair[1] in found}


def _id_map(model, owner, wanted: Iterable[str | None]) -> tuple[dict[str, str], int]:
    """Keep each id that is free in the target; a taken one gets its derived id."""
    wanted = [i for i in wanted if i]
    taken = _existing(model.objects.all(), wanted)
    derived = {i: derived_id(i, owner.pk) for i in taken}
    clash = _existing(model.objects.all(), list(derived.values()))
    mapping = {i: i for i in wanted}
    for i, new in derived.items():
        mapping[i] = models.new_ulid() if new in clash else new
    return mapping, len(taken)


def import_memory(
    owner, data: Any, *, embed: bool | str = True, progress: ProgressFn | None = None
) -> ImportReport:
    """Import a Recollect export into `owner`'s memory, in one transaction.

    A conversation or topic whose id the owner already has is skipped, so importing the same
    file twice adds nothing. Passages are rebuilt from the text and embedded with this
    instance's model (embed=False leaves that to background work it queues; embed="upkeep"
    queues none, for a caller that embeds them itself: an import job).
    """
    doc = validate_export(data)
    report = ImportReport(source_model=doc["embedding_model"], target_model=settings.EMBEDDING_MODEL)
    progress = progress or (lambda stage, done, total: None)
    convs = doc["conversations"]
    owned = _owned(models.Conversation, owner, [c["id"] for c in convs])
    fresh = [c for c in convs if c["id"] not in owned]
    report.skipped_conversations = len(convs) - len(fresh)
    fresh, left_ids = _leave_out_forgotten(owner, fresh, report)
    # Messages of skipped conversations are already the owner's, under their ids then.
    kept = _owned(models.Message, owner, [m["id"] for c in convs if c["id"] in owned for m in c["messages"]])
    conv_ids, n1 = _id_map(models.Conversation, owner, [c["id"] for c in fresh])
    msg_ids, n2 = _id_map(models.Message, owner, [m["id"] for c in fresh for m in c["messages"]])
    call_ids, n3 = _id_map(
        models.ToolCall, owner, [t["id"] for c in fresh for m in c["messages"] for t in m["tool_calls"]]
    )
    report.new_ids = n1 + n2 + n3
    message_map = {**kept, **msg_ids}
    total = sum(len(c["messages"]) for c in fresh)
    taken_external = set(
        models.Message.objects.owned_by(owner).logical()
        .filter(external_id__in=[m["external_id"] for c in fresh for m in c["messages"] if m["external_id"]])
        .values_list("external_id", flat=True)
    )

    # The live text each message replies to, for its first passage's context: from the file,
    # or from the owner's memory for a parent kept from an earlier import.
    live_in_file = {m["id"]: m["content"] for c in convs for m in c["messages"] if not m["deleted"]}
    live_kept = dict(
        models.Message.objects.visible_to(owner)
        .filter(pk__in=list(kept.values())).values_list("pk", "content")
    )

    with transaction.atomic():
        conversations, messages, calls, chunks, call_chunks, passages = [], [], [], [], [], []
        done = 0
        for c in fresh:
            conv = models.Conversation(
                id=conv_ids.get(c["id"]) or models.new_ulid(), owner_id=owner.pk, title=c["title"],
                next_position=max([c["next_position"], *(m["position"] + 1 for m in c["messages"])]),
            )
            conv.created_at = c["created_at"] or timezone.now()
            conv.updated_at = c["updated_at"] or conv.created_at
            conversations.append(conv)
            for m in c["messages"]:
                parent_id = m["parent_id"]
                if parent_id is not None and parent_id not in message_map:
                    report.warnings.append(
                        f"message {m['id']}: parent {parent_id} is not in the file; stored without a parent"
                    )
                external_id = m["external_id"]
                metadata = dict(m["metadata"])
                if external_id in taken_external:
                    report.warnings.append(
                        f"message {m['id']}: external_id {external_id!r} is already used by another "
                        "of this user's messages; kept in metadata as original_external_id"
                    )
                    metadata["original_external_id"] = external_id
                    external_id = None
                message = models.Message(
                    id=message_map[m["id"]],
                    owner_id=owner.pk,
                    conversation_id=conv.pk,
                    role=m["role"],
                    content=m["content"],
                    snippet=make_snippet(m["content"]),
                    timestamp=m["timestamp"],
                    parent_id=message_map.get(parent_id) if parent_id else None,
                    token_count=count_tokens(m["content"]),
                    metadata=metadata,
                    external_id=external_id,
                    edited=m["edited"],
                    edit_history=m["edit_history"],
                    deleted=m["deleted"],
                    deleted_at=m["deleted_at"] or (m["timestamp"] if m["deleted"] else None),
                    pinned=m["pinned"],
                    pinned_at=m["pinned_at"] or (m["timestamp"] if m["pinned"] else None),
                    position=m["position"],
                )
                message_calls = [
                    models.ToolCall(
                        id=call_ids.get(t["id"]) or models.new_ulid(),
                        owner_id=owner.pk, message_id=message.pk,
                        tool_name=t["tool_name"], arguments=t["arguments"], result=t["result"],
                        timestamp=t["timestamp"], token_count=count_tokens(t["result"]),
                        is_error=t["is_error"], duration_ms=t["duration_ms"],
                    )
                    for t in m["tool_calls"]
                ]
                parent_text = None
                if parent_id is not None and message.parent_id:
                    parent_text = live_kept.get(message.parent_id) if parent_id in kept else (
                        live_in_file.get(parent_id)
                    )
                m_chunks, c_chunks, m_passages = derive_rows(message, message_calls, parent_text)
                spans = [[r.metadata["char_start"], r.metadata["char_end"]] for r in m_chunks]
                if m["chunks"] is not None and spans != m["chunks"]:
                    report.rechunked += 1
                for t, call in zip(m["tool_calls"], message_calls, strict=True):
                    n = sum(1 for r in c_chunks if r.chunk_parent_id == call.pk)
                    if t["chunks"] is not None and n != t["chunks"]:
                        report.rechunked += 1
                messages.append(message)
                chunks.extend(m_chunks)
                calls.extend(message_calls)
                call_chunks.extend(c_chunks)
                passages.extend(m_passages)
                done += 1
                if done % 200 == 0:
                    progress("messages", done, total)
        _create_keeping_dates(models.Conversation, conversations)
        models.Message.objects.bulk_create(messages, batch_size=500)
        models.Message.objects.bulk_create(chunks, batch_size=200)
        models.ToolCall.objects.bulk_create(calls, batch_size=500)
        models.ToolCall.objects.bulk_create(call_chunks, batch_size=200)
        progress("messages", done, total)
        report.conversations = len(conversations)
        report.messages = len(messages)
        report.tool_calls = len(calls)
        report.passages = len(passages)
        if embed is True:
            _embed(passages, progress)
            report.embedded = len(passages)
        models.Passage.objects.bulk_create(passages, batch_size=500)
        versions.bump(owner.pk)
        if passages and embed is False:
            owner_id = owner.pk
            transaction.on_commit(lambda: queue_embedding(owner_id))
        topic_map = _import_topics(owner, doc["topics"], message_map, report, left_ids)
        _import_periods(owner, doc["period_summaries"], topic_map)
        _import_entities(owner, doc["entities"], doc["entity_edges"], message_map, report)
        if left_ids:  # what the file made of them (topics, names, tool results) loses their words
            forgetting.forget_left_out(owner, report.left_out.texts or [], [c.pk for c in conversations])
    return report


def _leave_out_forgotten(owner, convs: list[dict], report: ImportReport) -> tuple[list[dict], set[str]]:
    """`convs` without the messages the owner forgot since the file was written (their
    tombstones; a reply to one hangs from what that one replied to), and those messages' ids. A
    conversation left with none of its messages is left out too."""
    messages = [m for c in convs for m in c["messages"]]
    forgotten = tombstones.forgotten(owner, [
        tombstones.Known((m["id"], m["external_id"] or ""), m["role"], m["content"]) for m in messages
    ])
    if not forgotten:
        return convs, set()
    gone = {messages[n]["id"] for n in forgotten}
    for n, when in forgotten.items():
        report.left_out.add(when, messages[n]["content"])
    parent_of = {m["id"]: m["parent_id"] for m in messages}
    kept_convs = []
    for c in convs:
        kept = []
        for m in c["messages"]:
            if m["id"] in gone:
                continue
            parent = m["parent_id"]
            while parent in gone:
                parent = parent_of.get(parent)
            kept.append({**m, "parent_id": parent})
        if kept or not c["messages"]:
            kept_convs.append({**c, "messages": kept})
    return kept_convs, gone


def _create_keeping_dates(model, rows: list) -> None:
    """bulk_create, then put back the exported created_at/updated_at (auto_now fields set
    "now" on insert, on the objects too)."""
    dates = [(row.created_at, row.updated_at) for row in rows]
    model.objects.bulk_create(rows, batch_size=500)
    for row, (created, updated) in zip(rows, dates, strict=True):
        row.created_at, row.updated_at = created, updated
    model.objects.bulk_update(rows, ["created_at", "updated_at"], batch_size=500)


def _embed(passages: list[models.Passage], progress: ProgressFn) -> None:
    embedder = get_embedder()
    for start in range(0, len(passages), EMBED_BATCH):
        batch = passages[start:start + EMBED_BATCH]
        vectors = embedder.embed([p.embedding_input for p in batch])
        for p, vec in zip(batch, vectors, strict=True):
            p.embedding = vec
            p.embedding_model = embedder.name
        progress("embed", start + len(batch), len(passages))


def _import_topics(
    owner, topics: list[dict], message_map: dict[str, str], report: ImportReport, left_ids: set[str]
) -> dict[str, str]:
    owned = _owned(models.Topic, owner, [t["id"] for t in topics])
    fresh = [t for t in topics if t["id"] not in owned]
    report.skipped_topics = len(topics) - len(fresh)
    ids, n = _id_map(models.Topic, owner, [t["id"] for t in fresh])
    report.new_ids += n
    topic_map = {**owned, **ids}
    rows, memberships = [], []
    for t in fresh:
        row = models.Topic(
            id=topic_map[t["id"]], owner_id=owner.pk,
            parent_id=topic_map.get(t["parent_id"]) if t["parent_id"] else None,
            **{k: t[k] for k in ("level", "order", "label", "keywords", "summary", "summary_source",
                                 "period_start", "period_end", "message_count", "token_count",
                                 "map_x", "map_y")},
            sample_message_ids=[message_map[i] for i in t["sample_message_ids"] if i in message_map],
        )
        row.created_at = t["created_at"] or timezone.now()
        row.updated_at = t["updated_at"] or row.created_at
        rows.append(row)
        for member in t["members"]:
            if member["message_id"] not in message_map:
                if member["message_id"] in left_ids:
                    continue  # forgotten: said in the report already
                report.warnings.append(
                    f"topic {t['label']!r}: message {member['message_id']} is not in the file"
                )
                continue
            memberships.append(models.TopicMembership(owner_id=owner.pk, topic_id=row.pk,
                                                      message_id=message_map[member["message_id"]],
                                                      score=member["score"]))
    _create_keeping_dates(models.Topic, rows)
    models.TopicMembership.objects.bulk_create(memberships, batch_size=1000, ignore_conflicts=True)
    report.topics = len(rows)
    report.memberships = len(memberships)
    _set_centroids(owner, rows, memberships)
    return topic_map


def _set_centroids(owner, topics: list[models.Topic], memberships: list[models.TopicMembership]) -> None:
    """Topic centroids are vectors of the target's model: mean of the members' vectors."""
    import numpy as np

    from memory.organizing.topics import message_vectors, unit

    if not topics:
        return
    vectors = message_vectors(owner, {m.message_id for m in memberships})
    sums: dict[str, np.ndarray] = {}
    for m in memberships:
        vec = vectors.get(m.message_id)
        if vec is not None:
            sums[m.topic_id] = sums[m.topic_id] + vec if m.topic_id in sums else vec.copy()
    # Inner topics sum their children's, deepest first.
    for t in sorted(topics, key=lambda t: -t.level):
        if t.pk in sums and t.parent_id:
            sums[t.parent_id] = sums[t.parent_id] + sums[t.pk] if t.parent_id in sums else sums[t.pk].copy()
    for t in topics:
        t.centroid = unit(sums[t.pk]).tolist() if t.pk in sums else None
    models.Topic.objects.bulk_update(topics, ["centroid"], batch_size=500)


def _import_periods(owner, periods: list[dict], topic_map: dict[str, str]) -> None:
    present = set(models.PeriodSummary.objects.owned_by(owner).values_list("period", flat=True))
    rows = []
    for p in periods:
        if p["period"] in present:
            continue
        top = [
            {**t, "id": topic_map.get(t.get("id"), t.get("id"))} if isinstance(t, dict) else t
            for t in p["top_topics"]
        ]
        rows.append(models.PeriodSummary(owner_id=owner.pk, **{**p, "top_topics": top}))
    models.PeriodSummary.objects.bulk_create(rows)


def _import_entities(owner, entities: list[dict], edges: list[dict], message_map: dict[str, str],
                     report: ImportReport) -> None:
    if not entities:
        return
    existing = {
        (e.normalized, e.kind): e
        for e in models.Entity.objects.owned_by(owner).filter(
            normalized__in={e["normalized"] for e in entities}
        )
    }
    new = [
        models.Entity(owner_id=owner.pk, **{k: e[k] for k in ("name", "normalized", "kind", "mention_count",
                                                             "first_seen", "last_seen")})
        for e in entities if (e["normalized"], e["kind"]) not in existing
    ]
    models.Entity.objects.bulk_create(new, batch_size=1000)
    report.entities = len(new)
    for e in new:
        existing[(e.normalized, e.kind)] = e
    rows = [existing[(e["normalized"], e["kind"])] for e in entities]
    mentions = [
        models.EntityMention(owner_id=owner.pk, entity_id=row.pk, message_id=message_map[m["message_id"]],
                             count=m["count"])
        for e, row in zip(entities, rows, strict=True)
        for m in e["mentions"] if m["message_id"] in message_map
    ]
    models.EntityMention.objects.bulk_create(mentions, batch_size=1000, ignore_conflicts=True)
    models.EntityEdge.objects.bulk_create(
        [models.EntityEdge(owner_id=owner.pk, source_id=rows[e["source"]].pk, target_id=rows[e["target"]].pk,
                           weight=e["weight"]) for e in edges],
        batch_size=1000, ignore_conflicts=True,
    )
