"""Reading the explorer's query-string filters without ever failing on what a person typed.

A bad value becomes a message shown on the page and the filter is left out; it never turns
into a 500 or a 404 (ids of objects that are not the user's are reported as unknown, exactly
like ids that do not exist).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.http import QueryDict
from django.utils import timezone

from memory.models import Conversation, Role, Topic

GRANULARITIES = ("day", "week", "month")
MAX_ID_LENGTH = 40


@dataclass
class Filters:
    conversation: Conversation | None = None
    topic: Topic | None = None
    role: str | None = None
    tool: str | None = None
    start: dt.date | None = None
    end: dt.date | None = None
    q: str = ""
    kind: str | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def start_dt(self) -> dt.datetime | None:
        return day_start(self.start) if self.start else None

    @property
    def end_dt(self) -> dt.datetime | None:
        """Exclusive upper bound: the end date is included in full."""
        if not self.end:
            return None
        try:
            return day_start(self.end + dt.timedelta(days=1))
        except OverflowError:
            return None

    @property
    def active(self) -> bool:
        return any(
            [
                self.conversation,
                self.topic,
                self.role,
                self.tool,
                self.start,
                self.end,
                self.q,
                self.kind,
            ]
        )


def day_start(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


def parse_date(raw: str, name: str, errors: list[str]) -> dt.date | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        return dt.date.fromisoformat(raw[:10]) if len(raw) <= 10 else _bad()
    except ValueError:
        errors.append(f"“{raw[:40]}” is not a date for {name}; use YYYY-MM-DD. The filter was ignored.")
        return None


def _bad():
    raise ValueError


def parse_filters(params: QueryDict, user, allowed: set[str]) -> Filters:
    f = Filters()
    errors = f.errors
    if "conversation" in allowed and (raw := params.get("conversation", "").strip()):
        conv = None
        if len(raw) <= MAX_ID_LENGTH:
            conv = Conversation.objects.owned_by(user).filter(pk=raw).first()
        if conv is None:
            errors.append(f"No conversation “{raw[:40]}” in your memory; showing all conversations.")
        f.conversation = conv
    if "topic" in allowed and (raw := params.get("topic", "").strip()):
        topic = None
        if len(raw) <= MAX_ID_LENGTH:
            topic = Topic.objects.owned_by(user).filter(pk=raw).first()
        if topic is None:
            errors.append(f"No topic “{raw[:40]}” in your memory; showing all topics.")
        f.topic = topic
    if "role" in allowed and (raw := params.get("role", "").strip()):
        if raw in Role.values:
            f.role = raw
        else:
            errors.append(
                f"“{raw[:40]}” is not a role; choose one of {', '.join(Role.values)}. The filter was ignored."
            )
    if "tool" in allowed and (raw := params.get("tool", "").strip()):
        if len(raw) <= 100:
            f.tool = raw
        else:
            errors.append("That tool name is longer than any tool's; the filter was ignored.")
    if "start" in allowed:
        f.start = parse_date(params.get("start", ""), "“from”", errors)
    if "end" in allowed:
        f.end = parse_date(params.get("end", ""), "“to”", errors)
    if f.start and f.end and f.start > f.end:
        errors.append("“from” is after “to”; the dates were swapped.")
        f.start, f.end = f.end, f.start
    if "q" in allowed:
        f.q = params.get("q", "").strip()[:500]
    if "kind" in allowed and (raw := params.get("kind", "").strip()):
        f.kind = raw[:32]
    return f


def parse_choice(
    params: QueryDict, name: str, choices: tuple[str, ...], default: str, errors: list[str]
) -> str:
    raw = params.get(name, "").strip()
    if not raw:
        return default
    if raw in choices:
        return raw
    errors.append(f"“{raw[:40]}” is not one of {', '.join(choices)}; showing {default}.")
    return default


def parse_int(
    params: QueryDict,
    name: str,
    default: int,
    errors: list[str],
    *,
    low: int = 0,
    high: int = 1_000_000,
) -> int:
    raw = params.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        errors.append(f"“{raw[:40]}” is not a number for {name}; showing {default}.")
        return default
    if not low <= value <= high:
        errors.append(f"{name} must be between {low} and {high}; showing {default}.")
        return default
    return value
