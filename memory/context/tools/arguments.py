"""What the tools' arguments say: the JSON-schema pieces they share (LIMIT, OFFSET, ID,
CHAR_OFFSET), and the readers of ids, dates and periods, each scoped to the owner's rows."""

from __future__ import annotations

import datetime as dt
import re

from django.utils import timezone

from memory.context.tools.registry import ToolError
from memory.errors import NotFound
from memory.models import Conversation, Message

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


def owned_conversation(owner, conversation_id: str | None):
    if not conversation_id:
        return None
    return Conversation.objects.owned_by(owner).filter(pk=conversation_id).first() or _raise(
        NotFound("conversation", conversation_id)
    )


def _raise(exc: Exception):
    raise exc


def visible_message(owner, message_id: str) -> Message:
    m = Message.objects.visible_to(owner).filter(pk=str(message_id)).first()
    if m is None:
        raise NotFound("message", message_id)
    return m


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


def position_time(owner, value: str | None, *, end: bool = False) -> dt.datetime | None:
    """A bound given as a message id (its time) or a date."""
    if not value:
        return None
    m = Message.objects.owned_by(owner).filter(pk=value).only("timestamp").first()
    if m is not None:
        return m.timestamp + (dt.timedelta(microseconds=1) if end else dt.timedelta(0))
    if re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{26}", value):
        raise NotFound("message", value)
    return _parse_day(value, end=end)
