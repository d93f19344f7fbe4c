"""Topic upkeep between rebuilds: new messages join the nearest leaf (or start one), a level
that grows past TOPIC_MAX_CHILDREN moves under a new parent, and topics whose messages were
edited or deleted are derived again (memory.organizing.topics builds the whole tree)."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from django.conf import settings
from django.db.models import Count, F
from pgvector.django import CosineDistance

from memory.models import Message, Topic, TopicMembership
from memory.organizing import labels, summaries
from memory.organizing.topics import (
    LEAF_MAX,
    MIN_LEAF,
    _describe,
    _leaf_samples,
    _leaf_summary,
    _Node,
    _row,
    _similarity,
    _thresholds,
    as_written,
    layout,
    message_vectors,
    name_parent,
    parse_vector,
    unit,
)


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
        .sources()
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
            # As a rebuild cuts runs: a run shorter than MIN_LEAF takes the next message of its
            # session whatever it says (a short chat is one topic, not one per message).
            if sim is None or sim >= cut_similarity or latest.message_count < MIN_LEAF:
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
        _join(owner, target, message, vec)
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


def _join(owner, topic: Topic, message: Message, vec: np.ndarray | None) -> None:
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
    topic.save()
    TopicMembership.objects.get_or_create(
        owner_id=topic.owner_id,
        topic=topic,
        message=message,
        defaults={
            "score": float(np.dot(vec, parse_vector(topic.centroid))) if vec is not None else 0.0
        },
    )
    # Named again as it grows (at 1, 2, 4, 8, ... messages): often enough to follow what it
    # became, seldom enough that upkeep stays cheap. A model-written name and summary stay.
    if _doubled(n, n + 1) and topic.summary_source != "llm":
        _redescribe(owner, topic)


def _doubled(before: int, after: int) -> bool:
    """A count went past a power of two (1, 2, 4, 8, ...)."""
    return after > 0 and (before <= 0 or int(math.log2(after)) > int(math.log2(before)))


def _leaf_doc_freq(owner, exclude: str | None = None) -> tuple[Counter, int]:
    """How many of the owner's leaves have each keyword (what sets a topic's words apart)."""
    doc_freq: Counter = Counter()
    n = 0
    for kws in leaves_qs(owner).exclude(pk=exclude).values_list("keywords", flat=True):
        doc_freq.update(set(kws))
        n += 1
    return doc_freq, max(1, n + 1)


def _sibling_labels(topic: Topic) -> list[str]:
    siblings = Topic.objects.filter(owner_id=topic.owner_id, parent_id=topic.parent_id).exclude(pk=topic.pk)
    taken = list(siblings.values_list("label", flat=True))
    if topic.parent_id:
        taken += list(Topic.objects.filter(pk=topic.parent_id).values_list("label", flat=True))
    return [t for t in taken if t not in ("(new topic)", "(group)") and not labels.is_period_label(t)]


def _redescribe(
    owner, topic: Topic, members: Sequence[Message] | None = None, node: _Node | None = None
) -> None:
    """Name a leaf again from its members (the messages memory learns from), distinct from its
    siblings, with new keywords and an extractive summary."""
    if node is None:
        if members is None:
            members = list(
                Message.objects.visible_to(owner).sources()
                .filter(topic_memberships__topic=topic)
                .order_by("timestamp", "position")
            )
        vectors = message_vectors(owner, [m.pk for m in members])
        node = _Node()
        for m in members:
            node.add(_row(m), vectors.get(m.pk))
    if not node.messages:
        return
    doc_freq, n_docs = _leaf_doc_freq(owner, exclude=topic.pk)
    _describe([node], doc_freq, n_docs)
    _name(topic, node.options, node.keywords, node.by_period)
    topic.summary = _leaf_summary(node, doc_freq, n_docs)
    topic.summary_source = "extractive"
    topic.save(update_fields=["label", "keywords", "summary", "summary_source", "updated_at"])


def _name(topic: Topic, options: list[str], keywords: list[str], by_period: bool = False) -> None:
    topic.keywords = keywords
    taken = _sibling_labels(topic)
    free = [o for o in options if not any(labels.same_label(o, t) for t in taken)]
    [topic.label] = labels.distinct_labels(
        [options if by_period else free or options or [labels.fallback_label(keywords)]],
        [summaries.period_text(topic.period_start, topic.period_end)],
        [by_period],
    )
    if by_period and Topic.objects.filter(
        owner_id=topic.owner_id, parent_id=topic.parent_id, label=topic.label
    ).exclude(pk=topic.pk).exists():
        topic.label = f"{topic.label} ({summaries.period_text(topic.period_start, topic.period_end)})"
    topic.label = topic.label[:200]


def _subjects(topic: Topic, phrases: labels.Phrases) -> list[str]:
    return labels.period_subjects(topic.label) or [as_written(topic.label, phrases)]


def _parent_phrases(owner, kids: Sequence[Topic]) -> labels.Phrases:
    """A parent's phrases, from its children's sample messages (a few each)."""
    ids = [i for k in kids for i in k.sample_message_ids[:3]]
    texts = list(
        Message.objects.visible_to(owner).sources().filter(pk__in=ids).values_list("content", flat=True)
    )
    return labels.phrases_of(texts)


def _refresh_ancestors(owner, topic_ids: Iterable[str], *, rewrite_summaries: bool = True) -> None:
    """Recompute counts, periods and centroids of the ancestors of these topics, bottom-up.
    rewrite_summaries (after an edit or delete): every name and summary is derived again, so no
    removed text stays in them; otherwise (new messages) a parent is named again when its size
    passes a power of two, and a model-written name and summary stay."""
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
            before = parent.message_count
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
            biggest = sorted(kids, key=lambda k: -k.message_count)
            parent.sample_message_ids = [
                k.sample_message_ids[0] for k in biggest[:3] if k.sample_message_ids
            ]
            keep = parent.summary_source == "llm" and not rewrite_summaries
            if not keep:
                parent.summary = summaries.parent_summary(parent, kids)
                parent.summary_source = "extractive"
            if not keep and (
                rewrite_summaries or parent.label == "(group)" or _doubled(before, parent.message_count)
            ):
                node = _Node(phrases=_parent_phrases(owner, kids))
                node.vec_sum, node.vec_n = (np.asarray(parent.centroid), 1) if parent.centroid else (None, 0)
                doc_freq, n_docs = _leaf_doc_freq(owner)
                _describe([node], doc_freq, n_docs)
                kid_labels = [k.label for k in kids]
                options = [o for o in node.options if not any(labels.same_label(o, k) for k in kid_labels)]
                options, _, by_period = name_parent(
                    [as_written(o, node.phrases) for o in options or node.options],
                    [(k.message_count, [k.label], k.keywords, _subjects(k, node.phrases)) for k in kids],
                    parent.period_start, parent.period_end,
                )
                _name(parent, options if by_period else [labels.capitalised(o) for o in options],
                      node.keywords, by_period)
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
            .sources()
            .filter(topic_memberships__topic=topic)
            .order_by("timestamp", "position")
        )
        # Deleted members go, and so do members found to only repeat memory since they joined.
        TopicMembership.objects.filter(topic=topic).exclude(message__in=members).delete()
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
            node.add(_row(m), vectors.get(m.pk))
        c = node.centroid()
        topic.centroid = c.tolist() if c is not None else None
        topic.message_count = len(members)
        topic.token_count = sum(m.token_count for m in members)
        topic.period_start, topic.period_end = members[0].timestamp, members[-1].timestamp
        topic.sample_message_ids = _leaf_samples(node)
        topic.save()
        _redescribe(owner, topic, node=node)
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
