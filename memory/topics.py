"""The topic tree, without an LLM: what the memory index, the levels and the tree-walking
tools read.

Leaves are temporally ordered runs of messages about one thing: a run ends at an idle gap
or where the next message drifts away from the run's centroid. Inner nodes
group consecutive children, at most TOPIC_MAX_CHILDREN each, until the top level itself fits,
so a top-down walk reads a bounded number of nodes per level. Labels are extractive keywords
(tf-idf against the owner's other topics), summaries are the sentences nearest the centroid.

A full rebuild is background work (`rebuild`, the `rebuild_topics` task, `manage.py
build_topics`); between rebuilds, `assign_messages` puts new messages into the nearest leaf and
`refresh` re-derives topics whose messages were edited or deleted.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F
from django.utils import timezone
from pgvector.django import CosineDistance

from memory.models import Message, PeriodSummary, Topic, TopicMembership

LEAF_MAX = 120  # messages per leaf; a longer run is cut so a leaf stays readable with one call
# The cosine thresholds of the embedder in use (memory.embeddings.Embedder.topic_*): a new
# message joins a leaf this close to it (join); inside a session, a message this far from the
# run starts a new leaf (cut); across an idle gap, a run continues only if this close (merge).


def _thresholds() -> tuple[float, float, float]:
    from memory.embeddings import get_embedder

    e = get_embedder()
    join = settings.INDEX_CLUSTERING_THRESHOLD
    return (e.topic_join if join is None else join), e.topic_cut, e.topic_merge
MIN_LEAF = 3

_STOP_TEXT = """
the and for that this with you your are was were have has had not but what when where which
who how why all any can could would should will just about into from than then them they
their there here been being also our out over some such more most very only other its it's
i'm i've we're you're don't does did doing done get got make made like want need know think
use used using one two three yes no okay ok sure thanks thank please let lets now new may
might must much many well good great really right way also each every even still back first
last time see say said tell told give given take going come came look looks something
anything nothing things thing sorry hello hi hey assistant user message messages
"""
_STOP = set(_STOP_TEXT.split())
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{2,30}")


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text[:8000]) if w.lower() not in _STOP]


def parse_vector(value) -> np.ndarray | None:
    if value is None:
        return None
    if isinstance(value, str):
        return np.array([float(x) for x in value.strip("[]").split(",")], dtype=np.float32)
    return np.asarray(value, dtype=np.float32)


def unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n else v


def message_vectors(owner, message_ids: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Mean passage vector of each visible logical message (Postgres averages the vectors)."""
    sql = (
        "SELECT p.logical_message_id, avg(p.embedding) FROM memory_passage p "
        "WHERE p.owner_id = %s AND NOT p.deleted AND p.kind = 'message' AND p.embedding IS NOT NULL"
    )
    params: list = [owner.pk]
    if message_ids is not None:
        ids = list(message_ids)
        if not ids:
            return {}
        sql += " AND p.logical_message_id = ANY(%s)"
        params.append(ids)
    sql += " GROUP BY p.logical_message_id"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {mid: unit(parse_vector(v)) for mid, v in cursor.fetchall()}


@dataclass
class _Node:
    messages: list = field(default_factory=list)  # (id, conversation_id, timestamp, tokens, text)
    vectors: list = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)
    terms: Counter = field(default_factory=Counter)
    vec_sum: np.ndarray | None = None
    vec_n: int = 0

    def add(self, row, vec) -> None:
        self.messages.append(row)
        if vec is not None:
            self.vectors.append((row[0], vec))
            self.vec_sum = vec.copy() if self.vec_sum is None else self.vec_sum + vec
            self.vec_n += 1

    def centroid(self) -> np.ndarray | None:
        if self.children:
            vs = [c.centroid() * c.size() for c in self.children if c.centroid() is not None]
            return unit(np.sum(vs, axis=0)) if vs else None
        return unit(self.vec_sum / self.vec_n) if self.vec_n else None

    def size(self) -> int:
        return sum(c.size() for c in self.children) if self.children else len(self.messages)


def _similarity(a: np.ndarray | None, b: np.ndarray | None) -> float | None:
    if a is None or b is None:
        return None
    return float(np.dot(a, b))


def segment(rows: Sequence, vectors: dict[str, np.ndarray]) -> list[_Node]:
    """Cut time-ordered message rows into leaves (temporally ordered)."""
    gap = dt.timedelta(minutes=settings.SESSION_IDLE_MINUTES)
    _, cut_similarity, merge_similarity = _thresholds()
    leaves: list[_Node] = []
    current = _Node()
    for row in rows:
        vec = vectors.get(row[0])
        if current.messages:
            prev = current.messages[-1]
            sim = _similarity(vec, current.centroid())
            idle = row[2] - prev[2] > gap or row[1] != prev[1]
            cut = (
                len(current.messages) >= LEAF_MAX
                or (idle and (sim is None or sim < merge_similarity))
                or (sim is not None and sim < cut_similarity and len(current.messages) >= MIN_LEAF)
            )
            if cut:
                leaves.append(current)
                current = _Node()
        current.add(row, vec)
    if current.messages:
        leaves.append(current)
    return leaves


def group_levels(nodes: list[_Node], max_children: int) -> list[_Node]:
    """Group consecutive nodes under parents of at most max_children until the top level fits."""
    merge_similarity = _thresholds()[2]
    while len(nodes) > max_children:
        min_group = max(2, max_children // 2)
        parents: list[_Node] = []
        group = _Node()
        for node in nodes:
            if group.children:
                sim = _similarity(node.centroid(), group.centroid())
                full = len(group.children) >= max_children
                drift = (
                    len(group.children) >= min_group and sim is not None and sim < merge_similarity
                )
                if full or drift:
                    parents.append(group)
                    group = _Node()
            group.children.append(node)
        parents.append(group)
        if len(parents) >= len(nodes):  # cannot happen with min_group >= 2; guard anyway
            break
        nodes = parents
    return nodes


def _keywords(terms: Counter, doc_freq: Counter, n_docs: int, k: int = 8) -> list[str]:
    scored = {
        t: c * math.log(1 + n_docs / (1 + doc_freq.get(t, 0))) for t, c in terms.items() if c >= 1
    }
    return [t for t, _ in sorted(scored.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def first_sentence(text: str, limit: int = 160) -> str:
    """The text's first sentence of at least 21 characters (whitespace collapsed), cut to
    `limit` characters with an ellipsis. Linear in the first `limit` characters: a sentence
    longer than that is cut anyway, so nothing past them is looked at."""
    head = text[: 8 * (limit + 2)]
    flat = " ".join(head.split())
    if len(flat) <= limit + 1 and len(head) < len(text):  # mostly whitespace: take it all
        flat = " ".join(text.split())
    # The end of a sentence: a mark at index 20 or later, then a space or the end. A mark at
    # `limit` or later (or the window's end) gives the same cut text as the whole would.
    m = _SENTENCE_END.search(flat, 20, limit + 1)
    s = flat[: m.end()] if m else flat
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "…"


def _leaf_samples(node: _Node, k: int = 3) -> list[str]:
    c = node.centroid()
    if c is None or not node.vectors:
        return [m[0] for m in node.messages[:k]]
    ranked = sorted(node.vectors, key=lambda iv: -float(np.dot(iv[1], c)))
    return [mid for mid, _ in ranked[:k]]


def rebuild(owner, *, progress=None) -> dict:
    """Rebuild the owner's whole topic tree and period summaries from visible messages."""
    rows = list(
        Message.objects.visible_to(owner)
        .logical()
        .order_by("timestamp", "position")
        .values_list("id", "conversation_id", "timestamp", "token_count", "content")
    )
    rows = [(r[0], r[1], r[2], r[3], r[4][:4000]) for r in rows]
    if progress:
        progress(0)
    vectors = message_vectors(owner)
    leaves = segment(rows, vectors)
    for leaf in leaves:
        for m in leaf.messages:
            leaf.terms.update(set(words(m[4])))
        if progress:
            progress(len(leaf.messages))
    top = group_levels(leaves, settings.TOPIC_MAX_CHILDREN)
    with transaction.atomic():
        Topic.objects.filter(owner_id=owner.pk).delete()  # memberships cascade
        topics, memberships = _materialise(owner, top, leaves)
        Topic.objects.bulk_create(topics, batch_size=500)
        TopicMembership.objects.bulk_create(memberships, batch_size=2000)
        layout(owner)
        update_period_summaries(owner)
    return {"messages": len(rows), "leaves": len(leaves), "topics": len(topics)}


def _materialise(owner, top: list[_Node], leaves: list[_Node]):
    doc_freq: Counter = Counter()
    for leaf in leaves:
        doc_freq.update(set(leaf.terms))
    n_docs = max(1, len(leaves))
    topics: list[Topic] = []
    memberships: list[TopicMembership] = []

    def walk(node: _Node, parent: Topic | None, level: int, order: int) -> Topic:
        if node.children:
            node.terms = Counter()
            for child in node.children:
                node.terms.update(child.terms)
        keywords = _keywords(node.terms, doc_freq, n_docs)
        centroid = node.centroid()
        topic = Topic(
            owner_id=owner.pk,
            parent=parent,
            level=level,
            order=order,
            label=label_from(keywords, [row[4] for row in node.messages] if not node.children else ()),
            keywords=keywords,
            centroid=centroid.tolist() if centroid is not None else None,
        )
        topics.append(topic)
        if node.children:
            kids = [walk(c, topic, level + 1, i) for i, c in enumerate(node.children)]
            topic.message_count = sum(k.message_count for k in kids)
            topic.token_count = sum(k.token_count for k in kids)
            topic.period_start = kids[0].period_start
            topic.period_end = kids[-1].period_end
            biggest = sorted(kids, key=lambda k: -k.message_count)
            topic.sample_message_ids = [
                k.sample_message_ids[0] for k in biggest[:3] if k.sample_message_ids
            ]
            topic.summary = (
                f"{len(kids)} subtopics: "
                + "; ".join(k.label for k in kids[:8])
                + (f". Largest: {biggest[0].summary}" if biggest[0].summary else "")
            )[:1000]
        else:
            topic.message_count = len(node.messages)
            topic.token_count = sum(m[3] for m in node.messages)
            topic.period_start = node.messages[0][2]
            topic.period_end = node.messages[-1][2]
            topic.sample_message_ids = _leaf_samples(node)
            texts = {m[0]: m[4] for m in node.messages}
            topic.summary = " … ".join(first_sentence(texts[i]) for i in topic.sample_message_ids)[
                :1000
            ]
            c = centroid
            vec_by_id = dict(node.vectors)
            for m in node.messages:
                v = vec_by_id.get(m[0])
                score = float(np.dot(v, c)) if v is not None and c is not None else 0.0
                memberships.append(
                    TopicMembership(owner_id=owner.pk, topic=topic, message_id=m[0], score=score)
                )
        return topic

    for i, node in enumerate(top):
        walk(node, None, 0, i)
    return topics, memberships


_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9'’\-]*")


def label_from(keywords: Sequence[str], texts: Sequence[str] = ()) -> str:
    """A 2-5 word name for a topic, extractive: the phrase of its messages that
    holds the most of its keywords (the best-ranked weighing most), as written there; without
    texts, or when no phrase holds two keywords, its two best keywords ("Tulips and roses")."""
    weight = {k: 1 / (1 + i) for i, k in enumerate(keywords[:8])}
    best: tuple[float, int, str] | None = None
    for text in list(texts)[:40]:
        tokens = _TOKEN.findall(text[:3000])
        lowered = [t.lower() for t in tokens]
        for n in range(2, 6):
            for i in range(len(tokens) - n + 1):
                window = lowered[i : i + n]
                if window[0] in _STOP or window[-1] in _STOP:
                    continue
                found = {w for w in window if w in weight}
                if len(found) < 2:
                    continue
                score = sum(weight[w] for w in found)
                phrase = " ".join(tokens[i : i + n])
                key = (score, -n, phrase)
                if best is None or key[:2] > best[:2]:
                    best = key
    if best is not None:
        phrase = best[2]
        return phrase[0].upper() + phrase[1:]
    if not keywords:
        return "(untitled)"
    first = keywords[0][0].upper() + keywords[0][1:]
    return f"{first} and {keywords[1]}" if len(keywords) > 1 else first


def layout(owner) -> None:
    """Place topics on a 2-D map: the first two principal components of their centroids."""
    topics = [
        t for t in Topic.objects.owned_by(owner).only("id", "centroid") if t.centroid is not None
    ]
    if not topics:
        return
    matrix = np.array([np.asarray(t.centroid, dtype=np.float32) for t in topics])
    centred = matrix - matrix.mean(axis=0)
    if len(topics) >= 2:
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        coords = centred @ vt[:2].T
        if coords.shape[1] < 2:
            coords = np.hstack([coords, np.zeros((len(topics), 1))])
    else:
        coords = np.zeros((1, 2))
    lo, hi = coords.min(axis=0), coords.max(axis=0)
    span = np.where(hi - lo == 0, 1, hi - lo)
    coords = (coords - lo) / span
    for t, (x, y) in zip(topics, coords, strict=True):
        t.map_x, t.map_y = float(x), float(y)
    Topic.objects.bulk_update(topics, ["map_x", "map_y"], batch_size=500)


# --- incremental upkeep ------------------------------------------------------------------------


def leaves_qs(owner):
    return Topic.objects.owned_by(owner).filter(children__isnull=True)


def assign_messages(owner, message_ids: Sequence[str]) -> dict:
    """Put new visible messages into the nearest leaf (or a new leaf); returns what was done."""
    existing = set(
        TopicMembership.objects.owned_by(owner)
        .filter(message_id__in=list(message_ids))
        .values_list("message_id", flat=True)
    )
    messages = list(
        Message.objects.visible_to(owner)
        .logical()
        .filter(pk__in=[m for m in message_ids if m not in existing])
        .order_by("timestamp", "position")
    )
    vectors = message_vectors(owner, [m.pk for m in messages])
    joined = created = 0
    touched: set[str] = set()
    gap = dt.timedelta(minutes=settings.SESSION_IDLE_MINUTES)
    cut_similarity = _thresholds()[1]
    for message in messages:
        vec = vectors.get(message.pk)
        target = None
        latest = leaves_qs(owner).order_by("-period_end").first()
        if (
            latest is not None
            and latest.period_end
            and message.timestamp - latest.period_end <= gap
        ):
            sim = _similarity(
                vec, parse_vector(latest.centroid) if latest.centroid is not None else None
            )
            if sim is None or sim >= cut_similarity:
                target = latest
        home = None  # the topic whose newest leaf the message belongs after
        if target is None and vec is not None:
            nearest = _nearest_leaf(owner, vec)
            if nearest is not None:
                # Leaves stay in time order: only the topic's newest leaf takes a new message;
                # an older one that is nearer gets a new leaf after it, under the same topic.
                newest = leaves_qs(owner).filter(parent_id=nearest.parent_id).order_by("-period_end").first()
                if newest is not None and newest.pk == nearest.pk:
                    target = nearest
                else:
                    home = nearest
        if target is not None and target.message_count >= LEAF_MAX * 2:
            target = None
        if target is None:
            target = _new_leaf(owner, home or latest)
            created += 1
        else:
            joined += 1
        _join(target, message, vec)
        touched.add(target.pk)
    if touched:
        # New messages do not make a model-written summary of a parent wrong; edits and deletes
        # (refresh) do, and rewrite it.
        _refresh_ancestors(owner, touched, rewrite_summaries=False)
        if created:
            _rebalance(owner)
            layout(owner)
    return {"joined": joined, "created": created, "skipped": len(existing)}


def _nearest_leaf(owner, vec: np.ndarray) -> Topic | None:
    leaf = (
        leaves_qs(owner)
        .exclude(centroid=None)
        .annotate(distance=CosineDistance("centroid", vec.tolist()))
        .order_by("distance")
        .first()
    )
    if leaf is not None and 1 - leaf.distance >= _thresholds()[0]:
        return leaf
    return None


def _new_leaf(owner, latest: Topic | None) -> Topic:
    parent = latest.parent if latest is not None else None
    siblings = Topic.objects.owned_by(owner).filter(parent=parent)
    order = (siblings.order_by("-order").values_list("order", flat=True).first() or 0) + 1
    return Topic.objects.create(
        owner_id=owner.pk,
        parent=parent,
        level=latest.level if latest else 0,
        order=order,
        label="(new topic)",
        keywords=[],
    )


def _join(topic: Topic, message: Message, vec: np.ndarray | None) -> None:
    n = topic.message_count
    if vec is not None:
        old = parse_vector(topic.centroid) if topic.centroid is not None else None
        topic.centroid = (unit(old * n + vec) if old is not None and n else vec).tolist()
    topic.message_count = n + 1
    topic.token_count += message.token_count
    topic.period_start = min(filter(None, [topic.period_start, message.timestamp]))
    topic.period_end = max(filter(None, [topic.period_end, message.timestamp]))
    if len(topic.sample_message_ids) < 3:
        topic.sample_message_ids = [*topic.sample_message_ids, message.pk]
    if not topic.summary or topic.label == "(new topic)":
        topic.keywords = [w for w, _ in Counter(words(message.content)).most_common(8)]
        topic.label = label_from(topic.keywords, [message.content])
        topic.summary = first_sentence(message.content)
    topic.save()
    TopicMembership.objects.get_or_create(
        owner_id=topic.owner_id,
        topic=topic,
        message=message,
        defaults={
            "score": float(np.dot(vec, parse_vector(topic.centroid))) if vec is not None else 0.0
        },
    )


def _refresh_ancestors(owner, topic_ids: Iterable[str], *, rewrite_summaries: bool = True) -> None:
    """Recompute counts, periods and centroids of the ancestors of these topics, bottom-up."""
    parents = set(
        Topic.objects.owned_by(owner)
        .filter(pk__in=list(topic_ids))
        .exclude(parent=None)
        .values_list("parent_id", flat=True)
    )
    while parents:
        next_parents = set()
        for parent in Topic.objects.owned_by(owner).filter(pk__in=parents):
            kids = list(parent.children.order_by("order"))
            if not kids:
                parent.delete()
                continue
            parent.message_count = sum(k.message_count for k in kids)
            parent.token_count = sum(k.token_count for k in kids)
            starts = [k.period_start for k in kids if k.period_start]
            ends = [k.period_end for k in kids if k.period_end]
            parent.period_start = min(starts) if starts else None
            parent.period_end = max(ends) if ends else None
            vecs = [
                parse_vector(k.centroid) * k.message_count for k in kids if k.centroid is not None
            ]
            parent.centroid = unit(np.sum(vecs, axis=0)).tolist() if vecs else None
            terms: Counter = Counter()
            for k in kids:
                for i, w in enumerate(k.keywords):
                    terms[w] += k.message_count / (1 + i)
            parent.keywords = [w for w, _ in terms.most_common(8)]
            parent.label = label_from(parent.keywords)
            if rewrite_summaries or parent.summary_source != "llm":
                parent.summary = (f"{len(kids)} subtopics: " + "; ".join(k.label for k in kids[:8]))[
                    :1000
                ]
                parent.summary_source = "extractive"
            biggest = sorted(kids, key=lambda k: -k.message_count)
            parent.sample_message_ids = [
                k.sample_message_ids[0] for k in biggest[:3] if k.sample_message_ids
            ]
            parent.save()
            if parent.parent_id:
                next_parents.add(parent.parent_id)
        parents = next_parents


def _rebalance(owner) -> None:
    """Keep every level within TOPIC_MAX_CHILDREN: an over-full set of siblings moves under a
    new parent of its own (the tree grows upward)."""
    max_children = settings.TOPIC_MAX_CHILDREN
    for _ in range(8):
        crowded = (
            Topic.objects.owned_by(owner)
            .values("parent_id")
            .annotate(n=Count("id"))
            .filter(n__gt=max_children)
            .first()
        )
        if crowded is None:
            return
        parent_id = crowded["parent_id"]
        siblings = list(
            Topic.objects.owned_by(owner)
            .filter(parent_id=parent_id)
            .order_by("order", "period_start")
        )
        # Fold the oldest siblings into one new node, keeping the newest ones where they are.
        keep = max_children // 2
        fold = siblings[: len(siblings) - keep]
        base_level = siblings[0].level
        new = Topic.objects.create(
            owner_id=owner.pk,
            parent_id=parent_id,
            level=base_level,
            order=fold[0].order,
            label="(group)",
        )
        Topic.objects.filter(pk__in=[t.pk for t in fold]).update(parent=new)
        _shift_levels(owner, [t.pk for t in fold])
        _refresh_ancestors(owner, [fold[0].pk])


def _shift_levels(owner, topic_ids: list[str]) -> None:
    ids = topic_ids
    while ids:
        Topic.objects.owned_by(owner).filter(pk__in=ids).update(level=F("level") + 1)
        ids = list(
            Topic.objects.owned_by(owner).filter(parent_id__in=ids).values_list("pk", flat=True)
        )


def refresh(owner, topic_ids: Iterable[str]) -> dict:
    """Re-derive leaves from their visible members (after edits and deletes); empty leaves go."""
    topic_ids = set(topic_ids)
    refreshed = removed = 0
    for topic in Topic.objects.owned_by(owner).filter(pk__in=topic_ids, children__isnull=True):
        members = list(
            Message.objects.visible_to(owner)
            .filter(topic_memberships__topic=topic)
            .order_by("timestamp", "position")
        )
        TopicMembership.objects.filter(topic=topic, message__deleted=True).delete()
        if not members:
            parent_id = topic.parent_id
            topic.delete()
            removed += 1
            if parent_id:
                _refresh_ancestors(
                    owner,
                    list(Topic.objects.filter(parent_id=parent_id).values_list("pk", flat=True))
                    or [],
                )
                _prune_empty(owner)
            continue
        vectors = message_vectors(owner, [m.pk for m in members])
        node = _Node()
        for m in members:
            node.add(
                (m.pk, m.conversation_id, m.timestamp, m.token_count, m.content[:4000]),
                vectors.get(m.pk),
            )
            node.terms.update(set(words(m.content)))
        doc_freq = Counter()
        for other in leaves_qs(owner).exclude(pk=topic.pk).values_list("keywords", flat=True):
            doc_freq.update(set(other))
        n_docs = max(1, leaves_qs(owner).count())
        topic.keywords = _keywords(node.terms, doc_freq, n_docs)
        topic.label = label_from(topic.keywords, [m.content for m in members[-40:]])
        c = node.centroid()
        topic.centroid = c.tolist() if c is not None else None
        topic.message_count = len(members)
        topic.token_count = sum(m.token_count for m in members)
        topic.period_start, topic.period_end = members[0].timestamp, members[-1].timestamp
        topic.sample_message_ids = _leaf_samples(node)
        texts = {m.pk: m.content for m in members}
        topic.summary = " … ".join(first_sentence(texts[i]) for i in topic.sample_message_ids)[
            :1000
        ]
        topic.summary_source = "extractive"
        topic.save()
        _refresh_ancestors(owner, [topic.pk])
        refreshed += 1
    return {"refreshed": refreshed, "removed": removed}


def _prune_empty(owner) -> None:
    while True:
        empty = Topic.objects.owned_by(owner).filter(
            children__isnull=True, memberships__isnull=True
        )
        if not empty.exists():
            return
        empty.delete()


def topics_mentioning(owner, message_ids: Iterable[str]) -> set[str]:
    """Topics that hold these messages or show them as samples (for refresh after edits)."""
    message_ids = list(message_ids)
    found = set(
        TopicMembership.objects.owned_by(owner)
        .filter(message_id__in=message_ids)
        .values_list("topic_id", flat=True)
    )
    for mid in message_ids:
        found.update(
            Topic.objects.owned_by(owner)
            .filter(sample_message_ids__contains=[mid])
            .values_list("pk", flat=True)
        )
    return found


# --- periods -----------------------------------------------------------------------------------

PERIODS = ("today", "this_week", "this_month", "older")


def period_bounds(
    now: dt.datetime | None = None,
) -> dict[str, tuple[dt.datetime | None, dt.datetime | None]]:
    """Disjoint periods: today, the rest of this week, the rest of this month, and older."""
    now = timezone.localtime(now or timezone.now())
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    week = today - dt.timedelta(days=today.weekday())
    month = today.replace(day=1)
    week_start = min(week, today)
    month_start = min(month, week_start)
    return {
        "today": (today, None),
        "this_week": (week_start, today),
        "this_month": (month_start, week_start),
        "older": (None, month_start),
    }


def update_period_summaries(owner, now: dt.datetime | None = None) -> list[PeriodSummary]:
    out = []
    for period, (start, end) in period_bounds(now).items():
        qs = Message.objects.visible_to(owner).logical()
        if start:
            qs = qs.filter(timestamp__gte=start)
        if end:
            qs = qs.filter(timestamp__lt=end)
        count = qs.count()
        tq = TopicMembership.objects.owned_by(owner).filter(message__deleted=False)
        if start:
            tq = tq.filter(message__timestamp__gte=start)
        if end:
            tq = tq.filter(message__timestamp__lt=end)
        top = list(tq.values("topic_id", "topic__label").annotate(n=Count("id")).order_by("-n")[:5])
        top_topics = [
            {"id": t["topic_id"], "label": t["topic__label"], "count": t["n"]} for t in top
        ]
        summary = f"{count} messages" + (
            ": mostly " + "; ".join(f"{t['label']} ({t['count']})" for t in top_topics[:3])
            if top_topics
            else ""
        )
        row, _ = PeriodSummary.objects.update_or_create(
            owner_id=owner.pk,
            period=period,
            defaults={
                "start": start,
                "end": end,
                "message_count": count,
                "summary": summary,
                "top_topics": top_topics,
            },
        )
        out.append(row)
    return out
