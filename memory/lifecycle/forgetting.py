"""Forgetting reaches every copy of a message's words, not only its row.

A forgotten message's text lives on in what was made from it: tool-call results that quoted
it (often cut mid-sentence), the context snapshots that showed it to the model, summaries,
drafts, a conversation title. `Overlap` finds any run of 5 or more of its words again (and a
whole field of a few of its words: a cut-off end of a quote), however the copy was cut, and
`scrub` replaces each run with FORGOTTEN in every column listed in COPIES. Another app adds
its own columns with `holds_copies` (chat's reply drafts do), so a new table of derived text
is one line here or there, not a new scrub.

Replies that quote or restate a forgotten message are messages of their own: `copies_of` lists
them for the forget dialog, which offers to forget them with it (offline-recall replies and
replies that paste tool results, ticked by default: they are only copies).

`forget_message` is the whole cascade, in one direction: lock, find what it touched (topics,
names only it gave), re-link its replies, delete it, scrub every copy, re-title, refresh its
topics. Storage (memory.storage.store) only writes and reads; it calls nothing here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.db import connection, transaction
from django.db.models import Q, TextField
from django.db.models.functions import Cast

from memory.errors import ChunkEditError, NotFound
from memory.knowledge.entities import remove_mentions
from memory.models import (
    Conversation,
    Entity,
    EntityMention,
    Message,
    Passage,
    TopicMembership,
    repeats_memory,
)
from memory.organizing.topic_updates import refresh, topics_mentioning
from memory.storage import store
from memory.text import STOP_WORDS, auto_title

FORGOTTEN = "[forgotten]"
RUN = 5  # words: a run this long shared with a forgotten text is a copy of it
SHORT_FIELD_CHARS = 10  # a whole field of fewer words is a copy when it is this long
MAX_PROBES = 400  # words looked for in SQL; past that, every row of the owner is read
MAX_POSITIONS = 64  # occurrences of one word in the forgotten texts that a match starts from
MAX_COPIES_LISTED = 200

# A JSON string's escapes are not words (a "\n" must not glue "n" to the next word), and a
# JSON text is matched between its quotes, so a scrub never cuts through its structure.
_TOKEN = re.compile(r'\\u[0-9a-fA-F]{4}|\\.|(\w+)')
_UNESCAPED_QUOTE = re.compile(r'(?<!\\)"')
_STOP = STOP_WORDS


def _tokens(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(1).lower(), m.start(), m.end()) for m in _TOKEN.finditer(text) if m.group(1)]


@dataclass
class Overlap:
    """The words of the texts being forgotten, and their ids: what a copy of them shares."""

    texts: Sequence[str]
    ids: set[str] = field(default_factory=set)
    _sources: list[list[str]] = field(init=False, default_factory=list)
    _where: dict[str, list[tuple[int, int]]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.ids = {i for i in self.ids if i}
        for text in self.texts:
            words = [w for w, _, _ in _tokens(text or "")]
            if not words:
                continue
            s = len(self._sources)
            self._sources.append(words)
            for p, w in enumerate(words):
                spots = self._where.setdefault(w, [])
                if len(spots) < MAX_POSITIONS:
                    spots.append((s, p))

    def __bool__(self) -> bool:
        return bool(self._sources or self.ids)

    def probes(self, limit: int | None = MAX_PROBES) -> list[str] | None:
        """Words of which every copy holds one (one per run of RUN words, the longest, and every
        word with a digit), plus the ids; None when there are too many to ask SQL for."""
        found = set(self.ids)
        for words in self._sources:
            last = -1
            for start in range(0, max(1, len(words) - RUN + 1)):
                if last >= start:
                    continue  # this run already holds a chosen word
                window = range(start, min(len(words), start + RUN))
                last = max(window, key=lambda p: (words[p] not in _STOP, len(words[p]), p))
                found.add(words[last])
            found.update(w for w in words if any(c.isdigit() for c in w) and len(w) >= 4)
        return sorted(found) if limit is None or len(found) <= limit else None

    def _spans(self, text: str) -> list[tuple[int, int]]:
        toks = _tokens(text)
        marked = [False] * len(toks)
        words = [w for w, _, _ in toks]
        i = 0
        while i < len(words):
            best = 0
            for s, p in self._where.get(words[i], ()):
                src = self._sources[s]
                length = 0
                room = min(len(words) - i, len(src) - p)
                while length < room and words[i + length] == src[p + length]:
                    length += 1
                back = 0
                while i - back > 0 and p - back > 0 and words[i - back - 1] == src[p - back - 1]:
                    back += 1
                whole = back == i and i + length == len(words)  # the field is this copy, all of it
                chars = sum(len(w) for w in words[i - back : i + length])
                short_copy = whole and chars >= SHORT_FIELD_CHARS and (
                    length + back >= 2 or any(c.isdigit() for c in words[i])
                ) and not all(w in _STOP for w in words)
                run = words[i - back : i + length]
                if (len(run) >= RUN and not all(w in _STOP for w in run)) or short_copy:
                    for k in range(i - back, i + length):
                        marked[k] = True
                    best = max(best, length)
            i += max(1, best)
        spans: list[tuple[int, int]] = []
        for k, is_marked in enumerate(marked):
            if not is_marked:
                continue
            start, end = toks[k][1], toks[k][2]
            if spans and k > 0 and marked[k - 1]:
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((start, end))
        return spans

    def scrub_text(self, text: str, *, json_text: bool = False) -> str:
        """`text` with every copied run (and every id) replaced by FORGOTTEN. json_text: the
        text is (a piece of) JSON, matched between its quotes."""
        if not text or not self:
            return text
        for i in self.ids:
            text = text.replace(i, FORGOTTEN)
        if not self._sources:
            return text
        if json_text:
            parts = _UNESCAPED_QUOTE.split(text)
            return '"'.join(self.scrub_text(p) for p in parts)
        out, at = [], 0
        for start, end in self._spans(text):
            out.append(text[at:start])
            out.append(FORGOTTEN)
            at = end
        out.append(text[at:])
        return "".join(out)

    def scrub_value(self, value: Any) -> Any:
        """A JSON value with its strings (keys too) scrubbed."""
        if isinstance(value, str):
            return self.scrub_text(value)
        if isinstance(value, list):
            return [self.scrub_value(v) for v in value]
        if isinstance(value, dict):
            return {self.scrub_text(k): self.scrub_value(v) for k, v in value.items()}
        return value

    def scrub_json_text(self, text: str) -> str:
        """A column of JSON text (a tool result): parsed and scrubbed value by value when it is
        whole JSON, else (a chunk of one, plain text) matched between its quotes."""
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            return self.scrub_text(text, json_text=True)
        if isinstance(value, str | int | float | bool) or value is None:
            return self.scrub_text(text, json_text=True)
        scrubbed = self.scrub_value(value)
        return text if scrubbed == value else json.dumps(scrubbed, ensure_ascii=False, default=str)

    def scrub(self, value: Any) -> Any:
        """Any column's value: text or JSON."""
        if isinstance(value, str):
            return self.scrub_json_text(value)
        return self.scrub_value(value)

    def copied_share(self, text: str) -> float:
        """The share of `text`'s words that are copies of the forgotten texts (1.0 when the text
        names one of their ids and says little else)."""
        toks = _tokens(text or "")
        if not toks:
            return 0.0
        copied = sum(len(_tokens(text[s:e])) for s, e in self._spans(text))
        if any(i in text for i in self.ids):
            copied = max(copied, 1)
        return copied / len(toks)


# --- where copies live ---------------------------------------------------------------------


@dataclass(frozen=True)
class Copies:
    """Columns of `model` ("app.Model", owned through `owner`) that may hold a forgotten
    message's words. `after(owner, rows)` re-derives what the scrubbed rows feed."""

    model: str
    fields: tuple[str, ...]
    after: Callable[[Any, list], None] | None = None


COPIES: list[Copies] = [
    Copies(
        "memory.ContextSnapshot",
        ("query", "reason", "text", "hits", "plan", "fallbacks", "included_ids", "tokens_by_zone"),
    ),
    Copies("memory.Topic", ("label", "keywords", "summary")),
    Copies("memory.PeriodSummary", ("summary", "top_topics")),
    Copies("memory.ConversationSummary", ("blocks",)),
    Copies("memory.UpkeepRun", ("detail",)),
    Copies("memory.SemanticCacheEntry", ("query", "payload")),
    Copies("memory.Fact", ("subject", "value", "statement", "corrected")),
    Copies("memory.ImportJob", ("report", "error")),
    # A scrubbed tool call's passages are made again from what is left of it.
    Copies("memory.ToolCall", ("result", "arguments"), store.rebuild_tool_call_passages),
]


def holds_copies(model: str, fields: Iterable[str], after=None) -> None:
    """Another app's columns that may hold a forgotten message's words (call from its ready())."""
    entry = Copies(model, tuple(fields), after)
    if entry not in COPIES:
        COPIES.append(entry)


def _candidates(qs, fields: Sequence[str], overlap: Overlap, *, every_row: bool = True):
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


def scrub(owner, overlap: Overlap) -> dict[str, int]:
    """Replace every copy of the forgotten words in every column of COPIES; the rows changed,
    by model. Run inside the forget's transaction."""
    changed: dict[str, int] = {}
    if not overlap:
        return changed
    for entry in COPIES:
        model = apps.get_model(entry.model)
        qs = _candidates(model.objects.filter(owner_id=owner.pk), entry.fields, overlap)
        rows = []
        for row in qs.only("pk", *entry.fields).iterator(chunk_size=500):
            dirty = []
            for f in entry.fields:
                before = getattr(row, f)
                after = overlap.scrub(before)
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
    texts = [message.content or ""]
    texts.extend(
        str(v.get("previous_content") or "") for v in (message.edit_history or []) if isinstance(v, dict)
    )
    return [t for t in texts if t]


def overlap_of(messages: Sequence) -> Overlap:
    """What a copy of these messages shares with them: their texts (every version) and ids
    (their chunks' too)."""
    ids = {m.pk for m in messages}
    ids.update(Message.objects.filter(chunk_parent_id__in=list(ids)).values_list("pk", flat=True))
    return Overlap([t for m in messages for t in texts_of(m)], ids)


# --- replies that quote it ----------------------------------------------------------------------

QUOTE_SHARE = 0.0  # any run of RUN words (or its id) makes a message a copy worth listing


@dataclass
class Copy:
    """A message that quotes or restates one being forgotten, for the forget dialog."""

    message: Any
    share: float  # of its words copied
    only_a_copy: bool  # repeats memory (an offline-recall reply, pasted tool results): ticked

    @property
    def percent(self) -> int:
        return max(1, round(self.share * 100))


def copies_of(owner, message) -> list[Copy]:
    """The owner's other messages that hold a copy of `message`'s words or name its id, most
    copied first. Candidates come from the passages' full-text index (any of the probe words),
    and Recollect's own texts (which have no passages) are read whole: the dialog stays quick
    on a large memory."""
    from django.contrib.postgres.search import SearchQuery

    overlap = overlap_of([message])
    probes = overlap.probes(limit=None) or []
    probes = sorted(probes, key=lambda w: (not any(c.isdigit() for c in w), -len(w)))[:MAX_PROBES]
    words = [w for w in probes if w.isalnum()]
    base = (
        Message.objects.owned_by(owner).logical().exclude(pk=message.pk)
        .only("id", "content", "metadata", "role", "timestamp", "conversation_id", "deleted")
    )
    indexed = Passage.objects.none()
    if words:
        query = SearchQuery(" | ".join(words), config="english", search_type="raw")
        indexed = Passage.objects.filter(owner_id=owner.pk, kind=Passage.Kind.MESSAGE, search_vector=query)
    own_text = base.filter(metadata__contains={"system_text": True})
    candidates = base.filter(pk__in=indexed.values("logical_message_id")) | _candidates(
        own_text, ["content"], overlap, every_row=False
    )
    found = []
    for other in candidates.distinct().iterator(chunk_size=500):
        share = overlap.copied_share(other.content)
        if share > QUOTE_SHARE:
            found.append(Copy(other, share, repeats_memory(other.metadata)))
    found.sort(key=lambda c: (not c.only_a_copy, -c.share, c.message.timestamp))
    return found[:MAX_COPIES_LISTED]


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
    rows = Message.objects.filter(owner_id=owner.pk, pk__in=ids).only("id", "content", "edit_history")
    return {m.pk: texts_of(m) for m in rows}


def gone_since_read(owner, seen: dict[str, list[str]]) -> Overlap:
    """Of the messages a running turn read (`seen`: id -> the texts it was shown), those that
    are gone now, as an Overlap to scrub what the turn is about to write.

    The turn calls this in the transaction that writes what it read, before writing: the rows
    still there are locked FOR KEY SHARE (which a forget's lock waits for, and edits do not), in
    id order as a forget locks them, so a forget either committed before (they are gone: scrub)
    or waits until this transaction commits (and then scrubs what it wrote)."""
    if not seen:
        return Overlap([])
    ids = sorted(seen)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM memory_message WHERE owner_id = %s AND id = ANY(%s) ORDER BY id FOR KEY SHARE",
            [owner.pk, ids],
        )
        live = {row[0] for row in cursor.fetchall()}
    gone = [i for i in ids if i not in live]
    return Overlap([t for i in gone for t in seen[i]], set(gone))


# --- forgetting: the cascade, in one place ------------------------------------------------------


def forget_message(owner, message_id: str, *, copies: Sequence[str] = ()) -> list[str]:
    """Permanent: content, chunks, passages and tool calls are gone, and so is every copy of its
    words in what was made from it (COPIES: tool results, snapshots, summaries, topics,
    facts, the conversation's title). Replies are re-linked to the forgotten message's parent
    so the thread stays connected.

    copies: ids of the owner's other messages that quote it (the forget dialog's ticked ones,
    from copies_of), forgotten with it in the same transaction. Returns the ids
    forgotten."""
    with transaction.atomic():
        ids = {str(message_id), *(str(c) for c in copies if c)}
        if any("\x00" in i for i in ids):  # no id holds one (and Postgres refuses it)
            raise NotFound("message", next(i for i in ids if "\x00" in i))
        first = store.get_message(owner, message_id, include_deleted=True)
        if first.is_chunk:
            raise ChunkEditError(first.pk, first.chunk_parent_id)
        # All locked at once, in id order, as a turn writing what it read locks them
        # (gone_since_read): neither waits for the other in a cycle.
        messages = list(
            Message.objects.owned_by(owner).logical().filter(pk__in=ids).order_by("pk").select_for_update()
        )
        if len(messages) < len(ids):
            missing = sorted(ids - {m.pk for m in messages})[0]
            raise NotFound("message", missing)
        _forget_locked(owner, messages)
    return [m.pk for m in messages]


def _forget_locked(owner, messages: list[Message]) -> None:
    ids = [m.pk for m in messages]
    by_id = {m.pk: m for m in messages}
    # Its topics, found while its memberships still exist (they go with it).
    topic_ids = topics_mentioning(owner, ids) | set(
        TopicMembership.objects.filter(message_id__in=ids).values_list("topic_id", flat=True)
    )
    overlap = overlap_of(messages)
    overlap.ids.update(_names_only_in(ids))
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
    scrub(owner, overlap)
    _retitle(owner, conversations, overlap, first_exchange)
    if topic_ids:
        refresh(owner, topic_ids)  # labels, keywords and summaries lose its words now
    store.queue_upkeep_on_commit(owner.pk, ids)


def _names_only_in(message_ids: Sequence[str]) -> set[str]:
    """Names that only these messages gave memory (an index lists them as key entities)."""
    own = EntityMention.objects.filter(message_id__in=list(message_ids)).values_list("entity_id", flat=True)
    shared = EntityMention.objects.filter(entity_id__in=own).exclude(message_id__in=list(message_ids))
    names = Entity.objects.filter(pk__in=own).exclude(pk__in=shared.values("entity_id"))
    return {name for name in names.values_list("name", flat=True) if len(name) >= 3}


def _retitle(owner, conversation_ids, overlap, first_exchange: set[str] = frozenset()) -> None:
    """A title that copies forgotten words (the one made from a forgotten first message, or the
    one the model wrote from a first exchange of which a message is forgotten: `first_exchange`
    names their conversations) is made again from the first message that stays, or left empty."""
    for conversation in Conversation.objects.owned_by(owner).filter(pk__in=list(conversation_ids)):
        title = conversation.title
        if not title:
            continue
        made_from_it = any(auto_title(t).lower() == title.lower() for t in overlap.texts) or (
            conversation.titled_by_model and conversation.pk in first_exchange
        )
        if not made_from_it and overlap.scrub_text(title) == title:
            continue
        first = (
            Message.objects.filter(conversation=conversation, is_chunk=False, deleted=False, role="user")
            .order_by("position").values_list("content", flat=True).first()
        )
        title = auto_title(first) if first else ""
        if overlap.scrub_text(title) != title:
            title = ""
        conversation.title = title.replace(FORGOTTEN, "").strip()
        conversation.titled_by_model = False
        conversation.save(update_fields=["title", "titled_by_model"])
