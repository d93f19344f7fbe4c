"""Request guards that hold for every page."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from memory.timeouts import cancelled, seconds, statement_limit

# Query parameters that carry an id (`?message=` on the tool-call list, `?at=` in a chat, `?job=`
# on an import's progress).
ID_PARAMETERS = ("message", "at", "job")


def nul_paths_not_found(get_response):
    """A path or an id parameter holding NUL (`%00`) names nothing: no id holds one, and
    Postgres cannot even compare text holding one, so every view would fail looking it up.
    404 before any does."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path_info or any(
            "\x00" in value for name in ID_PARAMETERS for value in request.GET.getlist(name)
        ):
            raise Http404("No such page")
        return get_response(request)

    return middleware


def small_bodies_when_signed_out(get_response):
    """DATA_UPLOAD_MAX_MEMORY_SIZE is sized for a signed-in person's longest message; a request
    from no one in particular keeps Django's 2.5 MB (413 past it), before any form reads it."""

    def middleware(request: HttpRequest) -> HttpResponse:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > settings.SIGNED_OUT_MAX_BODY_BYTES and not request.user.is_authenticated:
            return HttpResponse("Request body too large.", status=413, content_type="text/plain")
        return get_response(request)

    return middleware


def reads_end_in_time(get_response):
    """A page that only reads (GET, HEAD) runs its statements under QUERY_TIMEOUT_MS
    (memory/timeouts.py); one that ran out answers 503 with a page saying so, instead of
    holding the person (and a server thread) for minutes. A change (POST) is not cut short
    halfway, and a download that streams reads after its view has returned."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return get_response(request)
        with statement_limit():
            return get_response(request)

    def process_exception(request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if request.method not in ("GET", "HEAD") or not cancelled(exception):
            return None
        template = "too_slow.html"
        return render(request, template, {"limit": seconds()}, status=503)

    middleware.process_exception = process_exception
    return middleware
