"""The Facts of memory in the explorer: a page of them, and correct, pin and forget one (htmx
swaps the fact's row; without htmx, back to where the person was)."""

from __future__ import annotations

from django.contrib import messages as flash
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from explorer.views.common import paginate, render_page
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


# The row of each place a fact is shown: the Memory overview's and an entity's (the default),
# and the Facts page's (row=memory).
ROWS = {"memory": "explorer/_memory_fact.html"}


def _row_template(request: HttpRequest) -> str:
    return ROWS.get(request.POST.get("row") or "", "explorer/_fact.html")


def _row(request: HttpRequest, fact: Fact) -> HttpResponse:
    return render(request, _row_template(request), {"fact": fact})


PER_PAGE = 50
REPLACED_SHOWN = 50


def page_context(request: HttpRequest, *, forget_error: str = "") -> dict:
    """The Facts page: the current facts (pinned first, then the newest), searched by their
    words (`q`) or one subject's (`subject`), a page at a time; what newer facts replaced."""
    subject = (request.GET.get("subject") or "").strip()[:200]
    q = (request.GET.get("q") or "").strip()[:200]
    found = Fact.objects.owned_by(request.user).live().select_related("message__conversation")
    if subject:
        found = found.about(subject)
    for word in q.split()[:8]:  # every word, in the fact's text (as drawn or corrected) or its subject
        found = found.filter(
            Q(statement__icontains=word) | Q(corrected__icontains=word) | Q(subject__icontains=word)
        )
    current = found.filter(superseded_by__isnull=True).order_by("-pinned", "-said_at", "-id")
    replaced = found.filter(superseded_by__isnull=False).select_related("superseded_by")
    return {
        "section": "facts",
        "subject": subject,
        "q": q,
        "page": paginate(request, current, per_page=PER_PAGE),
        "replaced": list(replaced.order_by("-valid_to", "-id")[:REPLACED_SHOWN]),
        "forget_error": forget_error,
    }


@login_required
@require_GET
@vary_on_headers("HX-Request")
def facts(request: HttpRequest) -> HttpResponse:
    """What Recollect remembers about the person, each fact with Edit, Forget and the message
    it came from; Download my data and Forget everything are on this page too."""
    asked = (request.GET.get("subject") or "") + (request.GET.get("q") or "")
    if "\x00" in asked:  # no fact holds one, and Postgres cannot compare text that does
        errors = ["A subject or search cannot contain a NUL character (%00)."]
        return render(request, "explorer/facts.html", {"section": "facts", "subject": "", "q": "",
                                                       "errors": errors}, status=400)
    return render_page(request, "explorer/facts.html", "fact-results", page_context(request))


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
            return render(request, _row_template(request), {"fact": fact, "error": error}, status=400)
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
