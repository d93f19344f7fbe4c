"""Hybrid search over one owner's memory: vector (HNSW, cosine) and Okapi BM25 over Postgres
full-text search, fused by their standardised scores. Results are SearchResults.

This is the one ranking of Recollect: the memory tools, the index builder's plan, offline
recall, the explorer's search and `manage.py recall` all call `search()`. Its choices are
measured by `manage.py eval_recall` on real multi-session conversations
(../shared/eval/long-conversations), with BM25, keyword-only and dense-only beside it:

- a passage is searched and embedded with its context (the speaker, and the end of the turn it
  replies to: memory.storage.store.passage_context), so a short reply is found by its subject;
- keyword scores are BM25 (term saturation, length normalisation), not ts_rank_cd;
- the two ranked lists are fused by z-scores over their candidates, not by reciprocal rank: a
  list that is sure of its first hit says so;
- a turn whose reply matches gets a share of the reply's score (the question before an answer),
  and turns two replies apart share some of each other's (a subject named, then its fact);
- a period the question names (a day, a month, a year) lifts what was said then.

The two lists are read at once when the caller holds no transaction: the vector search on a
connection of its own, in a worker thread, while this thread reads the keyword candidates.

Search runs over passages (windows that fit the embedder), then groups them by the unit a
person would open: a message, a chunk of a long message, or a tool call. Deleted content is
filtered out at the passage level, so it can never surface.

This module is the entry point and what a search returns; the two candidate lists are read in
memory.finding.candidates, and ranked in memory.finding.fusion.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from django.conf import settings
from django.db import connection

from memory.embedders import get_embedder
from memory.finding.candidates import (
    _keyword_candidates,
    _timed_vector_candidates,
    _vector_candidates,
    in_worker,
)
from memory.finding.fusion import QueryBoosts, fuse
from memory.knowledge import graph
from memory.models import Message, Passage


@dataclass
class SearchHit:
    id: str
    type: str  # "message" | "tool_call"
    is_chunk: bool
    message_id: str  # the logical message (a chunk's parent; the message that made a tool call)
    conversation: str
    role: str
    timestamp: dt.datetime
    score: float
    snippet: str
    external_id: str | None = None
    vector_rank: int | None = None
    keyword_rank: int | None = None
    vector_similarity: float | None = None
    passage_text: str = ""
    # The periods the passage's words name, resolved when it was said (Passage.periods).
    periods: list[dict[str, str]] = field(default_factory=list)

    def as_result(self) -> dict[str, Any]:
        """One search result (type, ids, score, snippet, timestamp), plus external_id, conversation
        and role; and `dates`, when its words name days relative to when it was said ("last
        Saturday" is 2023-05-20), so a reader can count the days between two of them."""
        result = {
            "id": self.id,
            "external_id": self.external_id,
            "conversation": self.conversation,
            "role": self.role,
            "timestamp": self.timestamp.isoformat(),
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "type": self.type,
            "is_chunk": self.is_chunk,
            "message_id": self.message_id,
        }
        if self.periods:
            result["dates"] = [_date(p) for p in self.periods]
        return result


@dataclass
class SearchResults:
    query: str
    hits: list[SearchHit] = field(default_factory=list)
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "results": [h.as_result() for h in self.hits],
            "fallbacks": self.fallbacks,
            "timings_ms": self.timings_ms,
        }


@dataclass
class SearchFilters:
    conversation_id: str | None = None
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    role: str | None = None
    include_tool_calls: bool | None = None
    exclude_message_id: str | None = None  # a message and its chunks and tool calls left out
    # The conversation reading memory: its own messages are found even when memory does not
    # keep them (None: the one `reading_for` names, if any).
    reader: str | None = None
    # The ids of the conversations left out (see sql), read once per search; None: not yet read.
    private: tuple[str, ...] | None = None

    def sql(self, owner_id: int | None = None) -> tuple[str, list[Any]]:
        """The filters as SQL on passages `p`. With `owner_id`, the conversations memory does
        not keep are left out too (Conversation.remembered), except the one reading
        (`reading_for`): their ids are read first, from a tiny partial index, so that a memory
        with none of them (the usual case) is searched by exactly the query it had before."""
        clauses, params = [], []
        if owner_id is not None:
            private = self.private
            if private is None:
                private = _private_conversations(owner_id, self.reader)
            if private:
                clauses.append("p.conversation_id <> ALL(%s)")
                params.append(list(private))
        for clause, value in (
            ("p.logical_message_id <> %s", self.exclude_message_id),
            ("p.conversation_id = %s", self.conversation_id),
            ("p.timestamp >= %s", self.start),
            ("p.timestamp < %s", self.end),
            ("p.role = %s", self.role),
        ):
            if value:
                clauses.append(clause)
                params.append(value)
        include_tools = (
            settings.INDEX_INCLUDE_TOOL_CALLS if self.include_tool_calls is None else self.include_tool_calls
        )
        if not include_tools:
            clauses.append("p.kind = 'message'")
        return "".join(f" AND {c}" for c in clauses), params



def _private_conversations(owner_id: int, reader: str | None) -> tuple[str, ...]:
    """The owner's conversations memory does not keep, but the reader's own."""
    # Every search reads this first, on the turn's path: written out, it costs a tenth of the
    # CPU the ORM spent building it.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM memory_conversation WHERE owner_id = %s AND NOT remembered AND id <> %s",
            [owner_id, str(reader or "")],
        )
        return tuple(row[0] for row in cursor.fetchall())


_EXCLUDED: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "search_excluded", default=frozenset()
)
_READER: contextvars.ContextVar[str | None] = contextvars.ContextVar("search_reader", default=None)


@contextlib.contextmanager
def reading_for(conversation_id: str | None) -> Iterator[None]:
    """Within this block, searches read memory for this conversation: its own messages are found
    even when memory does not keep them; another conversation's that it does not keep never are."""
    token = _READER.set(str(conversation_id) if conversation_id else None)
    try:
        yield
    finally:
        _READER.reset(token)


@contextlib.contextmanager
def excluding(message_ids: Iterable[str]) -> Iterator[None]:
    """Within this block, no search returns these messages (a turn's tool calls never find the
    turn's own message)."""
    token = _EXCLUDED.set(_EXCLUDED.get() | {str(m) for m in message_ids if m})
    try:
        yield
    finally:
        _EXCLUDED.reset(token)


def excluded_ids() -> frozenset[str]:
    """The message ids `excluding()` leaves out of searches in this context (a turn's own)."""
    return _EXCLUDED.get()


_AS_OF: contextvars.ContextVar[dt.datetime | None] = contextvars.ContextVar("search_as_of", default=None)


@contextlib.contextmanager
def asked_at(moment: dt.datetime | None) -> Iterator[None]:
    """Within this block, searches are asked at `moment` (a turn's time): the periods a query
    names relative to it ("last Saturday", "this month") resolve against it. None: now."""
    token = _AS_OF.set(moment if moment is not None else _AS_OF.get())
    try:
        yield
    finally:
        _AS_OF.reset(token)


def asked_moment() -> dt.datetime | None:
    """The moment `asked_at()` set for searches in this context, or None (now)."""
    return _AS_OF.get()


def search(
    owner,
    query: str,
    *,
    limit: int = 10,
    filters: SearchFilters | None = None,
    candidates: int | None = None,
    query_vector=None,
    exclude_message_ids: tuple[str, ...] | list[str] = (),
    as_of: dt.datetime | None = None,
) -> SearchResults:
    """Hybrid search of `owner`'s memory. Never returns deleted content or other users' rows,
    nor the messages of `exclude_message_ids` (a turn's own message, searched for itself).
    as_of: when the question is asked (a turn's time; default the `asked_at()` block's, else
    now): "last week" and "this month" are read from it."""
    results = SearchResults(query=query)
    query = (query or "").strip()
    limit = max(1, min(int(limit), 200))
    if not query or owner is None or not getattr(owner, "pk", None):
        return results
    filters = filters or SearchFilters()
    if filters.reader is None and _READER.get():
        # Carried by the filters: the vector list is read on a worker thread.
        filters = replace(filters, reader=_READER.get())
    if filters.private is None:  # read once here, not by each of the queries below
        filters = replace(filters, private=_private_conversations(owner.pk, filters.reader))
    exclude = {str(m) for m in exclude_message_ids if m} | _EXCLUDED.get()
    k = (candidates or max(100, limit * 5)) + len(exclude)

    # Both lists at once where the caller's transaction does not hide rows from another
    # connection; else keyword candidates first, so a query vector still being embedded
    # (query_vector may be a callable that waits for it) is ready when the vector search needs it.
    vector_job = in_worker(_timed_vector_candidates, owner, query, filters, k, results, query_vector)
    started = time.perf_counter()
    keyword_rows = _keyword_candidates(owner, query, filters, k, results)
    results.timings_ms["keyword"] = round((time.perf_counter() - started) * 1000, 2)
    boosts = QueryBoosts.of(query, now=as_of if as_of is not None else _AS_OF.get())
    if vector_job is not None:
        # The graph's part needs only the query: looked up while the vector search runs.
        boosts.graph = graph.related_or_none(owner, query)
        vector_rows = vector_job.result()
        results.timings_ms["vector_after_keyword"] = round((time.perf_counter() - started) * 1000, 2)
    else:
        vector_rows = _timed_vector_candidates(owner, query, filters, k, results, query_vector)
    if exclude:
        vector_rows = [r for r in vector_rows if r[2] not in exclude]
        keyword_rows = [r for r in keyword_rows if r[2] not in exclude]

    ranked, info = fuse(owner, vector_rows, keyword_rows, limit, boosts=boosts, expand=(filters, exclude),
                        fallbacks=results.fallbacks)
    results.hits = _hits(owner, ranked, info)
    return results


# Near results shown at most, apart from the matches.
NEAR_SHOWN = 10


def split_matches(hits: list[SearchHit]) -> tuple[list[SearchHit], list[SearchHit]]:
    """The hits that hold a word of the query (the keyword list found them), in their order,
    and up to NEAR_SHOWN of the others whose passage is close to the query in meaning (at least
    the embedder's near_similarity): what a person is shown as matches, and apart, as near."""
    threshold = get_embedder().near_similarity
    matches = [h for h in hits if h.keyword_rank is not None]
    near = [
        h for h in hits
        if h.keyword_rank is None and h.vector_similarity is not None and h.vector_similarity >= threshold
    ]
    return matches, near[:NEAR_SHOWN]


def similar_messages(owner, message: Message, limit: int = 5) -> list[dict[str, Any]] | None:
    """The owner's messages nearest `message` by embedding, best first, as {"message",
    "similarity"}: the vector search of search(), from the message's first passage, never
    deleted content nor the message itself. None when the message has no vector of the
    current model (not embedded yet, or not the owner's)."""
    embedder = get_embedder()
    vector = (
        Passage.objects.owned_by(owner)
        .filter(logical_message_id=message.pk, embedding_model=embedder.name, embedding__isnull=False)
        .order_by("kind", "index")
        .values_list("embedding", flat=True)
        .first()
    )
    if vector is None:
        return None
    filters = SearchFilters(include_tool_calls=True, exclude_message_id=message.pk)
    # Several passages a message: read enough of them to rank `limit` messages.
    rows = _vector_candidates(owner, "", filters, limit * 6, SearchResults(query=""), vector)
    best: dict[str, float] = {}
    for _message_id, _call_id, logical_id, _text, similarity, *_ in rows:
        best[logical_id] = max(best.get(logical_id, -1.0), float(similarity))
    ranked = sorted(best.items(), key=lambda kv: -kv[1])[:limit]
    found = Message.objects.visible_to(owner).in_bulk([k for k, _ in ranked])
    return [{"message": found[k], "similarity": s} for k, s in ranked if k in found]


def _hits(owner, ranked: list[tuple[tuple[str, str], float]], info: dict) -> list[SearchHit]:
    """The hits of the ranked units (fuse's), in their order; a unit whose row is gone is left out."""
    message_ids = [key[1] for key, _ in ranked if key[0] == "message"]
    call_ids = [key[1] for key, _ in ranked if key[0] == "tool_call"]
    # Only the columns a hit shows: a message's content and edit history, a tool call's
    # arguments and result can be long, and up to `limit` of them are read here. Written out:
    # every search reads them, and the ORM's building of the two queries cost more CPU than
    # running them. A chunk's external id is its message's.
    messages: dict[str, tuple] = {}
    calls: dict[str, tuple] = {}
    with connection.cursor() as cursor:
        if message_ids:
            cursor.execute(
                "SELECT m.id, m.conversation_id, m.role, m.timestamp, m.snippet, m.is_chunk, "
                "coalesce(m.chunk_parent_id, m.id), "
                "(CASE WHEN m.is_chunk THEN p.metadata ELSE m.metadata END) -> 'external_id' "
                "FROM memory_message m LEFT JOIN memory_message p ON p.id = m.chunk_parent_id "
                "WHERE m.owner_id = %s AND m.id = ANY(%s)",
                [owner.pk, message_ids],
            )
            messages = {row[0]: row for row in cursor.fetchall()}
        if call_ids:
            cursor.execute(
                "SELECT id, message_id, timestamp, is_chunk FROM memory_toolcall "
                "WHERE owner_id = %s AND id = ANY(%s)",
                [owner.pk, call_ids],
            )
            calls = {row[0]: row for row in cursor.fetchall()}
    hits = []
    for key, score in ranked:
        entry = info[key]
        # What the ranking knew of the hit's passage, alike for messages and tool calls.
        ranking = {
            "score": score,
            "vector_rank": entry.get("vector_rank"),
            "keyword_rank": entry.get("keyword_rank"),
            "vector_similarity": entry.get("similarity"),
            "passage_text": entry["text"],
            "periods": entry.get("periods") or [],
        }
        if key[0] == "message":
            m = messages.get(key[1])
            if m is None:
                continue
            pk, conversation_id, role, timestamp, snippet, is_chunk, logical_id, external_id = m
            hits.append(
                SearchHit(
                    id=pk,
                    type="message",
                    is_chunk=is_chunk,
                    message_id=logical_id,
                    conversation=conversation_id,
                    role=role,
                    timestamp=timestamp,
                    snippet=_snippet(entry["text"]) or snippet,
                    external_id=json.loads(external_id) if external_id is not None else None,
                    **ranking,
                )
            )
        else:
            c = calls.get(key[1])
            if c is None:
                continue
            pk, message_id, timestamp, is_chunk = c
            hits.append(
                SearchHit(
                    id=pk,
                    type="tool_call",
                    is_chunk=is_chunk,
                    message_id=message_id,
                    conversation=entry.get("conversation") or "",
                    role="tool",
                    timestamp=timestamp,
                    snippet=_snippet(entry["text"]),
                    **ranking,
                )
            )
    # Tool-call hits carry their message's conversation.
    missing = [h for h in hits if h.type == "tool_call"]
    if missing:
        conv = dict(
            Message.objects.owned_by(owner)
            .filter(pk__in=[h.message_id for h in missing])
            .values_list("pk", "conversation_id")
        )
        for h in missing:
            h.conversation = conv.get(h.message_id, "")
    return hits


def _date(period: dict[str, str]) -> dict[str, str]:
    """{"text": "last Saturday", "date": "2023-05-20"}, or "from" and "until" (inclusive) for a span."""
    start, end = dt.date.fromisoformat(period["start"]), dt.date.fromisoformat(period["end"])
    if end - start == dt.timedelta(days=1):
        return {"text": period["text"], "date": start.isoformat()}
    last = end - dt.timedelta(days=1)
    return {"text": period["text"], "from": start.isoformat(), "until": last.isoformat()}


def _snippet(text: str) -> str:
    length = settings.INDEX_SNIPPET_LENGTH * 2
    flat = " ".join((text or "").split())
    return flat if len(flat) <= length else flat[: length - 1] + "…"


def hit_dicts(hits: list[SearchHit]) -> list[dict[str, Any]]:
    return [asdict(h) | {"timestamp": h.timestamp.isoformat()} for h in hits]
