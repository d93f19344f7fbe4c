"""The topic tree, without an LLM: what the memory index, the levels and the tree-walking
tools read.

Leaves are temporally ordered runs of messages about one thing: a run ends at an idle gap
or where the next message drifts away from the run's centroid. Inner nodes
group consecutive children, at most TOPIC_MAX_CHILDREN each, until the top level itself fits,
so a top-down walk reads a bounded number of nodes per level. Labels are extractive keywords
(tf-idf against the owner's other topics), summaries are the sentences nearest the centroid.

A full rebuild is background work (`rebuild`, the `rebuild_topics` task, `manage.py
build_topics`); between rebuilds, memory.organizing.topic_updates's `assign_messages` puts new
messages into the nearest leaf and its `refresh` re-derives topics whose messages were edited or
deleted. This module holds the full rebuild and what both build from: message vectors, leaves
as nodes, their labels and summaries, and the map layout.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db import connection, transaction

from memory.models import Message, Topic, TopicMembership
from memory.organizing import labels, summaries
from memory.organizing.periods import update_period_summaries

logger = logging.getLogger(__name__)

LEAF_MAX = 120  # messages per leaf; a longer run is cut so a leaf stays readable with one call
# An idle gap this long always ends a leaf: what was said on another day is another part of the
# story, even about the same thing (the tree groups such leaves under one parent), so a leaf's
# summary can say when it happened. Shorter gaps end a run only when the subject changes.
BREAK = dt.timedelta(hours=3)
# The cosine thresholds of the embedder in use (memory.embedders.Embedder.topic_*): a new
# message joins a leaf this close to it (join); inside a session, a message this far from the
# run starts a new leaf (cut); across an idle gap, a run continues only if this close (merge).


def _thresholds() -> tuple[float, float, float]:
    from memory.embedders import get_embedder

    e = get_embedder()
    join = settings.INDEX_CLUSTERING_THRESHOLD
    return (e.topic_join if join is None else join), e.topic_cut, e.topic_merge


MIN_LEAF = 3
LABEL_TEXTS = 60  # messages of a leaf read for its label (spread over the leaf)


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


# What a leaf keeps of each message: (id, conversation_id, timestamp, tokens, text, role, speaker).
ROW_FIELDS = ("id", "conversation_id", "timestamp", "token_count", "content", "role", "metadata__speaker")


def _row(m: Message) -> tuple:
    speaker = (m.metadata or {}).get("speaker")
    return (m.pk, m.conversation_id, m.timestamp, m.token_count, m.content[:4000], m.role, speaker)


@dataclass
class _Node:
    messages: list = field(default_factory=list)  # ROW_FIELDS tuples
    vectors: list = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)
    phrases: labels.Phrases | None = None
    vec_sum: np.ndarray | None = None
    vec_n: int = 0
    options: list[str] = field(default_factory=list)  # label candidates, best first
    keywords: list[str] = field(default_factory=list)
    # What it is about, as the words would run in a sentence ("moving house", "the React
    # dashboard"), biggest first: one subject, or a parent's main ones when it holds several.
    subjects: list[str] = field(default_factory=list)
    by_period: bool = False  # named for its period and main subjects (holds no one subject)

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

    def start(self):
        return self.children[0].start() if self.children else self.messages[0][2]

    def end(self):
        return self.children[-1].end() if self.children else self.messages[-1][2]


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
                or row[2] - prev[2] > BREAK
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


def _spread(items: Sequence, k: int) -> list:
    """At most k of `items`, evenly spread (a long leaf is named from all of it)."""
    if len(items) <= k:
        return list(items)
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]


def _phrase_vectors(phrases: Iterable[str]) -> dict[str, np.ndarray]:
    """The embedder's vectors of label candidates, in one call; none when it cannot embed (the
    labels then rest on statistics alone)."""
    from memory.embedders import get_embedder

    phrases = list(dict.fromkeys(phrases))
    if not phrases:
        return {}
    try:
        vectors = np.asarray(get_embedder().embed(phrases), dtype=np.float32)
    except Exception:  # noqa: BLE001 - a label without the embedder is still a label
        logger.exception("could not embed label candidates")
        return {}
    return {p: unit(v) for p, v in zip(phrases, vectors, strict=True)}


def _describe(nodes: Sequence[_Node], doc_freq: Counter, n_docs: int) -> None:
    """Keywords, label candidates (best first) and subjects of nodes whose children, if any, are
    described already: a leaf's from its messages, a parent's from its children's phrases. A
    parent whose candidates name no subject most of its messages share is named for its period
    and its main subjects ("May–June 2024: moving house, running, the React dashboard")."""
    pools = []
    for node in nodes:
        if node.children:
            node.phrases = labels.merge([c.phrases for c in node.children if c.phrases is not None])
        elif node.phrases is None:
            node.phrases = labels.phrases_of([m[4] for m in _spread(node.messages, LABEL_TEXTS)])
        node.keywords = node.phrases.keywords(doc_freq, n_docs)
        pools.append(labels.candidates(node.phrases, doc_freq, n_docs))
    vectors = _phrase_vectors(c.phrase for pool in pools for c in pool)
    for node, pool in zip(nodes, pools, strict=True):
        ranked = [c.phrase for c in labels.closest(pool, vectors, node.centroid())]
        fallback = labels.fallback_label(node.keywords)
        if fallback != "(untitled)" and fallback.lower() not in (r.lower() for r in ranked):
            ranked.append(fallback[:1].lower() + fallback[1:] if fallback[1:2].islower() else fallback)
        if node.children:
            kids = [(c.size(), c.options[:1], c.keywords, c.subjects) for c in node.children]
            ranked, node.subjects, node.by_period = name_parent(ranked, kids, node.start(), node.end())
        else:
            node.subjects = [as_written(r, node.phrases) for r in ranked[:1]]
        # A parent described from its children's phrases alone (topic upkeep) has no messages of
        # its own and is named by its caller: only a leaf is named for its day.
        if not node.children and node.messages:
            day = summaries.period_text(node.start(), node.end())
            if not ranked:  # "ok", "thanks!", "see you": no word names anything
                ranked = node.subjects = [f"Brief exchange, {day}"]
            elif all(labels.is_fragment(labels.capitalised(r)) for r in ranked):
                # A run of a few short messages: named for its day and its words ("3 May 2024: work").
                ranked = [f"{day}: {', '.join(ranked[:2])}"]
                node.by_period = True
        node.options = [r if node.by_period else labels.capitalised(r) for r in ranked]


def as_written(label: str, phrases: labels.Phrases) -> str:
    """A label as its words run in a sentence: "moving house" (its first letter was capitalised
    only to be a label, or only because a sentence began with it), while a name that is never
    written in lower case stays ("React dashboard")."""
    first = label.split(" ", 1)[0]
    lower = first[:1].lower() + first[1:]
    if lower == first:
        return label
    written = Counter(w for forms in phrases.surface.values() for form in forms for w in form.split()[:1])
    return label if written[lower] == 0 and written[first] > 0 else lower + label[len(first):]


# A parent is about one subject when a name of its own covers children holding this share of
# its messages; otherwise it is named for its period and its main subjects.
SUBJECT_SHARE = 0.6
MAIN_SUBJECTS = 3


def about(phrase: str, names: Sequence[str], keywords: Sequence[str]) -> bool:
    """A topic with these names (its label or best candidates) and keywords is about `phrase`:
    one of its names is the phrase to a reader, or its keywords hold every word of the phrase."""
    words = labels.label_key(phrase)
    return any(labels.same_label(phrase, n) for n in names) or words <= labels.label_key(" ".join(keywords))


def name_parent(
    options: Sequence[str], kids: Sequence[tuple[int, Sequence[str], Sequence[str], Sequence[str]]],
    start, end,
) -> tuple[list[str], list[str], bool]:
    """A parent's label options, subjects and whether it is named for its period, from its own
    candidates (best first, as the words run) and its children as (size, names, keywords,
    subjects): the candidates that cover SUBJECT_SHARE of its messages, or else one option, its
    period and its main subjects (the children's, biggest first)."""
    total = sum(size for size, *_ in kids) or 1

    def share(option: str) -> float:
        return sum(size for size, names, keywords, _ in kids if about(option, names, keywords)) / total

    covering = [
        o for o in options if not labels.is_fragment(labels.capitalised(o)) and share(o) >= SUBJECT_SHARE
    ]
    if covering:
        return covering, covering[:1], False
    weight: dict[str, int] = {}
    for size, _, _, subjects in kids:
        for rank, subject in enumerate(subjects[:MAIN_SUBJECTS]):
            same = next((s for s in weight if labels.same_label(s, subject)), subject)
            weight[same] = weight.get(same, 0) + size // (rank + 1)
    main = sorted(weight, key=lambda s: -weight[s])
    if not main:
        return list(options), list(options[:1]), False
    return [f"{summaries.month_span(start, end)}: {', '.join(main[:MAIN_SUBJECTS])}"], main, True


def _name_siblings(
    nodes: Sequence[_Node], taken: Sequence[str] = (), used: set[str] | None = None
) -> list[str]:
    """Labels for siblings: none the same as another's or as one of `taken` (their parent's),
    and where they can, none the same as one `used` elsewhere in the tree (added to it)."""
    used = set() if used is None else used

    def free(options: list[str], against: Iterable[str]) -> list[str]:
        against = list(against)
        return [o for o in options if not any(labels.same_label(o, t) for t in against)]

    groups = [
        n.options if n.by_period else free(n.options, [*taken, *used]) or free(n.options, taken) or n.options
        for n in nodes
    ]
    names = labels.distinct_labels(
        groups, [summaries.period_text(n.start(), n.end()) for n in nodes], [n.by_period for n in nodes]
    )
    # A name for a period lists subjects its subtopics are named for: it takes no name away.
    used.update(name for name, n in zip(names, nodes, strict=True) if not n.by_period)
    return names


def rebuild(owner, *, progress=None) -> dict:
    """Rebuild the owner's whole topic tree and period summaries from the messages memory
    learns from (Message.objects.sources(): not those that only repeat memory)."""
    Message.objects.visible_to(owner).flag_quotes()
    rows = list(
        Message.objects.visible_to(owner)
        .logical()
        .sources()
        .order_by("timestamp", "position")
        .values_list(*ROW_FIELDS)
    )
    rows = [(*r[:4], r[4][:4000], *r[5:]) for r in rows]
    if progress:
        progress(0)
    vectors = message_vectors(owner)
    leaves = segment(rows, vectors)
    for leaf in leaves:
        leaf.phrases = labels.phrases_of([m[4] for m in _spread(leaf.messages, LABEL_TEXTS)])
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
        doc_freq.update(set(leaf.phrases.words))
    n_docs = max(1, len(leaves))
    # Bottom-up, a level at a time (a parent reads its children's phrases), each level's label
    # candidates embedded in one call.
    levels: list[list[_Node]] = [list(top)]
    while any(n.children for n in levels[-1]):
        levels.append([c for n in levels[-1] for c in n.children])
    for level in reversed(levels):
        _describe(level, doc_freq, n_docs)
    topics: list[Topic] = []
    memberships: list[TopicMembership] = []

    def walk(node: _Node, parent: Topic | None, level: int, order: int, label: str) -> Topic:
        centroid = node.centroid()
        topic = Topic(
            owner_id=owner.pk,
            parent=parent,
            level=level,
            order=order,
            label=label[:200],
            keywords=node.keywords,
            centroid=centroid.tolist() if centroid is not None else None,
        )
        topics.append(topic)
        if node.children:
            names = _name_siblings(node.children, [] if node.by_period else [label], used)
            kids = [walk(c, topic, level + 1, i, names[i]) for i, c in enumerate(node.children)]
            topic.message_count = sum(k.message_count for k in kids)
            topic.token_count = sum(k.token_count for k in kids)
            topic.period_start = kids[0].period_start
            topic.period_end = kids[-1].period_end
            biggest = sorted(kids, key=lambda k: -k.message_count)
            topic.sample_message_ids = [
                k.sample_message_ids[0] for k in biggest[:3] if k.sample_message_ids
            ]
            topic.summary = summaries.parent_summary(topic, kids)
        else:
            topic.message_count = len(node.messages)
            topic.token_count = sum(m[3] for m in node.messages)
            topic.period_start = node.messages[0][2]
            topic.period_end = node.messages[-1][2]
            topic.sample_message_ids = _leaf_samples(node)
            topic.summary = _leaf_summary(node, doc_freq, n_docs)
            c = centroid
            vec_by_id = dict(node.vectors)
            for m in node.messages:
                v = vec_by_id.get(m[0])
                score = float(np.dot(v, c)) if v is not None and c is not None else 0.0
                memberships.append(
                    TopicMembership(owner_id=owner.pk, topic=topic, message_id=m[0], score=score)
                )
        return topic

    used: set[str] = set()
    names = _name_siblings(top, (), used)
    for i, node in enumerate(top):
        walk(node, None, 0, i, names[i])
    return topics, memberships


def _leaf_summary(node: _Node, doc_freq: Counter, n_docs: int) -> str:
    """What happened in a leaf, dated: its most telling sentences, who said them, in order."""
    c = node.centroid()
    vec_by_id = dict(node.vectors)
    said = [
        summaries.Said(
            timestamp=m[2],
            who=summaries.speaker_name(m[5], m[6]),
            text=m[4],
            closeness=float(np.dot(vec_by_id[m[0]], c)) if c is not None and m[0] in vec_by_id else 0.0,
        )
        for m in node.messages
    ]
    weights = dict(labels.ranked_words(node.phrases.words, doc_freq, n_docs))
    return summaries.extractive(said, weights, language=node.phrases.language)


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
