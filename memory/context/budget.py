"""The prompt fits the model (issue 13 §2): the model's window split into zones, and the
messages of one turn fitted to them.

`allocate` splits CHAT_CONTEXT_TOKENS (the model's window; unset: looked up from CHAT_MODEL in
MODEL_WINDOWS) into zones, each with a minimum and a preferred share:

    system · tools (schemas) · index (memory) · recent turns · current message ·
    tool results · answer (sent as max_tokens) · margin (other tokenizers, framing)

`Prompt` turns a context plan, the new message and the tool rounds so far into the messages sent
on each round, every zone within its allocation:

- the index, system text and tool schemas come from `prepare_context`, which is given its four
  zones (`Allocation.index_zones`);
- recent turns are trimmed oldest first;
- a current message over its zone goes as its head and tail, with a note giving its id and how
  to page through the stored whole;
- tool results of earlier rounds shrink to their summaries when the tool-result zone fills; the
  newest round's results get what is left.

When the provider still says the context is too long, `Prompt.shrink` halves the index, recent,
current and tool-result zones once (overflow retry); a second refusal ends the turn.

Counts are real cl100k tokens (memory/tokens.py) plus MESSAGE_OVERHEAD per chat message, as
OpenAI counts its own framing; other models' tokenizers differ a little, which the margin holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone

from memory.tokens import count_tokens, encoding

SYSTEM_PROMPT = """You are Recollect, a helpful assistant whose memory never runs out.
Today is {today}. When you rely on an earlier message, cite its id.

{memory}"""

# Tokens of a chat message's framing (role, separators), and of the reply's priming.
MESSAGE_OVERHEAD = 4
PRIMING = 3

# Context windows of common models, in tokens, matched by name prefix (the longest wins; a
# provider prefix such as "openai/" and an Ollama tag such as ":8b" are ignored). Local servers
# often run a model with less than its native window (Ollama's num_ctx): set
# CHAT_CONTEXT_TOKENS to what the server really gives it.
MODEL_WINDOWS = {
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
    "llama2": 4_096,
    "llama3": 8_192,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3.3": 131_072,
    "mistral": 32_768,
    "mixtral": 32_768,
    "qwen2.5": 32_768,
    "gemma2": 8_192,
    "phi3": 4_096,
    "tinyllama": 2_048,
}
DEFAULT_WINDOW = 8_192


def context_window(model: str | None = None) -> int:
    """CHAT_CONTEXT_TOKENS when set; else the window of `model` (default CHAT_MODEL) from
    MODEL_WINDOWS; else DEFAULT_WINDOW."""
    if settings.CHAT_CONTEXT_TOKENS:
        return int(settings.CHAT_CONTEXT_TOKENS)
    name = (model or settings.CHAT_MODEL or "").lower().rsplit("/", 1)[-1].split(":", 1)[0]
    matches = [prefix for prefix in MODEL_WINDOWS if name.startswith(prefix)]
    return MODEL_WINDOWS[max(matches, key=len)] if matches else DEFAULT_WINDOW


@dataclass(frozen=True)
class Zone:
    name: str
    min: int
    share: float  # of the window: the preferred size
    max: int | None = None  # None: grows with the window (gets what capped zones leave)

    def cap(self) -> int | None:
        if self.name == "index":
            return settings.INDEX_MAX_TOKENS
        if self.name == "answer":
            return settings.CHAT_ANSWER_MAX_TOKENS
        return self.max


ZONES = (
    Zone("system", 120, 0.04, 1_500),
    Zone("tools", 200, 0.15, 4_000),
    Zone("index", 200, 0.25, 0),  # capped by INDEX_MAX_TOKENS
    Zone("recent", 150, 0.15),
    Zone("current", 200, 0.12),
    Zone("tool_results", 300, 0.16),
    Zone("answer", 256, 0.10, 0),  # capped by CHAT_ANSWER_MAX_TOKENS
    Zone("margin", 64, 0.03, 2_048),
)
# What a retry after "context length exceeded" halves (the others are fixed costs).
SHRINKABLE = ("index", "recent", "current", "tool_results")


@dataclass
class Allocation:
    window: int
    zones: dict[str, int]
    shrunk: bool = False

    def __getitem__(self, name: str) -> int:
        return self.zones[name]

    def shrink(self) -> Allocation:
        """The plan for a retry: the index, recent, current and tool-result zones halved."""
        zones = {n: (v // 2 if n in SHRINKABLE else v) for n, v in self.zones.items()}
        return Allocation(self.window, zones, shrunk=True)

    def index_zones(self) -> dict[str, int]:
        """The zones `prepare_context` fills (its own names; no reserve of its own: the answer
        and margin zones are that). The system zone is what the wrapper around the index leaves."""
        return {
            "system": max(0, self["system"] - system_wrapper_tokens()),
            "tools": self["tools"],
            "memory": self["index"],
            "history": self["recent"],
            "reserve": 0,
        }


def allocate(window: int | None = None) -> Allocation:
    """Split `window` tokens (default: `context_window()`) into ZONES.

    Each zone prefers share x window within [min, max]. When the preferred sizes do not fit,
    every zone keeps its minimum and the rest is shared in proportion to what each wanted above
    it (below the sum of minimums, the minimums shrink in proportion). When they leave room (a
    large window, where capped zones stop growing), the zones without a cap share it."""
    window = int(window or context_window())
    preferred = {}
    for z in ZONES:
        size = max(z.min, round(z.share * window))
        cap = z.cap()
        preferred[z.name] = min(size, cap) if cap else size
    minimum = {z.name: min(z.min, preferred[z.name]) for z in ZONES}
    total = sum(preferred.values())
    if total > window:
        floor = sum(minimum.values())
        if floor >= window:
            zones = {n: minimum[n] * window // floor for n in minimum}
        else:
            f = (window - floor) / (total - floor)
            zones = {n: minimum[n] + int((preferred[n] - minimum[n]) * f) for n in minimum}
    else:
        zones = dict(preferred)
        growing = [z for z in ZONES if z.max is None]
        left = window - total
        shares = sum(z.share for z in growing)
        for z in growing:
            zones[z.name] += int(left * z.share / shares)
    return Allocation(window, zones)


# --- counting and cutting ---------------------------------------------------------------------


def message_tokens(message: dict[str, Any]) -> int:
    """A chat message as the window counts it: framing, content, tool calls."""
    tokens = MESSAGE_OVERHEAD + count_tokens(message.get("content") or "")
    if message.get("tool_calls"):
        tokens += count_tokens(json.dumps(message["tool_calls"], ensure_ascii=False))
    return tokens


def tools_tokens(tools: list[dict[str, Any]]) -> int:
    return sum(count_tokens(json.dumps(t, ensure_ascii=False)) for t in tools or [])


def system_wrapper_tokens() -> int:
    return count_tokens(_system_text("")) + MESSAGE_OVERHEAD


def _system_text(memory: str) -> str:
    return SYSTEM_PROMPT.format(today=timezone.now().date().isoformat(), memory=memory)


def head(text: str, tokens: int) -> str:
    """The longest start of `text` of at most `tokens` tokens (never splits a character)."""
    return _fit(text, tokens, from_end=False)


def tail(text: str, tokens: int) -> str:
    """The longest end of `text` of at most `tokens` tokens."""
    return _fit(text, tokens, from_end=True)


def _fit(text: str, tokens: int, *, from_end: bool) -> str:
    if tokens <= 0 or not text:
        return ""
    # A token is rarely longer than 32 characters: only a window of the text is encoded, so a
    # million-character message costs no more than a short one.
    window = text[-(tokens * 32 + 16) :] if from_end else text[: tokens * 32 + 16]
    ids = encoding().encode_ordinary(window)
    if len(ids) <= tokens and len(window) == len(text):
        return text
    piece = ids[-tokens:] if from_end else ids[:tokens]
    chars = len(encoding().decode_bytes(piece).decode("utf-8", errors="ignore"))
    # (text[-0:] would be the whole text.)
    out = text[len(text) - chars :] if from_end else text[:chars]
    # Text cut at a token boundary can re-tokenise a little longer; trim until it fits.
    while out and count_tokens(out) > tokens:
        cut = max(1, len(out) // 50)
        out = out[cut:] if from_end else out[:-cut]
    return out


# --- the prompt --------------------------------------------------------------------------------


@dataclass
class ToolResultText:
    """One tool call's result as the model may read it: in full, or its summary."""

    call_id: str
    text: str
    summary: str


@dataclass
class ToolRound:
    text: str  # what the model said before calling the tools
    calls: list[dict[str, Any]]  # OpenAI tool_calls entries
    results: list[ToolResultText]


@dataclass
class Prompt:
    """The messages of one turn, fitted to `allocation` (see the module docstring)."""

    allocation: Allocation
    plan: Any  # memory.context.index_builder.ContextPlan
    message_id: str
    content: str
    content_tokens: int | None = None
    rounds: list[ToolRound] = field(default_factory=list)
    used: dict[str, int] = field(default_factory=dict)
    # The largest prompt sent this turn, zone by zone (what the snapshot records).
    peak: dict[str, int] = field(default_factory=dict)
    shrunk_results: int = 0  # results of earlier rounds shown as their summaries, last round
    custom_tokens: int = 0  # of the system zone's use: the person's custom instructions

    @classmethod
    def for_message(cls, allocation: Allocation, plan, message) -> Prompt:
        return cls(allocation, plan, message.pk, message.content, message.token_count or None)

    @property
    def max_tokens(self) -> int:
        """The answer's reserve, sent as max_tokens."""
        return self.allocation["answer"]

    def shrink(self) -> bool:
        """Halve the shrinkable zones once; False when that was already done."""
        if self.allocation.shrunk:
            return False
        self.allocation = self.allocation.shrink()
        self.peak = {}  # the report is of what was sent with the zones that held
        return True

    def add_round(self, text: str, calls: list[dict[str, Any]], results: list[ToolResultText]) -> None:
        self.rounds.append(ToolRound(text, calls, results))

    def messages(self, tools: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """The messages for the next request; `used` then holds each zone's tokens."""
        a = self.allocation
        used: dict[str, int] = {"tools": tools_tokens(tools or [])}
        # The conversation's rolling summary (what came before the recent turns) is history:
        # it takes at most half the recent zone, and the recent turns what it leaves.
        summary = getattr(self.plan, "summary", "") or ""
        if summary and count_tokens(summary) > a["recent"] // 2:
            summary = _fit_lines(summary, a["recent"] // 2)
        summary_tokens = count_tokens(summary) if summary else 0
        # A turn shown no memory (memory off, a temporary chat) gives the index's zone to its
        # conversation's recent turns.
        recent_room = a["recent"] + (a["index"] if getattr(self.plan, "strategy", "") == "off" else 0)
        recent, used["recent"] = self._recent(max(0, recent_room - summary_tokens))
        used["recent"] += summary_tokens
        # The index has what system, tools and recent turns leave of their four zones, as
        # prepare_context fitted it (after a shrink, the halved zones cut it further).
        wrapper = system_wrapper_tokens()
        # The person's custom instructions come first, whole: they take from the index's room.
        custom = getattr(self.plan, "custom_instructions", "") or ""
        fixed = [p for p in (custom, self.plan.instructions) if p]
        instructions = sum(count_tokens(p) for p in fixed)
        room = a["system"] + a["tools"] + a["index"] + a["recent"]
        room -= wrapper + instructions + used["tools"] + used["recent"]
        index = _fit_lines(self.plan.text, max(0, room - 2))
        system = _system_text("\n\n".join(p for p in (*fixed, summary, index) if p))
        self.custom_tokens = count_tokens(custom) if custom else 0
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        used["index"] = count_tokens(index)
        used["system"] = message_tokens(messages[0]) - used["index"] - summary_tokens + PRIMING
        messages += recent
        current = {"role": "user", "content": self._current(a["current"] - MESSAGE_OVERHEAD)}
        used["current"] = message_tokens(current)
        messages.append(current)
        rounds, used["tool_results"] = self._rounds(a["tool_results"])
        messages += rounds
        self.used = used
        if sum(used.values()) >= sum(self.peak.values()):
            self.peak = dict(used)
        return messages

    def report(self, *, completion_tokens: int | None = None, retried: bool = False) -> dict[str, Any]:
        """Every zone, allocated and used (the largest request of the turn), for the snapshot."""
        used = dict(self.peak or self.used)
        zones = {
            name: {"allocated": tokens, "used": used.get(name, 0)}
            for name, tokens in self.allocation.zones.items()
        }
        zones["answer"]["used"] = completion_tokens or 0
        zones["margin"]["used"] = 0
        return {
            "window": self.allocation.window,
            "zones": zones,
            "prompt_tokens": sum(used.values()),
            "max_tokens": self.max_tokens,
            "shrunk": self.allocation.shrunk,
            "retried": retried,
            "rounds": len(self.rounds),
            "results_shown_as_summaries": self.shrunk_results,
            "custom_instructions_tokens": self.custom_tokens,
            "current_message_cut": self._current_tokens() > self.allocation["current"] - MESSAGE_OVERHEAD,
        }

    # --- zones ---

    def _recent(self, allowance: int) -> tuple[list[dict[str, Any]], int]:
        """The plan's recent turns, the oldest dropped first until they fit."""
        kept: list[dict[str, Any]] = []
        used = 0
        for m in reversed(self.plan.recent):
            if m.pk == self.message_id or m.deleted or m.role not in {"user", "assistant"}:
                continue
            cost = (m.token_count or count_tokens(m.content)) + MESSAGE_OVERHEAD
            if used + cost > allowance:
                break
            kept.insert(0, {"role": m.role, "content": m.content})
            used += cost
        return kept, used

    def _current_tokens(self) -> int:
        if self.content_tokens is None:
            self.content_tokens = count_tokens(self.content)
        return self.content_tokens

    def _current(self, allowance: int) -> str:
        """The message, or its head and tail around a note when it is over its zone."""
        total = self._current_tokens()
        if total <= allowance:
            return self.content
        note = self._cut_note(len(self.content), total, head_chars=10**9)
        room = max(0, allowance - count_tokens(note) - 8)
        start = head(self.content, room * 3 // 5)
        end = tail(self.content[len(start) :], room - count_tokens(start))
        note = self._cut_note(len(self.content), total, head_chars=len(start))
        return f"{start}\n\n{note}\n\n{end}"

    def _cut_note(self, chars: int, tokens: int, *, head_chars: int) -> str:
        return (
            f"[… the middle of this message is left out: it has {chars:,} characters (about "
            f"{tokens:,} tokens), more than fits the model's context window. The whole message is "
            f"stored in memory as chunks, id {self.message_id}: read on from here with "
            f'get_message_by_id(id="{self.message_id}", offset={head_chars}) and its next_offset, '
            f'or chunk by chunk with get_message_with_chunks(id="{self.message_id}", offset=0). '
            "Below is its end. …]"
        )

    def _rounds(self, allowance: int) -> tuple[list[dict[str, Any]], int]:
        """The tool rounds so far: full results while they fit; earlier rounds' results shrink
        to their summaries (then to a stub) so the newest round gets what is left."""
        if not self.rounds:
            return [], 0
        calls = [
            {"role": "assistant", "content": r.text or None, "tool_calls": r.calls} for r in self.rounds
        ]
        fixed = sum(message_tokens(c) for c in calls)
        earlier = [res for r in self.rounds[:-1] for res in r.results]
        newest = self.rounds[-1].results
        forms: dict[int, str] = {}  # id(result) -> text sent

        def cost(text: str) -> int:
            return MESSAGE_OVERHEAD + count_tokens(text)

        # Earlier results start as summaries; where even those would not leave the newest results
        # NEWEST_MIN_TOKENS each (the model just asked for them), the oldest become stubs.
        for res in earlier:
            forms[id(res)] = _summary_form(res)
        left = allowance - fixed - sum(cost(forms[id(r)]) for r in earlier)
        need = sum(min(cost(r.text), NEWEST_MIN_TOKENS) for r in newest)
        for res in earlier:
            if left >= need:
                break
            stub = "[result left out to fit the context window; call the tool again to read it]"
            left += cost(forms[id(res)]) - cost(stub)
            forms[id(res)] = stub
        # The newest results share what is left, the shortest first (they may need less).
        pending = sorted(newest, key=lambda r: count_tokens(r.text))
        for i, res in enumerate(pending):
            share = max(0, left) // (len(pending) - i)
            full = cost(res.text)
            if full <= share:
                forms[id(res)] = res.text
            else:
                forms[id(res)] = _cut_result(res, share - MESSAGE_OVERHEAD)
            left -= cost(forms[id(res)])
        # What is still left brings earlier results back in full, the newest first.
        self.shrunk_results = len(earlier)
        for res in reversed(earlier):
            extra = cost(res.text) - cost(forms[id(res)])
            if extra <= left:
                forms[id(res)] = res.text
                left -= extra
                self.shrunk_results -= 1
        out: list[dict[str, Any]] = []
        for call, r in zip(calls, self.rounds, strict=True):
            out.append(call)
            out += [
                {"role": "tool", "tool_call_id": res.call_id, "content": forms[id(res)]} for res in r.results
            ]
        return out, sum(message_tokens(m) for m in out)


# What the newest tool results keep at least (while earlier ones can shrink to make room).
NEWEST_MIN_TOKENS = 120


def _summary_form(res: ToolResultText) -> str:
    summary = " ".join((res.summary or "no summary").split())[:300]
    return (
        f"[earlier result, shrunk to its summary to fit the context window: {summary}. "
        "Call the tool again to read it in full.]"
    )


def _cut_result(res: ToolResultText, tokens: int) -> str:
    note = "… [cut to fit the context window; page on with the tool's offset or call it again]"
    room = tokens - count_tokens(note) - 2
    if room < 20:
        return _summary_form(res) if count_tokens(_summary_form(res)) <= tokens else "[result left out]"
    return head(res.text, room) + note


def _fit_lines(text: str, tokens: int) -> str:
    """`text` without its last lines until it fits `tokens` (the index is written best first)."""
    if count_tokens(text) <= tokens:
        return text
    lines = text.split("\n")
    out = head(text, tokens)
    # Keep whole lines: drop the one the cut went through.
    kept = out.count("\n")
    return "\n".join(lines[:kept]) if kept else ""
