"""The semantic cache: near-identical memory queries reuse their results.

A memory search of a conversation whose query vector is within SEMANTIC_CACHE_SIMILARITY
(cosine, default 0.95) of an earlier one with the same parameters, at the same memory version
of the same owner (memory.storage.versions), gets the earlier results instead of searching again. The
version is read before the search runs, so a result is never filed under a version older than
what it saw; every store, edit, delete, restore or forget moves the version on, and an edit,
delete or forget also drops the owner's entries, so deleted words never come back from here.

With RESPONSE_CACHE on (off by default), a reply is kept too: a near-identical question in the
same conversation, arriving when the only change to memory since that reply is the question
itself, is answered with it. A reply is kept only when nothing else changed memory while it
was written (its question's version and its own are consecutive).

Entries live in Postgres (SemanticCacheEntry), per owner and conversation, never shared across
owners; each owner keeps at most SEMANTIC_CACHE_MAX_ENTRIES, and entries of versions that can no
longer match are removed when a new one is stored. Hits and misses are counted per owner
(CacheCounter) for the explorer.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import F
from pgvector.django import CosineDistance

from memory.dates import query_period
from memory.models import CacheCounter, SemanticCacheEntry
from memory.storage import versions

logger = logging.getLogger(__name__)

KINDS = ("search", "response")


def _key(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


# --- what must be the same besides the vector ------------------------------------------------
# A cosine threshold alone cannot tell "the same question": e5 puts "...meeting on Monday?" and
# "...on Tuesday?" at 0.971, and unrelated text at 0.8-0.95. So a hit also needs the same
# content words (names, numbers, dates, weekdays, every word that is not a stop word), negation
# included, after case, punctuation, a plural or -ing/-ed ending and leading zeros are set aside.
# Words that only ask ("what did I say about", "please search") are stop words: they do not
# change what is looked up.
#
# Some small words change what is asked as much as a name does, and embeddings barely hear them
# ("What did he say about the contract?" / "...she...", cosine 0.972; "flights from Berlin to
# Rome" / "from Rome to Berlin", 0.998), so they must be equal too:
# - who: the pronouns and possessives, by person and by case ("he" asks, "him" is asked about,
#   "his" owns): "I" and "me", "my" are three different terms;
# - direction: "from X" and "to X" (into, onto, towards) are terms of their own, X bound to its
#   preposition, so "from Berlin to Rome" is not "from Rome to Berlin" in any order;
# - when: one tense for the question, told by its auxiliary (did, was, were, had: past; will,
#   shall, 'll, won't: future; is, are, do, does, has, have: present), else by a past form
#   ("what I said", "the restaurant we picked"), else present;
# - how: the modal verb (can and could ask the same; should, must, would, may and might do not).
_STOP_WORDS_TEXT = """
    a an the and or but so if then than of in on at for by with about as
    per via it its this that these those there here be been being doing done having
    ca wo let lets s d ll m re ve just also too very really please again
    search find look looking lookup show tell say saying mention remember
    recall know talk discuss ask remind anything something
    everything any some all thing things stuff between
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
# What a question asks for: the same search either way (Postgres' English configuration drops
# them too), but not the same answer, so a reply's rule keeps them.
QUESTION_WORDS = frozenset(
    {"what", "which", "who", "whom", "whose", "when", "where", "why", "how", "many", "much"}
)
NEGATIONS = frozenset(
    {"not", "no", "never", "none", "nothing", "nobody", "nowhere", "neither", "nor", "without"}
)
# Person and case: (who, as what).
PRONOUNS = {
    "i": "i", "me": "me", "myself": "me", "my": "my", "mine": "my",
    "we": "we", "us": "us", "ourselves": "us", "our": "our", "ours": "our",
    "you": "you", "yourself": "you", "yourselves": "you", "your": "your", "yours": "your",
    "he": "he", "him": "him", "himself": "him", "his": "his",
    "she": "she", "her": "her", "herself": "her", "hers": "her",
    "they": "they", "them": "them", "themselves": "them", "their": "their", "theirs": "their",
}
DIRECTIONS = {"from": "from", "to": "to", "into": "to", "onto": "to", "towards": "to", "toward": "to"}
PAST_AUXILIARIES = frozenset({"did", "was", "were", "had"})
FUTURE_AUXILIARIES = frozenset({"will", "shall", "ll", "wo"})  # wo: won't
PRESENT_AUXILIARIES = frozenset({"is", "are", "am", "do", "does", "has", "have"})
# Past forms that tell the tense when no auxiliary does ("what I said about...").
_PAST_FORMS_TEXT = """
    said told knew thought went came saw got made took gave found bought brought sent spent wrote met
    paid ate drank drove flew ran sold felt kept lost won began broke chose forgot heard held meant
    spoke stood taught understood wore mentioned asked talked discussed decided
"""
PAST_FORMS = frozenset(_PAST_FORMS_TEXT.split())
# Those that only ask ("what I said about..."): not terms.
ASKING_PAST = frozenset({"said", "told", "knew", "mentioned", "asked", "talked", "discussed"})
# Words ending in -ed that are not a past form.
_NOT_PAST_TEXT = """
    need feed seed speed bed red shed embed hundred bred sacred naked wicked wed weed breed greed
    steed reed deed indeed
"""
NOT_PAST = frozenset(_NOT_PAST_TEXT.split())
MODALS = {"can": "can", "could": "can", "ca": "can", "should": "should", "ought": "should",
          "must": "must", "would": "would", "may": "may", "might": "might"}
_WORD = re.compile(r"[^\W_]+")


def _stem(word: str) -> str:
    if word.isdigit():
        return word.lstrip("0") or "0"
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    return word[:-1] if len(word) > 4 and word.endswith("e") else word  # decide / decided


def _tense(words: list[str]) -> str | None:
    if any(w in FUTURE_AUXILIARIES for w in words):
        return "future"
    if any(w in PAST_AUXILIARIES for w in words):
        return "past"
    if any(w in PRESENT_AUXILIARIES for w in words):
        return "present"
    if any(w in PAST_FORMS or (len(w) > 4 and w.endswith("ed") and w not in NOT_PAST) for w in words):
        return "past"
    return None  # nothing says: "vacation days left in 2024"


# How a question is put to the assistant, not what it asks: "can you tell me what...", "do you
# remember...", "did I tell you...", "remind me...". Left out before the terms are read.
_PREAMBLE = re.compile(
    r"^(?:(?:hey|hi|ok|okay|so|please)\b\W*)*"
    r"(?:(?:can|could|would|will) you(?: please)? (?:tell me|remind me|show me|find|look up|check|say)?|"
    r"do you (?:remember|know|recall)|did i (?:tell|mention to) you|i (?:told|mentioned to) you|"
    r"remind me|tell me|show me)\b"
)
# Time words a direction does not point at ("notes from the 12 January standup" is "from the
# standup").
_TIME_WORDS_TEXT = """
    january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday today yesterday tomorrow
"""
_TIME_WORDS = frozenset(_TIME_WORDS_TEXT.split())
FIRST_PERSON = frozenset({"@i", "@me", "@my"})
# "for eight" is "for 8".
_NUMBER_WORDS_TEXT = """
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty
"""
NUMBER_WORDS = {word: str(n) for n, word in enumerate(_NUMBER_WORDS_TEXT.split())}
NUMBER_WORDS |= {"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70",
                 "eighty": "80", "ninety": "90", "hundred": "100"}
# "going to charge" is "will charge"; "going to the party" is a trip, its "to" a direction.
_GOING_TO = re.compile(
    r"\b(?:going to|gonna)\b(?! (?:the|a|an|my|your|his|her|our|their|this|that|these|those)\b)"
)


@dataclass(frozen=True)
class Shape:
    """What the cache compares of a query besides its vector: its terms in order (content words,
    "not", question words, and "from:x"/"to:x" bound to the word they point at), its pronouns by
    person and case ("@he", "@his"), its modal verbs ("~should") and its tense (None when nothing
    in it says)."""

    terms: tuple[str, ...]
    pronouns: tuple[str, ...]
    modals: frozenset[str]
    tense: str | None

    def search_key(self) -> list[str]:
        """What an entry must share to be looked at for a search: its terms, in any order (search
        does not read word order), and its modal verbs."""
        return sorted({t for t in self.terms if t not in QUESTION_WORDS} | self.modals)

    def reply_key(self) -> list[str]:
        return [*self.terms, *sorted(self.modals)]

    def same_who_and_when(self, other: Shape, *, ordered: bool) -> bool:
        """The same pronouns (in order, for a reply) and tense. A query naming no one asks about
        the person asking ("gym schedule on Wednesday" is "my gym schedule..."), and one whose
        words give no tense asks in any ("grocery receipt total from Saturday")."""
        mine, theirs = _owner_told(self.pronouns), _owner_told(other.pronouns)
        if not ordered:
            mine, theirs = tuple(sorted(set(mine))), tuple(sorted(set(theirs)))
        if mine != theirs and not (not mine and set(theirs) <= FIRST_PERSON) \
                and not (not theirs and set(mine) <= FIRST_PERSON):
            return False
        return self.tense == other.tense or self.tense is None or other.tense is None


def _owner_told(pronouns: tuple[str, ...]) -> tuple[str, ...]:
    """Without "my" when the query is already in the first person: "can I bring my dog" asks
    what "can I bring the dog" does. Another person's possessive stays ("his dog")."""
    if "@i" in pronouns or "@me" in pronouns:
        return tuple(p for p in pronouns if p != "@my")
    return pronouns


def shape(query: str, *, questions: bool = False) -> Shape:
    """The Shape of a query (with `questions`, its question words are terms too)."""
    text = (query or "").lower().replace("\u2019", "'").strip()
    text = re.sub(r"n't\b", " not", text)
    text = re.sub(r"(?<=[^\W_])-(?=[^\W_])", "", text)  # wi-fi, x-ray, PROJ-1234 as one word
    text = _PREAMBLE.sub("", text)
    text = _GOING_TO.sub("will", text)
    words = [NUMBER_WORDS.get(w, w) for w in _WORD.findall(text)]
    terms: list[str] = []
    pronouns: list[str] = []
    modals: set[str] = set()
    direction = None  # a preposition waiting for the word it points at
    for i, word in enumerate(words):
        if word in NEGATIONS:
            terms.append("not")
        elif word in QUESTION_WORDS:
            if questions:
                terms.append(word)
        elif word in PRONOUNS:
            pronouns.append("@" + PRONOUNS[word])
        elif word in MODALS and (word != "may" or _beside_pronoun(words, i)):  # "in May": a month
            modals.add("~" + MODALS[word])
        elif word in DIRECTIONS:
            # "how to reset": an infinitive, not a direction.
            direction = None if words[i - 1 : i] and words[i - 1] in QUESTION_WORDS else DIRECTIONS[word]
        elif word in STOP_WORDS or word in PAST_AUXILIARIES or word in FUTURE_AUXILIARIES \
                or word in PRESENT_AUXILIARIES or word in ASKING_PAST:
            continue
        else:
            term = _stem(word)
            # "to Sunday's party" points at the party, as "to the party on Sunday" does; a date
            # or a day is never what a direction points at.
            possessive = words[i + 1 : i + 2] == ["s"] and i + 2 < len(words)
            if direction and not possessive and word not in _TIME_WORDS and not word.isdigit():
                term, direction = f"{direction}:{term}", None
            terms.append(term)
    return Shape(tuple(terms), tuple(pronouns), frozenset(modals), _tense(words))


def _beside_pronoun(words: list[str], i: int) -> bool:
    return any(w in PRONOUNS for w in words[max(0, i - 1) : i] + words[i + 1 : i + 2])


def query_terms(query: str, *, questions: bool = False) -> list[str]:
    """The terms of a query's Shape, in order."""
    return list(shape(query, questions=questions).terms)


def search_terms(query: str) -> list[str]:
    """What must be equal for a search to reuse another's results, besides who and when (see
    same_search): its terms and modal verbs, in any order."""
    return shape(query).search_key()


def reply_terms(question: str) -> list[str]:
    """What must be equal for a question to reuse another's reply, besides who and when (see
    same_question): its terms, question words and modal verbs, in order ("did Anna call Tom" is
    not "did Tom call Anna"; "when" is not "where")."""
    return shape(question, questions=True).reply_key()


def same_search(a: str, b: str) -> bool:
    """Whether a search for `b` may reuse the results of one for `a` (their vectors aside)."""
    first, second = shape(a), shape(b)
    return first.search_key() == second.search_key() and first.same_who_and_when(second, ordered=False)


def same_question(a: str, b: str) -> bool:
    """Whether question `b` may be answered with the reply to `a` (their vectors aside)."""
    first, second = shape(a, questions=True), shape(b, questions=True)
    return first.reply_key() == second.reply_key() and first.same_who_and_when(second, ordered=True)


def similarity_threshold() -> float:
    """SEMANTIC_CACHE_SIMILARITY, or the embedder's own (cosines mean different things per model)."""
    if settings.SEMANTIC_CACHE_SIMILARITY is not None:
        return settings.SEMANTIC_CACHE_SIMILARITY
    from memory.embedders import get_embedder

    return get_embedder().cache_similarity


def query_vector(query: str):
    """The query's embedding (the embedder's cache usually has it), or None if it fails."""
    from memory.embedders import get_embedder, query_text

    try:
        text = query_text(query)
        return [float(x) for x in get_embedder().embed_query(text)] if text else None
    except Exception:  # noqa: BLE001 - no vector, no cache: the search runs as usual
        logger.debug("no query vector for the semantic cache", exc_info=True)
        return None


def count(owner_id: int, kind: str, *, hit: bool) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO memory_cachecounter (owner_id, kind, hits, misses) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (owner_id, kind) DO UPDATE SET hits = memory_cachecounter.hits + EXCLUDED.hits, "
            "misses = memory_cachecounter.misses + EXCLUDED.misses",
            [owner_id, kind, int(hit), int(not hit)],
        )


def stats(owner) -> dict[str, dict[str, Any]]:
    """Hits, misses and hit rate of each cache of `owner`."""
    rows = {c.kind: c for c in CacheCounter.objects.owned_by(owner)}
    out = {}
    for kind in KINDS:
        c = rows.get(kind)
        hits, misses = (c.hits, c.misses) if c else (0, 0)
        rate = hits / (hits + misses) if hits + misses else None
        out[kind] = {"hits": hits, "misses": misses, "rate": rate}
    return out


def _find(owner_id: int, conversation_id: str | None, kind: str, key: str, version: int, vector,
          same: Callable[[str], bool]):
    """The nearest entry with this key within the threshold whose query `same` accepts (asks
    about the same people, at the same time)."""
    entries = (
        SemanticCacheEntry.objects.filter(
            owner_id=owner_id, conversation_id=conversation_id, kind=kind, key=key, version=version
        )
        .annotate(distance=CosineDistance("vector", vector))
        .filter(distance__lte=1 - similarity_threshold())
        .order_by("distance")[:5]
    )
    return next((entry for entry in entries if same(entry.query)), None)


def _keep(owner_id: int, conversation_id: str | None, kind: str, key: str, version: int,
          query: str, vector, payload: dict[str, Any]) -> None:
    if versions.locked(owner_id) != version:
        # Memory changed while this was made (a forget or an edit that already emptied the
        # cache): kept now, it would hold words that are gone.
        return
    SemanticCacheEntry.objects.create(
        owner_id=owner_id, conversation_id=conversation_id, kind=kind, key=key, version=version,
        query=query[:2000], vector=vector, payload=payload,
    )
    # Versions only grow: a search entry is reused at its own version, a reply at the next one.
    SemanticCacheEntry.objects.filter(owner_id=owner_id, version__lt=version - 1).delete()
    keep = settings.SEMANTIC_CACHE_MAX_ENTRIES
    entries = SemanticCacheEntry.objects.filter(owner_id=owner_id).order_by("-id")
    old = list(entries.values_list("id", flat=True)[keep : keep + 1000])
    if old:
        SemanticCacheEntry.objects.filter(id__in=old).delete()


# --- search results --------------------------------------------------------------------------


def _hit_from(data: dict[str, Any]):
    from memory.finding.search import SearchHit

    return SearchHit(**{**data, "timestamp": dt.datetime.fromisoformat(data["timestamp"])})


def search(owner, query: str, *, limit: int, filters=None, conversation=None):
    """memory.finding.search.search, through the cache (see the module docstring)."""
    from memory.finding.search import SearchResults, hit_dicts
    from memory.finding.search import search as hybrid_search

    query = (query or "").strip()
    if not settings.SEMANTIC_CACHE or not query or owner is None or not getattr(owner, "pk", None):
        return hybrid_search(owner, query, limit=limit, filters=filters)
    version = versions.settled(owner.pk)  # before the search: a result never outlives its version
    vector = query_vector(query) if version is not None else None
    if vector is None:
        return hybrid_search(owner, query, limit=limit, filters=filters)
    from memory.finding.search import asked_moment, excluded_ids  # the calling turn's own message, its time

    key = _key(
        {
            "limit": limit,
            "filters": vars(filters) if filters is not None else None,
            "exclude": sorted(excluded_ids()),
            "tool_calls": settings.INDEX_INCLUDE_TOOL_CALLS,
            "terms": search_terms(query),
            # A period the query names relative to when it is asked ("last week") differs by day.
            "period": [str(t) for t in query_period(query, now=asked_moment()) or ()],
        }
    )
    conversation_id = conversation.pk if conversation is not None else None
    entry = _find(owner.pk, conversation_id, "search", key, version, vector,
                  lambda earlier: same_search(earlier, query))
    count(owner.pk, "search", hit=entry is not None)
    if entry is not None:
        SemanticCacheEntry.objects.filter(pk=entry.pk).update(hits=F("hits") + 1)
        results = SearchResults(query=query, hits=[_hit_from(h) for h in entry.payload["hits"]])
        results.timings_ms["cache"] = 1.0
        results.fallbacks = []
        return results
    results = hybrid_search(owner, query, limit=limit, filters=filters, query_vector=vector)
    if not results.fallbacks:  # a degraded search (a timeout, no vectors) is not kept
        _keep(owner.pk, conversation_id, "search", key, version, query, vector,
              {"hits": hit_dicts(results.hits)})
    return results


# --- replies (RESPONSE_CACHE) ----------------------------------------------------------------


def _reply_key(question: str) -> str:
    return _key({"reply": reply_terms(question)})


def cached_reply(owner, conversation, user_message) -> dict[str, Any] | None:
    """A kept reply to a near-identical question of this conversation, if memory has not changed
    since it but for `user_message` itself being stored. None otherwise (or when off)."""
    if not settings.RESPONSE_CACHE or conversation is None:
        return None
    version = getattr(user_message, "memory_version", None)  # set when the message was stored
    vector = query_vector(user_message.content) if version is not None else None
    if vector is None:
        return None
    key = _reply_key(user_message.content)
    entry = _find(owner.pk, conversation.pk, "response", key, version - 1, vector,
                  lambda earlier: same_question(earlier, user_message.content))
    count(owner.pk, "response", hit=entry is not None)
    if entry is None:
        return None
    SemanticCacheEntry.objects.filter(pk=entry.pk).update(hits=F("hits") + 1)
    return entry.payload


def remember_reply(owner, conversation, user_message, assistant, text: str) -> bool:
    """Keep a complete reply (called in the transaction that stores it). Only when nothing but
    this reply changed memory since its question was stored."""
    if not settings.RESPONSE_CACHE or conversation is None or not text.strip():
        return False
    asked = getattr(user_message, "memory_version", None)
    answered = getattr(assistant, "memory_version", None)
    if asked is None or answered is None or answered != asked + 1:
        return False
    vector = query_vector(user_message.content)
    if vector is None:
        return False
    _keep(owner.pk, conversation.pk, "response", _reply_key(user_message.content), answered,
          user_message.content, vector,
          {"text": text, "message_id": assistant.pk, "question_id": user_message.pk})
    return True
