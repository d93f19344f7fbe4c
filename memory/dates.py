"""The periods a text names: "2024-05-03", "1 February, 2023", "in March", "last week".

Search lifts what was said in the period a question names (memory.finding.fusion.QueryBoosts),
and a fact takes the period its clause names, relative to when it was said
(memory.knowledge.facts).
"""

from __future__ import annotations

import datetime as dt
import re

_MONTH_NAMES = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTHS = "|".join(_MONTH_NAMES)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# "1 February, 2023", "on the 3rd of June 2023", "February 1, 2023", "Oct 13 2023" (full names).
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTHS}),?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTHS})\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_IN_MONTH = re.compile(
    rf"\b(?:in|during|from|since|of)\s+(?:early\s+|late\s+|mid-?)?({_MONTHS})\b(?:,?\s+(\d{{4}}))?", re.I
)
_MONTH_YEAR = re.compile(rf"\b({_MONTHS}),?\s+(\d{{4}})\b", re.I)
_IN_YEAR = re.compile(r"\b(?:in|during)\s+((?:19|20)\d{2})\b", re.I)


def query_period(query: str, now: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime] | None:
    """The time range a question names, if any: '2024-05-03', '1 February, 2023', 'May 3, 2023',
    'in March [2024]', 'December 2023', 'in 2023', 'yesterday', 'today', 'last week',
    'this week', 'last month', 'this month', 'last year'.

    A month without a year is its latest occurrence not after `now`. A date no calendar holds
    (2023-02-30, a year past 9998) names no period."""
    try:
        return _query_period(query, now)
    except (ValueError, OverflowError):
        return None


def _query_period(query: str, now: dt.datetime | None) -> tuple[dt.datetime, dt.datetime] | None:
    from django.utils import timezone

    now = timezone.localtime(now or timezone.now())
    day0 = now.replace(hour=0, minute=0, second=0, microsecond=0)
    text = (query or "").lower()

    def day(year: int, month: int, d: int) -> tuple[dt.datetime, dt.datetime]:
        start = day0.replace(year=year, month=month, day=d)
        return start, start + dt.timedelta(days=1)

    def month_span(year: int, month: int) -> tuple[dt.datetime, dt.datetime]:
        start = day0.replace(year=year, month=month, day=1)
        return start, start.replace(year=year + (month == 12), month=month % 12 + 1)

    if m := _ISO_DATE.search(text):
        return day(int(m[1]), int(m[2]), int(m[3]))
    if m := _DAY_MONTH_YEAR.search(text):
        return day(int(m[3]), _MONTH_NAMES.index(m[2]) + 1, int(m[1]))
    if m := _MONTH_DAY_YEAR.search(text):
        return day(int(m[3]), _MONTH_NAMES.index(m[1]) + 1, int(m[2]))
    if m := _IN_MONTH.search(text):
        month = _MONTH_NAMES.index(m[1]) + 1
        year = int(m[2]) if m[2] else (now.year if month <= now.month else now.year - 1)
        return month_span(year, month)
    if m := _MONTH_YEAR.search(text):
        return month_span(int(m[2]), _MONTH_NAMES.index(m[1]) + 1)
    if m := _IN_YEAR.search(text):
        start = day0.replace(year=int(m[1]), month=1, day=1)
        return start, start.replace(year=start.year + 1)
    week0 = day0 - dt.timedelta(days=day0.weekday())
    month0 = day0.replace(day=1)
    relative = {
        "yesterday": (day0 - dt.timedelta(days=1), day0),
        "today": (day0, day0 + dt.timedelta(days=1)),
        "last week": (week0 - dt.timedelta(days=7), week0),
        "this week": (week0, week0 + dt.timedelta(days=7)),
        "last month": ((month0 - dt.timedelta(days=1)).replace(day=1), month0),
        "this month": (month0, (month0 + dt.timedelta(days=32)).replace(day=1)),
        "last year": (day0.replace(year=now.year - 1, month=1, day=1), day0.replace(month=1, day=1)),
    }
    for phrase, span in relative.items():
        if re.search(rf"\b{phrase}\b", text):
            return span
    return None
