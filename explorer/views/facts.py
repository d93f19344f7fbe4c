"""The Facts of memory in the explorer: a page of them, and correct, pin and forget one (htmx
swaps the fact's row; without htmx, back to where the person was)."""

from __future__ import annotations

from django.contrib import messages as flash
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from memory.models import Fact

MAX_PK = 2**63 - 1
MAX_CORRECTION = 2000


def _get_fact_for_user(user, fact_id: int) -> Fact:
    fact = Fact.objects.owned_by(user).live().filter(pk=fact_id).first() if fact_id <= MAX_PK else None
    if fact is None:
        raise Http404("no such fact")
    return fact


def _back(request: HttpRequest) -> HttpResponse:
    target = request.POST.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return redirect(target)
    return redirect("explorer:facts")


def _row(request: HttpRequest, fact: Fact) -> HttpResponse:
    return render(request, "explorer/_fact.html", {"fact": fact})


@login_required
@require_GET
def facts(request: HttpRequest) -> HttpResponse:
    """Every fact, current first, then what they superseded, with their dates."""
    subject = (request.GET.get("subject") or "").strip()[:200]
    if "\x00" in subject:  # no subject holds one, and Postgres cannot compare text that does
        errors = ["A subject cannot contain a NUL character (%00)."]
        return render(request, "explorer/facts.html", {"subject": "", "errors": errors}, status=400)
    return render(request, "explorer/facts.html", {"subject": subject})


@login_required
@require_POST
def fact_pin(request: HttpRequest, fact_id: int) -> HttpResponse:
    pinned = (request.POST.get("pinned") or "true").strip().lower() in {"1", "true", "on", "yes"}
    fact = _get_fact_for_user(request.user, fact_id).set_pinned(pinned)
    if request.htmx:
        return _row(request, fact)
    flash.success(request, "Fact pinned." if pinned else "Fact unpinned.")
    return _back(request)


@login_required
@require_POST
def fact_correct(request: HttpRequest, fact_id: int) -> HttpResponse:
    """The person's wording replaces the drawn statement; an empty one goes back to it."""
    fact = _get_fact_for_user(request.user, fact_id)
    text = request.POST.get("text") or ""
    error = ""
    if len(text) > MAX_CORRECTION:
        error = f"A correction is at most {MAX_CORRECTION} characters; nothing was changed."
    elif "\x00" in text:
        error = "A correction cannot contain a NUL character; nothing was changed."
    if error:
        if request.htmx:
            return render(request, "explorer/_fact.html", {"fact": fact, "error": error}, status=400)
        flash.error(request, error)
        return _back(request)
    fact.correct(text)
    if request.htmx:
        return _row(request, fact)
    flash.success(request, "Fact corrected.")
    return _back(request)


@login_required
@require_POST
def fact_forget(request: HttpRequest, fact_id: int) -> HttpResponse:
    """The fact goes for good; what it had superseded holds again. Under a reply in the chat
    ("Saved to memory: … Undo"), the line says it was removed."""
    _get_fact_for_user(request.user, fact_id).forget()
    if request.htmx:
        if request.POST.get("undo"):
            return render(request, "explorer/_fact_undone.html")
        return HttpResponse("")
    flash.success(request, "Fact forgotten.")
    return _back(request)
