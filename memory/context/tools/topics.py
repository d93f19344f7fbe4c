"""The tools that walk the topic tree: view_topic top-down, the messages of a topic or cluster,
and the summaries of a stretch of memory."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from memory.context.tools.arguments import ID, LIMIT, OFFSET, position_time
from memory.context.tools.registry import tool
from memory.context.tools.shapes import child_counts, messages_page, page_of, topic_dict
from memory.errors import NotFound
from memory.models import Message, PeriodSummary, Topic
from memory.tokens import snip


def _descendant_leaves(owner, topic: Topic, cap: int = 2000) -> list[str]:
    ids, frontier, leaves = [topic.pk], [topic.pk], []
    while frontier and len(ids) < cap:
        kids = list(
            Topic.objects.owned_by(owner)
            .filter(parent_id__in=frontier)
            .values_list("pk", flat=True)
        )
        if not kids:
            break
        ids.extend(kids)
        frontier = kids
    return ids or leaves


def _topic(owner, ident: str) -> Topic:
    t = Topic.objects.owned_by(owner).filter(pk=ident).first()
    if t is None:
        t = (
            Topic.objects.owned_by(owner)
            .filter(label__iexact=ident)
            .order_by("-message_count")
            .first()
            or Topic.objects.owned_by(owner)
            .filter(label__icontains=ident)
            .order_by("-message_count")
            .first()
        )
    if t is None:
        raise NotFound("topic", ident)
    return t


@tool(
    "get_cluster",
    "Read the messages of a topic cluster (id from the index), oldest first.",
    {"cluster_id": ID, "limit": LIMIT, "offset": OFFSET},
    required=["cluster_id"],
    keywords=("cluster", "topic", "group"),
    label=lambda a: f"opened topic {snip(a['cluster_id'], 40)}" if a.get("cluster_id") else "",
)
def get_cluster(owner, *, cluster_id: str, limit: int = 20, offset: int = 0, conversation=None):
    return _topic_messages(owner, _topic(owner, cluster_id), limit, offset)


def _topic_messages(owner, topic: Topic, limit: int, offset: int):
    topic_ids = _descendant_leaves(owner, topic)
    qs = (
        Message.objects.visible_to(owner)
        .logical()
        .filter(topic_memberships__topic_id__in=topic_ids)
        .distinct()
        .order_by("timestamp", "position")
    )
    result, rows = messages_page(qs, limit, offset, topic=topic_dict(topic))
    return result, f'read {len(rows)} messages of topic "{snip(topic.label, 50)}"'


@tool(
    "view_topic",
    "Walk the topic tree top-down: without topic_id, the top-level topics; with "
    "one, that topic and its children (each with label, size, period and summary).",
    {"topic_id": ID},
    keywords=("topic", "topics", "overview", "tree", "browse", "subjects"),
)
def view_topic(owner, *, topic_id: str | None = None, conversation=None):
    limit = settings.TOPIC_MAX_CHILDREN * 2
    if topic_id:
        topic = _topic(owner, topic_id)
        kids = list(Topic.objects.owned_by(owner).filter(parent=topic).order_by("order")[:limit])
        node = topic_dict(topic)
        node["parent_id"] = topic.parent_id
        samples = Message.objects.visible_to(owner).filter(pk__in=topic.sample_message_ids[:3])
        node["samples"] = [{"id": m.pk, "snippet": snip(m.content)} for m in samples]
    else:
        node = {"id": None, "label": "(all memory)"}
        kids = list(Topic.objects.owned_by(owner).filter(parent=None).order_by("order")[:limit])
    counts = child_counts(owner, kids)
    node["children"] = [topic_dict(k, children=counts.get(k.pk, 0)) for k in kids]
    if not kids and not topic_id:
        node["note"] = "no topics yet; they are built in the background (manage.py build_topics)"
    return node, f'viewed topic "{snip(node["label"], 50)}" ({len(kids)} children)'


@tool(
    "get_topic_messages",
    "Read the messages of a topic (by id or label), oldest first.",
    {"topic": {"type": "string", "maxLength": 200}, "limit": LIMIT, "offset": OFFSET},
    required=["topic"],
    keywords=("topic", "messages"),
    label=lambda a: f"read the messages of topic {snip(a['topic'], 40)}" if a.get("topic") else "",
)
def get_topic_messages(owner, *, topic: str, limit: int = 20, offset: int = 0, conversation=None):
    return _topic_messages(owner, _topic(owner, topic), limit, offset)


@tool(
    "show_summaries",
    "Summaries of a stretch of memory: period summaries and the topics "
    "between two positions (message ids or dates; both optional).",
    {
        "start": {"type": "string", "maxLength": 40},
        "end": {"type": "string", "maxLength": 40},
        "limit": LIMIT,
        "offset": OFFSET,
    },
    keywords=("summary", "summaries", "summarise", "summarize", "overview", "happened", "recap"),
)
def show_summaries(
    owner,
    *,
    start: str | None = None,
    end: str | None = None,
    limit: int = 10,
    offset: int = 0,
    conversation=None,
):
    lo, hi = position_time(owner, start), position_time(owner, end, end=True)
    qs = Topic.objects.owned_by(owner).filter(children__isnull=True)
    if lo:
        qs = qs.filter(period_end__gte=lo)
    if hi:
        qs = qs.filter(period_start__lt=hi)
    rows, next_offset = page_of(qs.order_by("period_start"), limit, offset)
    result: dict[str, Any] = {"offset": offset, "summaries": [topic_dict(t) for t in rows]}
    if not start and not end:
        result["periods"] = [
            {"period": p.period, "messages": p.message_count, "summary": p.summary}
            for p in PeriodSummary.objects.owned_by(owner)
        ]
    if next_offset is not None:
        result["next_offset"] = next_offset
    if not rows:
        result["note"] = "no topic summaries in this range (topics are built in the background)"
    return result, f"showed {len(rows)} summaries"
