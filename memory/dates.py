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


# --- When a fact's words say it happens (issue 34: facts) ----------------------------------------
# A fact's relative date is read against the date its message was said, forward for what is
# planned ("the end of June" said in May 2024 is June 2024; "in April" said in November 2024 is
# April 2025), back for what happened ("last April", "in April" in a past-tense clause). The
# words are found here; dateparser reads them.

_W_MONTH = rf"(?:{_MONTHS})"
_W_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_WHEN = re.compile(
    r"\b(?:"
    r"\d{4}-\d{2}-\d{2}"
    rf"|(?:the\s+)?\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_W_MONTH}(?:,?\s+\d{{4}})?"
    rf"|{_W_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?"
    r"|\d{1,2}/\d{1,2}(?:/\d{2,4})?"
    rf"|(?:the\s+)?(?:end|beginning|start|middle)\s+of\s+(?:{_W_MONTH}|next\s+(?:week|month|year)|"
    rf"the\s+(?:week|month|year))"
    rf"|(?:early|late|mid-?)\s*{_W_MONTH}"
    rf"|(?:last|next|this|coming)\s+(?:{_W_MONTH}|{_W_WEEKDAY}|week(?:end)?|month|year|summer|winter|spring|"
    rf"fall|autumn)"
    rf"|(?:in|during|by|until|since)\s+{_W_MONTH}(?:,?\s+\d{{4}})?"
    rf"|{_W_MONTH}\s+\d{{4}}"
    r"|(?:in|during)\s+(?:19|20)\d{2}"
    rf"|on\s+{_W_WEEKDAY}"
    r"|(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|several|\d+)\s+(?:days?|weeks?|months?|"
    r"years?)\s+ago"
    r"|in\s+(?:a|an|one|two|three|four|five|six|\d+)\s+(?:days?|weeks?|months?)"
    r"|yesterday|today|tonight|tomorrow|last\s+night"
    r")\b",
    re.I,
)
_PAST_WORDS = re.compile(
    r"\b(?:ago|last|yesterday|was|were|had|did|went|got|took|made|ran|saw|met|bought|spent|caught|came|"
    r"found|gave|left|lost|won|wrote|built|began|brought|taught|held|sold|threw|grew|drew|felt|kept|paid|"
    r"flew|drove|rode|swam|sang|wore|told|said|heard|sat|stood|slept|ate|drank|fell|forgot|broke|chose|"
    r"spoke|woke|became|\w+ed)\b|\bI've\b|\bI have (?:been|had|\w+ed)\b",
    re.I,
)


def is_planned(text: str) -> bool:
    """Whether a clause speaks of what is to come ("I'm flying to Porto in April", "my book club
    meets in September") rather than of what happened ("I went to Porto in April")."""
    if re.search(r"\b(?:ago|last|yesterday)\b", text, re.I):
        return False
    if re.search(r"\b(?:will|'ll|going to|gonna|plan(?:ning|ned)?|hop(?:e|ing) to|next|upcoming|coming up|"
                 r"scheduled|booked|about to|due to|tomorrow|tonight|(?:rescheduled|moved|postponed|"
                 r"pushed back|"
                 r"brought forward) (?:\w+ ){0,3}?(?:to|for))\b", text, re.I):
        return True
    return not _PAST_WORDS.search(text)


def resolve_when(
    text: str, said_at: dt.datetime, planned: bool | None = None
) -> tuple[dt.datetime, dt.datetime] | None:
    """The period the first date expression of `text` names, read against `said_at` (forward
    when `planned`, back otherwise; by the clause's own words when None), as aware datetimes in
    said_at's zone; None when it names none."""
    m = _WHEN.search(text or "")
    if m is None:
        return None
    expression = " ".join(m[0].lower().split())
    planned = is_planned(text) if planned is None else planned
    try:
        return _resolve(expression, said_at, planned)
    except (ValueError, OverflowError):
        return None


def _resolve(expression: str, said_at: dt.datetime, planned: bool) -> tuple[dt.datetime, dt.datetime] | None:
    import dateparser

    local = said_at
    base = local.replace(tzinfo=None)
    day0 = base.replace(hour=0, minute=0, second=0, microsecond=0)
    if expression in ("this weekend", "coming weekend", "next weekend"):
        ahead = (5 - day0.weekday()) % 7 + (7 if expression == "next weekend" else 0)
        saturday = day0 + dt.timedelta(days=ahead)
        return _aware(saturday, saturday + dt.timedelta(days=2), local)
    if expression == "last weekend":
        saturday = day0 - dt.timedelta(days=(day0.weekday() - 5) % 7 or 7)
        return _aware(saturday, saturday + dt.timedelta(days=2), local)
    if expression == "last night":
        return _aware(day0 - dt.timedelta(days=1), day0, local)
    direction = "future" if planned else "past"
    words = expression
    if words.startswith(("last ", "next ", "coming ", "this ")):
        first, _, rest = words.partition(" ")
        if re.fullmatch(rf"{_W_MONTH}|summer|winter|spring|fall|autumn", rest):
            direction = {"last": "past", "next": "future", "coming": "future"}.get(first, direction)
            words = rest
    part = re.match(r"(?:the\s+)?(end|beginning|start|middle)\s+of\s+(.+)$", words)
    if part:
        words = part[2]
    words = re.sub(r"^(?:early|late|mid-?)\s*", "", words)
    words = re.sub(r"^(?:in|during|by|until|since|on)\s+", "", words)
    seasons = {"summer": (6, 3), "winter": (12, 3), "spring": (3, 3), "fall": (9, 3), "autumn": (9, 3)}
    season = seasons.get(words)
    if season:
        month, length = season
        year = base.year
        start = day0.replace(year=year, month=month, day=1)
        if direction == "future" and start + dt.timedelta(days=92) < day0:
            start = start.replace(year=year + 1)
        elif direction == "past" and start > day0:
            start = start.replace(year=year - 1)
        return _aware(start, _add_months(start, length), local)
    parsed = dateparser.date.DateDataParser(
        languages=["en"],
        settings={"RELATIVE_BASE": base, "PREFER_DATES_FROM": direction, "PREFER_DAY_OF_MONTH": "first",
                  "RETURN_TIME_AS_PERIOD": True},
    ).get_date_data(words)
    when, period = parsed.date_obj, parsed.period
    if when is None:
        return None
    when = when.replace(tzinfo=None) if when.tzinfo else when
    start = when.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "year":
        start = start.replace(month=1, day=1)
        return _aware(start, start.replace(year=start.year + 1), local)
    if period == "month":
        start = start.replace(day=1)
        return _aware(start, _add_months(start, 1), local)
    if period == "week":
        return _aware(start, start + dt.timedelta(days=7), local)
    return _aware(start, start + dt.timedelta(days=1), local)


def _add_months(start: dt.datetime, months: int) -> dt.datetime:
    month = start.month - 1 + months
    return start.replace(year=start.year + month // 12, month=month % 12 + 1, day=1)


def _aware(start: dt.datetime, end: dt.datetime, like: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    return start.replace(tzinfo=like.tzinfo), end.replace(tzinfo=like.tzinfo)
