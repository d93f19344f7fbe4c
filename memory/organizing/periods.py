"""Period summaries: how many messages today, the rest of this week, the rest of this month and
before, and the topics they mostly belong to (kept fresh by background upkeep)."""

from __future__ import annotations

import datetime as dt

from django.db.models import Count
from django.utils import timezone

from memory.models import Message, PeriodSummary, TopicMembership
from memory.organizing import labels

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
        summary = labels.count_of(count, "message") + (
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
