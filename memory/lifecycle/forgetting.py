"""Forgetting reaches every copy of a message's words, not only its row.

A forgotten message's text lives on in what was made from it: tool-call results that quoted
it (often cut mid-sentence), the arguments of a later search for one of its words, the context
snapshots that showed it to the model, summaries, drafts, facts, names, a conversation title.
`Overlap` (memory.lifecycle.overlap) finds its rare words and long runs of its words again, and
`scrub` replaces them with FORGOTTEN in every column listed in COPIES. Another app adds its own
columns with `holds_copies` (chat's reply drafts do), so a new table of derived text is one line
here or there, not a new scrub.

Replies that quote or restate a forgotten message, or repeat one of its rare words, are
messages of their own: memory.lifecycle.echoes lists them for the forget dialog, with the tool
calls, titles, topics, names and facts that hold its rare words (ticked by default; what a
person unticks keeps its words: `keep`).

`forget_message` is the whole cascade, in one direction: lock, find what it touched (topics,
names only it gave), lay its tombstone (so no import brings it back), re-link its replies,
delete it, scrub every copy, re-title, refresh its topics. Storage (memory.storage.store) only
writes and reads; it calls nothing here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db import DataError, connection, transaction
from django.db.models import Q, TextField
from django.db.models.functions import Cast

from memory.errors import ChunkEditError, NotFound
from memory.knowledge.entities import prune_orphans, remove_mentions
from memory.lifecycle import tombstones, turn_lock
from memory.lifecycle.overlap import FORGOTTEN, MAX_PROBES, RUN, Overlap, rare_words
from memory.models import (
    Conversation,
    Entity,
    EntityMention,
    Fact,
    Message,
    TopicMembership,
)
from memory.organizing.topic_updates import refresh, topics_mentioning
from memory.storage import store
from memory.storage.inserts import joined
from memory.text import auto_title

__all__ = ["COPIES", "FORGOTTEN", "RUN", "Overlap", "forget_message", "holds_copies", "scrub"]

MAX_COPIES_LISTED = 200


# --- where copies live ---------------------------------------------------------------------


@dataclass(frozen=True)
class Copies:
    """Columns of `model` ("app.Model", owned through `owner`) that may hold a forgotten
    message's words. `after(owner, rows)` re-derives what the scrubbed rows feed. `echo`: how
    the forget dialog names a row of it ("toolcall" gives "toolcall:<id>"), so a row a person
    chose to keep loses the copied runs but keeps the rare words."""

    model: str
    fields: tuple[str, ...]
    after: Callable[[Any, list], None] | None = None
    echo: str = ""


def _refresh_topics(owner, rows: list) -> None:
    refresh(owner, [row.pk for row in rows])


COPIES: list[Copies] = [
    Copies(
        "memory.ContextSnapshot",
        ("query", "reason", "text", "hits", "plan", "fallbacks", "included_ids", "tokens_by_zone"),
    ),
    Copies("memory.Topic", ("label", "keywords", "summary"), _refresh_topics, echo="topic"),
    Copies("memory.PeriodSummary", ("summary", "top_topics")),
    Copies("memory.ConversationSummary", ("blocks",)),
    Copies("memory.UpkeepRun", ("detail",)),
    Copies("memory.SemanticCacheEntry", ("query", "payload")),
    Copies("memory.Fact", ("subject", "value", "statement", "wording", "corrected"), echo="fact"),
    Copies("memory.ImportJob", ("report", "error")),
    # A scrubbed tool call's passages are made again from what is left of it.
    Copies("memory.ToolCall", ("result", "arguments"), store.rebuild_tool_call_passages, echo="toolcall"),
]


def holds_copies(model: str, fields: Iterable[str], after=None) -> None:
    """Another app's columns that may hold a forgotten message's words (call from its ready())."""
    entry = Copies(model, tuple(fields), after)
    if entry not in COPIES:
        COPIES.append(entry)


def candidates(qs, fields: Sequence[str], overlap: Overlap, *, every_row: bool = True):
    """The rows of `qs` that may hold a copy: every one of them does hold a probe word. For a
    text with too many probes, every row (every_row) or those holding one of its MAX_PROBES
    rarest-looking words (longest, or with digits): a listing, not a scrub, may miss a copy."""
    probes = overlap.probes()
    if probes is None and every_row:
        return qs
    if probes is None:
        probes = overlap.probes(limit=None)
        probes = sorted(probes, key=lambda w: (not any(c.isdigit() for c in w), -len(w)))[:MAX_PROBES]
    qs = qs.annotate(**{f"_{f}_text": Cast(f, TextField()) for f in fields})
    q = Q()
    for word in probes:
        for f in fields:
            q |= Q(**{f"_{f}_text__icontains": word})
    return qs.filter(q)


def scrub(owner, overlap: Overlap, keep: Iterable[str] = ()) -> dict[str, int]:
    """Replace every copy of the forgotten words in every column of COPIES; the rows changed,
    by model. `keep`: echo keys ("toolcall:<id>") of rows whose rare words stay (their copied
    runs and ids still go). Run inside the forget's transaction."""
    changed: dict[str, int] = {}
    if not overlap:
        return changed
    keep = set(keep)
    plain = overlap.without_rare() if keep and overlap.rare else overlap
    for entry in COPIES:
        model = apps.get_model(entry.model)
        qs = candidates(model.objects.filter(owner_id=owner.pk), entry.fields, overlap)
        rows = []
        chunked = any(f.name == "chunk_parent" for f in model._meta.fields)
        loaded = ("pk", *entry.fields, *(["chunk_parent_id"] if chunked else []))
        for row in qs.only(*loaded).iterator(chunk_size=500):
            # A chunk of a tool call is kept with its call.
            echo_id = (getattr(row, "chunk_parent_id", None) if chunked else None) or row.pk
            this = plain if entry.echo and f"{entry.echo}:{echo_id}" in keep else overlap
            dirty = []
            for f in entry.fields:
                before = getattr(row, f)
                after = this.scrub(before)
                if after != before:
                    setattr(row, f, after)
                    dirty.append(f)
            if dirty:
                row.save(update_fields=dirty)
                rows.append(row)
        if rows:
            changed[entry.model] = len(rows)
            if entry.after:
                entry.after(owner, rows)
    return changed


def texts_of(message) -> list[str]:
    """Every text a message had: its content and each earlier version of it."""
    return _texts(message.content, message.edit_history)


def _texts(content: str | None, edit_history: list | None) -> list[str]:
    texts = [content or ""]
    texts.extend(str(v.get("previous_content") or "") for v in (edit_history or []) if isinstance(v, dict))
    return [t for t in texts if t]


def overlap_of(messages: Sequence, owner=None) -> Overlap:
    """What a copy of these messages shares with them: their texts (every version), ids (their
    chunks' too) and, given their owner, the words rare in that owner's memory (rare_words)."""
    ids = {m.pk for m in messages}
    ids.update(Message.objects.filter(chunk_parent_id__in=list(ids)).values_list("pk", flat=True))
    texts = [t for m in messages for t in texts_of(m)]
    rare = rare_words(owner, texts, exclude_ids=ids) if owner is not None else set()
    return Overlap(texts, ids, rare)


# --- a turn that was reading what got forgotten ------------------------------------------------


_ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")
MAX_READ_IDS = 2000


def read_by(owner, value: Any) -> dict[str, list[str]]:
    """The owner's messages whose ids `value` (a tool result, a plan: any JSON) names, with
    their texts: what a turn read, so that what it writes later can lose them if they are
    forgotten meanwhile (gone_since_read)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    ids = list(dict.fromkeys(_ULID.findall(text)))[:MAX_READ_IDS]
    if not ids:
        return {}
    # Read on every turn, a hundred rows or so: rows, not model instances (a turn spent about
    # as much CPU building those as the rest of this step).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, content, edit_history FROM memory_message "
            "WHERE owner_id = %s AND id = ANY(%s::text[])",
            [owner.pk, text_array(ids)],
        )
        rows = cursor.fetchall()
    return {pk: _texts(content, _json(history)) for pk, content, history in rows}


def text_array(values: Sequence[str]) -> str:
    """Postgres' text of an array of `values` (`%s::text[]`), every element quoted: one string
    parameter. A turn sends ~75 ids three times; psycopg adapting a list element by element
    took ~0.15 ms of the turn's CPU each time, this ~0.01."""
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


def _json(value: Any) -> Any:
    """A jsonb column read by a cursor: text with Django's connection (its JSONField decodes it)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def gone_since_read(
    owner, seen: dict[str, list[str]], *, then: Sequence[tuple[str, list[Any]]] = ()
) -> Overlap:
    """Of the messages a running turn read (`seen`: id -> the texts it was shown), those that
    are gone now, as an Overlap (their rare words too) to scrub what the turn is about to write.

    The turn calls this in the transaction that writes what it read, before writing: it takes
    the owner's turn lock shared (memory.lifecycle.turn_lock), then reads which are still there
    in a statement of its own, so a forget either committed before (they are gone: scrub) or
    waits until this transaction commits (and then scrubs what it wrote).
    then: the writes (sql, params), sent after the check in the same round trip."""
    statements = [(sql, list(params)) for sql, params in then]
    ids = sorted(seen)
    if ids:
        statements[:0] = [
            turn_lock.shared_statement(owner),
            ("SELECT id FROM memory_message WHERE owner_id = %s AND id = ANY(%s::text[])",
             [owner.pk, text_array(ids)]),
        ]
    if not statements:
        return Overlap([])
    with connection.cursor() as cursor:
        cursor.execute(*joined(statements))
        live = set()
        if ids:
            cursor.nextset()  # past the lock's row, to the check's
            live = {row[0] for row in cursor.fetchall()}
    if not ids:
        return Overlap([])
    gone = [i for i in ids if i not in live]
    texts = [t for i in gone for t in seen[i]]
    return Overlap(texts, set(gone), rare_words(owner, texts, exclude_ids=gone) if texts else set())


def written_if_none_gone(owner, seen: dict[str, list[str]], writes: Sequence[tuple[str, list[Any]]]) -> bool:
    """Outside a transaction: `writes` (sql, params) sent in one round trip, which Postgres runs
    as one transaction, after the owner's turn lock taken shared and a check that every message
    of `seen` is still there, as gone_since_read checks. When one is gone the check fails (a
    division by zero), nothing is written and this returns False: the caller then writes in a
    transaction of its own with gone_since_read, which tells what to scrub. Inside a transaction
    (whose statements a failed check would abort) it writes nothing and returns False.

    The lock and the check are two statements: each statement of the message reads a snapshot
    taken when it starts (READ COMMITTED), so the check reads after the lock is granted, that is
    after any forget that held it has committed (memory.lifecycle.turn_lock)."""
    if connection.in_atomic_block:
        return False
    ids = sorted(seen)
    statements = [(sql, list(params)) for sql, params in writes]
    if ids:
        statements[:0] = [
            turn_lock.shared_statement(owner),
            ("SELECT 1 / (count(*) = %s)::int FROM memory_message WHERE owner_id = %s "
             "AND id = ANY(%s::text[])", [len(ids), owner.pk, text_array(ids)]),
        ]
    if not statements:
        return True
    try:
        with connection.cursor() as cursor:
            cursor.execute(*joined(statements))
    except DataError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "22012":  # division_by_zero: one is gone
            return False
        raise
    return True


def write_checked(owner, seen: dict[str, list[str]], writes: Sequence[tuple[str, list[Any]]]) -> Overlap:
    """What a running turn writes from what it read (`seen`), written so that nothing forgotten
    meanwhile survives in it: one round trip while all of it is there (written_if_none_gone),
    else a transaction that locks what is left, writes, and scrubs what is gone from what it
    wrote. Returns what was gone (empty when nothing was)."""
    if written_if_none_gone(owner, seen, writes):
        return Overlap([])
    with transaction.atomic():
        gone = gone_since_read(owner, dict(seen), then=writes)
        if gone:
            scrub(owner, gone)
    return gone

# --- forgetting: the cascade, in one place ------------------------------------------------------


def forget_message(
    owner, message_id: str, *, copies: Sequence[str] = (), keep: Iterable[str] = ()
) -> list[str]:
    """Permanent: content, chunks, passages and tool calls are gone, and so is every copy of its
    words in what was made from it (COPIES: tool calls, snapshots, summaries, topics, facts,
    names, the conversation's title), its rare words included. Replies are re-linked to the
    forgotten message's parent so the thread stays connected, and a tombstone (hashes, no text)
    keeps any later import from bringing it back.

    copies: ids of the owner's other messages that quote it or repeat its rare words (the forget
    dialog's ticked ones, from memory.lifecycle.echoes), forgotten with it in the same
    transaction. keep: echo keys the dialog listed and a person unticked ("toolcall:<id>",
    "topic:<id>", "fact:<id>", "entity:<id>", "title:<id>"): those keep its rare words. Returns
    the ids forgotten."""
    with transaction.atomic():
        ids = {str(message_id), *(str(c) for c in copies if c)}
        if any("\x00" in i for i in ids):  # no id holds one (and Postgres refuses it)
            raise NotFound("message", next(i for i in ids if "\x00" in i))
        # First: the turns writing now finish (this scrubs what they wrote), later ones wait and
        # then see these messages gone (memory.lifecycle.turn_lock).
        turn_lock.hold_off_turns(owner)
        first = store.get_message(owner, message_id, include_deleted=True)
        if first.is_chunk:
            raise ChunkEditError(first.pk, first.chunk_parent_id)
        # All locked at once, in id order: two forgets (or a forget and an edit) of the same
        # messages never wait for each other in a cycle.
        messages = list(
            Message.objects.owned_by(owner).logical().filter(pk__in=ids).order_by("pk").select_for_update()
        )
        if len(messages) < len(ids):
            missing = sorted(ids - {m.pk for m in messages})[0]
            raise NotFound("message", missing)
        _forget_locked(owner, messages, {str(k) for k in keep})
    return [m.pk for m in messages]


def _forget_locked(owner, messages: list[Message], keep: set[str]) -> None:
    ids = [m.pk for m in messages]
    by_id = {m.pk: m for m in messages}
    # Its topics, found while its memberships still exist (they go with it).
    topic_ids = topics_mentioning(owner, ids) | set(
        TopicMembership.objects.filter(message_id__in=ids).values_list("topic_id", flat=True)
    )
    overlap = overlap_of(messages, owner)
    overlap.ids.update(_names_only_in(ids))
    tombstones.lay(owner, messages, texts_of)
    # Its mentions and its share of the graph's edges go; names only it mentioned go too.
    remove_mentions(owner, ids)
    replies = list(
        Message.objects.filter(parent_id__in=ids, is_chunk=False).exclude(pk__in=ids)
        .values_list("pk", flat=True)
    )
    for message in messages:
        # The nearest ancestor that stays: a chain of forgotten messages is skipped whole.
        parent_id = message.parent_id
        while parent_id in by_id:
            parent_id = by_id[parent_id].parent_id
        Message.objects.filter(parent_id=message.pk).exclude(pk__in=ids).update(parent_id=parent_id)
    conversations = {m.conversation_id for m in messages}
    # A title the model wrote from the first exchange goes with any message of it.
    parents = Message.objects.filter(pk__in=[m.parent_id for m in messages], parent=None)
    roots = set(parents.values_list("pk", flat=True))
    first_exchange = {m.conversation_id for m in messages if m.parent_id is None or m.parent_id in roots}
    Message.objects.filter(pk__in=ids).delete()
    for message in messages:
        store.memory_changed(owner, message)
    store.refresh_reply_context(owner, None, reply_ids=replies)
    _forget_echoes(owner, overlap, keep)
    scrub(owner, overlap, keep)
    _retitle(owner, conversations, overlap, keep, first_exchange)
    if topic_ids:
        refresh(owner, topic_ids)  # labels, keywords and summaries lose its words now
    store.queue_upkeep_on_commit(owner.pk, ids)
    # Tasks already done keep no id of it (the ones still waiting lose it when they finish).
    transaction.on_commit(lambda: tombstones.forget_task_arguments(message_ids=ids), robust=True)


def _forget_echoes(owner, overlap: Overlap, keep: set[str]) -> None:
    """Facts and names that hold one of its rare words go whole (a fact or a name cut down to
    "[forgotten]" says nothing), unless a person kept them."""
    if not overlap.rare:
        return
    for model, fields, prefix in ((Fact, ("subject", "value", "statement", "corrected"), "fact"),
                                  (Entity, ("name",), "entity")):
        rows = candidates(model.objects.filter(owner_id=owner.pk), fields, Overlap([], rare=overlap.rare))
        doomed = [
            row.pk for row in rows.only("pk", *fields)
            if f"{prefix}:{row.pk}" not in keep and any(overlap.rare_in(getattr(row, f)) for f in fields)
        ]
        if doomed:
            model.objects.filter(pk__in=doomed).delete()


def forget_left_out(owner, texts: Sequence[str], conversation_ids: Iterable[str]) -> None:
    """An import left out messages that had been forgotten (their tombstones): whatever it brought
    that echoes them (a title, a topic, a tool result) loses their words, as the forget that made
    the tombstones did, and names only they gave go. (Facts and names a person kept at the forget
    stay; a copy of the rare words they kept elsewhere is scrubbed again.)"""
    overlap = Overlap(list(texts), set(), rare_words(owner, texts))
    with transaction.atomic():
        turn_lock.hold_off_turns(owner)  # a turn writing now is scrubbed too
        scrub(owner, overlap)
        _retitle(owner, set(conversation_ids), overlap, set())
        prune_orphans(owner)


def _names_only_in(message_ids: Sequence[str]) -> set[str]:
    """Names that only these messages gave memory (an index lists them as key entities)."""
    own = EntityMention.objects.filter(message_id__in=list(message_ids)).values_list("entity_id", flat=True)
    shared = EntityMention.objects.filter(entity_id__in=own).exclude(message_id__in=list(message_ids))
    names = Entity.objects.filter(pk__in=own).exclude(pk__in=shared.values("entity_id"))
    return {name for name in names.values_list("name", flat=True) if len(name) >= 3}


def _retitle(owner, conversation_ids, overlap: Overlap, keep: set[str],
             first_exchange: set[str] = frozenset()) -> None:
    """A title that copies forgotten words (the one made from a forgotten first message, one the
    model wrote from a first exchange of which a message is forgotten — `first_exchange` names
    their conversations —, or one that holds a rare word of it) is made again from the first
    message that stays, or left empty. The titles of the forgotten messages' conversations are
    checked, and every title that holds a rare word (unless a person kept it)."""
    titled = Q(pk__in=list(conversation_ids))
    for word in overlap.rare:
        titled |= Q(title__icontains=word)
    for conversation in Conversation.objects.owned_by(owner).filter(titled):
        title = conversation.title
        if not title:
            continue
        this = overlap.without_rare() if f"title:{conversation.pk}" in keep else overlap
        made_from_it = conversation.pk in conversation_ids and (
            any(auto_title(t).lower() == title.lower() for t in this.texts)
            or (conversation.titled_by_model and conversation.pk in first_exchange)
        )
        if not made_from_it and this.scrub_text(title) == title:
            continue
        first = (
            Message.objects.filter(conversation=conversation, is_chunk=False, deleted=False, role="user")
            .order_by("position").values_list("content", flat=True).first()
        )
        title = auto_title(first) if first else ""
        if this.scrub_text(title) != title:
            title = ""
        conversation.title = title.replace(FORGOTTEN, "").strip()
        conversation.titled_by_model = False
        conversation.save(update_fields=["title", "titled_by_model"])
