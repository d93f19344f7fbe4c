"""The entity graph at work: graph-aware search and graph upkeep.

Search: the entities a query names are looked up in the owner's graph and expanded one or two
hops along co-occurrence edges; candidates that mention them get a boost. Each entity counts
by how rare it is in the owner's memory (a name in a third of the history says nothing about
which message is meant), each hop by how often the two entities are named together. Only rare
entities are expanded, so the walk stays a few index reads whatever the size of the memory.

Upkeep (background work, memory.tasks.graph_upkeep): spellings of one entity are merged (case
and possessives already share a key, memory.knowledge.entities.normalize; plurals join their singular),
edges no message has reinforced for a while lose weight, and entities no visible message
mentions any more are pruned. A deleted or forgotten message leaves the graph at once
(memory.knowledge.entities.remove_mentions), never through upkeep alone.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from memory.knowledge.entities import extract, normalize, prune_orphans, refresh_counts, singular_forms
from memory.models import Entity, EntityEdge, EntityMention
from memory.pgvalues import text_array

# The share of a hop's score: a direct match, one hop, two hops.
HOP_FACTORS = (1.0, 0.5, 1 / 6)
# Edges followed from each entity at each hop (its strongest).
EDGES_PER_ENTITY = 8
_WORD = re.compile(r"[\w'’.@-]+")


# --- search ------------------------------------------------------------------------------------


def rarity(mentions: int, messages: int) -> float:
    """1 for an entity one message names, falling with the log of its mentions to 0 at
    GRAPH_MAX_SHARE of the owner's messages (and beyond)."""
    ceiling = settings.GRAPH_MAX_SHARE * max(1, messages)
    if mentions <= 0 or ceiling <= 1 or mentions >= ceiling:
        return 0.0
    return max(0.0, 1.0 - math.log(mentions) / math.log(ceiling))


def query_keys(query: str) -> set[str]:
    """What in the query could be an entity's key: what the extractor finds, and every run of
    one to four words (so "did melanie's kids..." finds Melanie, lower case and all)."""
    keys = {f.normalized for f in extract(query)}
    words = [w.strip(".'’") for w in _WORD.findall(query[:1000])][:60]
    for size in range(1, 5):
        for i in range(len(words) - size + 1):
            keys.add(normalize(" ".join(words[i : i + size])))
    return {k for k in keys if len(k) >= 2}


def related(owner, query: str) -> dict[int, float]:
    """The entities the query names and their neighbours within GRAPH_SEARCH_HOPS, each with a
    relevance in 0..1 (rarity times hop factor times how tied it is to the entity it came from)."""
    keys = query_keys(query)
    if not keys:
        return {}
    keys |= {s for k in keys for s in singular_forms(k)}
    with connection.cursor() as cursor:
        # The owner's messages, from the conversations' position counters (an upper bound,
        # read without counting a million rows).
        cursor.execute(
            "SELECT e.id, e.mention_count, (SELECT coalesce(sum(c.next_position), 0) "
            "FROM memory_conversation c WHERE c.owner_id = %s) "
            "FROM memory_entity e WHERE e.owner_id = %s AND e.normalized = ANY(%s) AND e.mention_count > 0",
            [owner.pk, owner.pk, list(keys)],
        )
        rows = cursor.fetchall()
    if not rows:
        return {}
    messages = int(rows[0][2])
    relevance = {eid: rarity(n, messages) * HOP_FACTORS[0] for eid, n, _ in rows}
    relevance = {eid: r for eid, r in relevance.items() if r > 0}
    frontier = dict(relevance)
    mentions = {eid: n for eid, n, _ in rows}
    for hop in range(1, min(settings.GRAPH_SEARCH_HOPS, len(HOP_FACTORS) - 1) + 1):
        if not frontier:
            break
        nxt: dict[int, float] = {}
        for eid, other, weight, other_mentions in _strongest_edges(owner, list(frontier)):
            tie = min(1.0, weight / max(1, mentions.get(eid, 1)))
            step = HOP_FACTORS[hop] / HOP_FACTORS[hop - 1]
            r = frontier[eid] * step * tie * rarity(other_mentions, messages)
            mentions.setdefault(other, other_mentions)
            if r > max(relevance.get(other, 0.0), nxt.get(other, 0.0)):
                nxt[other] = r
        relevance.update(nxt)
        frontier = nxt
    return relevance


def related_or_none(owner, query: str) -> dict[int, float] | None:
    """related(), or None when the boost is off (nothing to look up) or the lookup failed
    (boost_scores then tries once more, and leaves the search as it was if that fails too)."""
    if not (settings.GRAPH_SEARCH and settings.GRAPH_SEARCH_WEIGHT):
        return None
    try:
        # A savepoint: a lookup that fails (or runs past a statement limit) leaves the caller's
        # transaction usable.
        with transaction.atomic():
            return related(owner, query)
    except Exception:  # noqa: BLE001 - the graph is an addition to search, not a dependency
        logging.getLogger(__name__).warning("graph lookup failed", exc_info=True)
        return None


def _strongest_edges(owner, entity_ids: list[int]) -> list[tuple[int, int, float, int]]:
    """(entity, neighbour, weight * decay, neighbour's mentions) for the EDGES_PER_ENTITY
    heaviest edges at each end of each entity (two index walks per entity)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT f.id, x.other, x.w, n.mention_count FROM unnest(%s::bigint[]) AS f(id) "
            "CROSS JOIN LATERAL ("
            " (SELECT target_id AS other, weight * decay AS w FROM memory_entityedge"
            "  WHERE source_id = f.id AND owner_id = %s ORDER BY weight DESC LIMIT %s)"
            " UNION ALL"
            " (SELECT source_id, weight * decay FROM memory_entityedge"
            "  WHERE target_id = f.id AND owner_id = %s ORDER BY weight DESC LIMIT %s)) x "
            "JOIN memory_entity n ON n.id = x.other WHERE n.mention_count > 0",
            [entity_ids, owner.pk, EDGES_PER_ENTITY, owner.pk, EDGES_PER_ENTITY],
        )
        return cursor.fetchall()


def boost_scores(
    owner, query: str, scores: dict[tuple[str, str], float], info: dict, relevance: dict | None = None
) -> dict[str, float]:
    """Graph-aware search, as one step of memory.finding.search's candidate scoring: each
    candidate message (or chunk: its message's mentions count) gains GRAPH_SEARCH_WEIGHT
    times how strongly it mentions what the query names or what that is tied to (a noisy-or
    of the entities' relevance, so 0..1). `scores` is changed in place; returns the boost per
    logical message. Never fails the search: the graph is an addition, not a dependency."""
    if not (settings.GRAPH_SEARCH and settings.GRAPH_SEARCH_WEIGHT) or not scores:
        return {}
    try:
        # `relevance`: related(owner, query), when search looked it up while its vector search ran
        # (then no savepoint: nothing is read).
        if relevance is None:
            with transaction.atomic():  # a savepoint, as in related_or_none
                relevance = related(owner, query)
        if not relevance:
            return {}
        logical = {key: info[key]["logical"] for key in scores if key[0] == "message" and key in info}
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT message_id, entity_id FROM memory_entitymention "
                "WHERE owner_id = %s AND entity_id = ANY(%s) AND message_id = ANY(%s::varchar[])",
                [owner.pk, list(relevance), text_array(set(logical.values()))],  # ~200 ids
            )
            rows = cursor.fetchall()
    except Exception:  # noqa: BLE001 - a graph failure leaves hybrid search as it was
        logging.getLogger(__name__).exception("graph boost failed; search goes on without it")
        return {}
    missing: dict[str, float] = defaultdict(lambda: 1.0)
    for message_id, entity_id in rows:
        missing[message_id] *= 1.0 - relevance[entity_id]
    boost = {message_id: 1.0 - rest for message_id, rest in missing.items()}
    for key, message_id in logical.items():
        if message_id in boost:
            scores[key] += settings.GRAPH_SEARCH_WEIGHT * boost[message_id]
    return boost


# --- upkeep ------------------------------------------------------------------------------------


def merge_aliases(owner) -> int:
    """Merge the spellings of one entity: keys that normalize alike now (stored before case,
    possessives and titles were folded: "melanie's" into "melanie") and plurals whose singular
    memory holds ("tulips" into "tulip"). The merged entity's mentions and edges move to the one
    kept, and its names join `aliases`. Returns how many entities were merged away."""
    merged = 0
    # Pass 1: one entity per key as normalize() makes it now (renamed in place when alone).
    groups: dict[tuple[str, str], list[tuple[int, str, int]]] = defaultdict(list)
    entities = Entity.objects.owned_by(owner).values_list("pk", "normalized", "kind", "mention_count")
    for pk, n, kind, count in entities:
        groups[(normalize(n), kind)].append((pk, n, count))
    for (key, _kind), rows in groups.items():
        if len(rows) == 1 and rows[0][1] == key:
            continue
        rows.sort(key=lambda r: (r[1] != key, -r[2], r[0]))  # the one already keyed so, else the most named
        keep = rows[0][0]
        merged += _merge(owner, keep, [pk for pk, _, _ in rows[1:]])
        Entity.objects.filter(pk=keep).exclude(normalized=key).update(normalized=key)
    # Pass 2: a plural joins its singular when it is the rarer spelling.
    rows = list(Entity.objects.owned_by(owner).values_list("pk", "normalized", "kind", "mention_count"))
    by_key = {(n, kind): (pk, count) for pk, n, kind, count in rows}
    into: dict[int, int] = {}
    for pk, n, kind, count in rows:
        singulars = [by_key.get((s, kind)) for s in singular_forms(n, kind)]
        target = next((t for t in singulars if t is not None and t[1] >= count and t[0] != pk), None)
        if target is not None:
            into[pk] = target[0]
    plural_groups: dict[int, list[int]] = defaultdict(list)
    for pk in into:
        keep, steps = into[pk], 0
        while keep in into and steps < 10:  # a chain (a -> b -> c) ends where nothing merges on
            keep, steps = into[keep], steps + 1
        if keep != pk:
            plural_groups[keep].append(pk)
    return merged + sum(_merge(owner, keep, others) for keep, others in plural_groups.items())


def _merge(owner, keep: int, others: list[int]) -> int:
    if not others:
        return 0
    with transaction.atomic(), connection.cursor() as cursor:
        entity = Entity.objects.select_for_update().get(pk=keep, owner_id=owner.pk)
        names = list(Entity.objects.filter(pk__in=others, owner_id=owner.pk).values_list("name", "aliases"))
        # Mentions move (a message naming both spellings keeps one mention, counts summed).
        cursor.execute(
            "INSERT INTO memory_entitymention (owner_id, entity_id, message_id, count) "
            "SELECT owner_id, %s, message_id, sum(count) FROM memory_entitymention "
            "WHERE entity_id = ANY(%s) GROUP BY owner_id, message_id "
            "ON CONFLICT (entity_id, message_id) DO UPDATE "
            "SET count = memory_entitymention.count + EXCLUDED.count",
            [keep, others],
        )
        # Edges move too, re-ordered (source < target), summed, and none from the entity to itself.
        cursor.execute(
            "INSERT INTO memory_entityedge "
            "(owner_id, source_id, target_id, weight, decay, last_seen, decayed_at) "
            "SELECT owner_id, least(a, b), greatest(a, b), sum(weight), "
            "sum(weight * decay) / greatest(sum(weight), 1), max(last_seen), max(decayed_at) FROM ("
            " SELECT owner_id, CASE WHEN source_id = ANY(%s) THEN %s ELSE source_id END AS a,"
            " CASE WHEN target_id = ANY(%s) THEN %s ELSE target_id END AS b,"
            " weight, decay, last_seen, decayed_at"
            " FROM memory_entityedge WHERE owner_id = %s AND (source_id = ANY(%s) OR target_id = ANY(%s))) m "
            "WHERE a <> b GROUP BY owner_id, least(a, b), greatest(a, b) "
            "ON CONFLICT (source_id, target_id) DO UPDATE SET "
            "decay = (memory_entityedge.weight * memory_entityedge.decay + EXCLUDED.weight * EXCLUDED.decay)"
            " / greatest(memory_entityedge.weight + EXCLUDED.weight, 1), "
            "weight = memory_entityedge.weight + EXCLUDED.weight, "
            "last_seen = greatest(memory_entityedge.last_seen, EXCLUDED.last_seen)",
            [others, keep, others, keep, owner.pk, others, others],
        )
        Entity.objects.filter(pk__in=others, owner_id=owner.pk).delete()  # their rows cascade
        aliases = set(entity.aliases or [])
        for name, more in names:
            aliases.add(name)
            aliases.update(more or [])
        entity.aliases = sorted(aliases - {entity.name})[:50]
        entity.save(update_fields=["aliases"])
        refresh_counts(owner, [keep])
    return len(others)


def decay_edges(owner, now: dt.datetime | None = None) -> int:
    """Halve the weight of edges for every GRAPH_EDGE_HALF_LIFE_DAYS that no message naming both
    entities came, counted from their last message or the last decay, so how often upkeep runs
    does not matter. Returns edges decayed."""
    now = now or timezone.now()
    half_life = dt.timedelta(days=settings.GRAPH_EDGE_HALF_LIFE_DAYS)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_entityedge SET decay = decay * power(0.5, extract(epoch FROM "
            "(%s - greatest(coalesce(decayed_at, last_seen), last_seen))) / %s), decayed_at = %s "
            "WHERE owner_id = %s AND last_seen < %s",
            [now, half_life.total_seconds(), now, owner.pk, now - half_life],
        )
        return cursor.rowcount


def upkeep(owner) -> dict[str, Any]:
    """Graph upkeep: merge aliases, decay edges, prune orphans."""
    merged = merge_aliases(owner)
    decayed = decay_edges(owner)
    pruned = prune_orphans(owner)
    return {"merged": merged, "decayed_edges": decayed, "pruned": pruned}


def stats(owner) -> dict[str, Any]:
    return {
        "entities": Entity.objects.owned_by(owner).count(),
        "edges": EntityEdge.objects.owned_by(owner).count(),
        "mentions": EntityMention.objects.owned_by(owner).count(),
    }
