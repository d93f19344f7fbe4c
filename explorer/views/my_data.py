"""The person's data as a whole: Download my data (the `export_memory` JSON, or the Markdown
transcript) and Forget everything (typed confirmation; memory.lifecycle.erasing)."""

from __future__ import annotations

import json

from django.contrib import messages as flash
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from explorer.views.facts import page_context
from memory.lifecycle import erasing
from memory.organizing.labels import count_of
from memory.transfer.export import export_markdown, export_memory

FORMATS = {"json": ("application/json", "json"), "markdown": ("text/markdown", "md")}
CONFIRMATION = "forget everything"


@login_required
@require_GET
def download(request: HttpRequest, fmt: str) -> HttpResponse:
    """Everything the person's memory holds that cannot be derived again (what `manage.py
    export_memory` writes; import_memory reads it back), or their conversations as text."""
    if fmt not in FORMATS:
        raise Http404("no such format")
    content_type, extension = FORMATS[fmt]
    if fmt == "json":
        body = json.dumps(export_memory(request.user), ensure_ascii=False, indent=1) + "\n"
    else:
        body = export_markdown(request.user)
    name = f"recollect-{request.user.get_username()}-{timezone.localdate():%Y-%m-%d}.{extension}"
    response = HttpResponse(body, content_type=f"{content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_safe_filename(name)}"'
    response["Cache-Control"] = "no-store"
    return response


def _safe_filename(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


@login_required
@require_POST
def forget_everything(request: HttpRequest) -> HttpResponse:
    """Every message, fact, topic and cache of the person, for good, once they typed the
    confirmation; their settings and account stay. Anything else typed changes nothing."""
    typed = " ".join((request.POST.get("confirm") or "").lower().split())
    if typed != CONFIRMATION:
        error = f"Type “{CONFIRMATION}” to confirm. Nothing was forgotten."
        return render(request, "explorer/facts.html", page_context(request, forget_error=error), status=400)
    done = erasing.forget_everything(request.user)
    flash.success(
        request,
        f"Everything is forgotten: {count_of(done['messages'], 'message')} in "
        f"{count_of(done['conversations'], 'conversation')}, {count_of(done['facts'], 'fact')} and "
        f"{count_of(done['topics'], 'topic')}. Memory is empty.",
    )
    return redirect("explorer:overview")
