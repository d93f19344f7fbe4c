"""The periods a text names: "2024-05-03", "1 February, 2023", "in March", "last week".

Search lifts what was said in the period a question names (memory.finding.fusion.QueryBoosts),
and a fact takes the period its clause names, relative to when it was said
(memory.knowledge.facts).
"""

from __future__ import annotations

import contextlib
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
# "in March", "of March 2023", and "mid-July", "early June 2023" with no word before them.
_IN_MONTH = re.compile(
    rf"\b(?:(?:in|during|from|since|of)\s+(?:early\s+|late\s+|mid-?)?|(?:early|late)\s+|mid-?)"
    rf"({_MONTHS})\b(?:,?\s+(\d{{4}}))?",
    re.I,
)
_MONTH_YEAR = re.compile(rf"\b({_MONTHS}),?\s+(\d{{4}})\b", re.I)
_DAY_NUMBER_BEFORE = re.compile(r"\b\d{1,2}(?:st|nd|rd|th)?\s+$")


def _in_month(text: str) -> re.Match[str] | None:
    """The first "in March", "of March 2023"... that names a month, not the day "the 17th of July"
    (read as that day, by spoken_period)."""
    for m in _IN_MONTH.finditer(text):
        if not (m[0].lower().startswith("of") and _DAY_NUMBER_BEFORE.search(text[: m.start()])):
            return m
    return None

# Each way of writing a day with its year, and where its year, month and day are.
_WRITTEN_DAYS = ((_ISO_DATE, (1, 2, 3)), (_DAY_MONTH_YEAR, (3, 2, 1)), (_MONTH_DAY_YEAR, (3, 1, 2)))
# A month that qualifies a noun ("Melanie's June camping trip", "the July barbecue"): written
# with its capital, so "the march to city hall" and "may" the verb are not months.
_MONTH_BEFORE_NOUN = re.compile(
    r"(?:'s|\b(?i:the|that|this|her|his|my|our|their|your))\s+"
    rf"({'|'.join(m.capitalize() for m in _MONTH_NAMES)})\s+(?!(?i:\d|of\b|and\b|or\b))[a-z]"
)
_IN_YEAR = re.compile(r"\b(?:in|during)\s+((?:19|20)\d{2})\b", re.I)


def query_period(query: str, now: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime] | None:
    """The time range a question names, if any: '2024-05-03', '1 February, 2023', 'May 3, 2023',
    'the week before June 9, 2023' (the days between), 'during the summer', 'the fall of 2022',
    'in March [2024]', 'December 2023', 'in 2023', 'in the past few weeks', 'yesterday', 'today',
    'last week', 'this week', 'last month', 'this month', 'last year', 'last Saturday',
    'on the 14th', 'on Thanksgiving', 'which month of 2023' (a year named any other way).

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

    named = _named_day(text, day) or _season(text, now)
    if named is not None:
        return named
    if m := _in_month(text):
        month = _MONTH_NAMES.index(m[1]) + 1
        year = int(m[2]) if m[2] else (now.year if month <= now.month else now.year - 1)
        return month_span(year, month)
    if m := _MONTH_YEAR.search(text):
        return month_span(int(m[2]), _MONTH_NAMES.index(m[1]) + 1)
    if m := _MONTH_BEFORE_NOUN.search(query or ""):
        month = _MONTH_NAMES.index(m[1].lower()) + 1
        return month_span(now.year if month <= now.month else now.year - 1, month)
    if m := _IN_YEAR.search(text):
        start = day0.replace(year=int(m[1]), month=1, day=1)
        return start, start.replace(year=start.year + 1)
    if span := _recent_span(text, day0):
        return span
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
    if span := spoken_period(text, now) or _holiday(text, day0):
        return span
    # A year named any other way ("which month of 2023", "early 2022"): that year.
    if m := _BARE_YEAR.search(text):
        start = day0.replace(year=int(m[1]), month=1, day=1)
        return start, start.replace(year=start.year + 1)
    return None


# --- Time at ingest (issue 35): the periods a message's words name, resolved against when it
# was said. "I went to bed at 2 AM last Wednesday" said on 2023-05-29 is about 2023-05-24, so
# search lifts it for "what did I do on the 24th?" and a reader can count days between events.
# dateparser resolves the relative phrases; the regular expressions below find them first (it
# reads any word that could be a date, "may" and "second" included) and handle what it does not
# (weekends, seasons, a day and month without a year: the nearest such day, before or after).

_NUMBER_WORDS = (
    "a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
    "|a couple of|a few|several|few|\\d{1,2}"
)
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_SEASONS = {"spring": (3, 6), "summer": (6, 9), "fall": (9, 12), "autumn": (9, 12), "winter": (12, 15)}
# Weekdays as people shorten them in a chat ("last Fri", "next Tues"); only after last / next,
# where "sat" and "sun" can be nothing else.
_WEEKDAYS_SHORT = "mon|tues?|weds?|thu|thur|thurs|fri|sat|sun"
_SHORT_DAYS = {
    "mon": "monday", "tue": "tuesday", "tues": "tuesday", "wed": "wednesday", "weds": "wednesday",
    "thu": "thursday", "thur": "thursday", "thurs": "thursday", "fri": "friday", "sat": "saturday",
    "sun": "sunday",
}
# The phrases are a small grammar, not a list of sayings: a direction (last, next, this past,
# this coming, this, earlier / later this) before a unit (a weekday, weekend, week, month, year,
# season); a count of units ago, from now or "in" them; "on <weekday>", "over the weekend" and
# "in <month>", read back or forward by the tense of their sentence; and the few single words.
_RELATIVE_PHRASE = re.compile(
    r"\b(?:the day before yesterday|the day after tomorrow|yesterday|tomorrow|last night|the other day"
    rf"|(?:last|next|this past|this coming)\s+(?:{_WEEKDAYS_SHORT})"
    rf"|(?:last|next|this past|this coming|this|earlier this|later this)\s+"
    rf"(?:{_WEEKDAYS}|weekend|week|month|year|spring|summer|fall|autumn|winter)"
    rf"|(?:{_NUMBER_WORDS})\s+(?:day|week|weekend|month|year)s?\s+ago"
    rf"|(?:{_NUMBER_WORDS})\s+(?:day|week|month|year)s?\s+from\s+(?:now|today)"
    rf"|in\s+(?:{_NUMBER_WORDS})\s+(?:day|week|month|year)s?(?!\s+(?:ago|old|later|before|after))"
    rf"|on\s+(?:{_WEEKDAYS})(?!s|\s+(?:mornings|afternoons|evenings|nights)\b)"  # not a habit
    r"|(?:over|on|during|at)\s+the\s+weekend"
    rf"|(?:in|during|since|back\s+in)\s+(?:early\s+|late\s+|mid-?)?(?:{_MONTHS})(?!\s*,?\s*\d)"
    r")\b",
    re.I,
)
_MONTH_DAY = re.compile(
    rf"\b(?:({_MONTHS})\s+(\d{{1,2}})(?:st|nd|rd|th)?|(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTHS}))\b"
    r"(?!,?\s+\d{4})(?!\s*(?:am|pm|:\d))",
    re.I,
)
_FUZZY = {"a couple of": "2", "a few": "3", "several": "3", "few": "3"}
_MAX_MENTIONS = 8


def mentioned_periods(text: str, said_at: dt.datetime) -> list[dict[str, str]]:
    """The periods `text` names relative to `said_at` ("last Saturday", "last Fri", "two weeks
    ago", "two weekends ago", "in two weeks", "next month", "last summer", "over the weekend",
    "on Friday", "in March": back or forward by the tense of the sentence, "March 20th") and the
    dates it writes with their year ("May 3, 2023", "in 2013"), each as {"text": the phrase,
    "start", "end": ISO dates, end exclusive}, in the text's order, at most _MAX_MENTIONS. A
    phrase that names the day it was said ("today") adds nothing to the message's own time, and
    is left out."""
    text = text or ""
    if not text.strip():
        return []
    found: list[tuple[int, str, dt.date, dt.date]] = []
    day = said_at.date()
    for m in _RELATIVE_PHRASE.finditer(text):
        if m[0].endswith("may") and not m[0].endswith("May"):
            continue  # "in may": the verb; the month is written "May"
        span = _relative_span(m[0].lower(), said_at, lambda m=m: _planned_at(text, m.start()))
        if span is not None:
            found.append((m.start(), m[0], *span))
    for m in _MONTH_DAY.finditer(text):
        month_name, number = (m[1], m[2]) if m[1] else (m[4], m[3])
        if month_name == "may":
            continue  # "it may 2x the cost": the verb, lower case
        span = _nearest_month_day(_MONTH_NAMES.index(month_name.lower()) + 1, int(number), day)
        if span is not None:
            found.append((m.start(), m[0], *span))
    found.extend(_dated(text))
    found.sort(key=lambda f: f[0])
    out, seen = [], set()
    for _at, phrase, start, end in found:
        if (start, end) in seen or (start == day and end == day + dt.timedelta(days=1)):
            continue
        seen.add((start, end))
        out.append({"text": " ".join(phrase.split()), "start": start.isoformat(), "end": end.isoformat()})
    return out[:_MAX_MENTIONS]


_ITS_OWN_DAY = re.compile(r"\b(?:today|tonight|this\s+(?:morning|afternoon|evening))\b", re.I)


def says_its_own_day(text: str) -> bool:
    """Whether `text` says something happened the day it was said ("one replied and said yes
    today!"): mentioned_periods leaves that day out, but the turn's own date answers "when"."""
    return bool(_ITS_OWN_DAY.search(text or ""))


# A year said with "in", "since", "back in"... ("I got Max in 2013"): that year.
_A_YEAR = re.compile(
    r"\b(?:in|since|during|back in|from|around|of|until)\s+((?:19|20)\d{2})\b(?![\d.,/:-]\d)", re.I
)


_ANY_YEAR = re.compile(r"\d{4}")


def _dated(text: str) -> list[tuple[int, str, dt.date, dt.date]]:
    """The dates a text writes out with their year ("May 3, 2023", "1 February, 2023",
    "2023-05-03", "March 2021", "in 2013"), as (where, phrase, start, end)."""
    found, taken = [], []
    if not _ANY_YEAR.search(text):  # most turns write no year: skip five searches of their words
        return found
    for pattern, parts in _WRITTEN_DAYS:
        for m in pattern.finditer(text):
            year, month, number = (m[i] for i in parts)
            month = int(month) if month.isdigit() else _MONTH_NAMES.index(month.lower()) + 1
            with contextlib.suppress(ValueError):
                start = dt.date(int(year), month, int(number))
                found.append((m.start(), m[0], start, start + dt.timedelta(days=1)))
                taken.append(m.span())
    for m in _MONTH_YEAR.finditer(text):
        if not any(a <= m.start() < b for a, b in taken):
            start = dt.date(int(m[2]), _MONTH_NAMES.index(m[1].lower()) + 1, 1)
            found.append((m.start(), m[0], start, (start + dt.timedelta(days=32)).replace(day=1)))
            taken.append(m.span())
    for m in _A_YEAR.finditer(text):
        if not any(a <= m.start(1) < b for a, b in taken):
            found.append((m.start(), m[0], dt.date(int(m[1]), 1, 1), dt.date(int(m[1]) + 1, 1, 1)))
    return found


def _nearest_month_day(month: int, number: int, day: dt.date) -> tuple[dt.date, dt.date] | None:
    """The day `number` of `month` nearest `day` (the year before, of, or after it)."""
    options = []
    for year in (day.year - 1, day.year, day.year + 1):
        try:
            options.append(dt.date(year, month, number))
        except ValueError:
            continue
    if not options:
        return None
    best = min(options, key=lambda d: abs((d - day).days))
    return best, best + dt.timedelta(days=1)


def _planned_at(text: str, at: int) -> bool:
    """Whether the sentence of `text` around position `at` speaks of what is to come."""
    start = max(text.rfind(mark, 0, at) for mark in ".!?\n") + 1
    ends = [i for i in (text.find(mark, at) for mark in ".!?\n") if i >= 0]
    return is_planned(text[start: min(ends, default=len(text))])


def _relative_span(phrase: str, said_at: dt.datetime, planned=None) -> tuple[dt.date, dt.date] | None:
    """The days `phrase` (lower case, one of _RELATIVE_PHRASE's) names as of `said_at`; `planned`
    says (when called) whether its sentence speaks of what is to come, for the phrases whose
    direction only the tense gives ("on Friday", "over the weekend", "in March")."""
    day = said_at.date()
    phrase = " ".join(phrase.split())
    words = phrase.replace("this past", "last").replace("this coming", "next").split()
    unit = words[-1]
    ahead = bool(planned()) if planned is not None else False
    monday = day - dt.timedelta(days=day.weekday())
    if phrase == "the other day":  # a few days back: the week before the day it was said
        return day - dt.timedelta(days=7), day
    if phrase == "the day after tomorrow":
        return day + dt.timedelta(days=2), day + dt.timedelta(days=3)
    if words[0] in ("earlier", "later"):
        if unit in ("week", "month", "year"):  # "earlier this week": the part of it before that day
            start, end = _period_of(day, unit, False)
            span = (start, day) if words[0] == "earlier" else (day + dt.timedelta(days=1), end)
            return span if span[0] < span[1] else None  # "earlier this week" said on a Monday
        return _relative_span(phrase.split(" ", 1)[1], said_at, planned)  # "earlier this summer"
    if unit == "weekend" and words[0] in ("over", "on", "during", "at"):
        saturday = monday + dt.timedelta(days=5)  # this week's: the one said in, or to come
        if ahead and day > saturday + dt.timedelta(days=1):
            saturday += dt.timedelta(days=7)
        elif not ahead and day < saturday:
            saturday -= dt.timedelta(days=7)
        return saturday, saturday + dt.timedelta(days=2)
    if words[-1] == "ago" and words[-2].startswith("weekend"):
        # "two weekends ago": the weekend before this week's, then one more a week back each.
        count = _count(" ".join(words[:-2]))
        saturday = monday - dt.timedelta(days=2) - dt.timedelta(days=7 * (count - 1))
        return saturday, saturday + dt.timedelta(days=2)
    if words[0] == "on":  # "on Friday": the last one, or the next when the sentence plans it
        target = _WEEKDAYS.split("|").index(unit)
        shift = (target - day.weekday()) % 7 or 7
        when = day + dt.timedelta(days=shift) if ahead else day - dt.timedelta(days=(7 - shift) % 7 or 7)
        return when, when + dt.timedelta(days=1)
    if unit in _MONTH_NAMES:  # "in March": the latest one begun, or the next when planned
        month = _MONTH_NAMES.index(unit) + 1
        year = day.year
        if ahead and month < day.month:
            year += 1
        elif not ahead and month > day.month:
            year -= 1
        start = dt.date(year, month, 1)
        return start, (start + dt.timedelta(days=32)).replace(day=1)
    if unit == "weekend":
        saturday = day + dt.timedelta(days=5 - day.weekday())  # this week's (Monday-based)
        shift = {"last": -7, "next": 7}.get(words[0], 0)
        if words[0] == "last" and day.weekday() >= 5:
            shift = 0 if day.weekday() == 6 else -7  # said on Sunday: the weekend it ends
        start = saturday + dt.timedelta(days=shift)
        return start, start + dt.timedelta(days=2)
    if unit in _SEASONS:
        last = _SEASONS[unit][1]
        year = day.year + {"last": -1, "next": 1}.get(words[0], 0)
        # "last summer" said in October is this year's: the latest one ended before `day`.
        if words[0] == "last" and dt.date(day.year, min(last, 12), 1) <= day and last <= 12:
            year = day.year
        return _season_days(unit, year)
    fuzzy = False
    for words_of, digit in _FUZZY.items():
        if phrase.startswith(words_of) or phrase.startswith(f"in {words_of}"):
            phrase = phrase.replace(words_of, digit, 1)
            fuzzy = True
    phrase = phrase.replace("this past", "last").replace("this coming", "next")
    if unit in _SHORT_DAYS:  # "last fri": dateparser knows some shortened days, not all
        phrase = phrase.rsplit(" ", 1)[0] + " " + _SHORT_DAYS[unit]
    parsed = _date_parser(said_at).get_date_data(phrase)
    if parsed is None or parsed.date_obj is None:
        return None
    return _period_of(parsed.date_obj.date(), parsed.period or "day", fuzzy)


def _period_of(when: dt.date, granularity: str, fuzzy: bool) -> tuple[dt.date, dt.date]:
    if granularity == "week":
        start = when - dt.timedelta(days=when.weekday())
        end = start + dt.timedelta(days=7)
    elif granularity == "month":
        start = when.replace(day=1)
        end = (start + dt.timedelta(days=32)).replace(day=1)
    elif granularity == "year":
        start, end = when.replace(month=1, day=1), when.replace(year=when.year + 1, month=1, day=1)
    else:
        start, end = when, when + dt.timedelta(days=1)
    if fuzzy:  # "a few days ago": a span around it, not one day
        width = end - start
        start, end = start - 2 * width, end + 2 * width
    return start, end


def _date_parser(said_at: dt.datetime):
    from dateparser.date import DateDataParser

    base = said_at.replace(tzinfo=None)
    return DateDataParser(
        languages=["en"], settings={"RELATIVE_BASE": base, "PREFER_DATES_FROM": "past"}
    )


_DAY_OF_MONTH = re.compile(r"\bon\s+the\s+(\d{1,2})(?:st|nd|rd|th)\b", re.I)


def spoken_period(text: str, now: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    """The period a question names in the words a message would use ("last Saturday", "two
    weeks ago", "last summer", "on the 14th": the latest 14th not after `now`), as aware
    datetimes in `now`'s zone; None when it names none."""
    span = None
    if m := _RELATIVE_PHRASE.search(text):
        span = _relative_span(m[0].lower(), now)
    elif m := _MONTH_DAY.search(text):
        # "on May 27": the latest such day not after `now` (a question asks about the past).
        month_name, number = (m[1], m[2]) if m[1] else (m[4], m[3])
        month = _MONTH_NAMES.index(month_name.lower()) + 1
        for year in (now.year, now.year - 1):
            with contextlib.suppress(ValueError):
                candidate = dt.date(year, month, int(number))
                if candidate <= now.date():
                    # "the week before June 9": the days between, as with the year written.
                    span = _with_offset(text[: m.start()], candidate, candidate + dt.timedelta(days=1))
                    break
    elif m := _DAY_OF_MONTH.search(text):
        number, day = int(m[1]), now.date()
        month = day.replace(day=1)
        for _ in range(3):  # this month's, or the last month that has that day
            try:
                candidate = month.replace(day=number)
            except ValueError:
                candidate = None
            if candidate is not None and candidate <= day:
                span = (candidate, candidate + dt.timedelta(days=1))
                break
            month = (month - dt.timedelta(days=1)).replace(day=1)
    if span is None:
        return None
    return _at_midnight(span[0], now), _at_midnight(span[1], now)


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


# --- More of the ways a question names a period (issue 35, held-out wordings) -----------------
# Each is a rule a person would state: a day with an offset names the days between ("the week
# before August 3, 2023"); a season is that season ("during the summer": the latest one begun);
# "the past few weeks" the weeks up to now; a holiday its days; a year named any way that year.

_NUMBER_VALUES = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3,
    "several": 3, "few": 3,
}
_UNIT_DAYS = {"day": 1, "week": 7, "weekend": 7, "month": 31, "year": 366}
_OFFSET = re.compile(
    rf"\b(?:(?:the|last|that)\s+)?(?:({_NUMBER_WORDS})\s+)?(day|week|weekend|month|{_WEEKDAYS})s?\s+"
    r"(before|after|prior\s+to|following)\s+(?:on\s+)?(?:the\s+)?$",
    re.I,
)


def _count(word: str | None) -> int:
    word = (word or "one").lower()
    return int(word) if word.isdigit() else _NUMBER_VALUES.get(word, 1)


def _named_day(text: str, day) -> tuple[dt.datetime, dt.datetime] | None:
    """A day written out ("2024-05-03", "1 February, 2023", "May 3, 2023"), or the days between
    it and an offset before or after it ("two weeks before August 11, 2023": July 28 to August
    11; the turn said that day and the one about the day itself both fall in it)."""
    for pattern, parts in _WRITTEN_DAYS:
        m = pattern.search(text)
        if m is None:
            continue
        year, month, number = (m[i] for i in parts)
        month = int(month) if month.isdigit() else _MONTH_NAMES.index(month) + 1
        return _with_offset(text[: m.start()], *day(int(year), month, int(number)))
    return None


def _with_offset(before: str, start, end):
    """The day from `start` to `end`, or the days between it and the offset `before` ends with
    ("the week before", "three days after"), whether or not the day was written with its year."""
    offset = _OFFSET.search(before)
    if offset is None:
        return start, end
    width = dt.timedelta(days=_count(offset[1]) * _UNIT_DAYS.get(offset[2].lower(), 7))
    if offset[3].lower() in ("after", "following"):
        return start, end + width
    return start - width, end


_SEASON_WORDS = "spring|summer|fall|autumn|winter"
# "during the summer", "in the fall of 2022", "summer 2023"; not "plans for the summer" (made
# before it), nor "at the summer camp": a season's name before another word names the thing,
# unless the word says when or what happened then.
_SEASON = re.compile(
    r"\b(?:in|during|over|through|throughout|that)\s+(?:the\s+)?(?:(?:early|late|mid-?)\s*)?"
    rf"({_SEASON_WORDS})\b"
    r"(?:,?\s+(?:of\s+)?((?:19|20)\d{2})\b"
    r"|(?!\s+(?!(?:of|and|or|with|when|while|before|after|did|was|were|break|vacation|holidays?)\b)[a-z]))"
    rf"|\b({_SEASON_WORDS}),?\s+(?:of\s+)?((?:19|20)\d{{2}})\b",
    re.I,
)


def _season(text: str, now: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    """The season a question names: of the year it gives, else the latest one begun by `now`."""
    m = _SEASON.search(text)
    if m is None:
        return None
    name, year = (m[1], m[2]) if m[1] else (m[3], m[4])
    start, end = _season_days(name.lower(), int(year) if year else now.year)
    if not year and start > now.date():
        start, end = _season_days(name.lower(), now.year - 1)
    return _at_midnight(start, now), _at_midnight(end, now)


def _season_days(name: str, year: int) -> tuple[dt.date, dt.date]:
    """The days of season `name` begun in `year` (winter runs into the next year)."""
    first, last = _SEASONS[name]
    return dt.date(year, first, 1), dt.date(year + (last > 12), (last - 1) % 12 + 1, 1)


_RECENT = re.compile(
    rf"\b(?:in|over|during|for|within|from|throughout)\s+the\s+(?:past|last|previous)\s+"
    rf"(?:({_NUMBER_WORDS})\s+)?(day|week|month|year)s?\b",
    re.I,
)


def _recent_span(text: str, day0: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    """"in the past few weeks", "over the last two months", "in the past month": the days up to
    and including today (not the calendar month before, as "last month" is)."""
    m = _RECENT.search(text)
    if m is None:
        return None
    count, unit = _count(m[1]), m[2].lower()
    if unit in ("month", "year"):  # the same day, that many months back (the month's last if shorter)
        first = _add_months(day0, -count * (12 if unit == "year" else 1))
        start = first.replace(day=min(day0.day, (_add_months(first, 1) - dt.timedelta(days=1)).day))
    else:
        start = day0 - dt.timedelta(days=count * _UNIT_DAYS[unit])
    return start, day0 + dt.timedelta(days=1)


# Holidays with a fixed day (month, day, how many days), and Thanksgiving (the fourth Thursday of
# November, to the Sunday after), as the days people speak of them on.
_HOLIDAYS = {
    r"christmas eve": (12, 24, 1),
    r"christmas(?:\s+day)?|xmas": (12, 24, 3),
    r"new year'?s eve": (12, 31, 1),
    r"new year'?s(?:\s+day)?": (12, 31, 2),
    r"valentine'?s(?:\s+day)?": (2, 14, 1),
    r"halloween": (10, 31, 1),
    r"independence day|fourth of july|july 4th": (7, 4, 1),
    r"thanksgiving": (11, 0, 4),
}
_HOLIDAY = re.compile(
    r"\b(" + "|".join(f"(?:{p})" for p in _HOLIDAYS) + r")(?:,?\s+(?:of\s+|in\s+)?((?:19|20)\d{2})\b)?",
    re.I,
)


def _holiday(text: str, day0: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    """The holiday a question names: of the year it gives, else the latest one begun by today."""
    m = _HOLIDAY.search(text)
    if m is None:
        return None
    month, number, length = next(v for p, v in _HOLIDAYS.items() if re.fullmatch(p, m[1], re.I))

    def start_in(year: int) -> dt.date:
        if number:
            return dt.date(year, month, number)
        first = dt.date(year, month, 1)  # Thanksgiving: the fourth Thursday
        return first + dt.timedelta(days=(3 - first.weekday()) % 7 + 21)

    start = start_in(int(m[2]) if m[2] else day0.year)
    if not m[2] and start > day0.date():
        start = start_in(day0.year - 1)
    return _at_midnight(start, day0), _at_midnight(start + dt.timedelta(days=length), day0)


# A year said any other way; not an amount ("2000 steps", "$1999") nor part of a date.
_BARE_YEAR = re.compile(
    r"(?<![\d$£€.,/:-])\b((?:19|20)\d{2})\b(?![\d.,/:-]|\s*(?:%|km|kg|miles|dollars|euros|pounds|words|pages|"
    r"people|calories|steps|times|hours|minutes|feet|meters|metres)\b)",
    re.I,
)


def _at_midnight(day: dt.date, like: dt.datetime) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=like.tzinfo)
