"""When a newer statement replaces an older one, and when two say the same, without a model.

"I lead a team of 4 engineers" and, months later, "I now lead a team of five engineers" are the
same thing with a new value: the newer supersedes the older. "I caught 7 bass with Alex on 7/10"
and "we caught 9 bass on 7/22" are two trips, and "I have 3 kids" and "I have 2 cats" two things:
neither supersedes. The test, on the speaker's own words of both:

- each states a value of the same type (a count, an ordinal, an amount of money, a time of day,
  a weekday, a frequency, a name) and the values differ;
- the differing values belong to the same thing: a content word next to the value in one
  (its head: "engineers", "followers", "level", "class") is next to it in the other too;
- with the values set aside, the two share content words beyond that head (a generic head such
  as "hours" or "times" alone says nothing), and more of them for names;
- they do not name two different dates (two events, not one fact updated).

Two statements say the same when their values are the same and, values set aside, their content
words are mostly the same (`same_meaning`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "hundred": 100, "dozen": 12, "twice": 2, "once": 1,
}
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10,
}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_VALUE = re.compile(
    r"(?P<money>[$€£]\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:k|m|million|thousand))?)"
    r"|(?P<date>\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b|\b\d{4}-\d{2}-\d{2}\b"
    rf"|\b(?:{_MONTHS})\s+\d{{1,2}}(?:st|nd|rd|th)?\b|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\b)"
    r"|(?P<time>\b\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)|\b\d{1,2}:\d{2}\b)"
    r"|(?P<frequency>\bevery\s+(?:other\s+|single\s+)?(?:\w+\s+)?(?:day|week|month|year|morning|evening|night|weekend)s?\b"
    r"|\b(?:once|twice|\w+\s+times)\s+(?:a|per)\s+(?:day|week|month|year)\b|\b(?:daily|weekly|biweekly|monthly)\b)"
    rf"|(?P<weekday>\b(?:{'|'.join(_WEEKDAYS)})s?\b)"
    r"|(?P<ordinal>\b(?:" + "|".join(_ORDINALS) + r")\b|\b\d+(?:st|nd|rd|th)\b)"
    r"|(?P<number>\b\d[\d,]*(?:\.\d+)?(?:\s?-\s?\d[\d,]*(?:\.\d+)?)?\b"
    r"|\b(?:" + "|".join(_NUMBER_WORDS) + r")\b)"
    r"|(?P<name>(?-i:(?<![.!?]\s)(?<!^)\b[A-Z][\w'’&-]*(?:\s+(?:of\s+|de\s+|the\s+)?[A-Z][\w'’&-]*)*))",
    re.I | re.M,
)
_STOP = {
    "a", "an", "the", "and", "or", "but", "so", "of", "to", "in", "on", "at", "for", "with", "from",
    "by", "about", "as", "into", "over", "after", "before", "since", "until", "i", "i'm", "i've", "i'd",
    "i'll", "me", "my", "mine", "myself", "we", "we're", "we've", "our", "us", "you", "your", "it",
    "it's", "its", "this", "that", "these", "those", "is", "am", "are", "was", "were", "be", "been",
    "being", "have", "has", "had", "having", "do", "does", "did", "done", "get", "got", "gotten",
    "getting", "just", "really", "actually", "now", "currently", "already", "still", "also", "even",
    "lately", "recently", "far", "then", "there", "here", "very", "pretty", "quite", "lot", "lots",
    "bit", "some", "any", "all", "more", "most", "much", "many", "few", "other", "another", "new",
    "one", "ones", "which", "who", "what", "when", "where", "how", "than", "too", "can", "could",
    "will", "would", "should", "might", "must", "may", "not", "no", "up", "out", "around",
    "approximately", "almost", "nearly", "total", "count", "right", "moment", "least", "every", "each",
    "last", "next", "past", "ago", "today", "yesterday", "tomorrow"
}
# Words that take a value but name no thing of their own: "10 hours", "six times".
_GENERIC = {
    "time", "hour", "minut", "day", "week", "month", "year", "second", "peopl", "thing", "weekend",
    "weekday", "morning", "even", "night",
    "point", "way", "part", "number", "amount", "piec", "item", "bit", "lot", "km", "mile", "kg", "lb",
    "pound", "metr", "meter", "kilomet", "mm", "cm", "dollar", "euro", "percent"
}
# Verbs too light to make two statements about one thing.
_LIGHT = {
    "have", "get", "got", "use", "make", "go", "went", "take", "buy", "bought", "start", "think",
    "plan", "like", "love", "enjoy", "want", "need", "tri", "spent", "spend", "see", "saw", "know",
    "feel", "found", "find", "keep", "kept", "put", "said", "say", "tell", "told", "manag", "look",
    "been"
}
_WORD = re.compile(r"[a-z][a-z'-]*")
# "I met…", "I attended…": an event, in the simple past.
_SIMPLE_PAST = re.compile(
    r"^(?:[A-Z][^,]{0,60},\s+)?I (?:also |just |recently |finally |then |)(?:met|attended|went|visited|saw|"
    r"took|caught|ran|won|lost|bought|got|flew|drove|stayed|tried|watched|read|finished|completed|\w+ed)\b"
)


@functools.cache
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


@dataclass
class Reading:
    """A statement's values by type (with where they are) and its content stems."""

    values: dict[str, list[tuple[str, int, int]]]
    stems: list[tuple[str, int]]  # (stem, character offset), values left out
    adjectives: set[str] = field(default_factory=set)  # stems of words that can only be adjectives

    @property
    def content(self) -> set[str]:
        return {s for s, _ in self.stems}


def _normalize(kind: str, raw: str) -> str:
    low = raw.lower().strip()
    if kind == "number":
        if low in _NUMBER_WORDS:
            return str(_NUMBER_WORDS[low])
        return low.replace(",", "").replace(" ", "")
    if kind == "ordinal":
        return str(_ORDINALS.get(low, re.sub(r"\D", "", low) or low))
    if kind == "weekday":
        return low.rstrip("s") if low.rstrip("s") in _WEEKDAYS else low
    if kind in ("money", "time"):
        return low.replace(" ", "").replace(",", "").replace(".", "")
    if kind == "frequency":
        words = low.split()
        return " ".join(str(_NUMBER_WORDS.get(w, w)) for w in words)
    return " ".join(low.split())


@functools.lru_cache(maxsize=20000)
def read(text: str) -> Reading:
    values: dict[str, list[tuple[str, int, int]]] = {}
    taken: list[tuple[int, int]] = []
    for m in _VALUE.finditer(text):
        kind = m.lastgroup or ""
        raw = m.group(0)
        if kind == "name":
            words = raw.split()
            if words[0] in ("I", "I'm", "I've", "I'd", "I'll"):
                continue
        values.setdefault(kind, []).append((_normalize(kind, raw), m.start(), m.end()))
        taken.append(m.span())
    stems = []
    words = [(w.group(0), w.start()) for w in _WORD.finditer(text.lower())]
    kept = [(w.strip("'-"), at) for w, at in words
            if w.strip("'-") not in _STOP and not any(a <= at < b for a, b in taken) and len(w) > 1]
    stemmed = _stemmer().stemWords([w for w, _ in kept])
    stems = [(s, at) for s, (_, at) in zip(stemmed, kept, strict=True)]
    adjectives = {s for s, (w, _) in zip(stemmed, kept, strict=True) if _only_adjective(w)}
    return Reading(values, stems, adjectives)


@functools.lru_cache(maxsize=20000)
def _only_adjective(word: str) -> bool:
    """'different', 'total': words that describe a counted thing rather than name it."""
    from memory.knowledge.wording import lexicon

    lemmas = lexicon().getAllLemmas(word)
    return bool(lemmas) and set(lemmas) <= {"ADJ", "ADV"}


_NEAR = {"number": (2, 2), "ordinal": (2, 2), "money": (2, 2), "name": (1, 2)}


def _heads(reading: Reading, kind: str) -> set[str]:
    """The content stems that say what each value of this type is of: for a count or a name,
    the two after it ("10 hours", "four bikes") and the one before it ("level 100", "trip to
    Paris"); for a time, day or frequency, the three on either side (the activity it times)."""
    heads: set[str] = set()
    ahead, behind = _NEAR.get(kind, (3, 3))
    for _, start, end in reading.values.get(kind, []):
        before = [s for s, at in reading.stems if at < start][-ahead:]
        after = [s for s, at in reading.stems if at >= end][:behind]
        if kind in _NEAR:
            after = [w for w in after if w not in reading.adjectives] or after
            if after and after[0] not in _GENERIC:
                after = after[:1]  # "four bikes": what is counted; "10 hours on the sculpture": both
        heads.update(before + after)
    return heads


def supersedes(new: str, old: str) -> bool:
    """Whether statement `new` gives a new value for the same thing as `old` (both the
    speaker's own words)."""
    a, b = read(new), read(old)
    days = {v for v, _, _ in a.values.get("date", [])}
    if b.values.get("date") and days != {v for v, _, _ in b.values["date"]}:
        return False  # what happened on a day stays true: another day is another event
    past = _SIMPLE_PAST.match(new) and _SIMPLE_PAST.match(old)
    if _SIMPLE_PAST.match(new) and not past and (b.values.get("weekday") or b.values.get("frequency")):
        return False  # "I ran the long run in 2 h 31": one time it happened, not a new routine
    shared = (a.content & b.content) - _LIGHT - _GENERIC
    for kind in ("number", "ordinal", "money", "time", "weekday", "frequency", "name"):
        va = {v for v, _, _ in a.values.get(kind, [])}
        vb = {v for v, _, _ in b.values.get(kind, [])}
        if not va or not vb or va == vb or (kind == "name" and (va & vb or past)):
            continue  # (two things that happened at different places are two events)
        heads = (_heads(a, kind) & _heads(b, kind)) - _LIGHT
        if not heads:
            continue
        specific = heads - _GENERIC
        needed = 3 if kind == "name" else 2
        # A head of its own ("bikes", "followers", "level") needs little more; a unit ("hours",
        # "times") needs the rest of the statement to be about the same thing.
        if (specific and len(shared) >= needed - 1) or len(shared) >= needed:
            return True
    return False


def same_meaning(a: str, b: str) -> bool:
    """Whether two statements say the same: the same values, and, values set aside, the content
    words of the shorter mostly in the longer ("I'm lactose intolerant" and "As I said, I'm
    lactose intolerant, so I skip desserts"; "I lead 3 engineers" and "I've been leading 3
    engineers for a year")."""
    ra, rb = read(a), read(b)
    for kind in set(ra.values) | set(rb.values):
        if kind == "name":
            continue
        if {v for v, _, _ in ra.values.get(kind, [])} != {v for v, _, _ in rb.values.get(kind, [])}:
            return False
    ca, cb = ra.content - _LIGHT, rb.content - _LIGHT
    if min(len(ca), len(cb)) < 2:
        return " ".join(a.lower().split()) == " ".join(b.lower().split())
    shared = len(ca & cb)
    return shared / len(ca | cb) >= 0.75 or shared / min(len(ca), len(cb)) >= (0.6 if ra.values else 0.8)
