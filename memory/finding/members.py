"""TRIAL (issue 35, sixth round): a question's kind word expanded with the members the
person's own history names, found by meaning.

"What martial arts has John done?" is answered by turns that say "kickboxing" and "taekwondo",
which share no word with the question and rank past 25 in both lists. The history's vocabulary
(distinct content words of its passages) is embedded once as e5 passages; at question time the
items nearest the question's kind phrase (embedded as a query) are added to the keyword query,
weighted lower than the question's own words.

Measured by `manage.py eval_recall --set EXPAND_SHARE=...`; the vocabulary is built in memory
at the start of the run (no table).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

# The share of its BM25 weight an added member keeps (0: the rule is off).
EXPAND_SHARE = 0.0
# At most this many members added to a question.
EXPAND_TOP = 5
# A member's similarity to the kind phrase, in standard deviations above the vocabulary's mean.
EXPAND_MIN_Z = 3.0
# How much a word's closeness to every word (its similarity to the vocabulary's centroid) is
# taken from its score: e5 places generic words near any query ("none", "thing").
EXPAND_HUB = 1.0
# What is matched: 1, the kind phrase after "what/which" (no phrase, no expansion); 2, the
# kind phrase, else the whole question.
EXPAND_FROM = 1
# A word held by more than this share of the history's passages is no member: a member is
# named now and then ("kickboxing"), a history's small talk often ("posted", "website").
EXPAND_MAX_DF = 1.0
# A second vector query per member: the share of its z-score a turn gains (0: none).
EXPAND_VECTOR_SHARE = 0.0
# ...for this many of the members at most (the nearest).
EXPAND_VECTOR_MEMBERS = 3

# Use PROBES (1) or the centroid (0) for a word's closeness to everything.
EXPAND_PROBES = 1
# Kinds of things questions ask for, as queries: a word close to all of them is a hub.
PROBES = (
    "things", "activities", "places", "people", "events", "items", "types", "ways", "foods",
    "countries", "books", "hobbies", "sports", "animals", "cities", "jobs", "music", "games",
    "movies", "tools", "colors", "plants", "drinks", "classes", "gifts", "problems", "reasons",
    "vehicles", "clothes", "companies",
)

_WORD = re.compile(r"(?<![\w.$/\\@#-])([A-Za-z][a-z]{2,23})(?![\w(/\\@#]|\.\w)")
_CODE_FENCE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", re.S)
# Words that name no member of anything: code and data tokens an assistant's pastes hold.
CODE_WORDS = frozenset(
    """
    none null true false nan undefined self def return import const var let function print str
    int float bool dict list tuple len args kwargs elif else lambda async await yield class
    http https www com org html json xml csv sql api url src div span img href px div npm pip
    int void public private static string char println printf sys argv init main todo etc
    """.split()
)
_AUX = (
    r"has|have|had|does|do|did|is|are|was|were|will|would|can|could|might|should|may|"
    r"being|been"
)
_KIND = re.compile(
    r"\b(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?"
    r"((?:[A-Za-z][\w-]*\s+){0,2}?[A-Za-z][\w-]*)\s+(?:" + _AUX + r")\b",
    re.I,
)
_KIND_OF_SOMEONE = re.compile(
    r"\b(?:[Ww]hat|[Ww]hich)\s+(?:are|were|is|was)\s+(?:(?:[A-Z][\w-]*(?:'s|s')?|my|his|her|their|our)\s+(?:and\s+[A-Z][\w-]*'s\s+)?)"
    r"((?:[a-z][\w-]*\s+){0,1}[a-z][\w-]*)\b"
)


_NOT_KINDS = frozenset("to the a an of do you i we he she they it this that these those there".split())


def kind_phrase(question: str) -> str | None:
    """The kind of thing a question asks for: "martial arts" of "What martial arts has John
    done?", "hobbies" of "What are Melanie's hobbies?"; None when it names none."""
    for pattern in (_KIND, _KIND_OF_SOMEONE):
        m = pattern.search(question)
        if m:
            phrase = m.group(1).strip()
            words = phrase.lower().split()
            if any(re.fullmatch(_AUX, w) or w in _NOT_KINDS for w in words):
                continue
            return phrase
    return None


_NAME = re.compile(r"(?<=\S\s)[A-Z][\w'-]*")


def without_names(question: str) -> str:
    """The question without the names in it (a capitalised word past its first): what it asks
    about, not whom ("What did Caroline research?" -> "What did research?")."""
    return " ".join(_NAME.sub(" ", question).split())


def vocabulary_words(texts: Iterable[str], stop_words: frozenset[str]) -> dict[str, int]:
    """The distinct content words of `texts` (lower case) and how many texts hold each: letters
    only, 3 to 24 of them, no code (fenced or inline), no word glued to a dot, slash or bracket
    (a file name, a call, a path), no word written in mixed case (a code identifier)."""
    counts: dict[str, int] = {}
    for text in texts:
        seen = set()
        for m in _WORD.finditer(_CODE_FENCE.sub(" ", text or "")):
            word = m.group(1).lower()
            if word in stop_words or word in CODE_WORDS:
                continue
            seen.add(word)
        for word in seen:
            counts[word] = counts.get(word, 0) + 1
    return counts


@dataclass
class Vocabulary:
    words: list[str]
    vectors: np.ndarray  # unit length, passage-embedded
    hub: np.ndarray  # each word's similarity to the centroid
    share: np.ndarray  # the share of the history's passages holding each word

    @classmethod
    def of(cls, words: list[str], vectors: np.ndarray, share: np.ndarray, probes: np.ndarray | None = None
           ) -> Vocabulary:
        """probes: query vectors of generic kinds (PROBES); a word near all of them is near any
        question ("source", "stuff"). Without them, the vocabulary's centroid stands in."""
        if probes is None or not EXPAND_PROBES:
            centroid = vectors.mean(axis=0)
            centroid /= np.linalg.norm(centroid) or 1.0
            return cls(words, vectors, vectors @ centroid, share)
        return cls(words, vectors, (vectors @ probes.T).mean(axis=1), share)

    def nearest(self, query_vector: np.ndarray, exclude: set[str]) -> list[tuple[str, float]]:
        scores = self.vectors @ query_vector - EXPAND_HUB * self.hub
        z = (scores - scores.mean()) / (scores.std() or 1.0)
        order = np.argsort(-z)
        found = []
        for i in order[: EXPAND_TOP + len(exclude) + 20]:
            if z[i] < EXPAND_MIN_Z:
                break
            word = self.words[i]
            if self.share[i] > EXPAND_MAX_DF:
                continue
            if word in exclude or any(
                (word.startswith(e[:5]) and len(e) >= 5) or (e.startswith(word) and len(word) >= 3) for e in exclude
            ):
                continue
            found.append((word, float(z[i])))
            if len(found) >= EXPAND_TOP:
                break
        return found


_EXPANSION: contextvars.ContextVar[dict[str, float]] = contextvars.ContextVar("expansion", default={})


@contextlib.contextmanager
def expanding(members: dict[str, float]) -> Iterator[None]:
    """Within this block, the keyword search also looks for these words, each weighed by its share."""
    token = _EXPANSION.set(dict(members))
    try:
        yield
    finally:
        _EXPANSION.reset(token)


def expansion() -> dict[str, float]:
    return _EXPANSION.get()
