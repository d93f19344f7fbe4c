"""Chat history from elsewhere, read into Recollect's memory: ChatGPT's and Claude's
conversations.json, and JSON Lines (one message per line, the format `manage.py import_history`
and `eval_recall`'s datasets use). Recollect's own export is memory.transfer.portability's.

Each reader checks its whole input (or, for JSON Lines, each line) before anything is stored,
and says where a bad value is.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from memory.errors import MemoryStoreError
from memory.lifecycle import forgetting, tombstones
from memory.models import Conversation, Message, Role
from memory.storage.store import (
    NUL_REPLACEMENT,
    SURROGATE_REPLACEMENT,
    NewMessage,
    clean_content,
    store_messages,
)
from memory.transfer import sources
from memory.transfer.export import FORMAT
from memory.transfer.portability import InvalidExport


@dataclass
class ParsedMessage:
    external_id: str
    role: str
    content: str
    timestamp: dt.datetime
    parent: str | None  # the external id of the message it replies to
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedConversation:
    title: str
    external_id: str | None
    created_at: dt.datetime | None
    messages: list[ParsedMessage]  # parents before their replies
    skipped: int = 0  # nodes with nothing to import (hidden system prompts, tool output)


def _epoch(value: Any) -> dt.datetime | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        try:
            return dt.datetime.fromtimestamp(value, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    return None


def export_kind(item: Any) -> str | None:
    """"chatgpt" or "claude" for a conversation of their exports, None for anything else."""
    if isinstance(item, dict):
        if "mapping" in item:
            return "chatgpt"
        if "chat_messages" in item:
            return "claude"
    return None


NEITHER_EXPORT = (
    "a JSON array, but neither ChatGPT's conversations.json (items with \"mapping\") nor "
    "Claude's (items with \"chat_messages\")"
)


def detect_kind(data: Any) -> str:
    """"recollect", "chatgpt" or "claude" for parsed JSON; raise InvalidExport otherwise."""
    if isinstance(data, dict):
        if data.get("format") == FORMAT:
            return "recollect"
        raise InvalidExport(
            'a JSON object that is not a Recollect export (no "format": "recollect-memory")'
        )
    if not isinstance(data, list):
        raise InvalidExport(f"expected a JSON array of conversations, got {type(data).__name__}")
    for item in data:
        kind = export_kind(item)
        if kind:
            return kind
    if not data:
        return "chatgpt"  # an empty export of either kind imports nothing
    raise InvalidExport(NEITHER_EXPORT)


LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads pairs the ones that make a character


def _storable(value: Any) -> str:
    """An export's title, id or name as text Postgres can store: a NUL becomes ␀ and a lone
    surrogate (JSON's "\\ud800") U+FFFD, so one odd character does not cost a conversation.
    The same file gives the same ids, so a re-import still finds what it stored."""
    return LONE_SURROGATE.sub("\ufffd", str(value).replace("\x00", NUL_REPLACEMENT))


def clean_imported(content: Any) -> str:
    """clean_content's text: a NUL becomes ␀ and a lone surrogate U+FFFD, kept as a chat
    message's are, so one odd character costs no message."""
    return clean_content(content)[0]


def _chatgpt_text(content: Any) -> str:
    if not isinstance(content, dict):
        return ""
    parts = content.get("parts")
    if isinstance(parts, list):
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                else:
                    out.append(f"[{part.get('content_type', 'attachment')}]")
        return "\n".join(p for p in out if p)
    if isinstance(content.get("text"), str):
        return content["text"]
    return ""


def parse_chatgpt(data: list) -> list[ParsedConversation]:
    """ChatGPT's conversations.json: a tree per conversation (`mapping`), branches kept.

    Nodes with nothing to show (the hidden system prompt, tool output) are left out and their
    replies attached to the nearest kept ancestor. Replies are ordered so the branch that was
    current in ChatGPT comes last, which makes it the active branch here too.
    """
    return [chatgpt_conversation(i, conv) for i, conv in enumerate(data)]


def chatgpt_conversation(i: int, conv: Any) -> ParsedConversation:
    """Conversation `i` of a ChatGPT export (see parse_chatgpt); raise InvalidExport saying
    where it is wrong."""
    if not isinstance(conv, dict) or not isinstance(conv.get("mapping"), dict):
        raise InvalidExport(f"conversations[{i}].mapping: expected an object of message nodes")
    mapping = conv["mapping"]
    started = _epoch(conv.get("create_time"))
    current_path: set[str] = set()
    node_id = conv.get("current_node")
    while isinstance(node_id, str) and node_id in mapping and node_id not in current_path:
        current_path.add(node_id)
        node = mapping[node_id]
        node_id = node.get("parent") if isinstance(node, dict) else None
    children: dict[str | None, list[str]] = defaultdict(list)
    for nid, node in mapping.items():
        if not isinstance(node, dict):
            raise InvalidExport(f"conversations[{i}].mapping[{nid!r}]: expected an object")
        parent = node.get("parent")
        children[parent if parent in mapping else None].append(nid)

    def when(nid: str, mapping: dict = mapping) -> float:
        msg = mapping[nid].get("message")
        t = msg.get("create_time") if isinstance(msg, dict) else None
        return t if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0

    parsed = ParsedConversation(
        title=_storable(conv.get("title") or "Untitled")[:200],
        external_id=_storable(conv.get("conversation_id") or conv.get("id") or "") or None,
        created_at=started,
        messages=[],
    )
    last_time = started or timezone.now()
    # Iterative depth-first walk: (node id, external id of its nearest kept ancestor).
    stack = [(nid, None) for nid in sorted(children[None], key=lambda n: (n in current_path, when(n)),
                                             reverse=True)]
    visited: set[str] = set()
    while stack:
        nid, kept_parent = stack.pop()
        if nid in visited:
            continue
        visited.add(nid)
        msg = mapping[nid].get("message")
        here = kept_parent
        if isinstance(msg, dict):
            author = msg.get("author") if isinstance(msg.get("author"), dict) else {}
            role = author.get("role")
            text = _chatgpt_text(msg.get("content"))
            hidden = (msg.get("metadata") or {}).get("is_visually_hidden_from_conversation") \
                if isinstance(msg.get("metadata"), dict) else False
            if role in ("user", "assistant", "system") and text.strip() and not hidden:
                stamp = _epoch(msg.get("create_time")) or last_time
                last_time = stamp
                ext = _storable(msg.get("id") or nid)
                meta: dict[str, Any] = {"imported": True, "source": "chatgpt", "external_id": ext}
                info = msg.get("metadata") if isinstance(msg.get("metadata"), dict) else {}
                model = info.get("model_slug")
                if model:
                    meta["model"] = _storable(model)
                parsed.messages.append(ParsedMessage(ext, role, text, stamp, kept_parent, meta))
                here = ext
            else:
                parsed.skipped += 1
        # Push so the current branch's child is popped last.
        kids = sorted(children.get(nid, []), key=lambda n: (n in current_path, when(n)), reverse=True)
        stack.extend((k, here) for k in kids)
    return parsed


def parse_claude(data: list) -> list[ParsedConversation]:
    """Claude's conversations.json: a list of threads (`chat_messages`), linear unless the
    export names parents (parent_message_uuid)."""
    return [claude_conversation(i, conv) for i, conv in enumerate(data)]


def claude_conversation(i: int, conv: Any) -> ParsedConversation:
    """Conversation `i` of a Claude export (see parse_claude); raise InvalidExport saying where
    it is wrong."""
    if not isinstance(conv, dict) or not isinstance(conv.get("chat_messages"), list):
        raise InvalidExport(f"conversations[{i}].chat_messages: expected a list of messages")
    started = _epoch(conv.get("created_at"))
    parsed = ParsedConversation(
        title=_storable(conv.get("name") or "Untitled")[:200],
        external_id=_storable(conv.get("uuid") or "") or None,
        created_at=started,
        messages=[],
    )
    known: set[str] = set()
    previous: str | None = None
    last_time = started or timezone.now()
    for j, m in enumerate(conv["chat_messages"]):
        if not isinstance(m, dict):
            raise InvalidExport(f"conversations[{i}].chat_messages[{j}]: expected an object")
        sender = m.get("sender")
        role = {"human": "user", "assistant": "assistant"}.get(sender)
        if role is None:
            raise InvalidExport(
                f"conversations[{i}].chat_messages[{j}].sender: "
                f'expected "human" or "assistant", got {sender!r}'
            )
        text = m.get("text") if isinstance(m.get("text"), str) else ""
        if not text.strip() and isinstance(m.get("content"), list):
            text = "\n".join(
                part["text"] for part in m["content"]
                if isinstance(part, dict) and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            )
        ext = _storable(m.get("uuid") or f"{parsed.external_id}:{j}")
        if not text.strip():
            parsed.skipped += 1
            continue
        stamp = _epoch(m.get("created_at")) or last_time
        last_time = stamp
        parent = m.get("parent_message_uuid")
        parent = parent if parent in known else previous
        meta: dict[str, Any] = {"imported": True, "source": "claude", "external_id": ext}
        attached = [f for key in ("attachments", "files") if isinstance(m.get(key), list) for f in m[key]]
        files = [_storable(f["file_name"]) for f in attached
                 if isinstance(f, dict) and f.get("file_name")]
        if files:
            meta["attachments"] = files
        parsed.messages.append(ParsedMessage(ext, role, text, stamp, parent, meta))
        known.add(ext)
        previous = ext
    return parsed


@dataclass
class HistoryReport:
    added: int = 0
    skipped: int = 0
    bad: int = 0
    conversations: int = 0
    errors: list[str] = field(default_factory=list)
    replaced: int = 0  # messages stored with characters replaced (a NUL, half a UTF-16 pair, bad UTF-8)
    left_out: tombstones.LeftOut = field(default_factory=tombstones.LeftOut)  # forgotten before
    conversation_ids: list[str] = field(default_factory=list)  # the conversations it started, in order

    def counts(self) -> dict[str, Any]:
        """What an import job's report keeps of it."""
        return {"added": self.added, "skipped": self.skipped, "bad": self.bad,
                "conversations": self.conversations, **self.left_out.as_report(),
                **replaced_report(self.replaced)}


def replaced_report(count: int) -> dict[str, Any]:
    """An import report's count of messages with characters replaced, as the chat says it."""
    if not count:
        return {"replaced": 0, "replaced_note": ""}
    had = "1 message had" if count == 1 else f"{count:,} messages had"
    shown = f"shown as {SURROGATE_REPLACEMENT} or {NUL_REPLACEMENT}"
    return {"replaced": count, "replaced_note": f"{had} characters replaced ({shown})"}


def had_replacements(content: str, notes: dict[str, Any]) -> bool:
    """Whether storing `content` replaced characters (clean_content's notes), or the file's
    reading already had (U+FFFD where its bytes were not UTF-8)."""
    return bool(notes) or SURROGATE_REPLACEMENT in content


def import_conversations(owner, conversations: Iterable[ParsedConversation], *, embed: bool | None = True,
                         progress: Callable[[int], None] | None = None) -> HistoryReport:
    """Store parsed conversations; a message whose external id the owner already has is
    skipped, and new replies to it join its conversation (so a later export adds only what
    is new)."""
    report = HistoryReport()
    left_in: list[str] = []  # conversations that had a forgotten message left out
    for conv in conversations:
        ext_ids = [m.external_id[:200] for m in conv.messages]
        existing = {}
        for start in range(0, len(ext_ids), 5000):
            existing.update({
                e: (pk, cid) for e, pk, cid in Message.objects.owned_by(owner).logical()
                .filter(external_id__in=ext_ids[start:start + 5000])
                .values_list("external_id", "pk", "conversation_id")
            })
        stored: dict[str, str] = {e: pk for e, (pk, _) in existing.items()}
        cleaned: list[tuple[ParsedMessage, str, str | MemoryStoreError, dict[str, Any]]] = []
        for m in conv.messages:
            try:
                content, notes = clean_content(m.content)
            except MemoryStoreError as exc:
                content, notes = exc, {}
            cleaned.append((m, m.external_id[:200], content, notes))
        asked = [
            (i, tombstones.Known((ext,), m.role, content)) for i, (m, ext, content, _) in enumerate(cleaned)
            if ext not in stored and isinstance(content, str)
        ]
        found = tombstones.forgotten(owner, [known for _, known in asked])
        forgotten = {asked[n][0]: when for n, when in found.items()}
        items: list[NewMessage] = []
        left_out = False
        for i, (m, ext, content, notes) in enumerate(cleaned):
            if ext in stored:
                report.skipped += 1
                continue
            if isinstance(content, MemoryStoreError):
                report.bad += 1
                report.errors.append(f"{conv.title!r} message {ext}: {content}")
                stored[ext] = stored.get(m.parent) if m.parent else None  # replies skip past it
                continue
            if i in forgotten:  # forgotten since: its replies hang from what it replied to
                report.left_out.add(forgotten[i], content)
                left_out = True
                stored[ext] = stored.get(m.parent) if m.parent else None
                continue
            report.replaced += had_replacements(content, notes)
            item = NewMessage(role=m.role, content=content, timestamp=m.timestamp,
                              parent_id=stored.get(m.parent) if m.parent else None,
                              metadata=m.metadata, external_id=ext)
            stored[ext] = item.id
            items.append(item)
        if progress:
            progress(len(conv.messages))
        if not items:
            continue
        with transaction.atomic():
            if existing:
                target = Conversation.objects.get(pk=next(iter(existing.values()))[1])
            else:
                target = Conversation.objects.create(owner=owner, title=conv.title or "Untitled")
                if conv.created_at:
                    Conversation.objects.filter(pk=target.pk).update(created_at=conv.created_at)
                report.conversations += 1
                report.conversation_ids.append(target.pk)
            store_messages(owner, target, items, embed=embed)
            keep_dates(target.pk)
        if left_out:
            left_in.append(target.pk)
        report.added += len(items)
    if report.left_out.count:  # the file's titles may quote what was forgotten
        forgetting.forget_left_out(owner, report.left_out.texts or [], left_in)
    return report


def keep_dates(conversation_id: str) -> None:
    """An imported conversation is as old as its messages: created no later than its first,
    last active at its newest (storing set "now"), so a list by activity shows it where it
    belongs in time, not as "just now"."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Conversation._meta.db_table} AS c SET updated_at = m.last, "
            "created_at = LEAST(c.created_at, m.first) "
            f"FROM (SELECT max(timestamp) AS last, min(timestamp) AS first FROM {Message._meta.db_table} "
            "WHERE conversation_id = %s AND NOT is_chunk) AS m WHERE c.id = %s AND m.last IS NOT NULL",
            [conversation_id, conversation_id],
        )


# --- JSON Lines ---------------------------------------------------------------------------------


class LineError(ValueError):
    """A JSON Lines line that cannot be imported (the message says why)."""


class LineTooDeep(LineError):
    """A JSON Lines line nested deeper than the decoder follows."""


def _check_storable(name: str, value: str) -> None:
    """Raise LineError unless Postgres can store `value`: a NUL or a lone surrogate (JSON's "\\u0000",
    "\\ud800") in a title, id or speaker is this line's fault, not the file's."""
    if "\x00" in value:
        raise LineError(f'"{name}" holds a NUL character (\\u0000)')
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LineError(
            f'"{name}" holds a lone surrogate ({value[exc.start]!r}) that is not a character'
        ) from None


def parse_line(raw: str) -> dict:
    """One JSON Lines message: {"conversation", "role", "content", "timestamp"} and optionally
    "external_id" and "speaker", checked and normalised (an aware timestamp)."""
    if isinstance(raw, sources.TooLong):
        raise LineError(f"longer than {sources.max_line_chars():,} characters (MAX_MESSAGE_CHARS and "
                        "room for the other fields); the line was not read")
    try:
        data = sources.loads(raw)
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except sources.TooDeep:
        raise LineTooDeep("nested too deeply to read (thousands of levels of [ or {)") from None
    if not isinstance(data, dict):
        raise LineError("expected a JSON object")
    conv = data.get("conversation")
    if not isinstance(conv, str) or not conv.strip():
        raise LineError('"conversation" must be a non-empty string')
    role = data.get("role")
    if role not in Role.values:
        raise LineError(f'"role" must be one of {", ".join(Role.values)}, got {role!r}')
    content = data.get("content")
    try:
        clean_imported(content)
    except MemoryStoreError as exc:
        raise LineError(str(exc)) from None
    stamp = data.get("timestamp")
    if not isinstance(stamp, str):
        raise LineError('"timestamp" must be an ISO-8601 string')
    try:
        when = dt.datetime.fromisoformat(stamp.strip())
    except ValueError:
        raise LineError(f'"timestamp" {stamp!r} is not ISO-8601') from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    external_id = data.get("external_id")
    if external_id is not None and not isinstance(external_id, (str, int)):
        raise LineError('"external_id" must be a string')
    speaker = data.get("speaker")
    if speaker is not None and not isinstance(speaker, str):
        raise LineError('"speaker" must be a string')
    for name, value in (("conversation", conv), ("external_id", external_id), ("speaker", speaker)):
        if isinstance(value, str):
            _check_storable(name, value)
    return {
        "conversation": conv.strip()[:200],
        "role": role,
        "content": content,
        "timestamp": when,
        "external_id": str(external_id) if external_id is not None else None,
        "speaker": speaker,
    }


def import_key(item: dict) -> str:
    """The id that makes re-imports add nothing: the given external_id, or a content hash."""
    if item["external_id"]:
        return item["external_id"][:200]
    digest = hashlib.sha1(
        "\x1f".join(
            [item["conversation"], item["role"], item["timestamp"].isoformat(), item["content"]]
        ).encode("utf-8", "surrogatepass")
    ).hexdigest()
    return f"auto:{digest}"


JSON_LINES_BATCH = 200


def import_json_lines(
    owner,
    lines: Iterable[str],
    *,
    embed: bool | None = True,
    progress: Callable[[int], None] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> HistoryReport:
    """Store JSON Lines messages (see parse_line), JSON_LINES_BATCH at a time.

    A conversation title is one thread: each message replies to the one before it, after what
    the owner already has under that title. A message imported before (the same import_key)
    is skipped; a bad line or a message that cannot be stored costs only itself and is
    reported as "line N: why" to `on_error` (else kept in the report's errors).
    """
    report = HistoryReport()
    job = _JsonLines(owner, embed, report, on_error or report.errors.append)
    pending: list[tuple[int, dict]] = []
    for lineno, raw in enumerate(lines, start=1):
        if progress:
            progress(1)
        if sources.blank(raw):
            continue
        try:
            item = parse_line(raw)
        except LineError as exc:
            report.bad += 1
            job.on_error(f"line {lineno}: {exc}")
            continue
        pending.append((lineno, item))
        if len(pending) >= JSON_LINES_BATCH:
            job.flush(pending)
            pending = []
    if pending:
        job.flush(pending)
    if report.left_out.count:  # what else the file holds may quote what was forgotten
        forgetting.forget_left_out(owner, report.left_out.texts or [], [])
    return report


class _JsonLines:
    """The threads a JSON Lines import is adding to, by conversation title."""

    def __init__(
        self, owner, embed: bool | None, report: HistoryReport, on_error: Callable[[str], None]
    ) -> None:
        self.owner = owner
        self.embed = embed
        self.report = report
        self.on_error = on_error
        self.conversations: dict[str, Conversation] = {}
        self.last_id: dict[str, str | None] = {}
        self.seen: set[str] = set()

    def _conversation(self, title: str) -> Conversation:
        conv = self.conversations.get(title)
        if conv is None:
            titled = Conversation.objects.owned_by(self.owner).filter(title=title)
            conv = titled.order_by("created_at").first()
            if conv is None:
                conv = Conversation.objects.create(owner=self.owner, title=title)
                self.report.conversations += 1
                self.report.conversation_ids.append(conv.pk)
            self.conversations[title] = conv
            last = (
                Message.objects.owned_by(self.owner).logical().filter(conversation=conv)
                .order_by("-position").values_list("pk", flat=True).first()
            )
            self.last_id[title] = last
        return conv

    def flush(self, pending: list[tuple[int, dict]]) -> None:
        keys = {import_key(item) for _, item in pending}
        existing = set(
            Message.objects.owned_by(self.owner).filter(external_id__in=keys, is_chunk=False)
            .values_list("external_id", flat=True)
        )
        forgotten = tombstones.forgotten(self.owner, [
            tombstones.Known((import_key(item),), item["role"], clean_imported(item["content"]))
            for _, item in pending
        ])
        by_conv: OrderedDict[str, list[tuple[int, NewMessage]]] = OrderedDict()
        for n, (lineno, item) in enumerate(pending):
            key = import_key(item)
            if key in existing or key in self.seen:
                self.report.skipped += 1
                continue
            self.seen.add(key)
            if n in forgotten:  # the thread goes on from the message before it
                self.report.left_out.add(forgotten[n], clean_imported(item["content"]))
                continue
            self.report.replaced += had_replacements(*clean_content(item["content"]))
            title = item["conversation"]
            self._conversation(title)
            metadata = {"imported": True}
            if item["external_id"]:
                metadata["external_id"] = item["external_id"]
            if item["speaker"]:
                metadata["speaker"] = item["speaker"]
            new = NewMessage(
                role=item["role"], content=item["content"], timestamp=item["timestamp"],
                parent_id=self.last_id[title], metadata=metadata, external_id=key,
            )
            self.last_id[title] = new.id
            by_conv.setdefault(title, []).append((lineno, new))
        for title, rows in by_conv.items():
            conv = self.conversations[title]
            try:
                store_messages(self.owner, conv, [m for _, m in rows], embed=self.embed)
                self.report.added += len(rows)
            except Exception:
                # Store one by one so one bad row costs only itself; the thread skips it.
                stored = {m.id for m in Message.objects.filter(pk__in=[m.id for _, m in rows])}
                last_ok = rows[0][1].parent_id
                for lineno, m in rows:
                    if m.parent_id not in stored and m.parent_id != last_ok:
                        m.parent_id = last_ok
                    try:
                        store_messages(self.owner, conv, [m], embed=self.embed)
                        self.report.added += 1
                        stored.add(m.id)
                        last_ok = m.id
                    except Exception as exc:  # noqa: BLE001 - reported with its line number
                        self.report.bad += 1
                        self.on_error(f"line {lineno}: could not store: {exc}")
                self.last_id[title] = last_ok
            keep_dates(conv.pk)


def detect_text_kind(text: str) -> tuple[str, Any]:
    """detect_kind_of for text in memory."""
    return detect_kind_of(sources.open_text(text))


def detect_kind_of(source: sources.Source) -> tuple[str, Any]:
    """("jsonl", None), (kind, None) for a ChatGPT or Claude export (read a conversation at a
    time: see conversations_of), or ("recollect", parsed JSON); raise InvalidExport for text
    that is none of them.

    A JSON Lines file starts with a line that is a whole JSON object; an export is one JSON
    value across the file (a pretty-printed one starts with a line holding only "[" or "{").
    """
    first, line = sources.peek(source)
    if first == "[":
        return _kind_of_array(source), None
    if first != "{":
        return "jsonl", None
    try:
        if isinstance(sources.loads(line), dict):
            return "jsonl", None
    except (json.JSONDecodeError, sources.TooDeep):
        pass
    try:
        with source.text() as stream:
            data = sources.loads(stream.read())
    except (json.JSONDecodeError, sources.TooDeep):
        return "jsonl", None  # bad lines are reported one by one
    if isinstance(data, dict) and data.get("format") != FORMAT:
        return "jsonl", None  # a one-line JSON Lines file
    return detect_kind(data), data


def _kind_of_array(source: sources.Source) -> str:
    """The kind of the export a JSON array is: its first item that is a conversation of either
    says (usually the first: parsing then says what is wrong with any before it); an array of
    neither is an InvalidExport."""
    empty = True
    with source.text() as stream:
        for item in sources.ArrayReader(stream):
            empty = False
            kind = export_kind(item)
            if kind:
                return kind
    if empty:
        return "chatgpt"  # an empty export of either kind imports nothing
    raise InvalidExport(NEITHER_EXPORT)


CONVERSATION_READERS = {"chatgpt": chatgpt_conversation, "claude": claude_conversation}


def conversations_of(source: sources.Source, kind: str) -> Iterator[ParsedConversation]:
    """The conversations of a ChatGPT or Claude export, parsed one at a time as the file is
    read; raise InvalidExport at the first that is wrong."""
    read = CONVERSATION_READERS[kind]
    with source.text() as stream:
        for i, item in enumerate(sources.ArrayReader(stream)):
            yield read(i, item)
