"""What a copy of a forgotten text shares with it, and how to cut it out.

A forgotten message lives on wherever its distinctive parts do: its rare words (rare in this
person's memory and in English: names, codes, made-up words, numbers) and long runs of its
words. `Overlap` finds both again in any text, however the copy was cut, and replaces them
with FORGOTTEN. Common phrases ("Can you help me make a") are never a copy: a shared run counts
only when it holds uncommon words, or when it is long and most of its line.

`rare_words` asks the owner's memory which of a text's unusual words are rare there: a name
mentioned in hundreds of messages is no echo of one of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory.models import Passage
from memory.text import STOP_WORDS, english_frequency, everyday_word

FORGOTTEN = "[forgotten]"
RUN = 5  # words: a shared run at least this long may be a copy
LONG_RUN = 8  # words: a run of common words this long is a copy when it is most of its line
UNCOMMON_PER_MILLION = 20.0  # a run holding two words rarer than this in English is a copy
RARE_PER_MILLION = 0.2  # a word rarer than this in English (and not in its written vocabulary) may be rare
NAME_PER_MILLION = 20.0  # ... and a capitalised one (a name) rarer than this
RARE_AT_MOST = 5  # other messages of the owner that may hold a word still rare in their memory
MAX_RARE_CANDIDATES = 40  # unusual words of the forgotten texts looked up in the owner's memory
SHORT_FIELD_CHARS = 10  # a whole field of fewer words is a copy when it is this long
MAX_PROBES = 400  # words looked for in SQL; past that, every row of the owner is read
MAX_POSITIONS = 64  # occurrences of one word in the forgotten texts that a match starts from

# A JSON string's escapes are not words (a "\n" must not glue "n" to the next word), and a
# JSON text is matched between its quotes, so a scrub never cuts through its structure.
_TOKEN = re.compile(r'\\u[0-9a-fA-F]{4}|\\.|(\w+)')
_UNESCAPED_QUOTE = re.compile(r'(?<!\\)"')
_STOP = STOP_WORDS
# Capitalised by English spelling, not names: a weekday or a month tells nothing apart.
_CALENDAR = frozenset((
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "january", "february",
    "march", "april", "may", "june", "july", "august", "september", "october", "november", "december",
))
# What may stand between a sentence's end and its first word: spaces, quotes, list marks.
_LEAD = " \t\r\"'“‘(*-•#>_`"


def tokens(text: str) -> list[tuple[str, int, int]]:
    """(word in lower case, start, end) of each word of `text`."""
    return [(m.group(1).lower(), m.start(), m.end()) for m in _TOKEN.finditer(text) if m.group(1)]


def _digits(word: str) -> int:
    return sum(c.isdigit() for c in word)


def _starts_sentence(text: str, at: int) -> bool:
    k = at - 1
    while k >= 0 and text[k] in _LEAD:
        k -= 1
    return k < 0 or text[k] in ".!?:;\n"


def unusual_words(texts: Iterable[str]) -> dict[str, float]:
    """The words of `texts` that could tell them apart from everything else, with how often
    English uses them: numbers and codes (3 digits or more), words that are no everyday English
    (rarer than RARE_PER_MILLION and not in its written vocabulary: made-up words, rare names
    and terms), and names (capitalised inside a sentence) rarer than NAME_PER_MILLION. Stop
    words and words shorter than 3 letters never are."""
    found: dict[str, float] = {}
    for text in texts:
        for m in _TOKEN.finditer(text or ""):
            raw = m.group(1)
            if not raw or len(raw) < 3:
                continue
            word = raw.lower()
            if word in _STOP or word in found:
                continue
            if _digits(word) >= 3:
                found[word] = 0.0
                continue
            if _digits(word) or "_" in word:
                continue
            freq = english_frequency(word)
            if not everyday_word(word, RARE_PER_MILLION) or (
                raw[0].isupper() and freq < NAME_PER_MILLION and word not in _CALENDAR
                and not _starts_sentence(text, m.start())
            ):
                found[word] = freq
    return found


def rare_words(owner, texts: Sequence[str], exclude_ids: Iterable[str] = ()) -> set[str]:
    """The unusual words of `texts` (unusual_words) that at most RARE_AT_MOST of the owner's
    other messages hold: what an echo of these texts would repeat. Candidates come from the
    passages' full-text index and are checked against the passages' own words (a passage is
    searched with the end of the message it replies to, which is not its text)."""
    from django.contrib.postgres.search import SearchQuery

    candidates = unusual_words(texts)
    if not candidates:
        return set()
    exclude = [str(i) for i in exclude_ids]
    picked = sorted(candidates, key=lambda w: (candidates[w], -len(w)))[:MAX_RARE_CANDIDATES]
    rare = set()
    for word in picked:
        rows = (
            Passage.objects.filter(
                owner_id=owner.pk, kind=Passage.Kind.MESSAGE,
                search_vector=SearchQuery(word, config="english", search_type="plain"),
            )
            .exclude(logical_message_id__in=exclude)
            .values_list("logical_message_id", "text")[:200]
        )
        holders = {mid for mid, text in rows if word in {w for w, _, _ in tokens(text)}}
        if len(holders) <= RARE_AT_MOST:
            rare.add(word)
    return rare


def _uncommon(word: str) -> bool:
    return word not in _STOP and len(word) >= 3 and (
        _digits(word) >= 3 or english_frequency(word) < UNCOMMON_PER_MILLION
    )


def _line_numbers(text: str, toks: list[tuple[str, int, int]]) -> list[int]:
    """The line each word is on."""
    if "\n" not in text:
        return [0] * len(toks)
    lines, line, at = [], 0, 0
    for _, start, _ in toks:
        line += text.count("\n", at, start)
        at = start
        lines.append(line)
    return lines


@dataclass
class Overlap:
    """The words of the texts being forgotten, their rare words and their ids: what a copy of
    them shares."""

    texts: Sequence[str]
    ids: set[str] = field(default_factory=set)
    rare: set[str] = field(default_factory=set)
    _sources: list[list[str]] = field(init=False, default_factory=list)
    _where: dict[str, list[tuple[int, int]]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.ids = {i for i in self.ids if i}
        self.rare = {w.lower() for w in self.rare if w}
        for text in self.texts:
            words = [w for w, _, _ in tokens(text or "")]
            if not words:
                continue
            s = len(self._sources)
            self._sources.append(words)
            for p, w in enumerate(words):
                spots = self._where.setdefault(w, [])
                if len(spots) < MAX_POSITIONS:
                    spots.append((s, p))

    def __bool__(self) -> bool:
        return bool(self._sources or self.ids)

    def without_rare(self) -> Overlap:
        """The same texts and ids, copies found by shared runs only (what a person chose to keep
        of the rare words' echoes)."""
        return Overlap(self.texts, set(self.ids))

    def probes(self, limit: int | None = MAX_PROBES) -> list[str] | None:
        """Words of which every copy holds one (one per run of RUN words, the longest, every
        word with a digit, and the rare words), plus the ids; None when there are too many to
        ask SQL for."""
        found = set(self.ids) | self.rare
        for words in self._sources:
            last = -1
            for start in range(0, max(1, len(words) - RUN + 1)):
                if last >= start:
                    continue  # this run already holds a chosen word
                window = range(start, min(len(words), start + RUN))
                last = max(window, key=lambda p: (words[p] not in _STOP, len(words[p]), p))
                found.add(words[last])
            found.update(w for w in words if any(c.isdigit() for c in w) and len(w) >= 4)
        return sorted(found) if limit is None or len(found) <= limit else None

    def _runs(self, words: list[str], marked: list[bool]) -> list[tuple[int, int]]:
        """Runs of RUN words or more shared with a forgotten text, as (start, end) word
        positions; a whole short field that is a copy (a quote's cut-off end) is marked at once."""
        runs = []
        i = 0
        while i < len(words):
            best = 0
            for s, p in self._where.get(words[i], ()):
                src = self._sources[s]
                length = 0
                room = min(len(words) - i, len(src) - p)
                while length < room and words[i + length] == src[p + length]:
                    length += 1
                back = 0
                while i - back > 0 and p - back > 0 and words[i - back - 1] == src[p - back - 1]:
                    back += 1
                run = words[i - back : i + length]
                whole = back == i and i + length == len(words)  # the field is this copy, all of it
                if whole and sum(map(len, run)) >= SHORT_FIELD_CHARS and (
                    len(run) >= 2 or any(c.isdigit() for c in words[i])
                ) and not all(w in _STOP for w in run):
                    for k in range(i - back, i + length):
                        marked[k] = True
                elif len(run) >= RUN and not all(w in _STOP for w in run):
                    runs.append((i - back, i + length))
                best = max(best, length)
            i += max(1, best)
        return runs

    def _spans(self, text: str) -> list[tuple[int, int]]:
        toks = tokens(text)
        words = [w for w, _, _ in toks]
        marked = [w in self.rare for w in words]
        runs = self._runs(words, marked)
        # A run counts when it holds uncommon words (or a rare one); a long run of common words
        # counts only where copied runs make up most of their line (a quoted sentence).
        lines = _line_numbers(text, toks)
        long_runs: dict[int, set[int]] = {}
        for a, b in runs:
            run = words[a:b]
            if any(w in self.rare for w in run) or sum(map(_uncommon, set(run))) >= 2:
                for k in range(a, b):
                    marked[k] = True
            elif b - a >= LONG_RUN:
                long_runs.setdefault(lines[a], set()).update(range(a, b))
        for line, covered in long_runs.items():
            if 2 * len(covered) >= lines.count(line):
                for k in covered:
                    marked[k] = True
        spans: list[tuple[int, int]] = []
        for k, is_marked in enumerate(marked):
            if not is_marked:
                continue
            start, end = toks[k][1], toks[k][2]
            if spans and k > 0 and marked[k - 1]:
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((start, end))
        return spans

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where `text` holds a copy: (start, end) of each copied run, rare word or id."""
        found = list(self._spans(text)) if self._sources else []
        for i in self.ids:
            at = text.find(i)
            while at >= 0:
                found.append((at, at + len(i)))
                at = text.find(i, at + len(i))
        merged: list[tuple[int, int]] = []
        for start, end in sorted(found):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged

    def scrub_text(self, text: str, *, json_text: bool = False) -> str:
        """`text` with every copied run, rare word and id replaced by FORGOTTEN. json_text: the
        text is (a piece of) JSON, matched between its quotes."""
        if not text or not self:
            return text
        for i in self.ids:
            text = text.replace(i, FORGOTTEN)
        if not self._sources:
            return text
        if json_text:
            parts = _UNESCAPED_QUOTE.split(text)
            return '"'.join(self.scrub_text(p) for p in parts)
        out, at = [], 0
        for start, end in self._spans(text):
            out.append(text[at:start])
            out.append(FORGOTTEN)
            at = end
        out.append(text[at:])
        return "".join(out)

    def scrub_value(self, value: Any) -> Any:
        """A JSON value with its strings (keys too) scrubbed."""
        if isinstance(value, str):
            return self.scrub_text(value)
        if isinstance(value, list):
            return [self.scrub_value(v) for v in value]
        if isinstance(value, dict):
            return {self.scrub_text(k): self.scrub_value(v) for k, v in value.items()}
        return value

    def scrub_json_text(self, text: str) -> str:
        """A column of JSON text (a tool result): parsed and scrubbed value by value when it is
        whole JSON, else (a chunk of one, plain text) matched between its quotes."""
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            return self.scrub_text(text, json_text=True)
        if isinstance(value, str | int | float | bool) or value is None:
            return self.scrub_text(text, json_text=True)
        scrubbed = self.scrub_value(value)
        return text if scrubbed == value else json.dumps(scrubbed, ensure_ascii=False, default=str)

    def scrub(self, value: Any) -> Any:
        """Any column's value: text or JSON."""
        if isinstance(value, str):
            return self.scrub_json_text(value)
        return self.scrub_value(value)

    def holds(self, value: Any) -> bool:
        """Whether a column's value (text or JSON) holds a copy."""
        return self.scrub(value) != value

    def copied_share(self, text: str) -> float:
        """The share of `text`'s words that are copies of the forgotten texts (1.0 when the text
        names one of their ids and says little else)."""
        toks = tokens(text or "")
        if not toks:
            return 0.0
        copied = sum(len(tokens(text[s:e])) for s, e in self._spans(text)) if self._sources else 0
        if any(i in text for i in self.ids):
            copied = max(copied, 1)
        return min(1.0, copied / len(toks))

    def rare_in(self, text: str) -> list[str]:
        """The rare words `text` holds, in the order it first says them."""
        seen: dict[str, None] = {}
        for w, _, _ in tokens(text or ""):
            if w in self.rare:
                seen.setdefault(w)
        return list(seen)

    def as_written(self, word: str) -> str:
        """A rare word as the forgotten texts first write it ("Vexmorrant", not "vexmorrant")."""
        for text in self.texts:
            for w, start, end in tokens(text or ""):
                if w == word:
                    return text[start:end]
        return word


def excerpt(text: str, spans: Sequence[tuple[int, int]], width: int = 160) -> list[tuple[str, bool]]:
    """About `width` characters of `text` around its first copied span, as (piece, copied)
    pairs, so a template can mark the copied pieces (and escape everything)."""
    if not text:
        return []
    first = spans[0][0] if spans else 0
    start = max(0, first - width // 3)
    if start:
        space = text.find(" ", start, first)
        start = space + 1 if space >= 0 else start
    end = min(len(text), start + width)
    pieces: list[tuple[str, bool]] = [("…", False)] if start else []
    at = start
    for s, e in spans:
        if e <= start or s >= end:
            continue
        s, e = max(s, start), min(e, end)
        if s > at:
            pieces.append((text[at:s], False))
        pieces.append((text[s:e], True))
        at = e
    if at < end:
        pieces.append((text[at:end], False))
    if end < len(text):
        pieces.append(("…", False))
    return [(re.sub(r"\s+", " ", p), copied) for p, copied in pieces]
