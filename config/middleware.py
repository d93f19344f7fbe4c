"""Request guards that hold for every page."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse

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
