"""The registry of memory tools and the one way a tool call runs.

A tool registers itself with `@tool` (its schema, the keywords select_tools matches a turn's
words against, how a call reads in the chat); `select_tools` picks the schemas a turn is
offered. `execute_tool` never raises: the arguments are parsed and validated against the tool's
own JSON schema first (missing, extra or mistyped arguments are reported by name), and the
result is bounded to MAX_RESULT_CHARS (a long list is cut, saying how to page on).
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

from django.db import transaction
from django.utils import timezone

from memory.errors import MemoryStoreError, NotFound
from memory.models import Conversation
from memory.timeouts import cancelled, seconds
from memory.tokens import count_tokens

logger = logging.getLogger(__name__)

MAX_RESULT_CHARS = 24000  # a whole tool result; past it, fewer items and a next_offset
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


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


def order_tools(names: Sequence[str]) -> None:
    """Put TOOLS in the order of `names` (any other tool after them, as registered): the order
    their schemas are offered in, and the one select_tools breaks ties by."""
    rank = {name: i for i, name in enumerate(names)}
    ordered = sorted(TOOLS.values(), key=lambda t: rank.get(t.name, len(rank)))
    TOOLS.clear()
    TOOLS.update((t.name, t) for t in ordered)


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
    exclude_message_ids: Sequence[str] = (), as_of: dt.datetime | None = None,
) -> ToolResult:
    """Run one tool call for `owner`. Never raises: bad input comes back as ok=False.
    exclude_message_ids: messages no search of this call returns (the turn's own message);
    as_of: when the turn's question was asked (its searches read "last week" from it)."""
    from memory.finding.search import asked_at, excluding, reading_for

    started_at, started = timezone.now(), time.perf_counter()
    # Its searches read memory for this conversation (the ones memory does not keep stay out).
    with excluding(exclude_message_ids), asked_at(as_of), reading_for(getattr(conversation, "pk", None)):
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
        # A savepoint: a statement cancelled for taking too long leaves the turn's transaction
        # usable.
        with transaction.atomic():
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
        if cancelled(exc):
            error = (f"{name} took too long (more than {seconds()}) and was stopped; answer with what you "
                     "have, or try a narrower query")
            return ToolResult(False, None, error, f"{name}: took too long", _ms(started))
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


def shorten_words(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at the last word that fits."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return cut[:space] if space > limit // 2 else cut


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
