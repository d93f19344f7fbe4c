"""Walks of one owner's topic tree: what lies below a topic, what lies above it, the messages
filed under it and how its activity spreads over time.

Every walk starts from the owner's own topics, so another user's topic id yields nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Exists, OuterRef

from memory.models import Message, Topic, TopicMembership

# How many topics a walk down the tree reads at the most (the tree is TOPIC_MAX_CHILDREN wide).
DESCENDANTS_MAX = 20000
ANCESTORS_MAX = 20


def descendant_ids(owner, topic: Topic) -> list[str]:
    """The topic and everything below it, if the topic is the owner's (else nothing)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE tree(id) AS (SELECT id FROM memory_topic WHERE id = %s AND owner_id = %s "
            "UNION ALL SELECT t.id FROM memory_topic t JOIN tree ON t.parent_id = tree.id) "
            "SELECT id FROM tree LIMIT %s",
            [topic.pk, owner.pk, DESCENDANTS_MAX],
        )
        return [r[0] for r in cursor.fetchall()]


def ancestors(owner, topic: Topic) -> list[Topic]:
    """The owner's topics above `topic`, the root first (id, label and parent only)."""
    found: list[Topic] = []
    parent_id = topic.parent_id
    while parent_id and len(found) < ANCESTORS_MAX:
        parent = Topic.objects.owned_by(owner).filter(pk=parent_id).only("id", "label", "parent_id").first()
        if parent is None:
            break
        found.insert(0, parent)
        parent_id = parent.parent_id
    return found


def in_topic(owner, topic: Topic) -> Exists:
    """A Message filter: membership in the topic or a topic below it, as EXISTS: an
    IN-subquery over a big topic is materialised in full and keeps Postgres from walking the
    timestamp index in order."""
    return Exists(
        TopicMembership.objects.owned_by(owner).filter(
            message_id=OuterRef("pk"), topic_id__in=descendant_ids(owner, topic)
        )
    )


class TopicMessages:
    """A topic's visible messages (its own and those of the topics below it) in time order,
    for a paginator, read from its memberships.

    Ordering the whole memory by time and keeping the members (what Postgres picks for a
    LIMIT) is fast for a topic at the start of the memory and slow for one at its end; reading
    the members first (a materialised CTE) costs the same wherever the topic lies.
    """

    _MEMBERS = (
        "WITH members AS MATERIALIZED (SELECT DISTINCT message_id FROM memory_topicmembership"
        " WHERE owner_id = %s AND topic_id = ANY(%s)) "
    )
    _LIVE = (
        "FROM members JOIN memory_message m ON m.id = members.message_id"
        " WHERE m.owner_id = %s AND NOT m.deleted AND NOT m.is_chunk"
    )

    def __init__(self, owner, topic: Topic) -> None:
        self.owner = owner
        self.topic_ids = descendant_ids(owner, topic)

    def _rows(self, sql: str, params: list[Any]) -> list[tuple]:
        with connection.cursor() as cursor:
            cursor.execute(self._MEMBERS + sql, [self.owner.pk, self.topic_ids, *params])
            return cursor.fetchall()

    def capped_count(self, cap: int) -> int:
        members = self._rows("SELECT count(*) FROM (SELECT 1 FROM members LIMIT %s) s", [cap + 1])[0][0]
        if members > cap:
            return members  # more than the cap: the paginator says "more than", exactly as wanted
        return self._rows(f"SELECT count(*) {self._LIVE}", [self.owner.pk])[0][0]

    def __getitem__(self, window: slice) -> list[Message]:
        start, stop = window.start or 0, window.stop
        ids = [
            r[0]
            for r in self._rows(
                f"SELECT m.id {self._LIVE} ORDER BY m.timestamp, m.id LIMIT %s OFFSET %s",
                [self.owner.pk, max(0, stop - start), start],
            )
        ]
        found = Message.objects.visible_to(self.owner).select_related("conversation").in_bulk(ids)
        return [found[i] for i in ids if i in found]


def activity(owner, topic_ids: list[str], start: float, end: float, buckets: int) -> dict[str, list[float]]:
    """How many messages each topic holds in each of `buckets` equal spans of the epoch
    seconds [start, end).

    Read from the leaf topics below each one (their period and size), never from the messages
    themselves: a top-level topic of 100,000 messages costs as little as a leaf. Each leaf's
    messages are spread evenly over its period, which the temporally ordered tree keeps short.
    Topics that are not the owner's get no row.
    """
    width = max(1.0, end - start) / buckets
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE tree(root, id) AS ("
            " SELECT id, id FROM memory_topic WHERE owner_id = %s AND id = ANY(%s)"
            " UNION ALL SELECT tree.root, t.id FROM memory_topic t"
            " JOIN tree ON t.parent_id = tree.id)"
            " SELECT tree.root, extract(epoch FROM t.period_start)::float8,"
            " extract(epoch FROM coalesce(t.period_end, t.period_start))::float8, t.message_count"
            " FROM tree JOIN memory_topic t ON t.id = tree.id"
            " WHERE t.period_start IS NOT NULL"
            " AND NOT EXISTS (SELECT 1 FROM memory_topic c WHERE c.parent_id = t.id)",
            [owner.pk, list(topic_ids)],
        )
        rows = cursor.fetchall()
    values: dict[str, list[float]] = {}
    for root, first_at, last_at, count in rows:
        first = min(max(int((first_at - start) // width), 0), buckets - 1)
        last = min(max(int((last_at - start) // width), first), buckets - 1)
        share = (count or 0) / (last - first + 1)
        spread = values.setdefault(root, [0.0] * buckets)
        for b in range(first, last + 1):
            spread[b] += share
    return values
