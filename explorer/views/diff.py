"""The diff of two versions of a message, bounded in time and size whatever the texts."""

from __future__ import annotations

import difflib
import re

# The diff of two versions compares lines, then the words of changed lines. difflib's matcher is
# quadratic to cubic on repetitive text ("a\n" * 200000 edited at both ends would pin a server
# thread for hours), so it gets a budget of steps; past it the changed part is shown whole.
# (A step is about a microsecond or two: the budget holds a diff to about a second.)
DIFF_WORK_LIMIT = 500_000
DIFF_CONTEXT_CHARS = 400  # unchanged text kept around a change; the rest is elided
DIFF_SHOWN_CHARS = 10_000  # removed or added text shown per change; the rest is elided
# Past its first DIFF_MAX_LINES differing lines, a diff is not computed, and past
# DIFF_MAX_SEGMENTS pieces or DIFF_MAX_OUTPUT_CHARS characters it is not shown: the page says
# the rest is left out. (Two 0.9 MB texts of 80,000 short lines, 70% changed, took 7 s and
# made 3.1 MB of HTML.)
DIFF_MAX_LINES = 2_000
DIFF_MAX_SEGMENTS = 1_500
DIFF_MAX_OUTPUT_CHARS = 150_000

# Words with the spaces after them: whitespace alone would be the commonest token by far, and
# the matcher's cost grows with how often tokens repeat.
_TOKEN = re.compile(r"\s+|\S+\s*")


class _DiffTooLarge(Exception):
    pass


class _BudgetedMatcher(difflib.SequenceMatcher):
    """A SequenceMatcher that gives up (raises _DiffTooLarge) once it has spent `budget`."""

    def __init__(self, a: list[str], b: list[str], budget: list[int]) -> None:
        self.budget = budget  # shared by the matchers of one diff: [steps left]
        super().__init__(None, a, b, autojunk=False)

    def find_longest_match(self, alo=0, ahi=None, blo=0, bhi=None):
        ahi = len(self.a) if ahi is None else ahi
        bhi = len(self.b) if bhi is None else bhi
        # An upper bound of the steps the search below takes: one per candidate pair.
        b2j = self.b2j
        self.budget[0] -= (ahi - alo) + sum(len(b2j.get(x, ())) for x in self.a[alo:ahi])
        if self.budget[0] < 0:
            raise _DiffTooLarge
        return super().find_longest_match(alo, ahi, blo, bhi)


def _common_ends(a: list[str], b: list[str]) -> tuple[int, int]:
    """How many tokens `a` and `b` share at their start, and then at their end."""
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


def _opcodes(a: list[str], b: list[str], budget: list[int]) -> list[tuple[str, str]]:
    """(op, text) turning token list `a` into `b`; raises _DiffTooLarge past the budget."""
    head, tail = _common_ends(a, b)
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    out = [("same", "".join(a[:head]))]
    for op, i1, i2, j1, j2 in _BudgetedMatcher(a_mid, b_mid, budget).get_opcodes():
        if op == "equal":
            out.append(("same", "".join(a_mid[i1:i2])))
        if op in ("delete", "replace"):
            out.append(("del", "".join(a_mid[i1:i2])))
        if op in ("insert", "replace"):
            out.append(("ins", "".join(b_mid[j1:j2])))
    out.append(("same", "".join(a[len(a) - tail :])))
    return out


def _words(segments: list[tuple[str, str]], budget: list[int]) -> list[tuple[str, str]]:
    """Changed lines compared word by word, while the budget lasts (past it, shown whole)."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(segments):
        op, text = segments[i]
        if op == "del" and i + 1 < len(segments) and segments[i + 1][0] == "ins":
            inserted = segments[i + 1][1]
            try:
                out += _opcodes(_TOKEN.findall(text), _TOKEN.findall(inserted), budget)
            except _DiffTooLarge:
                budget[0] = -1
                out += [("del", text), ("ins", inserted)]
            i += 2
        else:
            out.append((op, text))
            i += 1
    return out


def _tidy(segments: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Spaces that end both sides of a change shown as unchanged; neighbours of one kind
    joined; long stretches elided ("skip": what was left out)."""
    spaced: list[tuple[str, str]] = []
    for op, text in segments:
        if op == "ins" and spaced and spaced[-1][0] == "del":
            old = spaced[-1][1]
            space = min(len(old) - len(old.rstrip()), len(text) - len(text.rstrip()))
            if space and old[-space:] == text[-space:] and old[:-space] and text[:-space]:
                spaced[-1] = ("del", old[:-space])
                spaced += [("ins", text[:-space]), ("same", text[-space:])]
                continue
        spaced.append((op, text))
    joined: list[list[str]] = []
    for op, text in spaced:
        if not text:
            continue
        if joined and joined[-1][0] == op:
            joined[-1][1] += text
        else:
            joined.append([op, text])
    out: list[tuple[str, str]] = []
    for op, text in joined:
        if op == "same" and len(text) > 2 * DIFF_CONTEXT_CHARS + 200:
            keep = DIFF_CONTEXT_CHARS
            out += [
                ("same", text[:keep]),
                ("skip", f"{len(text) - 2 * keep:,} unchanged characters"),
                ("same", text[-keep:]),
            ]
        elif op in ("del", "ins") and len(text) > DIFF_SHOWN_CHARS:
            keep = DIFF_SHOWN_CHARS // 2
            what = "removed" if op == "del" else "added"
            out += [
                (op, text[:keep]),
                ("skip", f"{len(text) - 2 * keep:,} more characters {what}"),
                (op, text[-keep:]),
            ]
        else:
            out.append((op, text))
    return out


def diff_segments(before: str, after: str) -> list[tuple[str, str]]:
    """(op, text) pieces turning `before` into `after`; op is "same", "del" or "ins", or "skip"
    (text left out: says how much) and "note" (first, when the versions are too large to
    compare in detail). Lines are compared first, then the words of changed lines; the work is
    bounded whatever the texts. The text is returned as data and escaped by the template."""
    budget = [DIFF_WORK_LIMIT]
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    head, tail = _common_ends(a, b)
    cut = max(len(a), len(b)) - head - tail > DIFF_MAX_LINES
    if cut:
        # Only the versions' first differing lines are compared: the first lines of one turned
        # into the first lines of the other, up to their last shared line (what follows it in
        # the window may be matched past it). The rest is said to be left out.
        a, b = a[: head + DIFF_MAX_LINES], b[: head + DIFF_MAX_LINES]
    try:
        line_ops = _opcodes(a, b, budget)
        if cut:
            shared = [i for i, (op, text) in enumerate(line_ops) if op == "same" and text and i]
            line_ops = line_ops[: shared[-1] + 1] if shared else line_ops
        segments = _words(line_ops, budget)
    except _DiffTooLarge:
        # Shown whole: the lines the two versions share at the start and end, then the rest of
        # each.
        head, tail = _common_ends(a, b)
        segments = [
            ("same", "".join(a[:head])),
            ("del", "".join(a[head : len(a) - tail])),
            ("ins", "".join(b[head : len(b) - tail])),
            ("same", "".join(a[len(a) - tail :])),
        ]
        budget[0] = -1
    note = []
    if budget[0] < 0:
        note = [
            ("note", "These versions are too large to compare in detail: the changed part is shown whole.")
        ]
    shown = _tidy(segments)
    if cut or len(shown) > DIFF_MAX_SEGMENTS or sum(len(t) for _, t in shown) > DIFF_MAX_OUTPUT_CHARS:
        shown = _first_of(shown)
        note.append(("note", "The versions differ in too many places to show them all: the first "
                             "changes are shown, the rest is not."))
        shown.append(("skip", "the rest of the changes is not shown"))
    return note + shown


def _first_of(segments: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The first DIFF_MAX_SEGMENTS pieces of a diff that fit DIFF_MAX_OUTPUT_CHARS."""
    out, size = [], 0
    for op, text in segments[:DIFF_MAX_SEGMENTS]:
        size += len(text)
        if size > DIFF_MAX_OUTPUT_CHARS:
            break
        out.append((op, text))
    return out
