"""Request guards that hold for every page."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse


def nul_paths_not_found(get_response):
    """A path holding NUL (`%00`) names nothing: no id holds one, and Postgres cannot even
    compare text holding one, so every view would fail looking it up. 404 before any does."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path_info:
            raise Http404("No such page")
        return get_response(request)

    return middleware
