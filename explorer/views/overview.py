"""The Memory overview, about the person, and Advanced, about the engine."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Case, Count, F, OuterRef, Q, QuerySet, Subquery, Sum, When
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_GET

from explorer.counting import Tally, bounded_count
from memory.finding import semantic_cache
from memory.knowledge import facts
from memory.models import (
    ContextSnapshot,
    Conversation,
    Entity,
    EntityMention,
    Message,
    Passage,
    PeriodSummary,
    Preferences,
    ToolCall,
    Topic,
    UpkeepRun,
)
from memory.organizing.periods import period_bounds


def _embedder_name() -> str:
    try:
        from memory.embedders import get_embedder

        return get_embedder().name
    except Exception:  # noqa: BLE001 - a misconfigured embedder must not take the page down
        return settings.EMBEDDING_MODEL


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
    if not Preferences.of(user).use_memory:
        reason += (
            ". Memory is off (Settings: Use memory in replies): until it is on, a turn sees only its "
            "conversation"
        )
    return {"strategy": strategy, "reason": reason, "source": "memory.context.index_builder"}


def temporal_overview(user, now: dt.datetime | None = None) -> list[dict[str, Any]]:
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
    """The names memory holds most about, people first (those the person calls their own, "my
    sister Ana", and those facts are about), each with the message that last mentioned it."""
    latest = (
        EntityMention.objects.filter(entity=OuterRef("pk"), message__deleted=False)
        .order_by("-message__timestamp", "-id")
    )
    people = sorted(n.lower() for n in facts.known_people(user))[:500]
    return list(
        Entity.objects.owned_by(user)
        .filter(kind="name", mention_count__gt=0)
        .annotate(person=Case(When(normalized__in=people, then=0), default=1))
        .order_by("person", "-mention_count", "name", "id")
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
        "periods": temporal_overview(user),
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
