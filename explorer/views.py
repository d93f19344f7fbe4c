"""The memory explorer: htmx pages over one user's memory.

Every query goes through an owner-scoped QuerySet method; objects that are not the signed-in
user's are 404s, exactly like ids that do not exist. Every list is paginated, so no page reads
an unbounded number of rows however large the memory grows.
"""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import json
import re
from typing import Any

from django.conf import settings
from django.contrib import messages as flash
from django.contrib.auth.decorators import login_required
from django.core.paginator import Page
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Left, Trunc
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from chat.models import ChatAllowance, LimitReached
from chat.turn import retitle_after_edit
from explorer import charts
from explorer.counting import Tally, bounded_count, capped_page
from explorer.filters import (
    GRANULARITIES,
    Filters,
    day_start,
    parse_filters,
)
from memory.errors import MemoryStoreError, NotFound
from memory.finding import semantic_cache
from memory.finding.search import similar_messages
from memory.lifecycle import forgetting
from memory.models import (
    ContextSnapshot,
    Conversation,
    Entity,
    EntityEdge,
    EntityMention,
    Message,
    Passage,
    PeriodSummary,
    Role,
    ToolCall,
    Topic,
    UpkeepRun,
)
from memory.organizing import summaries, topic_tree
from memory.organizing.periods import period_bounds
from memory.storage import store

PAGE_SIZE = 25
MAX_PK = 2**63 - 1
MAX_ID = 40
CONTENT_PREVIEW_CHARS = 60_000
# The diff of two versions compares lines, then the words of changed lines. difflib's matcher is
# quadratic to cubic on repetitive text ("a\n" * 200000 edited at both ends would pin a server
# thread for hours), so it gets a budget of steps; past it the changed part is shown whole.
# (A step is about a microsecond or two: the budget holds a diff to about a second.)
DIFF_WORK_LIMIT = 500_000
DIFF_CONTEXT_CHARS = 400  # unchanged text kept around a change; the rest is elided
DIFF_SHOWN_CHARS = 10_000  # removed or added text shown per change; the rest is elided
# Past its first DIFF_MAX_LINES differing lines, a diff is not computed, and past
# DIFF_MAX_SEGMENTS pieces or DIFF_MAX_OUTPUT_CHARS characters it is not shown: the page says
# the rest is left out. (Two 0.9 MB texts of 80,000 short lines, 70% changed, took 7 s and
# made 3.1 MB of HTML.)
DIFF_MAX_LINES = 2_000
DIFF_MAX_SEGMENTS = 1_500
DIFF_MAX_OUTPUT_CHARS = 150_000
SPARK_BUCKETS = 24


# --- access helpers: another user's object is a 404, like an unknown id -----------------------


def _get_message_for_user(user, message_id: str) -> Message:
    """The user's message, deleted or not (the explorer is where deleted ones are restored)."""
    if len(message_id) > MAX_ID:
        raise Http404("no such message")
    message = Message.objects.owned_by(user).select_related("conversation").filter(pk=message_id).first()
    if message is None:
        raise Http404("no such message")
    return message


def _get_topic_for_user(user, topic_id: str) -> Topic:
    topic = Topic.objects.owned_by(user).filter(pk=topic_id).first() if len(topic_id) <= MAX_ID else None
    if topic is None:
        raise Http404("no such topic")
    return topic


def _get_tool_call_for_user(user, call_id: str) -> ToolCall:
    call = (
        ToolCall.objects.owned_by(user)
        .select_related("message", "message__conversation")
        .filter(pk=call_id)
        .first()
        if len(call_id) <= MAX_ID
        else None
    )
    if call is None:
        raise Http404("no such tool call")
    return call


def _get_snapshot_for_user(user, snapshot_id: str) -> ContextSnapshot:
    snap = (
        ContextSnapshot.objects.owned_by(user)
        .select_related("conversation", "message", "user_message")
        .filter(pk=snapshot_id)
        .first()
        if len(snapshot_id) <= MAX_ID
        else None
    )
    if snap is None:
        raise Http404("no such context snapshot")
    return snap


def _get_entity_for_user(user, entity_id: int) -> Entity:
    entity = Entity.objects.owned_by(user).filter(pk=entity_id).first() if entity_id <= MAX_PK else None
    if entity is None:
        raise Http404("no such entity")
    return entity


# --- small shared helpers ----------------------------------------------------------------------


def _page(request: HttpRequest, items, *, param: str = "page", per_page: int = PAGE_SIZE) -> Page:
    """One page of `items`; a missing, malformed or too large page number gives page 1 / the last.
    A long list is counted only a little past the page asked for (see explorer.counting)."""
    return capped_page(items, request.GET.get(param), per_page)


def _render(
    request: HttpRequest,
    template: str,
    partial: str | None,
    context: dict[str, Any],
    *,
    status: int = 200,
) -> HttpResponse:
    name = f"{template}#{partial}" if request.htmx and partial else template
    return render(request, name, context, status=status)


def _apply_message_filters(user, qs: QuerySet[Message], f: Filters) -> QuerySet[Message]:
    if f.conversation:
        qs = qs.filter(conversation=f.conversation)
    if f.role:
        qs = qs.filter(role=f.role)
    if f.start_dt:
        qs = qs.filter(timestamp__gte=f.start_dt)
    if f.end_dt:
        qs = qs.filter(timestamp__lt=f.end_dt)
    if f.topic:
        qs = qs.filter(topic_tree.in_topic(user, f.topic))
    return qs


def _conversation_choices(user) -> list[Conversation]:
    return list(Conversation.objects.owned_by(user).only("id", "title")[:200])


def _json_pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return text


def _embedder_name() -> str:
    try:
        from memory.embedders import get_embedder

        return get_embedder().name
    except Exception:  # noqa: BLE001 - a misconfigured embedder must not take the page down
        return settings.EMBEDDING_MODEL


# --- overview ----------------------------------------------------------------------------------


def _token_total(live: QuerySet[Message], messages: Tally) -> Tally:
    """Tokens stored: summed exactly for a memory within the count cap, else estimated from
    the newest messages' average (summing 100,000 rows would read them all)."""
    if messages.exact:
        return Tally(live.aggregate(n=Sum("token_count"))["n"] or 0)
    sample = list(live.order_by("-timestamp").values_list("token_count", flat=True)[:1000])
    average = sum(sample) / max(1, len(sample))
    return Tally(round(average * messages.value), exact=False)


def next_turn_strategy(user) -> dict[str, Any]:
    """Which index strategy the next turn would use and why, decided by the
    index builder itself so the explorer never disagrees with what the model will be shown."""
    from memory.context import index_builder

    size = index_builder.history_size(user)
    strategy, reason = index_builder.choose_strategy(size)
    return {"strategy": strategy, "reason": reason, "source": "memory.context.index_builder"}


def _temporal_overview(user, now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Today, earlier this week, earlier this month and older: the periods the background upkeep
    summarizes (memory.organizing.periods.period_bounds), so a count and its summary speak of the same
    messages. A summary written before the latest messages came is left out, not contradicted."""
    bounds = period_bounds(now)
    live = Message.objects.visible_to(user).logical()
    # The recent periods are a short range of the (owner, timestamp) index; "older" is most of
    # a big memory, so it is counted up to a cap and estimated beyond it.
    recent = {key: (start, end) for key, (start, end) in bounds.items() if start is not None}
    agg = live.filter(timestamp__gte=min(start for start, _ in recent.values())).aggregate(
        **{
            key: Count("timestamp", filter=Q(timestamp__gte=start, **({"timestamp__lt": end} if end else {})))
            for key, (start, end) in recent.items()
        }
    )
    agg["older"] = bounded_count(live.filter(timestamp__lt=bounds["older"][1]))
    summaries = {p.period: p for p in PeriodSummary.objects.owned_by(user)[:20]}
    timeline = reverse("explorer:timeline")
    labels = {
        "today": "Today", "this_week": "Earlier this week", "this_month": "Earlier this month",
        "older": "Older",
    }
    out = []
    for key, (start, end) in bounds.items():
        last_day = (end - dt.timedelta(days=1)).date() if end else timezone.localdate(now)
        href = f"{timeline}?end={last_day}" + (f"&start={start.date()}" if start else "")
        summary = summaries.get(key)
        count = agg[key]
        exact = not isinstance(count, Tally) or count.exact
        fresh = summary is not None and exact and summary.message_count == int(count)
        out.append(
            {
                "key": key,
                "label": labels[key],
                "count": agg[key],
                "href": href,
                "summary": summary.summary if fresh else "",
            }
        )
    return out


def _people_places_and_things(user, limit: int = 8) -> list[Entity]:
    """The names memory holds most about, each with the message that last mentioned it."""
    latest = (
        EntityMention.objects.filter(entity=OuterRef("pk"), message__deleted=False)
        .order_by("-message__timestamp", "-id")
    )
    return list(
        Entity.objects.owned_by(user)
        .filter(kind="name", mention_count__gt=0)
        .order_by("-mention_count", "name", "id")
        .annotate(
            latest_id=Subquery(latest.values("message_id")[:1]),
            latest_snippet=Subquery(latest.values("message__snippet")[:1]),
            latest_when=Subquery(latest.values("message__timestamp")[:1]),
        )[:limit]
    )


def _recent_changes(user, limit: int = 6) -> list[dict[str, Any]]:
    """Messages edited or deleted (restorable) lately, newest change first."""
    owned = Message.objects.owned_by(user).filter(is_chunk=False)
    changes = []
    for m in owned.filter(edited=True, deleted=False).order_by("-timestamp")[: limit * 3]:
        when = parse_datetime(str((m.edit_history or [{}])[-1].get("timestamp") or "")) or m.timestamp
        changes.append({"message": m, "what": "edited", "when": when})
    for m in owned.filter(deleted=True).order_by("-deleted_at", "-timestamp")[:limit]:
        changes.append({"message": m, "what": "deleted", "when": m.deleted_at or m.timestamp})
    changes.sort(key=lambda c: c["when"], reverse=True)
    return changes[:limit]


@login_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    """Memory's first page, about the person: who and what it knows most about, what they
    pinned, what they talked about lately and what changed; the engine is under Advanced."""
    user = request.user
    visible = Message.objects.visible_to(user)
    context = {
        "section": "overview",
        "stats": {
            "conversations": bounded_count(Conversation.objects.owned_by(user)),
            "messages": bounded_count(visible.logical()),
        },
        "entities": _people_places_and_things(user),
        "pinned": list(visible.logical().pinned().order_by("-pinned_at")[:8]),
        "topics": list(
            Topic.objects.owned_by(user).filter(period_end__isnull=False).order_by("-period_end")[:6]
        ),
        "changes": _recent_changes(user),
        "periods": _temporal_overview(user),
    }
    return render(request, "explorer/overview.html", context)


@login_required
@require_GET
def advanced(request: HttpRequest) -> HttpResponse:
    """The engine: what is stored, which index the next turn uses, health, caches, upkeep."""
    user = request.user
    owned = Message.objects.owned_by(user)
    live = owned.visible().logical()
    messages = bounded_count(live)
    tokens = _token_total(live, messages)
    model = _embedder_name()
    passages = Passage.objects.owned_by(user)
    unembedded = passages.filter(embedding__isnull=True)
    # Chunks whose parent's deleted flag differs were left behind by an interrupted delete/restore.
    stale_chunks = bounded_count(
        owned.filter(is_chunk=True, chunk_parent__isnull=False).exclude(deleted=F("chunk_parent__deleted"))
    )
    stats = {
        "conversations": bounded_count(Conversation.objects.owned_by(user)),
        "messages": messages,
        "chunks": bounded_count(owned.filter(is_chunk=True, deleted=False)),
        "tokens": tokens,
        "deleted": bounded_count(owned.filter(is_chunk=False, deleted=True)),
        "tool_calls": bounded_count(ToolCall.objects.owned_by(user).logical()),
        "topics": bounded_count(Topic.objects.owned_by(user)),
        "entities": bounded_count(Entity.objects.owned_by(user)),
        "snapshots": bounded_count(ContextSnapshot.objects.owned_by(user)),
        "passages": bounded_count(passages),
    }
    health = {
        "unembedded": bounded_count(unembedded),
        "unembedded_messages": bounded_count(unembedded.values("logical_message_id").distinct()),
        # Two ranges rather than "<>", so the (owner, embedding_model) index finds just these rows.
        "other_model": bounded_count(
            passages.filter(embedding__isnull=False).filter(
                Q(embedding_model__lt=model) | Q(embedding_model__gt=model)
            )
        ),
        "model": model,
        "orphaned_chunks": bounded_count(owned.filter(is_chunk=True, chunk_parent__isnull=True)),
        "stale_chunks": stale_chunks,
    }
    health["ok"] = not any(
        health[k] for k in ("unembedded", "other_model", "orphaned_chunks", "stale_chunks")
    )
    upkeep = list(UpkeepRun.objects.filter(Q(owner=user) | Q(owner__isnull=True))[:5])
    context = {
        "section": "advanced",
        "stats": stats,
        "health": health,
        "strategy": next_turn_strategy(user),
        "thresholds": {
            "full": settings.INDEX_FULL_MAX,
            "snippets": settings.INDEX_SNIPPET_MAX,
            "clusters": settings.INDEX_CLUSTER_MAX,
        },
        "upkeep": upkeep,
                "cache": semantic_cache.stats(user),
        "response_cache": settings.RESPONSE_CACHE,
    }
    return render(request, "explorer/advanced.html", context)


# --- topics ------------------------------------------------------------------------------------


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
    page = _page(request, qs)
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
    return _render(request, "explorer/topics.html", "topic-list", context)


@login_required
@require_GET
@vary_on_headers("HX-Request")
def topic_detail(request: HttpRequest, topic_id: str) -> HttpResponse:
    user = request.user
    topic = _get_topic_for_user(user, topic_id)
    children_page = _page(
        request, topic.children.order_by("order", "period_start", "id"), param="cpage", per_page=20
    )
    messages_page = _page(request, topic_tree.TopicMessages(user, topic))
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
    return _render(request, "explorer/topic.html", "topic-messages", context)


# --- timeline ----------------------------------------------------------------------------------

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
    base = _apply_message_filters(user, Message.objects.visible_to(user).logical(), f)

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
            period_page = _page(request, qs.select_related("conversation").order_by("timestamp", "id"))
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
        "conversations": _conversation_choices(user),
        "chart": chart,
        "window": (starts[0], window_end - dt.timedelta(days=1)),
        "window_total": sum(counts.values()),
        "period": period,
        "period_last": period_end - dt.timedelta(days=1) if period_end else None,
        "period_page": period_page,
        "earlier": earlier,
        "later": later,
        "until": until,
        "periods": _temporal_overview(user),
    }
    partial = (
        "period-messages" if request.htmx and request.htmx.target == "period-messages" else "timeline-body"
    )
    return _render(request, "explorer/timeline.html", partial, context)


# --- message detail ----------------------------------------------------------------------------


def _versions(message: Message) -> list[dict[str, Any]]:
    """Every version oldest first: the edit history's previous texts, then the current text."""
    versions = []
    for i, entry in enumerate(message.edit_history or []):
        if not isinstance(entry, dict):
            continue
        versions.append(
            {
                "number": i,
                "content": str(entry.get("previous_content", "")),
                "replaced_at": str(entry.get("timestamp", ""))[:19].replace("T", " "),
                "tokens": entry.get("previous_token_count"),
            }
        )
    versions.append(
        {
            "number": len(versions),
            "content": message.content,
            "replaced_at": None,
            "tokens": message.token_count,
            "current": True,
        }
    )
    return versions


# Words with the spaces after them: whitespace alone would be the commonest token by far, and
# the matcher's cost grows with how often tokens repeat.
_TOKEN = re.compile(r"\s+|\S+\s*")


class _DiffTooLarge(Exception):
    pass


class _BudgetedMatcher(difflib.SequenceMatcher):
    """A SequenceMatcher that gives up (raises _DiffTooLarge) once it has spent `budget`."""

    def __init__(self, a: list[str], b: list[str], budget: list[int]) -> None:
        self.budget = budget  # shared by the matchers of one diff: [steps left]
        super().__init__(None, a, b, autojunk=False)

    def find_longest_match(self, alo=0, ahi=None, blo=0, bhi=None):
        ahi = len(self.a) if ahi is None else ahi
        bhi = len(self.b) if bhi is None else bhi
        # An upper bound of the steps the search below takes: one per candidate pair.
        b2j = self.b2j
        self.budget[0] -= (ahi - alo) + sum(len(b2j.get(x, ())) for x in self.a[alo:ahi])
        if self.budget[0] < 0:
            raise _DiffTooLarge
        return super().find_longest_match(alo, ahi, blo, bhi)


def _common_ends(a: list[str], b: list[str]) -> tuple[int, int]:
    """How many tokens `a` and `b` share at their start, and then at their end."""
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


def _opcodes(a: list[str], b: list[str], budget: list[int]) -> list[tuple[str, str]]:
    """(op, text) turning token list `a` into `b`; raises _DiffTooLarge past the budget."""
    head, tail = _common_ends(a, b)
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    out = [("same", "".join(a[:head]))]
    for op, i1, i2, j1, j2 in _BudgetedMatcher(a_mid, b_mid, budget).get_opcodes():
        if op == "equal":
            out.append(("same", "".join(a_mid[i1:i2])))
        if op in ("delete", "replace"):
            out.append(("del", "".join(a_mid[i1:i2])))
        if op in ("insert", "replace"):
            out.append(("ins", "".join(b_mid[j1:j2])))
    out.append(("same", "".join(a[len(a) - tail :])))
    return out


def _words(segments: list[tuple[str, str]], budget: list[int]) -> list[tuple[str, str]]:
    """Changed lines compared word by word, while the budget lasts (past it, shown whole)."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(segments):
        op, text = segments[i]
        if op == "del" and i + 1 < len(segments) and segments[i + 1][0] == "ins":
            inserted = segments[i + 1][1]
            try:
                out += _opcodes(_TOKEN.findall(text), _TOKEN.findall(inserted), budget)
            except _DiffTooLarge:
                budget[0] = -1
                out += [("del", text), ("ins", inserted)]
            i += 2
        else:
            out.append((op, text))
            i += 1
    return out


def _tidy(segments: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Spaces that end both sides of a change shown as unchanged; neighbours of one kind
    joined; long stretches elided ("skip": what was left out)."""
    spaced: list[tuple[str, str]] = []
    for op, text in segments:
        if op == "ins" and spaced and spaced[-1][0] == "del":
            old = spaced[-1][1]
            space = min(len(old) - len(old.rstrip()), len(text) - len(text.rstrip()))
            if space and old[-space:] == text[-space:] and old[:-space] and text[:-space]:
                spaced[-1] = ("del", old[:-space])
                spaced += [("ins", text[:-space]), ("same", text[-space:])]
                continue
        spaced.append((op, text))
    joined: list[list[str]] = []
    for op, text in spaced:
        if not text:
            continue
        if joined and joined[-1][0] == op:
            joined[-1][1] += text
        else:
            joined.append([op, text])
    out: list[tuple[str, str]] = []
    for op, text in joined:
        if op == "same" and len(text) > 2 * DIFF_CONTEXT_CHARS + 200:
            keep = DIFF_CONTEXT_CHARS
            out += [
                ("same", text[:keep]),
                ("skip", f"{len(text) - 2 * keep:,} unchanged characters"),
                ("same", text[-keep:]),
            ]
        elif op in ("del", "ins") and len(text) > DIFF_SHOWN_CHARS:
            keep = DIFF_SHOWN_CHARS // 2
            what = "removed" if op == "del" else "added"
            out += [
                (op, text[:keep]),
                ("skip", f"{len(text) - 2 * keep:,} more characters {what}"),
                (op, text[-keep:]),
            ]
        else:
            out.append((op, text))
    return out


def diff_segments(before: str, after: str) -> list[tuple[str, str]]:
    """(op, text) pieces turning `before` into `after`; op is "same", "del" or "ins", or "skip"
    (text left out: says how much) and "note" (first, when the versions are too large to
    compare in detail). Lines are compared first, then the words of changed lines; the work is
    bounded whatever the texts. The text is returned as data and escaped by the template."""
    budget = [DIFF_WORK_LIMIT]
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    head, tail = _common_ends(a, b)
    cut = max(len(a), len(b)) - head - tail > DIFF_MAX_LINES
    if cut:
        # Only the versions' first differing lines are compared: the first lines of one turned
        # into the first lines of the other, up to their last shared line (what follows it in
        # the window may be matched past it). The rest is said to be left out.
        a, b = a[: head + DIFF_MAX_LINES], b[: head + DIFF_MAX_LINES]
    try:
        line_ops = _opcodes(a, b, budget)
        if cut:
            shared = [i for i, (op, text) in enumerate(line_ops) if op == "same" and text and i]
            line_ops = line_ops[: shared[-1] + 1] if shared else line_ops
        segments = _words(line_ops, budget)
    except _DiffTooLarge:
        # Shown whole: the lines the two versions share at the start and end, then the rest of
        # each.
        head, tail = _common_ends(a, b)
        segments = [
            ("same", "".join(a[:head])),
            ("del", "".join(a[head : len(a) - tail])),
            ("ins", "".join(b[head : len(b) - tail])),
            ("same", "".join(a[len(a) - tail :])),
        ]
        budget[0] = -1
    note = []
    if budget[0] < 0:
        note = [
            ("note", "These versions are too large to compare in detail: the changed part is shown whole.")
        ]
    shown = _tidy(segments)
    if cut or len(shown) > DIFF_MAX_SEGMENTS or sum(len(t) for _, t in shown) > DIFF_MAX_OUTPUT_CHARS:
        shown = _first_of(shown)
        note.append(("note", "The versions differ in too many places to show them all: the first "
                             "changes are shown, the rest is not."))
        shown.append(("skip", "the rest of the changes is not shown"))
    return note + shown


def _first_of(segments: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The first DIFF_MAX_SEGMENTS pieces of a diff that fit DIFF_MAX_OUTPUT_CHARS."""
    out, size = [], 0
    for op, text in segments[:DIFF_MAX_SEGMENTS]:
        size += len(text)
        if size > DIFF_MAX_OUTPUT_CHARS:
            break
        out.append((op, text))
    return out


def _message_context(request: HttpRequest, message: Message) -> dict[str, Any]:
    user = request.user
    chunks_page = _page(request, message.chunks.order_by("chunk_index"), param="chunks", per_page=5)
    related = Message.objects.owned_by(user).select_related("conversation")
    parent = related.filter(pk=message.parent_id).first() if message.parent_id else None
    replies_qs = related.logical().filter(parent_id=message.pk).order_by("position")
    siblings_qs = (
        related.logical().filter(parent_id=message.parent_id).exclude(pk=message.pk).order_by("position")
        if message.parent_id
        else Message.objects.none()
    )
    in_conv = Message.objects.owned_by(user).logical().filter(conversation_id=message.conversation_id)
    previous = in_conv.filter(position__lt=message.position).order_by("-position").first()
    following = in_conv.filter(position__gt=message.position).order_by("position").first()
    versions = _versions(message)
    tool_calls_qs = message.tool_calls.filter(is_chunk=False).order_by("timestamp")
    snapshot = ContextSnapshot.objects.owned_by(user).filter(message=message).only("id").first()
    content = message.content
    return {
        "section": "timeline",
        "message": message,
        "content": content[:CONTENT_PREVIEW_CHARS],
        "content_truncated": len(content) > CONTENT_PREVIEW_CHARS,
        "chunks_page": chunks_page,
        "parent": parent,
        "replies": list(replies_qs[:20]),
        "replies_count": replies_qs.count(),
        "siblings": list(siblings_qs[:20]),
        "siblings_count": siblings_qs.count() if message.parent_id else 0,
        "previous": previous,
        "following": following,
        "versions": versions,
        "edits": versions[:-1],
        "tool_calls": list(tool_calls_qs[:20]),
        "tool_calls_count": tool_calls_qs.count(),
        "memberships": list(message.topic_memberships.select_related("topic").order_by("-score")[:10]),
        "mentions": list(message.entity_mentions.select_related("entity").order_by("-count")[:30]),
        "similar": similar_messages(user, message) if not message.deleted else [],
        "snapshot": snapshot,
    }


@login_required
@require_GET
@vary_on_headers("HX-Request")
def message_detail(request: HttpRequest, message_id: str) -> HttpResponse:
    message = _get_message_for_user(request.user, message_id)
    if message.is_chunk:
        url = reverse("explorer:message", args=[message.chunk_parent_id])
        return redirect(f"{url}#chunk-{message.chunk_index}")
    context = _message_context(request, message)
    return _render(request, "explorer/message.html", "chunk-list", context)


def counted(view):
    """A change to memory made here counts against the same per-user limit as the chat's
    (CHAT_RATE_LIMIT_PER_MINUTE): past it the change is refused with 429 and nothing is done."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, message_id: str, *args, **kwargs) -> HttpResponse:
        if request.method == "POST":
            try:
                ChatAllowance.count_action(request.user)
            except LimitReached as exc:
                if request.htmx:
                    return HttpResponse(exc.message, status=429)
                flash.error(request, exc.message)
                response = redirect("explorer:message", message_id=message_id)
                response.status_code = 303
                return response
        return view(request, message_id, *args, **kwargs)

    return wrapper


@login_required
@require_POST
@counted
def message_edit(request: HttpRequest, message_id: str) -> HttpResponse:
    """Correct a message's text: same id, the old text kept in the edit history, re-chunked and
    re-embedded by memory.storage.store; topic upkeep then places it again in the background."""
    message = _get_message_for_user(request.user, message_id)
    text = request.POST.get("content", "")
    try:
        edited = store.update_message(request.user, message.pk, text)
    except MemoryStoreError as exc:
        if message.is_chunk:
            message = _get_message_for_user(request.user, message.chunk_parent_id)
        context = _message_context(request, message)
        context.update(edit_error=str(exc), edit_text=text[:CONTENT_PREVIEW_CHARS])
        return render(request, "explorer/message.html", context, status=400)
    if edited.edit_history != message.edit_history:
        # A conversation named after its first message takes the new text's name.
        retitle_after_edit(edited.conversation_id, edited, message.content)
        # The store queued topic upkeep for the edit when it committed.
        flash.success(request, "Saved: the old text is kept in the edit history below.")
    else:
        flash.info(request, "The text is unchanged, so nothing was saved.")
    return redirect("explorer:message", message_id=edited.pk)


@login_required
@require_GET
def message_diff(request: HttpRequest, message_id: str, version: int) -> HttpResponse:
    """The diff from version `version` to the one after it."""
    message = _get_message_for_user(request.user, message_id)
    versions = _versions(message)
    if version >= len(versions) - 1:
        raise Http404("no such edit")
    before, after = versions[version], versions[version + 1]
    context = {
        "section": "timeline",
        "message": message,
        "before": before,
        "after": after,
        "segments": diff_segments(before["content"], after["content"]),
    }
    if request.htmx:
        return render(request, "explorer/message.html#edit-diff", context)
    return render(request, "explorer/diff.html", context)


def _change_state(request: HttpRequest, message_id: str, *, delete: bool) -> HttpResponse:
    message = _get_message_for_user(request.user, message_id)
    error = ""
    try:
        if delete:
            message = store.delete_message(request.user, message.pk)
        else:
            message = store.restore_message(request.user, message.pk)
    except MemoryStoreError as exc:
        error = str(exc)
    if request.htmx:
        return render(request, "explorer/message.html#message-state", {"message": message, "error": error})
    if error:
        flash.error(request, error)
    elif delete:
        flash.success(request, "Deleted: the assistant will not recall this message. Restore undoes it.")
    else:
        flash.success(request, "Restored: the assistant can recall this message again.")
    return redirect("explorer:message", message_id=message.pk)


@login_required
@require_POST
@counted
def message_delete(request: HttpRequest, message_id: str) -> HttpResponse:
    return _change_state(request, message_id, delete=True)


@login_required
@require_POST
@counted
def message_restore(request: HttpRequest, message_id: str) -> HttpResponse:
    return _change_state(request, message_id, delete=False)


@login_required
@require_POST
@counted
def message_pin(request: HttpRequest, message_id: str) -> HttpResponse:
    """Pin (pinned=true) or unpin (pinned=false): a pinned message is always in the model's memory
    index, until it is unpinned or deleted."""
    pinned = (request.POST.get("pinned") or "true").strip().lower() in {"1", "true", "on", "yes"}
    message = _get_message_for_user(request.user, message_id).set_pinned(pinned)
    if request.htmx:
        return render(request, "explorer/message.html#pin-state", {"message": message})
    flash.success(request, "Pinned: always shown to the assistant." if pinned else "Unpinned.")
    return redirect("explorer:message", message_id=message.pk)


@login_required
@require_http_methods(["GET", "POST"])
@counted
def message_forget(request: HttpRequest, message_id: str) -> HttpResponse:
    """Forgetting is permanent, so it asks first and needs the confirmation box ticked. The
    messages that quote or restate it are listed, to forget with it (those that only repeat
    memory are ticked already)."""
    message = _get_message_for_user(request.user, message_id)
    if message.is_chunk:
        return redirect("explorer:forget", message_id=message.chunk_parent_id)
    error = ""
    if request.method == "POST":
        if request.POST.get("confirm") == "forget":
            conversation_id = message.conversation_id
            try:
                forgotten = store.forget_message(
                    request.user, message.pk, copies=request.POST.getlist("copies")
                )
            except NotFound:
                raise Http404("No such message.") from None
            except MemoryStoreError as exc:
                error = str(exc)
            else:
                also = len(forgotten) - 1
                flash.success(
                    request,
                    "Forgotten: the message, its chunks and its tool calls are gone for good"
                    + (f", with {also} message{'s' if also != 1 else ''} quoting it." if also else "."),
                )
                return redirect(f"{reverse('explorer:timeline')}?conversation={conversation_id}")
        else:
            error = "Tick the box to confirm: forgetting cannot be undone."
    return render(
        request,
        "explorer/forget.html",
        {
            "section": "timeline",
            "message": message,
            "error": error,
            "tool_calls_count": message.tool_calls.filter(is_chunk=False).count(),
            "chunks_count": message.chunks.count(),
            "copies": forgetting.copies_of(request.user, message),
        },
        status=400 if error else 200,
    )


@login_required
@require_GET
def message_context(request: HttpRequest, message_id: str) -> HttpResponse:
    """From an assistant turn (e.g. in the chat) to what the model was shown for it."""
    message = _get_message_for_user(request.user, message_id)
    snap = ContextSnapshot.objects.owned_by(request.user).filter(message_id=message.logical_id).first()
    if snap is None:
        raise Http404("no context was recorded for this message")
    return redirect("explorer:context", snapshot_id=snap.pk)


# --- tool calls --------------------------------------------------------------------------------


@login_required
@require_GET
@vary_on_headers("HX-Request")
def tool_calls(request: HttpRequest) -> HttpResponse:
    user = request.user
    f = parse_filters(request.GET, user, {"conversation", "tool", "start", "end"})
    qs = ToolCall.objects.owned_by(user).logical().select_related("message")
    if f.tool:
        qs = qs.filter(tool_name=f.tool)
    if f.conversation:
        qs = qs.filter(message__conversation=f.conversation)
    if f.start_dt:
        qs = qs.filter(timestamp__gte=f.start_dt)
    if f.end_dt:
        qs = qs.filter(timestamp__lt=f.end_dt)
    message_id = request.GET.get("message", "").strip()
    if message_id:
        if (
            len(message_id) <= MAX_ID
            and "\x00" not in message_id  # names nothing; Postgres cannot compare it
            and Message.objects.owned_by(user).filter(pk=message_id).exists()
        ):
            qs = qs.filter(message_id=message_id)
        else:
            f.errors.append(f"No message “{message_id[:40]}” in your memory; showing all tool calls.")
            message_id = ""
    page = _page(request, qs.order_by("-timestamp", "-id").defer("result", "arguments"))
    # Short previews only: a result can be megabytes.
    previews = {
        row["pk"]: row
        for row in ToolCall.objects.filter(pk__in=[c.pk for c in page.object_list]).values(
            "pk", args=Left("arguments", 300), res=Left("result", 300)
        )
    }
    rows = [
        {
            "call": c,
            "args": previews[c.pk]["args"],
            "result": previews[c.pk]["res"],
            "chunked": c.token_count > settings.INDEX_CHUNK_THRESHOLD,
        }
        for c in page.object_list
    ]
    tool_names = list(
        ToolCall.objects.owned_by(user)
        .logical()
        .values_list("tool_name", flat=True)
        .order_by("tool_name")
        .distinct()[:100]
    )
    context = {
        "section": "tools",
        "errors": f.errors,
        "filters": f,
        "message_filter": message_id,
        "page": page,
        "rows": rows,
        "tool_names": tool_names,
        "conversations": _conversation_choices(user),
    }
    return _render(request, "explorer/tool_calls.html", "tool-rows", context)


@login_required
@require_GET
@vary_on_headers("HX-Request")
def tool_call_detail(request: HttpRequest, call_id: str) -> HttpResponse:
    user = request.user
    call = _get_tool_call_for_user(user, call_id)
    if call.is_chunk and call.chunk_parent_id:
        return redirect(
            f"{reverse('explorer:tool_call', args=[call.chunk_parent_id])}?chunk={call.chunk_index + 1}"
        )
    chunks_page = _page(request, call.chunks.order_by("chunk_index"), param="chunk", per_page=1)
    chunked = chunks_page.paginator.count > 0
    context = {
        "section": "tools",
        "call": call,
        "arguments": _json_pretty(call.arguments),
        "result": "" if chunked else _json_pretty(call.result),
        "result_chars": len(call.result),
        "chunked": chunked,
        "chunks_page": chunks_page,
    }
    return _render(request, "explorer/tool_call.html", "result-chunk", context)


# --- context inspector -------------------------------------------------------------------------


@login_required
@require_GET
@vary_on_headers("HX-Request")
def contexts(request: HttpRequest) -> HttpResponse:
    user = request.user
    f = parse_filters(request.GET, user, {"conversation", "start", "end"})
    qs = (
        ContextSnapshot.objects.owned_by(user)
        .select_related("conversation")
        .defer("text", "plan", "hits", "included_ids")
    )
    if f.conversation:
        qs = qs.filter(conversation=f.conversation)
    if f.start_dt:
        qs = qs.filter(created_at__gte=f.start_dt)
    if f.end_dt:
        qs = qs.filter(created_at__lt=f.end_dt)
    page = _page(request, qs.order_by("-created_at", "-id"))
    rows = []
    for snap in page.object_list:
        zones = _zones(snap.tokens_by_zone)
        rows.append({"snap": snap, "tokens": sum(v for _, v in zones)})
    context = {
        "section": "context",
        "errors": f.errors,
        "filters": f,
        "page": page,
        "rows": rows,
        "conversations": _conversation_choices(user),
    }
    return _render(request, "explorer/contexts.html", "context-rows", context)


def _zones(raw: Any) -> list[tuple[str, int]]:
    if not isinstance(raw, dict):
        return []
    out = []
    for key, value in list(raw.items())[:20]:
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out.append((str(key), int(value)))
    return out


def _window(raw: Any) -> dict[str, Any] | None:
    """The model's window as the turn split it (plan["window"], memory/context/budget.py): each zone's
    allocated and used tokens. None for snapshots from before it was recorded."""
    if not isinstance(raw, dict) or not isinstance(raw.get("zones"), dict):
        return None

    def number(value: Any) -> int:
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0

    zones = [
        {"name": str(name), "allocated": number(z.get("allocated")), "used": number(z.get("used"))}
        for name, z in list(raw["zones"].items())[:20]
        if isinstance(z, dict)
    ]
    return {
        "window": number(raw.get("window")),
        "zones": zones,
        "prompt_tokens": number(raw.get("prompt_tokens")),
        "max_tokens": number(raw.get("max_tokens")),
        "retried": raw.get("retried") is True,
        "current_message_cut": raw.get("current_message_cut") is True,
        "summaries": number(raw.get("results_shown_as_summaries")),
    }


def _hits(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        return []
    out = []
    for hit in raw[:200]:
        if not isinstance(hit, dict):
            out.append({"snippet": str(hit)[:300]})
            continue
        message_id = hit.get("message_id") or (
            hit.get("id") if hit.get("type") in (None, "message") else None
        )
        score = hit.get("score")
        out.append(
            {
                "id": str(hit.get("id", ""))[:40],
                "type": str(hit.get("type", "message")),
                "message_id": str(message_id)[:40] if message_id else "",
                "score": score if isinstance(score, int | float) else None,
                "vector_rank": hit.get("vector_rank"),
                "keyword_rank": hit.get("keyword_rank"),
                "similarity": hit.get("vector_similarity"),
                "snippet": str(hit.get("snippet", ""))[:400],
                "is_chunk": bool(hit.get("is_chunk")),
            }
        )
    return out


@login_required
@require_GET
def context_detail(request: HttpRequest, snapshot_id: str) -> HttpResponse:
    user = request.user
    snap = _get_snapshot_for_user(user, snapshot_id)
    zones = _zones(snap.tokens_by_zone)
    calls = []
    if snap.message_id:
        calls = list(snap.message.tool_calls.filter(is_chunk=False).order_by("timestamp")[:50])
    fallbacks = snap.fallbacks if isinstance(snap.fallbacks, list) else [snap.fallbacks]
    context = {
        "section": "context",
        "snap": snap,
        "bar": charts.stacked_bar(zones, snap.budget),
        "zones": zones,
        "window": _window(snap.plan.get("window") if isinstance(snap.plan, dict) else None),
        "hits": _hits(snap.hits),
        "fallbacks": [f if isinstance(f, dict) else {"kind": "", "detail": str(f)} for f in fallbacks[:50]],
        "tools_offered": [
            (t.get("name") or t.get("function", {}).get("name", "")) if isinstance(t, dict) else str(t)
            for t in (snap.tools_offered if isinstance(snap.tools_offered, list) else [])[:50]
        ],
        "tool_calls": [
            {
                "call": c,
                "arguments": c.arguments[:2000],
                "result": c.result[:3000],
                "result_truncated": len(c.result) > 3000,
            }
            for c in calls
        ],
        "plan": json.dumps(snap.plan, indent=2, ensure_ascii=False, default=str)[:20000],
        "text_chars": len(snap.text),
    }
    return render(request, "explorer/context.html", context)


# --- search ------------------------------------------------------------------------------------


@login_required
@require_GET
@vary_on_headers("HX-Request")
def search(request: HttpRequest) -> HttpResponse:
    from memory.finding.search import SearchFilters
    from memory.finding.search import search as hybrid_search

    user = request.user
    f = parse_filters(request.GET, user, {"conversation", "role", "start", "end", "q"})
    results = None
    page = None
    if f.q:
        # Five pages of twenty, from 200 candidates per ranked list rather than search()'s
        # default of five times the limit: far down both lists a weak match still collects two
        # reciprocal ranks and climbs over a strong match found by one list (eval_recall's
        # facts: MRR 0.89 at 200, 0.86 at 500), and the longer graph walk is slower.
        results = hybrid_search(
            user,
            f.q,
            limit=100,
            candidates=200,
            filters=SearchFilters(
                conversation_id=f.conversation.pk if f.conversation else None,
                start=f.start_dt,
                end=f.end_dt,
                role=f.role,
            ),
        )
        page = _page(request, results.hits, per_page=20)
    context = {
        "section": "search",
        "errors": f.errors,
        "filters": f,
        "results": results,
        "page": page,
        "roles": Role.values,
        "conversations": _conversation_choices(user),
    }
    return _render(request, "explorer/search.html", "search-results", context)


# --- entities ----------------------------------------------------------------------------------


@login_required
@require_GET
@vary_on_headers("HX-Request")
def entities(request: HttpRequest) -> HttpResponse:
    user = request.user
    f = parse_filters(request.GET, user, {"q", "kind"})
    kinds = list(
        Entity.objects.owned_by(user).values_list("kind", flat=True).order_by("kind").distinct()[:50]
    )
    qs = Entity.objects.owned_by(user)
    if f.q:
        qs = qs.filter(name__icontains=f.q)
    if f.kind:
        if f.kind in kinds:
            qs = qs.filter(kind=f.kind)
        else:
            f.errors.append(f"No entities of kind “{f.kind}”; showing every kind.")
            f.kind = None
    page = _page(request, qs.order_by("-mention_count", "name", "id"))
    context = {
        "section": "entities",
        "errors": f.errors,
        "filters": f,
        "page": page,
        "kinds": kinds,
    }
    return _render(request, "explorer/entities.html", "entity-rows", context)


@login_required
@require_GET
@vary_on_headers("HX-Request")
def entity_detail(request: HttpRequest, entity_id: int) -> HttpResponse:
    user = request.user
    entity = _get_entity_for_user(user, entity_id)
    mentions = _page(
        request,
        EntityMention.objects.owned_by(user)
        .filter(entity=entity, message__deleted=False)
        .select_related("message", "message__conversation")
        .order_by("-message__timestamp", "-id"),
    )
    edges = list(
        EntityEdge.objects.owned_by(user)
        .filter(Q(source=entity) | Q(target=entity))
        .select_related("source", "target")
        .order_by("-weight", "id")[:30]
    )
    neighbours = [
        {"entity": e.target if e.source_id == entity.pk else e.source, "weight": e.weight} for e in edges
    ]
    context = {
        "section": "entities",
        "entity": entity,
        "mentions": mentions,
        "neighbours": neighbours,
    }
    return _render(request, "explorer/entity.html", "mention-rows", context)
