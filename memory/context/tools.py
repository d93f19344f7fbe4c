"""The memory tools the LLM calls (reading and searching messages, walking the topic tree and
the levels, find, summaries, stats, the entity graph), in the OpenAI tools format.

`execute_tool` never raises and never reads another user's rows: arguments are parsed and
validated against the tool's own JSON schema first (missing, extra or mistyped arguments are
reported by name), every read goes through `owned_by(owner)` and visible-only querysets, and
results are bounded (limits capped, long texts cut with a hint how to page on).

Any character stays readable through the tools alone (issue 13 §1): every text a tool returns
(a message's content, a tool call's result) comes with `offset`, `total_chars` and `next_offset`
(null once the end is in hand), and get_message_by_id / get_tool_call read on from any
character `offset` in pages that fit MAX_RESULT_CHARS. In the list tools `offset` keeps
counting items (messages, chunks, matches); in a text it counts characters.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count, Exists, Max, Min, OuterRef, Q, Sum
from django.utils import timezone

from memory.context import compression
from memory.errors import MemoryStoreError, NotFound
from memory.models import (
    Conversation,
    Entity,
    EntityMention,
    Message,
    PeriodSummary,
    ToolCall,
    Topic,
)
from memory.organizing import hierarchy
from memory.storage import sessions
from memory.tokens import count_tokens, snip

logger = logging.getLogger(__name__)

MAX_CONTENT_CHARS = 6000  # per text in a list or search result; page on with get_message_by_id
MAX_RESULT_CHARS = 24000  # a whole tool result; past it, fewer items and a next_offset
# One page of a text read by id: a whole 4,000-token chunk (16-20k characters) at once, with
# room in MAX_RESULT_CHARS for the rest of the result and JSON escapes.
PAGE_CHARS = 20000
FIND_TIMEOUT_MS = 1500
MAX_PATTERN_CHARS = 300


class ToolError(Exception):
    """A request the tool cannot carry out; the message is shown to the model as is."""


@dataclass
class ToolResult:
    """One tool call's outcome: what execute_tool returns, and what the chat shows and stores
    with the reply (call_id is the model's id for the call)."""

    ok: bool
    result: Any = None
    error: str = ""
    summary: str = ""
    duration_ms: float = 0.0
    name: str = ""
    arguments_text: str = ""
    call_id: str = ""
    started_at: dt.datetime = field(default_factory=timezone.now)

    def content(self, budget: int = MAX_RESULT_CHARS) -> str:
        """What goes back to the model as the tool message: at most MAX_RESULT_CHARS characters,
        or `budget` (what is left of the turn's tool-result budget) when that is less."""
        payload = self.result if self.ok else {"error": self.error}
        text = json.dumps(payload, ensure_ascii=False, default=str)
        if len(text) > MAX_RESULT_CHARS and budget >= MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"… [cut at {MAX_RESULT_CHARS} characters]"
        elif len(text) > budget:
            text = text[:budget] + f"… [cut at {budget} characters: this turn's tool-result budget is spent]"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "result": self.result, "error": self.error, "summary": self.summary}


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, dict[str, Any]]
    required: list[str]
    handler: Callable[..., tuple[Any, str]]
    keywords: tuple[str, ...] = ()
    core: bool = False
    # How a call reads in the chat ("searched memory for …"), from its arguments; "" when they
    # do not say enough, and the call reads "called <name>".
    label: Callable[[dict[str, Any]], str] | None = None
    schema_cache: dict[str, Any] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        if not self.schema_cache:
            self.schema_cache.update(
                {
                    "type": "function",
                    "function": {
                        "name": self.name,
                        "description": self.description,
                        "parameters": {
                            "type": "object",
                            # "shorten" is ours (_validate), not JSON Schema.
                            "properties": {
                                key: {k: v for k, v in spec.items() if k != "shorten"}
                                for key, spec in self.parameters.items()
                            },
                            "required": self.required,
                            "additionalProperties": False,
                        },
                    },
                }
            )
        return self.schema_cache


TOOLS: dict[str, Tool] = {}


def tool(
    name: str,
    description: str,
    parameters: dict[str, dict[str, Any]],
    required=(),
    keywords: tuple[str, ...] = (),
    core: bool = False,
    label: Callable[[dict[str, Any]], str] | None = None,
):
    def register(fn):
        TOOLS[name] = Tool(name, description, parameters, list(required), fn, keywords, core, label)
        return fn

    return register


def _searched(args: dict[str, Any]) -> str:
    query = args.get("query")
    return f"searched memory for “{snip(query, 80)}”" if query else ""


def _searched_and_read(args: dict[str, Any]) -> str:
    query = args.get("query")
    return f"searched and read the best matches for “{snip(query, 80)}”" if query else ""


def shorten_words(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at the last word that fits."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return cut[:space] if space > limit // 2 else cut


def _opened_messages(ids: Any) -> str:
    if not isinstance(ids, list):
        return ""
    return f"opened {len(ids)} message{'s' if len(ids) != 1 else ''}"


def tool_schemas(names: list[str] | None = None) -> list[dict[str, Any]]:
    """OpenAI tool schemas, all of them or the named ones (unknown names are skipped)."""
    if names is None:
        return [t.schema() for t in TOOLS.values()]
    return [TOOLS[n].schema() for n in names if n in TOOLS]


def schema_tokens(schema: dict[str, Any]) -> int:
    return count_tokens(json.dumps(schema, ensure_ascii=False))


_QWORD = re.compile(r"[a-z0-9]+")


# A turn is offered the tools it is likely to need, not all of them: schemas are
# most of a prompt's fixed cost. Any tool still runs if the model calls it by name.
MAX_OFFERED_TOOLS = 8
_SCHEMA_TOKENS: dict[str, int] = {}


def _tool_tokens(t: Tool) -> int:
    if t.name not in _SCHEMA_TOKENS:
        _SCHEMA_TOKENS[t.name] = schema_tokens(t.schema())
    return _SCHEMA_TOKENS[t.name]


def select_tools(
    query: str,
    budget: int,
    *,
    recently_used: list[str] | None = None,
    wanted: list[str] | None = None,
    max_tools: int = MAX_OFFERED_TOOLS,
) -> tuple[list[dict[str, Any]], int]:
    """The tools this turn is offered, added in this order while their schemas fit
    `budget` tokens and at most `max_tools` are chosen: recently used tools (always kept while
    they fit), the core tools, the `wanted` ones (those the memory index points to), then the
    others whose keywords the query mentions, best first. Tools nothing points to are left out.
    Returns (schemas in registry order, tokens)."""
    words = set(_QWORD.findall((query or "").lower()))
    recent = [n for n in dict.fromkeys(recently_used or []) if n in TOOLS][:6]
    wanted = [n for n in dict.fromkeys(wanted or []) if n in TOOLS]

    # " " + k in this text: some word of the query starts with the keyword k (or is it).
    starts = " " + " ".join(words)

    def score(t: Tool) -> int:
        return sum(1 for k in t.keywords if " " + k in starts)

    first = recent + [t.name for t in TOOLS.values() if t.core] + wanted
    scores = {t.name: score(t) for t in TOOLS.values() if t.name not in first}
    relevant = sorted(
        (TOOLS[n] for n, s in scores.items() if s > 0), key=lambda t: -scores[t.name]
    )
    ordered = [TOOLS[n] for n in dict.fromkeys(first)] + relevant
    chosen, used = [], 0
    for t in ordered:
        if len(chosen) >= max(max_tools, len(recent)):
            break
        cost = _tool_tokens(t)
        if used + cost <= budget:
            chosen.append(t)
            used += cost
    # Keep the registry's order so the prompt is stable across turns (better prompt caching).
    names = {t.name for t in chosen}
    return [t.schema() for t in TOOLS.values() if t.name in names], used


# --- execution ---------------------------------------------------------------------------------


def execute_tool(
    owner, name: str, arguments: Any, *, conversation: Conversation | None = None,
    exclude_message_ids: Sequence[str] = (),
) -> ToolResult:
    """Run one tool call for `owner`. Never raises: bad input comes back as ok=False.
    exclude_message_ids: messages no search of this call returns (the turn's own message)."""
    from memory.finding.search import excluding

    started_at, started = timezone.now(), time.perf_counter()
    with excluding(exclude_message_ids):
        outcome = _execute_tool(owner, name, arguments, conversation, started)
    outcome.name, outcome.started_at = str(name or ""), started_at
    if isinstance(arguments, str):
        outcome.arguments_text = arguments
    elif arguments is not None:
        outcome.arguments_text = json.dumps(arguments, ensure_ascii=False, default=str)
    return outcome


def _execute_tool(owner, name: str, arguments: Any, conversation, started: float) -> ToolResult:
    try:
        t = TOOLS.get(str(name))
        if t is None:
            raise ToolError(f"unknown tool {str(name)[:60]!r}; available: {', '.join(TOOLS)}")
        args = parse_arguments(arguments)
        args = _validate(t, args)
        result, summary = t.handler(owner, conversation=conversation, **args)
        result = _bound(result)
        return ToolResult(True, result, "", summary, _ms(started))
    except ToolError as exc:
        return ToolResult(False, None, str(exc), f"{name}: {exc}"[:200], _ms(started))
    except NotFound as exc:
        return ToolResult(False, None, str(exc), f"{name}: {exc}"[:200], _ms(started))
    except MemoryStoreError as exc:
        return ToolResult(False, None, str(exc), f"{name}: {exc}"[:200], _ms(started))
    except Exception as exc:  # a tool bug must not end the turn; the model is told, we log it
        logger.exception("tool %s failed", name)
        return ToolResult(
            False,
            None,
            f"internal error in {name}: {type(exc).__name__}",
            f"{name} failed",
            _ms(started),
        )


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


# A \uXXXX escape (a surrogate pair as one), not one whose backslash is itself escaped.
_ESCAPE = re.compile(
    r"(?<!\\)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})|(?<!\\)\\u([0-9a-f]{4})", re.IGNORECASE
)


def _unescape(match: re.Match) -> str:
    if match.group(3):
        code = int(match.group(3), 16)
        # Control characters and lone surrogates stay escaped: they have nothing to show.
        return match.group(0) if code < 0x20 or 0xD800 <= code <= 0xDFFF else chr(code)
    high, low = int(match.group(1), 16), int(match.group(2), 16)
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def readable_json(text: str) -> str:
    """Tool arguments or results as a person reads them: `¿Cómo…`, not `\\u00bfC…` (also in
    JSON cut short, which does not parse)."""
    text = str(text or "")
    if "\\u" not in text:
        return text
    return _ESCAPE.sub(_unescape, text)


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments, a JSON object as text or already parsed; raises ToolError."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, (str, bytes)):
        try:
            value = json.loads(arguments)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ToolError(
                f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
                if isinstance(exc, json.JSONDecodeError)
                else "arguments are not valid JSON"
            ) from None
        if not isinstance(value, dict):
            raise ToolError("arguments must be a JSON object")
        return value
    raise ToolError("arguments must be a JSON object")


def _validate(t: Tool, args: dict[str, Any]) -> dict[str, Any]:
    extra = sorted(set(args) - set(t.parameters))
    if extra:
        raise ToolError(
            f"unexpected argument(s) {', '.join(extra)}; {t.name} takes "
            f"{', '.join(t.parameters) or 'no arguments'}"
        )
    missing = [r for r in t.required if args.get(r) in (None, "")]
    if missing:
        raise ToolError(f"missing required argument(s): {', '.join(missing)}")
    clean: dict[str, Any] = {}
    for key, value in args.items():
        spec = t.parameters[key]
        if value is None:
            continue
        kind = spec.get("type")
        if kind == "string":
            if not isinstance(value, str):
                raise ToolError(f"{key} must be a string")
            if len(value) > spec.get("maxLength", 10000) and spec.get("shorten"):
                # A model's long query (a pasted paragraph) is searched for by its start.
                value = shorten_words(value, spec["maxLength"])
            if len(value) > spec.get("maxLength", 10000):
                raise ToolError(f"{key} is too long (at most {spec.get('maxLength')} characters)")
            if "enum" in spec and value not in spec["enum"]:
                raise ToolError(f"{key} must be one of {', '.join(spec['enum'])}")
            _storable(key, value)
        elif kind == "integer":
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or (isinstance(value, float) and not math.isfinite(value))
                or int(value) != value
            ):
                raise ToolError(f"{key} must be an integer")
            value = int(value)
            if "minimum" in spec and value < spec["minimum"]:
                raise ToolError(f"{key} must be at least {spec['minimum']}")
            if "maximum" in spec and value > spec["maximum"]:
                value = spec["maximum"]  # a generous ask is capped, not refused
        elif kind == "boolean":
            if not isinstance(value, bool):
                raise ToolError(f"{key} must be true or false")
        elif kind == "array":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ToolError(f"{key} must be a list of strings")
            if len(value) > spec.get("maxItems", 100):
                raise ToolError(f"{key} may hold at most {spec['maxItems']} items")
            if not value:
                raise ToolError(f"{key} must not be empty")
            for item in value:
                _storable(key, item)
        clean[key] = value
    return clean


def _storable(key: str, value: str) -> None:
    """Refuse text Postgres cannot read (NUL, half a surrogate pair) with a clear error: no id,
    date, pattern or stored word holds either, and the query would fail as an internal error."""
    if "\x00" in value:
        raise ToolError(f"{key} must not contain a NUL character")
    if not value.isascii() and _LONE_SURROGATE.search(value):
        raise ToolError(f"{key} must not contain half of a surrogate pair")


def _bound(result: Any) -> Any:
    """Cut a too-large list result down to what fits MAX_RESULT_CHARS, saying so."""
    if not isinstance(result, dict):
        return result
    text = json.dumps(result, ensure_ascii=False, default=str)
    if len(text) <= MAX_RESULT_CHARS:
        return result
    for key in ("messages", "results", "items", "tool_calls", "matches", "summaries"):
        items = result.get(key)
        if isinstance(items, list) and items:
            while (
                len(items) > 1
                and len(json.dumps(result, ensure_ascii=False, default=str)) > MAX_RESULT_CHARS
            ):
                items.pop()
            result["truncated"] = True
            result["note"] = (
                f"result cut to {len(items)} {key} to stay within size; page with offset"
            )
            if "offset" in result:
                result["next_offset"] = result["offset"] + len(items)
            return result
    return result


# --- shapes ------------------------------------------------------------------------------------


def _json_len(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str))


def _page_text(text: str, offset: int, budget: int) -> str:
    """The longest piece of `text` from `offset` whose JSON string takes at most `budget`
    characters (quotes, newlines and control characters grow when escaped)."""
    hi = max(0, min(budget, len(text) - offset))
    if _json_len(text[offset : offset + hi]) <= budget:
        return text[offset : offset + hi]
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _json_len(text[offset : offset + mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[offset : offset + lo]


def _check_offset(offset: int, total: int, what: str) -> None:
    if offset and offset >= total:
        raise ToolError(
            f"offset {offset} is past the end of {what}: it has {total} characters, "
            f"so offsets run from 0 to {max(0, total - 1)}"
        )


def _text_page(
    out: dict[str, Any], key: str, text: str, offset: int, budget: int, read_on: str
) -> dict[str, Any]:
    """Put the page of `text` at `offset` under `key` with where it sits in the whole text."""
    piece = _page_text(text, offset, budget) if offset < len(text) else ""
    end = offset + len(piece)
    out[key] = piece
    out["offset"] = offset
    out["total_chars"] = len(text)
    out["next_offset"] = end if end < len(text) else None
    out["remaining_chars"] = len(text) - end
    if end < len(text):
        out["truncated"] = True
        out["note"] = (
            f"characters {offset}-{end} of {len(text)} shown; read on with "
            f"{read_on}(id={out['id']!r}, offset={end})"
        )
    return out


def message_dict(m: Message, *, max_chars: int = MAX_CONTENT_CHARS, offset: int = 0) -> dict[str, Any]:
    """A message for the model: its content from character `offset`, at most `max_chars`
    JSON characters of it, with total_chars and next_offset (null when the rest is shown)."""
    out: dict[str, Any] = {
        "id": m.pk,
        "content": "",
        "role": m.role,
        "timestamp": m.timestamp.isoformat(),
        "parentId": m.parent_id,
        "conversationId": m.conversation_id,
        "isChunk": m.is_chunk,
    }
    if m.is_chunk:
        out["chunkIndex"] = m.chunk_index
        out["chunkParentId"] = m.chunk_parent_id
    if m.edited:
        out["edited"] = True
    return _text_page(out, "content", m.content, offset, max_chars, "get_message_by_id")


def compressed_message_dict(message, query: str, *, max_chars: int) -> dict[str, Any] | None:
    """A long message of a search result as its best sentences for `query`, with their
    offsets (None: the message is short enough, or compression is off, so it is shown as is)."""
    text = message.content
    if not settings.RESULT_COMPRESSION or len(text) <= settings.RESULT_COMPRESSION_MIN_CHARS:
        return None
    cut = compression.compress(text, query, max_chars=min(max_chars, settings.RESULT_COMPRESSION_CHARS))
    if not cut.excerpts:
        return None
    item = message_dict(message, max_chars=0)
    for key in ("offset", "next_offset", "remaining_chars"):
        item.pop(key, None)
    item["content"] = cut.text()
    item["excerpts"] = [{"offset": e.start, "end": e.end} for e in cut.excerpts]
    item["truncated"] = True
    item["compressed"] = True
    item["note"] = (
        f"the sentences best matching the query: {cut.kept_chars} of {cut.total_chars} characters, "
        f"at the offsets in excerpts; read on around any with get_message_by_id(id={message.pk!r}, offset=N)"
    )
    return item


def tool_call_dict(
    c: ToolCall, *, max_chars: int = MAX_CONTENT_CHARS, offset: int = 0
) -> dict[str, Any]:
    """A stored tool call: its result from character `offset` (as message_dict pages content)."""
    out: dict[str, Any] = {
        "id": c.pk,
        "toolName": c.tool_name,
        "arguments": c.arguments[:2000],
        "result": "",
        "timestamp": c.timestamp.isoformat(),
        "messageId": c.message_id,
        "isChunk": c.is_chunk,
        "isError": c.is_error,
    }
    if c.is_chunk:
        out["chunkIndex"] = c.chunk_index
        out["chunkParentId"] = c.chunk_parent_id
    return _text_page(out, "result", c.result, offset, max_chars, "get_tool_call")


def _room(shell: Any, slack: int = 300) -> int:
    """JSON characters left for text in a result whose other parts take `shell`'s size."""
    return max(0, min(PAGE_CHARS, MAX_RESULT_CHARS - _json_len(shell) - slack))


def _topic_dict(t: Topic, *, children: int | None = None) -> dict[str, Any]:
    out = {
        "id": t.pk,
        "label": t.label,
        "level": t.level,
        "message_count": t.message_count,
        "period": [
            t.period_start.isoformat() if t.period_start else None,
            t.period_end.isoformat() if t.period_end else None,
        ],
        "summary": t.summary[:600],
        "keywords": t.keywords[:8],
    }
    if children is not None:
        out["children"] = children
    return out


def _child_counts(owner, parents) -> dict[str, int]:
    """How many child topics each of `parents` has (those with none are left out)."""
    return dict(
        Topic.objects.owned_by(owner)
        .filter(parent__in=parents)
        .values("parent_id")
        .annotate(n=Count("id"))
        .values_list("parent_id", "n")
    )


# --- argument helpers ---------------------------------------------------------------------------


def _conversation(owner, conversation_id: str | None):
    if not conversation_id:
        return None
    return Conversation.objects.owned_by(owner).filter(pk=conversation_id).first() or _raise(
        NotFound("conversation", conversation_id)
    )


def _raise(exc: Exception):
    raise exc


def _message(owner, message_id: str) -> Message:
    m = Message.objects.visible_to(owner).filter(pk=str(message_id)).first()
    if m is None:
        raise NotFound("message", message_id)
    return m


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_DATE_RANGE = re.compile(r"^\s*(.+?)\s*(?:\.\.|/| to )\s*(.+?)\s*$")


# The end of a period that runs to the calendar's last day ("..9999-12-31", "9999-12"): the
# day after it is past what a datetime holds, so the end is clamped here (as recall's
# question periods are) instead of failing as an internal error.
END_OF_TIME = dt.datetime.max


def _parse_day(text: str, *, end: bool = False) -> dt.datetime:
    text = text.strip()
    try:
        if re.fullmatch(r"\d{4}-\d{2}", text):
            year, month = map(int, text.split("-"))
            start = dt.datetime(year, month, 1)
            if end:
                start = END_OF_TIME if (year, month) == (9999, 12) else dt.datetime(
                    year + (month == 12), month % 12 + 1, 1
                )
            return timezone.make_aware(start)
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(
            f"cannot read {text[:40]!r} as a date; use YYYY-MM-DD, YYYY-MM, 'today', 'this_week', "
            "'this_month' or a range like 2024-05-01..2024-05-31"
        ) from None
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    if end and len(text) <= 10:
        try:
            value += dt.timedelta(days=1)  # a whole day, inclusive
        except OverflowError:
            value = timezone.make_aware(END_OF_TIME, value.tzinfo)
    return value


def parse_period(
    period: str, now: dt.datetime | None = None
) -> tuple[dt.datetime | None, dt.datetime | None, str]:
    """(start, end, label) of a period name, a date, a month or a date range; end exclusive."""
    now = timezone.localtime(now or timezone.now())
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    key = period.strip().lower().replace(" ", "_")
    named = {
        "today": (today, None),
        "yesterday": (today - dt.timedelta(days=1), today),
        "this_week": (today - dt.timedelta(days=today.weekday()), None),
        "last_week": (
            today - dt.timedelta(days=today.weekday() + 7),
            today - dt.timedelta(days=today.weekday()),
        ),
        "this_month": (today.replace(day=1), None),
        "last_month": (
            (today.replace(day=1) - dt.timedelta(days=1)).replace(day=1),
            today.replace(day=1),
        ),
        "older": (None, today.replace(day=1)),
    }
    if key in named:
        start, end = named[key]
        return start, end, key
    m = _DATE_RANGE.match(period)
    if m and not re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", period.strip()):
        start, end = _parse_day(m.group(1)), _parse_day(m.group(2), end=True)
    else:
        start, end = _parse_day(period), _parse_day(period, end=True)
        if end == start:
            end = start + dt.timedelta(days=1)
    if end <= start:
        raise ToolError("the period ends before it starts")
    return start, end, period.strip()


def _position(owner, value: str | None, *, end: bool = False) -> dt.datetime | None:
    """A bound given as a message id (its time) or a date."""
    if not value:
        return None
    m = Message.objects.owned_by(owner).filter(pk=value).only("timestamp").first()
    if m is not None:
        return m.timestamp + (dt.timedelta(microseconds=1) if end else dt.timedelta(0))
    if re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{26}", value):
        raise NotFound("message", value)
    return _parse_day(value, end=end)


LIMIT = {"type": "integer", "minimum": 1, "maximum": 50, "description": "how many (1-50)"}
OFFSET = {
    "type": "integer",
    "minimum": 0,
    "maximum": 1_000_000,
    "description": "skip this many (paging)",
}
ID = {"type": "string", "maxLength": 64}
# A position in a text; no maximum: a capped offset would silently show the wrong page.
CHAR_OFFSET = {
    "type": "integer",
    "minimum": 0,
    "description": "character to start reading at: 0, or the next_offset of the page before",
}


def _page(qs, limit: int, offset: int) -> tuple[list, int | None]:
    rows = list(qs[offset : offset + limit + 1])
    more = len(rows) > limit
    return rows[:limit], (offset + limit if more else None)


def _messages_page(qs, limit: int, offset: int, **head: Any) -> tuple[dict[str, Any], list[Message]]:
    """A tool result listing one page of messages: `head`'s keys, then offset, the messages and
    (when there are more) next_offset; with the page's rows."""
    rows, next_offset = _page(qs, limit, offset)
    result = {**head, "offset": offset, "messages": [message_dict(m, max_chars=1500) for m in rows]}
    if next_offset is not None:
        result["next_offset"] = next_offset
    return result, rows


# --- messages and search -----------------------------------------------------------------------


@tool(
    "get_message_by_id",
    "Read one message of memory by its id (from the memory index or a search), page by page: "
    "the result gives total_chars and next_offset; call again with offset=next_offset until "
    "next_offset is null. A chunk id reads that chunk.",
    {"id": {**ID, "description": "message id"}, "offset": CHAR_OFFSET},
    required=["id"],
    keywords=("message", "read", "full", "id"),
    core=True,
    label=lambda a: f"opened message {snip(a['id'], 40)}" if a.get("id") else "",
)
def get_message_by_id(owner, *, id: str, offset: int = 0, conversation=None):
    m = _message(owner, id)
    _check_offset(offset, len(m.content), f"message {m.pk}")
    item = message_dict(m, offset=offset, max_chars=_room(message_dict(m, max_chars=0)))
    shown = len(item["content"])
    return item, f"read message {m.pk}" + (
        f" characters {offset}-{offset + shown} of {len(m.content)}"
        if shown < len(m.content)
        else ""
    )


@tool(
    "get_messages_by_ids",
    "Read several messages by their ids, each from character offset (default 0); each says "
    "total_chars and next_offset: read on in one with get_message_by_id(id, offset).",
    {
        "ids": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
        "offset": CHAR_OFFSET,
    },
    required=["ids"],
    keywords=("messages", "read", "ids"),
    label=lambda a: _opened_messages(a.get("ids")),
)
def get_messages_by_ids(owner, *, ids: list[str], offset: int = 0, conversation=None):
    found = {m.pk: m for m in Message.objects.visible_to(owner).filter(pk__in=ids)}
    missing = [i for i in ids if i not in found]
    if not found:
        raise NotFound("message", ", ".join(ids[:5]))
    order = [found[i] for i in dict.fromkeys(ids) if i in found]
    if offset and all(offset >= len(m.content) for m in order):
        longest = max(len(m.content) for m in order)
        raise ToolError(
            f"offset {offset} is past the end of every message asked for "
            f"(the longest has {longest} characters)"
        )
    shell = {"messages": [message_dict(m, max_chars=0) for m in order], "not_found": missing}
    per = _room(shell, slack=300 + 60 * len(order)) // len(order)
    items = []
    for m in order:
        if offset >= len(m.content) > 0:
            item = message_dict(m, max_chars=0)
            item.update(
                offset=offset,
                next_offset=None,
                remaining_chars=0,
                note=f"offset {offset} is past its end ({len(m.content)} characters)",
            )
            item.pop("truncated", None)
        else:
            item = message_dict(m, max_chars=per, offset=offset)
        items.append(item)
    result: dict[str, Any] = {"messages": items}
    if missing:
        result["not_found"] = missing
    return result, f"read {len(found)} messages" + (
        f" ({len(missing)} not found)" if missing else ""
    )


@tool(
    "get_message_with_chunks",
    "Read a long message chunk by chunk (a chunk id leads to its whole message). offset and "
    "next_offset count chunks here; a chunk too long for one result says its own next_offset: "
    "read on in it with get_message_by_id(chunk id, offset).",
    {
        "id": ID,
        "offset": {**OFFSET, "description": "first chunk (0 = the first)"},
        "limit": {**LIMIT, "maximum": 5, "description": "chunks (1-5), fewer if they are long"},
    },
    required=["id"],
    keywords=("chunk", "chunks", "long", "rest"),
    label=lambda a: f"read message {snip(a['id'], 40)} in full" if a.get("id") else "",
)
def get_message_with_chunks(owner, *, id: str, offset: int = 0, limit: int = 3, conversation=None):
    m = _message(owner, id)
    if m.is_chunk:
        m = _message(owner, m.chunk_parent_id)
    live = m.chunks.filter(deleted=False).order_by("chunk_index")
    total = live.count()
    if not total:
        if offset:
            raise ToolError(
                f"message {m.pk} has no chunks ({len(m.content)} characters): read it with "
                "get_message_by_id, whose offset counts characters"
            )
        head = message_dict(m, max_chars=_room({"message": message_dict(m, max_chars=0)}))
        result = {"message": head, "chunk_count": 0, "offset": 0, "chunks": [], "next_offset": None}
        return result, f"read message {m.pk}"
    if offset >= total:
        raise ToolError(
            f"offset {offset} is past the last chunk: message {m.pk} has {total} chunks, "
            f"so offsets run from 0 to {total - 1}"
        )
    head = message_dict(m, max_chars=0)
    for key in ("truncated", "note", "next_offset", "offset", "remaining_chars"):
        head.pop(key, None)
    head["note"] = f"its {len(m.content)} characters are in {total} chunks, below"
    result = {"message": head, "chunk_count": total, "offset": offset, "chunks": []}
    room = _room(result, slack=400)
    for c in live[offset : offset + limit]:
        shell = _json_len(message_dict(c, max_chars=0)) + 60
        item = message_dict(c, max_chars=max(0, room - shell))
        # The first chunk is always shown (a page of it if need be); later ones only whole.
        if result["chunks"] and item["next_offset"] is not None:
            break
        result["chunks"].append(item)
        room -= _json_len(item) + 2
        if item["next_offset"] is not None or room <= 0:
            break
    shown = len(result["chunks"])
    result["next_offset"] = offset + shown if offset + shown < total else None
    return result, f"read message {m.pk} chunks {offset}-{offset + shown - 1} of {total}"


def _search(owner, query, limit, *, conversation=None, conversation_id=None, role=None, start=None, end=None):
    from memory.finding import semantic_cache
    from memory.finding.search import SearchFilters

    conv = _conversation(owner, conversation_id)
    filters = SearchFilters(
        conversation_id=conv.pk if conv else None,
        role=role,
        start=_position(owner, start),
        end=_position(owner, end, end=True),
    )
    # Near-identical queries of this conversation at an unchanged memory reuse their results.
    return semantic_cache.search(owner, query, limit=limit, filters=filters, conversation=conversation)


SEARCH_FILTERS = {
    "conversation_id": {**ID, "description": "only this conversation"},
    "role": {"type": "string", "enum": ["user", "assistant", "system"]},
    "start": {
        "type": "string",
        "maxLength": 40,
        "description": "from this date (YYYY-MM-DD) or message id",
    },
    "end": {"type": "string", "maxLength": 40, "description": "up to this date or message id"},
}


@tool(
    "vector_search",
    "Search all of memory (meaning and exact words, messages and tool calls); "
    "returns ids with snippets and scores.",
    {"query": {"type": "string", "maxLength": 2000, "shorten": True}, "limit": LIMIT, **SEARCH_FILTERS},
    required=["query"],
    keywords=("search", "find", "remember", "recall", "when", "what"),
    core=True,
    label=_searched,
)
def vector_search(owner, *, query: str, limit: int = 10, conversation=None, **filters):
    results = _search(owner, query, limit, conversation=conversation, **filters)
    out = {"query": query, "results": compression.search_results(owner, query, results.hits)}
    if results.fallbacks:
        out["fallbacks"] = results.fallbacks
    return out, f'searched memory for "{snip(query, 60)}" — {len(results.hits)} hits'


@tool(
    "search_and_retrieve",
    "Search memory and read the best matches in full, each with its session neighbours.",
    {
        "query": {"type": "string", "maxLength": 2000, "shorten": True},
        "auto_limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10,
            "description": "messages (1-10)",
        },
        **SEARCH_FILTERS,
    },
    required=["query"],
    keywords=("search", "remember", "recall", "details", "what", "who"),
    core=True,
    label=_searched_and_read,
)
def search_and_retrieve(owner, *, query: str, auto_limit: int = 5, conversation=None, **filters):
    results = _search(owner, query, auto_limit * 2, conversation=conversation, **filters)
    ids = list(dict.fromkeys(h.message_id for h in results.hits))[:auto_limit]
    found = {m.pk: m for m in Message.objects.visible_to(owner).filter(pk__in=ids)}
    per = max(800, MAX_CONTENT_CHARS // max(1, len(found)))
    out = []
    for h_id in ids:
        m = found.get(h_id)
        if m is None:
            continue
        item = compressed_message_dict(m, query, max_chars=per) or message_dict(m, max_chars=per)
        item["session"] = [
            {"id": n.pk, "role": n.role, "snippet": snip(n.content)}
            for n in sessions.neighbours(owner, m, before=1, after=1)
        ]
        out.append(item)
    result = {"query": query, "messages": out}
    if results.fallbacks:
        result["fallbacks"] = results.fallbacks
    return result, f'searched and read memory for "{snip(query, 60)}" — {len(out)} messages'


def _descendant_leaves(owner, topic: Topic, cap: int = 2000) -> list[str]:
    ids, frontier, leaves = [topic.pk], [topic.pk], []
    while frontier and len(ids) < cap:
        kids = list(
            Topic.objects.owned_by(owner)
            .filter(parent_id__in=frontier)
            .values_list("pk", flat=True)
        )
        if not kids:
            break
        ids.extend(kids)
        frontier = kids
    return ids or leaves


def _topic(owner, ident: str) -> Topic:
    t = Topic.objects.owned_by(owner).filter(pk=ident).first()
    if t is None:
        t = (
            Topic.objects.owned_by(owner)
            .filter(label__iexact=ident)
            .order_by("-message_count")
            .first()
            or Topic.objects.owned_by(owner)
            .filter(label__icontains=ident)
            .order_by("-message_count")
            .first()
        )
    if t is None:
        raise NotFound("topic", ident)
    return t


@tool(
    "get_cluster",
    "Read the messages of a topic cluster (id from the index), oldest first.",
    {"cluster_id": ID, "limit": LIMIT, "offset": OFFSET},
    required=["cluster_id"],
    keywords=("cluster", "topic", "group"),
    label=lambda a: f"opened topic {snip(a['cluster_id'], 40)}" if a.get("cluster_id") else "",
)
def get_cluster(owner, *, cluster_id: str, limit: int = 20, offset: int = 0, conversation=None):
    return _topic_messages(owner, _topic(owner, cluster_id), limit, offset)


def _topic_messages(owner, topic: Topic, limit: int, offset: int):
    topic_ids = _descendant_leaves(owner, topic)
    qs = (
        Message.objects.visible_to(owner)
        .logical()
        .filter(topic_memberships__topic_id__in=topic_ids)
        .distinct()
        .order_by("timestamp", "position")
    )
    result, rows = _messages_page(qs, limit, offset, topic=_topic_dict(topic))
    return result, f'read {len(rows)} messages of topic "{snip(topic.label, 50)}"'


@tool(
    "get_period_messages",
    "Read messages of a period: 'today', 'yesterday', 'this_week', "
    "'last_week', 'this_month', 'last_month', a date (YYYY-MM-DD), a month (YYYY-MM) or a range "
    "(YYYY-MM-DD..YYYY-MM-DD).",
    {
        "period": {"type": "string", "maxLength": 60},
        "limit": LIMIT,
        "offset": OFFSET,
        "conversation_id": ID,
    },
    required=["period"],
    keywords=("today", "yesterday", "week", "month", "date", "when", "period", "last", "ago"),
    label=lambda a: f"looked at messages from {snip(a.get('period') or 'a period', 40)}",
)
def get_period_messages(
    owner,
    *,
    period: str,
    limit: int = 20,
    offset: int = 0,
    conversation_id: str | None = None,
    conversation=None,
):
    start, end, label = parse_period(period)
    qs = Message.objects.visible_to(owner).logical()
    if start:
        qs = qs.filter(timestamp__gte=start)
    if end:
        qs = qs.filter(timestamp__lt=end)
    conv = _conversation(owner, conversation_id)
    if conv:
        qs = qs.filter(conversation=conv)
    result, rows = _messages_page(
        qs.order_by("timestamp", "position"),
        limit,
        offset,
        period=label,
        start=start.isoformat() if start else None,
        end=end.isoformat() if end else None,
    )
    return result, f"read {len(rows)} messages from {label}"


@tool(
    "get_conversation_thread",
    "Read the thread a message belongs to: the messages before it "
    "(up to depth), the message, and its replies.",
    {"message_id": ID, "depth": {"type": "integer", "minimum": 1, "maximum": 20}},
    required=["message_id"],
    keywords=("thread", "context", "before", "conversation", "reply"),
    label=lambda a: f"followed the thread of {snip(a['message_id'], 40)}" if a.get("message_id") else "",
)
def get_conversation_thread(owner, *, message_id: str, depth: int = 5, conversation=None):
    m = _message(owner, message_id)
    if m.is_chunk:
        m = _message(owner, m.chunk_parent_id)
    chain: list[Message] = []
    current = m
    visible = Message.objects.visible_to(owner).logical()
    for _ in range(depth):
        if current.parent_id:
            parent = visible.filter(pk=current.parent_id).first()
        else:  # imported history may have no parent links: the previous position stands in
            parent = (
                visible.filter(
                    conversation_id=current.conversation_id, position__lt=current.position
                )
                .order_by("-position")
                .first()
            )
        if parent is None:
            break
        chain.insert(0, parent)
        current = parent
    replies = list(
        visible.filter(
            Q(parent_id=m.pk)
            | Q(conversation_id=m.conversation_id, parent_id=None, position=m.position + 1)
        ).order_by("position")[:5]
    )
    items = [message_dict(x, max_chars=1500) for x in [*chain, m, *replies]]
    return {
        "message_id": m.pk,
        "messages": items,
    }, f"read the thread of {m.pk} ({len(items)} messages)"


@tool(
    "get_tool_call",
    "Read one stored tool call (arguments and result) by id; a long result pages: call again "
    "with offset=next_offset until next_offset is null.",
    {"id": ID, "offset": CHAR_OFFSET},
    required=["id"],
    keywords=("tool", "call", "result"),
    label=lambda a: f"opened tool call {snip(a.get('id') or '?', 40)}",
)
def get_tool_call(owner, *, id: str, offset: int = 0, conversation=None):
    c = ToolCall.objects.owned_by(owner).visible().filter(pk=id).first()
    if c is None:
        raise NotFound("tool call", id)
    _check_offset(offset, len(c.result), f"the result of tool call {c.pk}")
    item = tool_call_dict(c, offset=offset, max_chars=_room(tool_call_dict(c, max_chars=0)))
    return item, f"read tool call {c.pk} ({c.tool_name})"


@tool(
    "get_tool_calls_by_message",
    "List the tool calls an assistant message made.",
    {"message_id": ID, "limit": LIMIT, "offset": OFFSET},
    required=["message_id"],
    keywords=("tool", "calls", "message"),
    label=lambda a: f"opened the tool calls of message {snip(a.get('message_id') or '?', 40)}",
)
def get_tool_calls_by_message(
    owner, *, message_id: str, limit: int = 20, offset: int = 0, conversation=None
):
    m = _message(owner, message_id)
    qs = (
        ToolCall.objects.owned_by(owner).visible().logical().filter(message=m).order_by("timestamp")
    )
    rows, next_offset = _page(qs, limit, offset)
    result = {"message_id": m.pk, "offset": offset, "tool_calls": [tool_call_dict(c) for c in rows]}
    if next_offset is not None:
        result["next_offset"] = next_offset
    return result, f"listed {len(rows)} tool calls of {m.pk}"


# --- walk the topic tree -----------------------------------------------------------------------


@tool(
    "view_topic",
    "Walk the topic tree top-down: without topic_id, the top-level topics; with "
    "one, that topic and its children (each with label, size, period and summary).",
    {"topic_id": ID},
    keywords=("topic", "topics", "overview", "tree", "browse", "subjects"),
)
def view_topic(owner, *, topic_id: str | None = None, conversation=None):
    limit = settings.TOPIC_MAX_CHILDREN * 2
    if topic_id:
        topic = _topic(owner, topic_id)
        kids = list(Topic.objects.owned_by(owner).filter(parent=topic).order_by("order")[:limit])
        node = _topic_dict(topic)
        node["parent_id"] = topic.parent_id
        samples = Message.objects.visible_to(owner).filter(pk__in=topic.sample_message_ids[:3])
        node["samples"] = [{"id": m.pk, "snippet": snip(m.content)} for m in samples]
    else:
        node = {"id": None, "label": "(all memory)"}
        kids = list(Topic.objects.owned_by(owner).filter(parent=None).order_by("order")[:limit])
    counts = _child_counts(owner, kids)
    node["children"] = [_topic_dict(k, children=counts.get(k.pk, 0)) for k in kids]
    if not kids and not topic_id:
        node["note"] = "no topics yet; they are built in the background (manage.py build_topics)"
    return node, f'viewed topic "{snip(node["label"], 50)}" ({len(kids)} children)'


@tool(
    "get_topic_messages",
    "Read the messages of a topic (by id or label), oldest first.",
    {"topic": {"type": "string", "maxLength": 200}, "limit": LIMIT, "offset": OFFSET},
    required=["topic"],
    keywords=("topic", "messages"),
    label=lambda a: f"read the messages of topic {snip(a['topic'], 40)}" if a.get("topic") else "",
)
def get_topic_messages(owner, *, topic: str, limit: int = 20, offset: int = 0, conversation=None):
    return _topic_messages(owner, _topic(owner, topic), limit, offset)


@tool(
    "get_session",
    "Read the session around a message: the turns before and after it without an idle gap.",
    {"message_id": ID},
    required=["message_id"],
    keywords=("session", "around", "context", "neighbours"),
)
def get_session(owner, *, message_id: str, conversation=None):
    m = _message(owner, message_id)
    if m.is_chunk:
        m = _message(owner, m.chunk_parent_id)
    run = sessions.session_of(owner, m, window=10)
    return (
        {"message_id": m.pk, "messages": [message_dict(x, max_chars=1500) for x in run]},
        f"read the session of {m.pk} ({len(run)} messages)",
    )


# --- find, summaries, stats --------------------------------------------------------------------


@tool(
    "find",
    "Find messages whose text matches a regular expression (POSIX style, as in "
    "Postgres), optionally between two positions (message ids or dates).",
    {
        "pattern": {"type": "string", "maxLength": MAX_PATTERN_CHARS},
        "start": {"type": "string", "maxLength": 40},
        "end": {"type": "string", "maxLength": 40},
        "case_sensitive": {"type": "boolean"},
        "conversation_id": ID,
        "limit": LIMIT,
        "offset": OFFSET,
    },
    required=["pattern"],
    keywords=("find", "exact", "regex", "pattern", "grep", "mentioned", "word"),
    label=lambda a: f"looked for the exact words “{snip(a['pattern'], 80)}”" if a.get("pattern") else "",
)
def find(
    owner,
    *,
    pattern: str,
    start: str | None = None,
    end: str | None = None,
    case_sensitive: bool = False,
    conversation_id: str | None = None,
    limit: int = 20,
    offset: int = 0,
    conversation=None,
):
    if not pattern.strip():
        raise ToolError("pattern must not be empty")
    op = "~" if case_sensitive else "~*"
    flags = "" if case_sensitive else "i"
    where = ["owner_id = %s", "NOT deleted", "NOT is_chunk", f"content {op} %s"]
    params: list[Any] = [owner.pk, pattern]
    lo, hi = _position(owner, start), _position(owner, end, end=True)
    if lo:
        where.append("timestamp >= %s")
        params.append(lo)
    if hi:
        where.append("timestamp < %s")
        params.append(hi)
    conv = _conversation(owner, conversation_id)
    if conv:
        where.append("conversation_id = %s")
        params.append(conv.pk)
    sql = (
        "SELECT id, role, timestamp, conversation_id, "
        "substr(content, greatest(1, regexp_instr(content, %s, 1, 1, 0, %s) - 80), 240) "
        f"FROM memory_message WHERE {' AND '.join(where)} "
        "ORDER BY timestamp, position LIMIT %s OFFSET %s"
    )
    try:
        # Postgres' regex engine runs under a statement timeout, so a pathological pattern
        # costs at most FIND_TIMEOUT_MS, never a stuck worker.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL statement_timeout = {FIND_TIMEOUT_MS}")
            cursor.execute(sql, [pattern, flags, *params, limit + 1, offset])
            rows = cursor.fetchall()
    except DatabaseError as exc:
        text = str(exc).lower()
        if "timeout" in text or "cancel" in text:
            raise ToolError(
                f"the pattern took longer than {FIND_TIMEOUT_MS} ms; make it more "
                "specific or narrow it with start/end"
            ) from None
        raise ToolError(f"invalid regular expression: {str(exc).splitlines()[0][:160]}") from None
    more = len(rows) > limit
    matches = [
        {
            "id": r[0],
            "role": r[1],
            "timestamp": r[2].isoformat(),
            "conversationId": r[3],
            "excerpt": " ".join((r[4] or "").split()),
        }
        for r in rows[:limit]
    ]
    result = {"pattern": pattern, "offset": offset, "matches": matches}
    if more:
        result["next_offset"] = offset + limit
    return result, f"found /{snip(pattern, 40)}/ in {len(matches)}{'+' if more else ''} messages"


@tool(
    "show_summaries",
    "Summaries of a stretch of memory: period summaries and the topics "
    "between two positions (message ids or dates; both optional).",
    {
        "start": {"type": "string", "maxLength": 40},
        "end": {"type": "string", "maxLength": 40},
        "limit": LIMIT,
        "offset": OFFSET,
    },
    keywords=("summary", "summaries", "summarise", "summarize", "overview", "happened", "recap"),
)
def show_summaries(
    owner,
    *,
    start: str | None = None,
    end: str | None = None,
    limit: int = 10,
    offset: int = 0,
    conversation=None,
):
    lo, hi = _position(owner, start), _position(owner, end, end=True)
    qs = Topic.objects.owned_by(owner).filter(children__isnull=True)
    if lo:
        qs = qs.filter(period_end__gte=lo)
    if hi:
        qs = qs.filter(period_start__lt=hi)
    rows, next_offset = _page(qs.order_by("period_start"), limit, offset)
    result: dict[str, Any] = {"offset": offset, "summaries": [_topic_dict(t) for t in rows]}
    if not start and not end:
        result["periods"] = [
            {"period": p.period, "messages": p.message_count, "summary": p.summary}
            for p in PeriodSummary.objects.owned_by(owner)
        ]
    if next_offset is not None:
        result["next_offset"] = next_offset
    if not rows:
        result["note"] = "no topic summaries in this range (topics are built in the background)"
    return result, f"showed {len(rows)} summaries"


@tool(
    "get_conversation_stats",
    "Statistics of memory (or one conversation): messages by role and by level, "
    "tokens, tool calls, topics, entities, first and last dates, and the tokens the memory "
    "index saved on recent turns (measured on what each turn sent).",
    {"conversation_id": ID},
    keywords=("stats", "statistics", "how", "many", "count", "size"),
    label=lambda a: "looked at memory statistics",
)
def get_conversation_stats(owner, *, conversation_id: str | None = None, conversation=None):
    conv = _conversation(owner, conversation_id)
    qs = Message.objects.visible_to(owner).logical()
    if conv:
        qs = qs.filter(conversation=conv)
    agg = qs.aggregate(
        n=Count("id"), tokens=Sum("token_count"), first=Min("timestamp"), last=Max("timestamp")
    )
    by_role = dict(qs.values("role").annotate(n=Count("id")).values_list("role", "n"))
    calls = ToolCall.objects.owned_by(owner).visible().logical()
    if conv:
        calls = calls.filter(message__conversation=conv)
    total_tokens = agg["tokens"] or 0
    days = ((agg["last"] - agg["first"]).total_seconds() / 86400) if agg["first"] else 0
    result = {
        "scope": f"conversation {conv.pk}" if conv else "all memory",
        "messages": agg["n"],
        "by_role": by_role,
        "tokens": total_tokens,
        "tool_calls": calls.count(),
        "conversations": 1 if conv else Conversation.objects.owned_by(owner).count(),
        "topics": Topic.objects.owned_by(owner).count(),
        "entities": Entity.objects.owned_by(owner).filter(mention_count__gt=0).count(),
        "first": agg["first"].isoformat() if agg["first"] else None,
        "last": agg["last"].isoformat() if agg["last"] else None,
        "duration_days": round(days, 2),
        "index_budget_tokens": settings.INDEX_MAX_TOKENS,
        # Messages per level, and tokens saved as measured on the turns' snapshots.
        "compression_levels": hierarchy.level_counts(owner, conv),
        **hierarchy.measured_savings(owner, conv),
    }
    return result, f"{agg['n']} messages, {total_tokens:,} tokens"


# --- the entity graph --------------------------------------------------------------------------


@tool(
    "memory_graph_query",
    "Explore the entity graph: an entity (name, number, identifier, date, "
    "URL...) and what it co-occurs with, up to depth hops, with the messages that mention it.",
    {
        "entity": {"type": "string", "maxLength": 300},
        "depth": {"type": "integer", "minimum": 1, "maximum": 3},
        "limit": LIMIT,
    },
    required=["entity"],
    keywords=("entity", "graph", "related", "who", "connected", "relationship"),
)
def memory_graph_query(owner, *, entity: str, depth: int = 1, limit: int = 10, conversation=None):
    from memory.knowledge.entities import normalize, singular_forms

    if depth < 1 or depth > 3:
        raise ToolError("depth must be between 1 and 3")
    norm = normalize(entity)
    # Only entities some visible message still mentions (counts may lag behind a delete).
    live = Entity.objects.owned_by(owner).filter(
        Exists(EntityMention.objects.filter(entity=OuterRef("pk"), message__deleted=False))
    )
    root = (
        live.filter(normalized=norm).order_by("-mention_count").first()
        or live.filter(normalized__in=singular_forms(norm)).order_by("-mention_count").first()
        or live.filter(normalized__icontains=norm).order_by("-mention_count").first()
    )
    if root is None:
        raise ToolError(f"no entity like {entity[:60]!r} in memory")
    nodes = {root.pk: root}
    edges: list[dict[str, Any]] = []
    frontier = [root.pk]
    per_node = max(3, limit)
    for _ in range(depth):
        next_frontier = []
        for eid in frontier:
            # Co-occurrence counted over visible messages only, so deleted text never links.
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT b.entity_id, count(*) FROM memory_entitymention a "
                    "JOIN memory_entitymention b ON a.message_id = b.message_id "
                    "AND b.entity_id <> a.entity_id "
                    "JOIN memory_message m ON m.id = a.message_id "
                    "WHERE a.owner_id = %s AND a.entity_id = %s AND NOT m.deleted "
                    "GROUP BY b.entity_id ORDER BY count(*) DESC LIMIT %s",
                    [owner.pk, eid, per_node],
                )
                rows = cursor.fetchall()
            for other, weight in rows:
                edges.append({"source": eid, "target": other, "weight": weight})
                if other not in nodes:
                    next_frontier.append(other)
            if len(nodes) + len(next_frontier) > 60:
                break
        for e in Entity.objects.owned_by(owner).filter(pk__in=next_frontier):
            nodes[e.pk] = e
        frontier = next_frontier
        if not frontier:
            break
    mentions = (
        EntityMention.objects.owned_by(owner)
        .filter(entity=root, message__deleted=False)
        .select_related("message")
        .order_by("-message__timestamp")[:limit]
    )
    result = {
        "entity": {
            "id": root.pk,
            "name": root.name,
            "kind": root.kind,
            "mentions": root.mention_count,
            "aliases": root.aliases,  # other spellings graph upkeep merged into it
        },
        "nodes": [
            {"id": e.pk, "name": e.name, "kind": e.kind, "mentions": e.mention_count}
            for e in nodes.values()
        ],
        "edges": [e for e in edges if e["target"] in nodes],
        "related_messages": [
            {
                "id": mm.message_id,
                "role": mm.message.role,
                "timestamp": mm.message.timestamp.isoformat(),
                "snippet": snip(mm.message.content),
            }
            for mm in mentions
        ],
    }
    return result, f'explored "{snip(root.name, 40)}" — {len(nodes) - 1} related entities'


# --- the hierarchy: expand_node, browse_hierarchy ----------------------------------------------


def _message_node(owner, b: hierarchy.Boundaries, m: Message) -> dict[str, Any]:
    return {
        "id": m.pk,
        "node_type": "message",
        "role": m.role,
        "timestamp": m.timestamp.isoformat(),
        "level": b.level_of(m.timestamp, m.pk).name,
        "pinned": m.pinned,
        "summary": hierarchy.message_summary(m),
        "tokens": m.token_count,
    }


def _topic_node(b: hierarchy.Boundaries, t: Topic, *, children: int | None = None) -> dict[str, Any]:
    out = _topic_dict(t, children=children)
    out["node_type"] = "topic"
    out["level"] = b.topic_level(t).name
    return out


@tool(
    "expand_node",
    "Open any node of the memory hierarchy by id: a message with its components (chunks, tool "
    "calls, errors), summary, level and topic; or a topic with its summary and children (its "
    "sub-topics, or for a leaf topic its messages). Children page with offset and limit.",
    {"id": {**ID, "description": "a message id or a topic id"}, "limit": LIMIT, "offset": OFFSET},
    required=["id"],
    keywords=("expand", "node", "open", "detail", "summary", "level"),
    label=lambda a: f"expanded memory node {snip(a['id'], 40)}" if a.get("id") else "",
)
def expand_node(owner, *, id: str, limit: int = 20, offset: int = 0, conversation=None):
    b = hierarchy.boundaries(owner)
    m = Message.objects.visible_to(owner).filter(pk=id).first()
    if m is not None:
        return _expand_message(owner, b, m, limit, offset)
    t = Topic.objects.owned_by(owner).filter(pk=id).first()
    if t is not None:
        return _expand_topic(owner, b, t, limit, offset)
    raise NotFound("node", id)


def _expand_message(owner, b: hierarchy.Boundaries, m: Message, limit: int, offset: int):
    node = _message_node(owner, b, m)
    node["message"] = message_dict(m, max_chars=MAX_CONTENT_CHARS)
    logical = m.chunk_parent if m.is_chunk else m
    chunks_qs = Message.objects.owned_by(owner).filter(chunk_parent=logical, is_chunk=True)
    chunks, next_offset = _page(chunks_qs.order_by("chunk_index"), limit, offset)
    calls = list(
        ToolCall.objects.owned_by(owner).logical().filter(message=logical).order_by("timestamp")[:20]
    )
    node["components"] = {
        "chunk_count": chunks_qs.count(),
        "chunks": [
            {"id": c.pk, "chunkIndex": c.chunk_index, "tokens": c.token_count, "snippet": snip(c.content)}
            for c in chunks
        ],
        "tool_calls": [
            {"id": c.pk, "toolName": c.tool_name, "isError": c.is_error, "result": snip(c.result)}
            for c in calls
        ],
        "errors": [logical.metadata["error"]] if (logical.metadata or {}).get("error") else [],
    }
    membership = logical.topic_memberships.select_related("topic").first()
    node["topic"] = (
        {"id": membership.topic_id, "label": membership.topic.label} if membership else None
    )
    node["offset"] = offset
    if next_offset is not None:
        node["next_offset"] = next_offset
        node["note"] = f"more chunks: expand_node(id={m.pk!r}, offset={next_offset})"
    return node, f"expanded message {m.pk} ({node['level']})"


def _expand_topic(owner, b: hierarchy.Boundaries, t: Topic, limit: int, offset: int):
    node = _topic_node(b, t)
    node["parent"] = {"id": t.parent_id, "label": t.parent.label} if t.parent_id else None
    kids = Topic.objects.owned_by(owner).filter(parent=t)
    if kids.exists():
        rows, next_offset = _page(kids.order_by("order"), limit, offset)
        counts = _child_counts(owner, rows)
        node["children"] = [_topic_node(b, k, children=counts.get(k.pk, 0)) for k in rows]
    else:
        members = (
            Message.objects.visible_to(owner)
            .logical()
            .filter(topic_memberships__topic=t)
            .order_by("timestamp", "id")
        )
        rows, next_offset = _page(members, limit, offset)
        node["children"] = [_message_node(owner, b, m) for m in rows]
    node["offset"] = offset
    if next_offset is not None:
        node["next_offset"] = next_offset
    return node, f'expanded topic "{snip(t.label, 50)}" ({len(rows)} children)'


@tool(
    "browse_hierarchy",
    "List the nodes of one level of memory, oldest first: FULL (the newest messages), SUMMARY "
    "(older messages as one-sentence summaries), META (topic groups of older messages) or "
    "ARCHIVE (the coarsest topics of the oldest memory). Open a node with expand_node.",
    {
        "level": {
            "type": "string",
            "enum": hierarchy.LEVEL_NAMES,
            "description": "FULL, SUMMARY, META or ARCHIVE",
        },
        "limit": LIMIT,
        "offset": OFFSET,
    },
    required=["level"],
    keywords=("browse", "hierarchy", "level", "levels", "archive", "older", "overview"),
    label=lambda a: f"browsed the {snip(a.get('level') or '?', 12)} level of memory",
)
def browse_hierarchy(owner, *, level: str, limit: int = 20, offset: int = 0, conversation=None):
    lvl = hierarchy.Level[level]
    b = hierarchy.boundaries(owner)
    result: dict[str, Any] = {"level": lvl.name, "level_number": int(lvl), "holds": hierarchy.level_ages(lvl)}
    if lvl in (hierarchy.Level.FULL, hierarchy.Level.SUMMARY):
        qs = hierarchy.messages_at(owner, b, lvl).order_by("timestamp", "id")
        rows, next_offset = _page(qs, limit, offset)
        nodes = [_message_node(owner, b, m) for m in rows]
        if lvl == hierarchy.Level.FULL:
            for node, m in zip(nodes, rows, strict=True):
                node["content"] = snip(m.content, 1500)
    else:
        qs = hierarchy.topics_at(owner, b, lvl).order_by("period_start", "id")
        rows, next_offset = _page(qs, limit, offset)
        nodes = [_topic_node(b, t) for t in rows]
    result.update({"node_count": qs.count(), "offset": offset, "items": nodes})
    if next_offset is not None:
        result["next_offset"] = next_offset
    if not b.active:
        result["note"] = (
            f"memory holds at most HIERARCHY_SUMMARY_THRESHOLD={settings.HIERARCHY_SUMMARY_THRESHOLD} "
            "messages, so every message is FULL"
        )
    elif not nodes and lvl in (hierarchy.Level.META, hierarchy.Level.ARCHIVE):
        result["note"] = (
            f"no {lvl.name} nodes: memory does not reach that far back, or its topics are not "
            "built yet (background upkeep)"
        )
    return result, f"browsed {lvl.name} ({len(nodes)} of {result['node_count']} nodes)"


# --- facts -------------------------------------------------------------------------------------

_USER_WORDS = {"the user", "user", "me", "i", "myself", "you", "yourself"}


def _fact_dict(f) -> dict[str, Any]:
    row = {
        "id": f.pk, "subject": f.subject, "attribute": f.attribute, "fact": f.text,
        "said_at": f.said_at.isoformat(), "message_id": f.message_id,
        "valid_from": f.valid_from.isoformat(), "current": f.is_current,
    }
    if f.valid_to:
        row["valid_to"] = f.valid_to.isoformat()
    if f.superseded_by_id:
        row["superseded_by"] = f.superseded_by_id
    if f.refers_from:
        row["refers_to_period"] = [f.refers_from.date().isoformat(), f.refers_to.date().isoformat()]
    if f.corrected:
        row["corrected_by_the_user"] = True
    if f.pinned:
        row["pinned"] = True
    return row


@tool(
    "get_facts",
    "What memory knows about someone: the current facts about a subject (a person's name, or "
    "'the user'), each with the message that says it and since when it holds; with "
    "include_superseded, also the facts they replaced and the dates each held.",
    {
        "subject": {"type": "string", "maxLength": 200, "description": "a name, or 'the user'"},
        "include_superseded": {"type": "boolean"},
        "limit": LIMIT,
        "offset": OFFSET,
    },
    required=["subject"],
    keywords=("fact", "know", "live", "work", "job", "partner", "favourite", "favorite", "plan",
              "moved", "move", "changed", "still", "who"),
    label=lambda a: f"looked up facts about {snip(str(a['subject']), 60)}" if a.get("subject") else "",
)
def get_facts(owner, *, subject: str, include_superseded: bool = False, limit: int = 20, offset: int = 0,
              conversation=None):
    from memory.knowledge import facts
    from memory.models import Fact

    name = " ".join(subject.split())
    if not name:
        raise ToolError("subject must name someone: a name, or 'the user'")
    wanted = "the user" if name.lower() in _USER_WORDS else name
    qs = Fact.objects.owned_by(owner).live().about(wanted)
    if not qs.exists():
        qs = facts.about_entity(owner, wanted)
    if not qs.exists():
        subjects = Fact.objects.owned_by(owner).current().order_by().values_list("subject", flat=True)
        known = list(subjects.distinct()[:12])
        raise ToolError(
            f"no facts about {name[:60]!r}"
            + (f"; subjects with facts: {', '.join(known)}" if known else "; memory holds no facts yet")
        )
    current = qs.filter(superseded_by__isnull=True)
    total_current = current.count()
    if not include_superseded:
        qs = current
    qs = qs.in_order()
    rows, next_offset = _page(qs, limit, offset)
    result: dict[str, Any] = {
        "subject": wanted, "current_count": total_current, "offset": offset,
        "facts": [_fact_dict(f) for f in rows],
    }
    if next_offset is not None:
        result["next_offset"] = next_offset
    return result, f"{len(rows)} facts about {snip(wanted, 60)}"
