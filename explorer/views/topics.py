"""The topic tree: one level of it with each topic's activity and its map, and one topic."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from explorer import charts
from explorer.views.common import MAX_ID, paginate, render_page
from memory.models import Message, Topic
from memory.organizing import summaries, topic_tree

SPARK_BUCKETS = 24


def _get_topic_for_user(user, topic_id: str) -> Topic:
    topic = Topic.objects.owned_by(user).filter(pk=topic_id).first() if len(topic_id) <= MAX_ID else None
    if topic is None:
        raise Http404("no such topic")
    return topic


def _time_range(user) -> tuple[dt.datetime, dt.datetime] | None:
    qs = Message.objects.visible_to(user).logical()
    first = qs.order_by("timestamp").values_list("timestamp", flat=True).first()
    last = qs.order_by("-timestamp").values_list("timestamp", flat=True).first()
    if first is None or last is None:
        return None
    return first, last


def _sparklines(
    user, topics: list[Topic], span: tuple[dt.datetime, dt.datetime] | None
) -> dict[str, charts.Sparkline]:
    """Activity of each topic over the memory's time span, in equal buckets (read from the
    topic tree, not the messages: see memory.organizing.topic_tree.activity)."""
    if not topics or span is None:
        return {}
    values = topic_tree.activity(
        user, [t.pk for t in topics], span[0].timestamp(), span[1].timestamp() + 1, SPARK_BUCKETS
    )
    empty = [0.0] * SPARK_BUCKETS
    return {t.pk: charts.sparkline([round(x) for x in values.get(t.pk, empty)]) for t in topics}


SUBTOPICS_SHOWN = 6


def _topic_rows(user, topics: list[Topic], sparks: dict[str, charts.Sparkline]) -> list[dict[str, Any]]:
    """What a topic's row shows besides its label: when (as a person writes it), its activity,
    and its first subtopics by name, so the list reads as the tree it is."""
    kids: dict[str, list[Topic]] = {t.pk: [] for t in topics}
    for kid in (
        Topic.objects.owned_by(user)
        .filter(parent_id__in=list(kids))
        .order_by("order", "period_start", "id")
        .only("id", "parent_id", "label")
    ):
        kids[kid.parent_id].append(kid)
    return [
        {
            "topic": t,
            "spark": sparks.get(t.pk),
            "period": summaries.period_text(t.period_start, t.period_end),
            "subtopics": kids[t.pk][:SUBTOPICS_SHOWN],
            "more_subtopics": max(0, len(kids[t.pk]) - SUBTOPICS_SHOWN),
            "subtopic_count": len(kids[t.pk]),
        }
        for t in topics
    ]


@login_required
@require_GET
@vary_on_headers("HX-Request")
def topics(request: HttpRequest) -> HttpResponse:
    user = request.user
    errors: list[str] = []
    levels = list(Topic.objects.owned_by(user).values("level").annotate(n=Count("id")).order_by("level"))
    level_numbers = [row["level"] for row in levels]
    raw_level = request.GET.get("level", "").strip()
    level = level_numbers[0] if level_numbers else 0
    if raw_level:
        try:
            wanted = int(raw_level)
        except ValueError:
            errors.append(f"“{raw_level[:40]}” is not a level number; showing level {level}.")
        else:
            if wanted in level_numbers:
                level = wanted
            else:
                errors.append(f"There is no level {wanted} in your topic tree; showing level {level}.")
    qs = Topic.objects.owned_by(user).filter(level=level).order_by("order", "period_start", "id")
    page = paginate(request, qs)
    span = _time_range(user)
    sparks = _sparklines(user, list(page.object_list), span)
    rows = _topic_rows(user, list(page.object_list), sparks)
    map_topics = list(
        Topic.objects.owned_by(user)
        .filter(level=level)
        .order_by("-message_count")
        .only("id", "label", "message_count", "map_x", "map_y")[:150]
    )
    topic_map = charts.topic_map(
        [
            (t.label, t.message_count, reverse("explorer:topic", args=[t.pk]), t.map_x, t.map_y)
            for t in map_topics
        ]
    )
    context = {
        "section": "topics",
        "errors": errors,
        "levels": levels,
        "level": level,
        "page": page,
        "rows": rows,
        "topic_map": topic_map,
        "map_truncated": len(map_topics) == 150,
        "span": span,
    }
    return render_page(request, "explorer/topics.html", "topic-list", context)


@login_required
@require_GET
@vary_on_headers("HX-Request")
def topic_detail(request: HttpRequest, topic_id: str) -> HttpResponse:
    user = request.user
    topic = _get_topic_for_user(user, topic_id)
    children_page = paginate(
        request, topic.children.order_by("order", "period_start", "id"), param="cpage", per_page=20
    )
    messages_page = paginate(request, topic_tree.TopicMessages(user, topic))
    sparks = _sparklines(user, [topic, *children_page.object_list], _time_range(user))
    context = {
        "section": "topics",
        "topic": topic,
        "ancestors": topic_tree.ancestors(user, topic),
        "children_page": children_page,
        "children": _topic_rows(user, list(children_page.object_list), sparks),
        "spark": sparks.get(topic.pk),
        "period": summaries.period_text(topic.period_start, topic.period_end),
        "messages_page": messages_page,
    }
    return render_page(request, "explorer/topic.html", "topic-messages", context)
