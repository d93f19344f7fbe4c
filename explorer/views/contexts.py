"""The context inspector: what the model was shown for each turn, zone by zone."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from explorer import charts
from explorer.filters import parse_filters
from explorer.views.common import MAX_ID, conversation_choices, paginate, render_page
from memory.models import ContextSnapshot


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
    page = paginate(request, qs.order_by("-created_at", "-id"))
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
        "conversations": conversation_choices(user),
    }
    return render_page(request, "explorer/contexts.html", "context-rows", context)


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


def _custom_instructions(snap: ContextSnapshot) -> dict[str, Any] | None:
    """The person's custom instructions as the turn sent them, and their tokens (counted in the
    system zone); None when the turn had none."""
    plan = snap.plan if isinstance(snap.plan, dict) else {}
    text = plan.get("custom_instructions")
    if not isinstance(text, str) or not text:
        return None
    zones = snap.tokens_by_zone if isinstance(snap.tokens_by_zone, dict) else {}
    tokens = zones.get("custom_instructions")
    return {"text": text[:5000], "tokens": tokens if isinstance(tokens, int) else None}


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
        "custom_instructions": _custom_instructions(snap),
        "plan": json.dumps(snap.whole_plan(), indent=2, ensure_ascii=False, default=str)[:20000],
        "text_chars": len(snap.text),
    }
    return render(request, "explorer/context.html", context)
