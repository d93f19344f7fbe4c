"""The tool calls the assistant made: a filtered list with short previews, and one call whole."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models.functions import Left
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from explorer.filters import parse_filters
from explorer.views.common import MAX_ID, conversation_choices, paginate, render_page
from memory.models import Message, ToolCall


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


def _json_pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return text


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
    page = paginate(request, qs.order_by("-timestamp", "-id").defer("result", "arguments"))
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
        "conversations": conversation_choices(user),
    }
    return render_page(request, "explorer/tool_calls.html", "tool-rows", context)


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
    chunks_page = paginate(request, call.chunks.order_by("chunk_index"), param="chunk", per_page=1)
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
    return render_page(request, "explorer/tool_call.html", "result-chunk", context)
