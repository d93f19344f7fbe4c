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
_STOP_WORDS_TEXT = """
    a an the and or but so if then than of to in on at for from by with about into onto as
    per via i me my mine myself we us our ours you your yours he him
    his she her hers it its they them their theirs this that these those there here is are was
    were be been being am do does did doing done have has had having will would shall should can
    could may might must ca wo let lets s d ll m re ve just also too very really please again
    search find look looking lookup show tell told say said saying mention mentioned remember
    recall know knew talk talked discuss discussed ask asked remind anything something
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


def query_terms(query: str, *, questions: bool = False) -> list[str]:
    """The content words of a query, in order, as the cache compares them (negation as "not";
    with `questions`, the question words too)."""
    text = (query or "").lower().replace("\u2019", "'")
    text = re.sub(r"n't\b", " not", text)
    text = re.sub(r"(?<=[^\W_])-(?=[^\W_])", "", text)  # wi-fi, x-ray, PROJ-1234 as one word
    terms = []
    for word in _WORD.findall(text):
        if word in NEGATIONS:
            terms.append("not")
        elif word in QUESTION_WORDS:
            if questions:
                terms.append(word)
        elif word not in STOP_WORDS:
            terms.append(_stem(word))
    return terms


def search_terms(query: str) -> list[str]:
    """What must match for a search to reuse another's results: its content words, in any order
    (search does not read word order)."""
    return sorted(set(query_terms(query)))


def reply_terms(question: str) -> list[str]:
    """What must match for a question to reuse another's reply: its content and question words,
    in order ("did Anna call Tom" is not "did Tom call Anna"; "when" is not "where")."""
    return query_terms(question, questions=True)


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


def _find(owner_id: int, conversation_id: str | None, kind: str, key: str, version: int, vector):
    return (
        SemanticCacheEntry.objects.filter(
            owner_id=owner_id, conversation_id=conversation_id, kind=kind, key=key, version=version
        )
        .annotate(distance=CosineDistance("vector", vector))
        .filter(distance__lte=1 - similarity_threshold())
        .order_by("distance")
        .first()
    )


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
    entry = _find(owner.pk, conversation_id, "search", key, version, vector)
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
    entry = _find(owner.pk, conversation.pk, "response", key, version - 1, vector)
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
