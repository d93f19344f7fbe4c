"""The semantic cache: near-identical memory queries reuse their results.

A memory search of a conversation whose query vector is within SEMANTIC_CACHE_SIMILARITY
(cosine, default 0.95) of an earlier one with the same parameters, at the same memory version
of the same owner (memory.versions), gets the earlier results instead of searching again. The
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
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import F
from pgvector.django import CosineDistance

from memory import versions
from memory.models import CacheCounter, SemanticCacheEntry

logger = logging.getLogger(__name__)

KINDS = ("search", "response")


def _key(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


def query_vector(query: str):
    """The query's embedding (the embedder's cache usually has it), or None if it fails."""
    from memory.embeddings import get_embedder, query_text

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
        .filter(distance__lte=1 - settings.SEMANTIC_CACHE_SIMILARITY)
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
    from memory.search import SearchHit

    return SearchHit(**{**data, "timestamp": dt.datetime.fromisoformat(data["timestamp"])})


def search(owner, query: str, *, limit: int, filters=None, conversation=None):
    """memory.search.search, through the cache (see the module docstring)."""
    from memory.search import SearchResults, hit_dicts
    from memory.search import search as hybrid_search

    query = (query or "").strip()
    if not settings.SEMANTIC_CACHE or not query or owner is None or not getattr(owner, "pk", None):
        return hybrid_search(owner, query, limit=limit, filters=filters)
    version = versions.settled(owner.pk)  # before the search: a result never outlives its version
    vector = query_vector(query) if version is not None else None
    if vector is None:
        return hybrid_search(owner, query, limit=limit, filters=filters)
    from memory.search import excluded_ids  # the calling turn's own message, left out of results

    key = _key(
        {
            "limit": limit,
            "filters": vars(filters) if filters is not None else None,
            "exclude": sorted(excluded_ids()),
            "tool_calls": settings.INDEX_INCLUDE_TOOL_CALLS,
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


def cached_reply(owner, conversation, user_message) -> dict[str, Any] | None:
    """A kept reply to a near-identical question of this conversation, if memory has not changed
    since it but for `user_message` itself being stored. None otherwise (or when off)."""
    if not settings.RESPONSE_CACHE or conversation is None:
        return None
    version = getattr(user_message, "memory_version", None)  # set when the message was stored
    vector = query_vector(user_message.content) if version is not None else None
    if vector is None:
        return None
    entry = _find(owner.pk, conversation.pk, "response", "reply", version - 1, vector)
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
    _keep(owner.pk, conversation.pk, "response", "reply", answered, user_message.content, vector,
          {"text": text, "message_id": assistant.pk, "question_id": user_message.pk})
    return True
