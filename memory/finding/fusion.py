"""How hybrid search (memory.finding.search) ranks its candidates: each list's scores as
z-scores over its own candidates, weighted and summed; the period a question names lifts what
was said then, or what names that period; the graph boost (memory.knowledge.graph); what the
question asks for (memory.finding.intent) moves turns: whose words answer it, statements over
questions, turns that say when for "when", the newest for "now", the person's stated tastes for
a request for a suggestion; turns of a session that matches share its score; turns near the
best ones join the candidates and share scores with them; and in the final order one chat's
many turns leave places to other chats' best.

The weights and shares are tuned on the dev split of `manage.py eval_recall` (its --set tries
other values: they are read from this module when a search runs).
"""

from __future__ import annotations

import datetime as dt
import heapq
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from itertools import chain
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.utils import OperationalError

from memory.dates import query_period, says_its_own_day
from memory.finding import intent
from memory.finding.candidates import local_settings_scope
from memory.knowledge import graph
from memory.pgvalues import text_array
from memory.timeouts import cancelled

# Fusion weights of the two lists' z-scores, and boosts in z units (tuned on the dev split of
# eval_recall; see that command).
KEYWORD_WEIGHT = 1.0
VECTOR_WEIGHT = 1.0
PERIOD_BOOST = 1.0
REPLY_SHARE = 0.2
# A candidate one list did not return scores as that list's weakest return, but never lower than
# ABSENT_Z below that list's mean (0: no bound): a long tail of weak keyword matches (a name said
# in every other turn) must not sink a turn the vector list ranks high but that shares no word.
ABSENT_Z = 0.5
NEIGHBOR_SHARE = 0.4
# How many of the best messages have their turns two replies away join the candidates (see
# _neighbours_and_chains): the best one. More seeds cost recall on the dev split (5: -1 point).
NEIGHBOR_SEEDS = 1
# What the question asks for (memory.finding.intent), in z units: a turn by the other speaker than
# the one whose words answer it ("my…" asks the person's; "what did you suggest" the assistant's)
# loses ROLE_SHIFT; a turn that only asks, when the question seeks a fact, QUESTION_SHIFT.
# ROLE_SHIFT 4 (2 before, set on 14 LongMemEval dev questions): the assistant's long replies that
# repeat the person's words still outranked the person's own statement at 2. Hybrid recall
# @1 / @5 / @10, 2 -> 4: LongMemEval dev (18) 44.4 / 83.3 / 91.7 -> 50.0 / 86.1 / 94.4, its new
# questions (36, docs/eval-extra) 38.2 / 72.5 / 75.7 -> 41.0 / 75.7 / 88.0, the updates (35)
# 28.6 / 95.7 / 97.1 -> 30.9 / 97.1 / 97.1; LoCoMo dev (494) and new (40) every question the same
# (43.5 / 76.8 / 84.5 and 30.0 / 45.8 / 59.4: its questions name people, not "I"/"my").
ROLE_SHIFT = 4.0
# The same for named speakers (an import's "speaker"): a question naming one of them ("What did
# Caroline research?") is answered by that person's words, not by another's that name them.
SPEAKER_SHIFT = 0.5
QUESTION_SHIFT = 3.0
# A question asking when ("When did Caroline go to the support group?"): a turn whose words name a
# time (a period resolved when it was said: "yesterday", "last week") gains WHEN_BOOST. On the dev
# split 64 of the 86 turns that answer "When…" questions name one, against 141 of all 1,451 turns.
WHEN_BOOST = 2.0
# "now", "current", "still": among the PRESENT_POOL best turns, the newest gains PRESENT_BOOST,
# the others in proportion to their place in time (the oldest nothing).
PRESENT_BOOST = 1.0
PRESENT_POOL = 10
# A request for a suggestion for the person ("Got any ideas for something to stream?"): the
# person's turns that state a taste, habit or dislike ("I love snapper") gain TASTE_BOOST. On the
# new LongMemEval preference questions (docs/evaluation.md, twelfth round (b)) 1.0 lifts two of
# six into the first 10 and moves no other question; 2.0 lifts the same two and costs one @1.
TASTE_BOOST = 1.0
# A turn gains SESSION_SHARE of its session's best score (a session: the candidates of one
# conversation with no gap over SESSION_GAP between them): evidence spread over a session.
SESSION_SHARE = 0.1
SESSION_GAP = dt.timedelta(hours=3)
# Links from the first hits (pseudo-relevance feedback): the words of the LINK_SEEDS best turns
# that the question lacks and only a few candidates hold (a name, a place, a thing) lift the
# other candidates holding them, the best linked by LINK_SHARE; read over the LINK_POOL best
# candidates only (reading the words of every candidate's passage costs ~10 ms a search).
LINK_SHARE = 0.5
LINK_SEEDS = 3
LINK_POOL = 100
# Evidence spread over chats: in the final order, a turn loses DIVERSITY_SHIFT for each turn of its
# own conversation already placed above it, so another chat's best turn can take a place.
DIVERSITY_SHIFT = 1.0


@dataclass
class QueryBoosts:
    """What a query names beyond its words: a period.

    Names, numbers and identifiers need no boost of their own: BM25 weighs each term by its
    rarity in the owner's memory. A flat boost for every entity the question names lifted every
    greeting of a participant ("Hey Melanie!") over the answer (eval_recall: 33% -> 49% recall@10
    without it)."""

    period: tuple[dt.datetime, dt.datetime] | None = None
    text: str = ""  # for the graph boost (memory.knowledge.graph), which weighs entities by rarity
    graph: dict[int, float] | None = None  # memory.knowledge.graph.related(owner, text), if looked up already
    speaker: str | None = None  # whose words answer it (intent.speaker)
    seeks_fact: bool = False
    present: bool = False
    asks_when: bool = False
    suggestion: bool = False

    @classmethod
    def of(cls, query: str, now: dt.datetime | None = None) -> QueryBoosts:
        """The query's boosts, its relative periods ("last week") read as of `now` (None: now)."""
        return cls(
            period=query_period(query, now=now),
            text=query,
            speaker=intent.speaker(query),
            seeks_fact=intent.seeks_fact(query),
            present=intent.wants_present(query),
            asks_when=intent.asks_when(query),
            suggestion=intent.asks_suggestion(query),
        )

    def bonus(self, timestamp: dt.datetime | None, periods=None) -> float:
        """PERIOD_BOOST for what was said in the question's period, or names a period that
        overlaps it ("last Saturday" said on the Monday after)."""
        if not self.period:
            return 0.0
        if timestamp is not None and self.period[0] <= timestamp < self.period[1]:
            return PERIOD_BOOST
        start, end = self.period[0].date().isoformat(), self.period[1].date().isoformat()
        if any(p["start"] < end and start < p["end"] for p in _periods(periods)):
            return PERIOD_BOOST
        return 0.0

    def shift(self, entry: dict[str, Any]) -> float:
        """What the question asks for moves a turn: down when it is the other speaker's, down
        when it only asks and the question seeks a fact, up when it says when and the question
        asks when, up when it is the person's stated taste and the question asks for a
        suggestion."""
        moved = 0.0
        role = entry.get("role")
        if self.speaker and role in ("user", "assistant") and role != self.speaker:
            moved -= ROLE_SHIFT
        if self.seeks_fact and intent.only_asks(entry.get("text") or ""):
            moved -= QUESTION_SHIFT
        if self.asks_when and (entry.get("periods") or says_its_own_day(entry.get("text") or "")):
            moved += WHEN_BOOST
        if self.suggestion and role == "user" and intent.states_taste(entry.get("text") or ""):
            moved += TASTE_BOOST
        return moved


def _periods(value) -> list[dict[str, str]]:
    """A passage's periods as read from its row (a JSON string from a raw cursor)."""
    if isinstance(value, str):
        if value == "[]" or not value:  # most passages name no period: no JSON to parse
            return []
        value = json.loads(value)
    return value or []


def _standardised(values: dict[Any, float]) -> tuple[dict[Any, float], float]:
    """z-scores of one list's scores over its candidates, and the z of its lowest score (what a
    candidate this list did not return gets)."""
    if not values:
        return {}, 0.0
    n = len(values)
    mean = sum(values.values()) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values.values()) / n) or 1.0
    z = {key: (v - mean) / sd for key, v in values.items()}
    floor = min(z.values())
    return z, max(floor, -ABSENT_Z) if ABSENT_Z else floor


def fuse(
    owner, vector_rows, keyword_rows, limit, boosts: QueryBoosts | None = None, expand=None,
    fallbacks: list[dict[str, Any]] | None = None,
) -> tuple[list[tuple[tuple[str, str], float]], dict[tuple[str, str], dict[str, Any]]]:
    """Fuse per unit (message, chunk or tool call): each list's best score per unit, as z-scores
    over that list's candidates, weighted and summed; then the period boost; then the turns two
    replies away from the best ones join the candidates (`expand`: the search's filters and
    excluded ids), and scores are shared between nearby turns.

    Returns the best `limit` units, as ((kind, id), score) best first, and what the lists knew
    of every unit (its logical message, passage text, ranks, similarity, timestamp). A step
    that took too long is left out, and said in `fallbacks`."""
    info: dict[tuple[str, str], dict[str, Any]] = {}

    def unit_key(row) -> tuple[str, str]:
        message_id, tool_call_id = row[0], row[1]
        return ("tool_call", tool_call_id) if tool_call_id else ("message", message_id)

    raw: dict[str, dict[tuple[str, str], float]] = {"vector": {}, "keyword": {}}
    for source, rows in (("vector", vector_rows), ("keyword", keyword_rows)):
        rank = 0
        for row in rows:
            key = unit_key(row)
            if key in raw[source]:
                continue
            rank += 1
            raw[source][key] = float(row[4])
            entry = info.setdefault(key, {"logical": row[2], "text": row[3]})
            entry[f"{source}_rank"] = rank
            if source == "vector":
                entry["similarity"] = float(row[4])
            elif "vector_rank" not in entry:
                entry["text"] = row[3]
            if len(row) > 5:
                entry["timestamp"] = row[5]
            if len(row) > 8:
                entry.setdefault("role", row[6])
                entry.setdefault("conversation", row[7])
                entry.setdefault("periods", _periods(row[8]))
            if len(row) > 9:
                entry.setdefault("speaker", row[9])
    z_vector, floor_vector = _standardised(raw["vector"])
    z_keyword, floor_keyword = _standardised(raw["keyword"])
    scores: dict[tuple[str, str], float] = {}
    for key, entry in info.items():
        scores[key] = VECTOR_WEIGHT * z_vector.get(key, floor_vector) + KEYWORD_WEIGHT * z_keyword.get(
            key, floor_keyword
        )
        if boosts is not None:
            scores[key] += boosts.bonus(entry.get("timestamp"), entry.get("periods")) + boosts.shift(entry)
    if boosts is not None:
        _shift_other_speakers(boosts.text, scores, info)
    if boosts is not None and boosts.text:
        # Graph-aware search (memory.knowledge.graph); GRAPH_SEARCH turns it off.
        graph.boost_scores(owner, boosts.text, scores, info, relevance=boosts.graph)
    if boosts is not None:
        _link_first_hits(boosts.text, scores, info)
    _share_session_scores(scores, info)
    try:
        neighbours, chains = _neighbours_and_chains(owner, scores, expand)
    except OperationalError as exc:
        if not cancelled(exc):
            raise
        neighbours, chains = {}, []
        if fallbacks is not None:
            fallbacks.append({"kind": "neighbours_timeout", "detail": (
                f"the turns around the best results took more than {settings.VECTOR_SEARCH_TIMEOUT_MS} ms "
                "to read; ranked without them")})
    floor = VECTOR_WEIGHT * floor_vector + KEYWORD_WEIGHT * floor_keyword
    for key, entry in neighbours.items():
        info[key] = entry
        scores[key] = floor + (
            boosts.bonus(entry.get("timestamp"), entry.get("periods")) + boosts.shift(entry)
            if boosts is not None
            else 0.0
        )
    _share_neighbour_scores(scores, chains)
    if boosts is not None and boosts.present:
        _lift_the_newest(scores, info)
    return _diversified(scores, info, limit), info


def _shift_other_speakers(query: str, scores: dict[tuple[str, str], float], info: dict) -> None:
    """When the question names exactly one of the candidates' speakers, the turns of the other
    named speakers lose SPEAKER_SHIFT: the person's own words answer what they did or think."""
    if not SPEAKER_SHIFT:
        return
    speakers = {entry["speaker"] for entry in info.values() if entry.get("speaker")}
    named = [s for s in speakers if re.search(rf"\b{re.escape(s)}\b", query, re.I)]
    if len(named) != 1:
        return
    for key, entry in info.items():
        if key in scores and entry.get("speaker") and entry["speaker"] != named[0]:
            scores[key] -= SPEAKER_SHIFT


_WORD = re.compile(r"\w{4,}")


def _link_first_hits(query: str, scores: dict[tuple[str, str], float], info: dict) -> None:
    """The other candidates that share the first hits' rarer words gain up to LINK_SHARE: the
    turn that names the subject often leads to the one that holds the fact ("since I moved
    from my home country" ... "a gift from my grandma in my home country, Sweden")."""
    if not LINK_SHARE or len(scores) < 4:
        return

    def words(text: str) -> set[str]:
        return set(_WORD.findall((text or "").lower()))

    asked = words(query)
    pool = sorted(scores, key=lambda key: -scores[key])[:LINK_POOL]
    bags = {key: words(info.get(key, {}).get("text", "")) for key in pool}
    df = Counter(chain.from_iterable(bags.values()))  # counted in C
    rare = max(2, len(bags) // 20)
    seeds = pool[:LINK_SEEDS]
    weights = {
        w: math.log(len(bags) / df[w]) for key in seeds for w in bags[key] - asked if 1 < df[w] <= rare
    }
    if not weights:
        return
    # Only the weighted words are added (in the bag's order, as before: the same float sums).
    linked = {key: sum([weights[w] for w in bags[key] if w in weights]) for key in pool[LINK_SEEDS:]}
    best = max(linked.values(), default=0.0)
    if best <= 0:
        return
    for key, weight in linked.items():
        scores[key] += LINK_SHARE * weight / best


def _sessions(scores: dict[tuple[str, str], float], info: dict) -> dict[tuple[str, str], tuple[str, int]]:
    """The session of each scored turn: the candidates of one conversation with no gap over
    SESSION_GAP between them, as (conversation, its n-th session among the candidates). A turn
    without a conversation or a time has none."""
    by_conversation: dict[str, list[tuple[dt.datetime, tuple[str, str]]]] = {}
    for key, entry in info.items():
        if key in scores and entry.get("conversation") and entry.get("timestamp") is not None:
            by_conversation.setdefault(entry["conversation"], []).append((entry["timestamp"], key))
    sessions: dict[tuple[str, str], tuple[str, int]] = {}
    for conversation, turns in by_conversation.items():
        turns.sort()
        number, last = 0, None
        for when, key in turns:
            if last is not None and when - last > SESSION_GAP:
                number += 1
            sessions[key] = (conversation, number)
            last = when
    return sessions


def _share_session_scores(scores: dict[tuple[str, str], float], info: dict) -> None:
    """Each turn gains SESSION_SHARE of the best score of its session (itself included): a turn
    among others that match is likelier the answer than one alone (evidence spread over a
    session)."""
    if not SESSION_SHARE:
        return
    best: dict[tuple[str, int], float] = {}
    sessions = _sessions(scores, info)
    for key, session in sessions.items():
        best[session] = max(best.get(session, scores[key]), scores[key])
    for key, session in sessions.items():
        if best[session] > 0:
            scores[key] += SESSION_SHARE * best[session]


def _diversified(
    scores: dict[tuple[str, str], float], info: dict, limit: int
) -> list[tuple[tuple[str, str], float]]:
    """The best `limit` turns, best first, each having lost DIVERSITY_SHIFT for every turn of its
    conversation placed before it: a chat whose many turns repeat the question's subject (a
    request, the assistant's long answers) yields places to the best turns of other chats, where
    a fact was told in passing; a clearly better turn of the same chat still comes first."""
    if not DIVERSITY_SHIFT:
        return sorted(scores.items(), key=lambda kv: -kv[1])[:limit]
    chats = {key: entry["conversation"] for key, entry in info.items() if entry.get("conversation")}
    # A turn's place depends on the score less the shift of its own chat's places only, so each
    # chat's turns keep their order (best first); the next turn placed is the best of the chats'
    # heads (a heap over chats, not over turns scored again and again: the same order, by
    # (adjusted score, places, key), as scoring each turn again whenever its chat gained one).
    turns: dict[Any, list[tuple[float, tuple[str, str]]]] = {}
    for key, score in scores.items():
        turns.setdefault(chats.get(key, key), []).append((-score, key))
    heap = []
    for chat, its in turns.items():
        its.sort()
        heap.append((its[0][0], 0, its[0][1], 0, chat))
    heapq.heapify(heap)
    ranked: list[tuple[tuple[str, str], float]] = []
    while heap and len(ranked) < limit:
        negative, seen, key, at, chat = heapq.heappop(heap)
        ranked.append((key, -negative))
        its = turns[chat]
        del its[at]
        if its:
            heapq.heappush(heap, (*_head(its, scores, seen + 1), chat))
    return ranked


def _head(its: list[tuple[float, tuple[str, str]]], scores: dict, seen: int) -> tuple:
    """The next turn of a chat with `seen` turns placed, as (-adjusted score, seen, key, its
    index): the first of its turns left (best first), or among the first ones whose adjusted
    scores round to the same float, the lowest key."""
    best: tuple = ()
    for at, (_, key) in enumerate(its):
        value = -(scores[key] - DIVERSITY_SHIFT * seen)
        if best and value != best[0]:
            break
        if not best or key < best[2]:
            best = (value, seen, key, at)
    return best


def _lift_the_newest(scores: dict[tuple[str, str], float], info: dict) -> None:
    """For a question about the present: among the PRESENT_POOL best turns, the newest gains
    PRESENT_BOOST and the others in proportion to their place in time (a value stated later
    replaces one stated before; the older ones follow)."""
    pool = [
        key for key, _ in sorted(scores.items(), key=lambda kv: -kv[1])[:PRESENT_POOL]
        if info.get(key, {}).get("timestamp") is not None
    ]
    if len(pool) < 2 or not PRESENT_BOOST:
        return
    times = [info[key]["timestamp"] for key in pool]
    oldest, newest = min(times), max(times)
    span = (newest - oldest).total_seconds()
    if span <= 0:
        return
    for key, when in zip(pool, times, strict=True):
        scores[key] += PRESENT_BOOST * (when - oldest).total_seconds() / span


def _neighbours_and_chains(owner, scores, expand) -> tuple[dict, list[tuple]]:
    """One round trip for what the scores share: the turns two replies before or after the
    NEIGHBOR_SEEDS best messages that neither list returned (their first passage each, within
    the filters; `expand` is the search's (filters, excluded ids), None for no neighbours), and
    each candidate's parent and grandparent. A fact stated a turn after its subject can share no
    word and little meaning with a question about that subject."""
    messages = [key[1] for key in scores if key[0] == "message"]
    seeds = [
        key[1]
        for key, score in sorted(scores.items(), key=lambda kv: -kv[1])
        if key[0] == "message" and score > 0
    ][:NEIGHBOR_SEEDS]
    near_sql, near_params, exclude = "", [], set()
    if expand is not None and seeds and NEIGHBOR_SHARE:
        filters, exclude = expand
        where, params = filters.sql(owner.pk)
        near_sql = (
            "WITH seeds AS (SELECT id, parent_id FROM memory_message WHERE owner_id = %s AND id = ANY(%s)), "
            "near AS ("
            " SELECT g.id FROM memory_message c JOIN memory_message g ON g.parent_id = c.id"
            " WHERE c.parent_id IN (SELECT id FROM seeds) AND c.owner_id = %s AND g.owner_id = %s"
            " UNION SELECT m.parent_id FROM memory_message m"
            " WHERE m.id IN (SELECT parent_id FROM seeds) AND m.owner_id = %s AND m.parent_id IS NOT NULL), "
            "nearp AS (SELECT DISTINCT ON (p.logical_message_id) "
            "p.message_id, p.logical_message_id, p.text, p.timestamp, p.role, p.conversation_id, p.periods "
            "FROM memory_passage p WHERE p.owner_id = %s AND NOT p.deleted AND p.kind = 'message' "
            "AND p.logical_message_id IN (SELECT id FROM near)" + where + " "
            "ORDER BY p.logical_message_id, p.id LIMIT 100) "
        )
        near_params = [owner.pk, seeds, *[owner.pk] * 4, *params]
    if not ((REPLY_SHARE or NEIGHBOR_SHARE) and (near_sql or len(messages) >= 2)):
        return {}, []
    chains_sql = (
        "SELECT m.id, m.parent_id, p.parent_id FROM memory_message m "
        "JOIN memory_message p ON p.id = m.parent_id "
        "WHERE m.owner_id = %s AND p.owner_id = %s AND m.parent_id IS NOT NULL AND (m.id = ANY(%s::varchar[])"
        + (" OR m.id IN (SELECT message_id FROM nearp))" if near_sql else ")")
    )
    chains_params = [owner.pk, owner.pk, text_array(messages)]  # ~200 ids
    # Bounded like the candidate lists: on statistics gone stale (a large import not yet analysed)
    # the planner once took 3 min 18 s over this; cancelled, the search goes on without it.
    limit = ["SELECT set_config('statement_timeout', %s, true); ",
             [str(int(settings.VECTOR_SEARCH_TIMEOUT_MS))]]
    with local_settings_scope(), connection.cursor() as cursor:
        if near_sql:
            cursor.execute(
                f"{limit[0]}{near_sql} SELECT * FROM nearp; {near_sql} {chains_sql}",
                [*limit[1], *near_params, *near_params, *chains_params],
            )
            cursor.nextset()
            near_rows = cursor.fetchall()
            cursor.nextset()
        else:
            cursor.execute(f"{limit[0]}{chains_sql}", [*limit[1], *chains_params])
            cursor.nextset()
            near_rows = []
        chains = cursor.fetchall()
    neighbours = {
        ("message", message_id): {
            "logical": logical,
            "text": text,
            "timestamp": timestamp,
            "role": role,
            "conversation": conversation,
            "periods": _periods(periods),
        }
        for message_id, logical, text, timestamp, role, conversation, periods in near_rows
        if ("message", message_id) not in scores and logical not in exclude
    }
    return neighbours, chains


def _share_neighbour_scores(scores: dict[tuple[str, str], float], chains: list[tuple]) -> None:
    """Scores flow between nearby turns when both are candidates (`chains`: each candidate's
    id, parent and grandparent). A message gets REPLY_SHARE of the score of its reply (the reply
    carries the message's end as context, and a question before a matching answer is often
    where the subject was named); turns two replies apart get NEIGHBOR_SHARE of each other's
    (a fact is often stated a turn after the one that named its subject: "The retreat is at
    Whispering Pines." ... "Whispering Pines is in Estes Park.")."""
    base = dict(scores)

    def share(to: str, source: str, fraction: float) -> None:
        if fraction and ("message", source) in base and ("message", to) in base:
            scores[("message", to)] += fraction * base[("message", source)]

    for reply, parent, grandparent in chains:
        share(parent, reply, REPLY_SHARE)
        if grandparent:
            share(grandparent, reply, NEIGHBOR_SHARE)
            share(reply, grandparent, NEIGHBOR_SHARE)
