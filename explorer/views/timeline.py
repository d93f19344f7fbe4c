"""The timeline: message counts by day, week or month, and the messages of one period."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.db.models.functions import Trunc
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from explorer import charts
from explorer.filters import GRANULARITIES, day_start, parse_filters
from explorer.views.common import apply_message_filters, conversation_choices, paginate, render_page
from explorer.views.overview import temporal_overview
from memory.models import Message, Role

BUCKETS = {"day": 60, "week": 52, "month": 24}


def _bucket_start(day: dt.date, granularity: str) -> dt.date:
    if granularity == "week":
        return day - dt.timedelta(days=day.weekday())
    if granularity == "month":
        return day.replace(day=1)
    return day


def _next_bucket(day: dt.date, granularity: str) -> dt.date:
    if granularity == "day":
        return day + dt.timedelta(days=1)
    if granularity == "week":
        return day + dt.timedelta(days=7)
    return (day.replace(day=28) + dt.timedelta(days=4)).replace(day=1)


def _prev_bucket(day: dt.date, granularity: str) -> dt.date:
    if granularity == "day":
        return day - dt.timedelta(days=1)
    if granularity == "week":
        return day - dt.timedelta(days=7)
    return (day - dt.timedelta(days=1)).replace(day=1)


def _bucket_label(day: dt.date, granularity: str) -> str:
    if granularity == "month":
        return day.strftime("%Y-%m")
    if granularity == "week":
        return f"wk {day.isoformat()}"
    return day.isoformat()


@login_required
@require_GET
@vary_on_headers("HX-Request")
def timeline(request: HttpRequest) -> HttpResponse:
    user = request.user
    f = parse_filters(
        request.GET, user, {"conversation", "topic", "role", "start", "end", "granularity", "until", "period"}
    )
    errors = f.errors
    granularity = f.granularity
    base = apply_message_filters(user, Message.objects.visible_to(user).logical(), f)

    # The window of bars ends at `until` (default: the newest message), BUCKETS[granularity] wide.
    until = f.until
    if until is None and f.topic and f.topic.period_end:
        # A topic knows its period: no walk back through the whole memory to find its newest.
        until = timezone.localtime(f.topic.period_end).date()
    if until is None:
        newest = base.order_by("-timestamp").values_list("timestamp", flat=True).first()
        until = timezone.localtime(newest).date() if newest else timezone.localdate()
    try:
        last = _bucket_start(until, granularity)
        starts = [last]
        for _ in range(BUCKETS[granularity] - 1):
            starts.insert(0, _prev_bucket(starts[0], granularity))
        window_end = _next_bucket(last, granularity)
    except (OverflowError, ValueError):
        errors.append("That date is out of range; showing the newest messages.")
        until = timezone.localdate()
        last = _bucket_start(until, granularity)
        starts = [last]
        for _ in range(BUCKETS[granularity] - 1):
            starts.insert(0, _prev_bucket(starts[0], granularity))
        window_end = _next_bucket(last, granularity)
    counts = {
        timezone.localtime(row["bucket"]).date(): row["n"]
        for row in base.filter(timestamp__gte=day_start(starts[0]), timestamp__lt=day_start(window_end))
        .annotate(bucket=Trunc("timestamp", granularity))
        .values("bucket")
        .annotate(n=Count("*"))
        .order_by()
    }
    period = f.period
    if period is not None:
        period = _bucket_start(period, granularity)
    params = request.GET.copy()
    params.pop("page", None)
    buckets = []
    for start in starts:
        params["period"] = start.isoformat()
        params["granularity"] = granularity
        buckets.append((_bucket_label(start, granularity), counts.get(start, 0), "?" + params.urlencode()))
    chart = charts.bar_chart(buckets, selected=_bucket_label(period, granularity) if period else None)

    period_page = None
    period_end = None
    if period is not None:
        try:
            period_end = _next_bucket(period, granularity)
            qs = base.filter(timestamp__gte=day_start(period), timestamp__lt=day_start(period_end))
            period_page = paginate(request, qs.select_related("conversation").order_by("timestamp", "id"))
        except OverflowError:
            errors.append("That period is out of range.")
            period = None
    nav = request.GET.copy()
    nav.pop("page", None)
    nav.pop("period", None)
    nav["granularity"] = granularity
    nav["until"] = (starts[0] - dt.timedelta(days=1)).isoformat()
    earlier = "?" + nav.urlencode()
    later = None
    if window_end <= timezone.localdate():
        ahead = last
        for _ in range(BUCKETS[granularity]):
            ahead = _next_bucket(ahead, granularity)
        nav["until"] = min(ahead, timezone.localdate()).isoformat()
        later = "?" + nav.urlencode()
    context = {
        "section": "timeline",
        "errors": errors,
        "filters": f,
        "granularity": granularity,
        "granularities": GRANULARITIES,
        "roles": Role.values,
        "conversations": conversation_choices(user),
        "chart": chart,
        "window": (starts[0], window_end - dt.timedelta(days=1)),
        "window_total": sum(counts.values()),
        "period": period,
        "period_last": period_end - dt.timedelta(days=1) if period_end else None,
        "period_page": period_page,
        "earlier": earlier,
        "later": later,
        "until": until,
        "periods": temporal_overview(user),
    }
    partial = (
        "period-messages" if request.htmx and request.htmx.target == "period-messages" else "timeline-body"
    )
    return render_page(request, "explorer/timeline.html", partial, context)
