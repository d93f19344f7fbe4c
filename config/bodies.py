"""Request bodies, bounded: no request, however large, moves the server's memory by more than a
few reads of it.

Three layers, outermost first:

- daphne (config.daphne_bodies): a body declared (Content-Length) or streamed (chunked) past the
  largest any page takes (`largest_body`) is never kept: its bytes are dropped as they arrive
  and the request goes on, bodiless, marked with REFUSED_HEADER. Bodies within it wait in a
  temporary file (Twisted's), are not parsed by Twisted (it reads a multipart body whole to do
  so), and reach the application a read at a time, as it asks, instead of queued whole.
- `RefuseLargeBodies` (ASGI, in front of Django): a body over its page's limit (the import
  page's IMPORT_MAX_UPLOAD_MB; DATA_UPLOAD_MAX_MEMORY_SIZE for a signed-in person's forms;
  SIGNED_OUT_MAX_BODY_BYTES from no one in particular) is refused from its Content-Length before
  Django reads a byte of it. The request goes on as a GET of the same page, without its body,
  with `scope["body_refused"]`: the page can say why (the import page does, where the upload
  was), and nothing that changes anything runs.
- `refused_bodies` (Django middleware): such a request is answered 413, unless its view shows
  the refusal itself (`shows_refused_body`).
"""

from __future__ import annotations

import types
from http.cookies import SimpleCookie
from importlib import import_module
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

MB = 1024 * 1024
# A multipart upload carries its file and a little more (boundaries, headers, the CSRF field).
MULTIPART_SLACK = MB
REFUSED_HEADER = b"x-recollect-body-refused"
_NO_BODY = ("GET", "HEAD", "OPTIONS")


def import_limit() -> int:
    """The largest body the import page reads: a file of IMPORT_MAX_UPLOAD_MB in its form."""
    return settings.IMPORT_MAX_UPLOAD_MB * MB + MULTIPART_SLACK


def largest_body() -> int:
    """The largest body any page takes, from anyone: beyond it daphne drops the bytes unread."""
    return max(import_limit(), settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


def _header(scope: dict, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value
    return None


def _declared(scope: dict) -> int | None:
    value = _header(scope, b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _signed_in(scope: dict) -> bool:
    """Whether the session cookie of the request is a signed-in person's (Django's own check,
    its session hash included)."""
    from django.contrib.auth import get_user

    cookies = SimpleCookie()
    try:
        cookies.load((_header(scope, b"cookie") or b"").decode("latin-1"))
    except Exception:  # noqa: BLE001 - an unreadable cookie header signs no one in
        return False
    morsel = cookies.get(settings.SESSION_COOKIE_NAME)
    if morsel is None:
        return False
    session = import_module(settings.SESSION_ENGINE).SessionStore(morsel.value)
    return get_user(types.SimpleNamespace(session=session)).is_authenticated


async def body_limit(scope: dict, declared: int | None) -> int:
    """The largest body this request may carry (see the module docstring). The session is
    looked up only for a body larger than anyone may send."""
    if declared is not None and declared <= settings.SIGNED_OUT_MAX_BODY_BYTES:
        return settings.SIGNED_OUT_MAX_BODY_BYTES
    if not await database_sync_to_async(_signed_in)(scope):
        return settings.SIGNED_OUT_MAX_BODY_BYTES
    if scope.get("path") == reverse("explorer:import"):
        return import_limit()
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


class RefuseLargeBodies:
    """ASGI middleware in front of Django's HTTP application: see the module docstring."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http" or scope.get("method") in _NO_BODY:
            return await self.app(scope, receive, send)
        declared = _declared(scope)
        refused = _header(scope, REFUSED_HEADER)
        limit = await body_limit(scope, declared)
        if refused is not None or (declared is not None and declared > limit):
            size = declared if declared is not None else int(refused or 0)
            return await self.app(_refused(scope, size, limit), _without_body(receive), send)
        if declared is None:
            receive = _counted(receive, limit)  # chunked: cut off once past the limit
        return await self.app(scope, receive, send)


def _refused(scope: dict, size: int, limit: int) -> dict:
    """The scope of a refused request: a GET of the same page, with no body, saying why."""
    dropped = {b"content-length", b"content-type", b"transfer-encoding", REFUSED_HEADER}
    return {
        **scope,
        "method": "GET",
        "headers": [(k, v) for k, v in scope.get("headers") or () if k.lower() not in dropped],
        "body_refused": {"size": size, "limit": limit},
    }


def _without_body(receive):
    """An empty body at once; after it, only the client's going away (the body, if it comes,
    is read and dropped)."""
    sent = False

    async def receive_nothing() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message

    return receive_nothing


def _counted(receive, limit: int):
    """`receive`, which ends the request as the client's going away once more than `limit`
    bytes have come (a chunked body declares no length to refuse it by)."""
    total = 0

    async def receive_counted() -> dict[str, Any]:
        nonlocal total
        message = await receive()
        if message["type"] == "http.request":
            total += len(message.get("body") or b"")
            if total > limit:
                return {"type": "http.disconnect"}
        return message

    return receive_counted


# --- Django's side -------------------------------------------------------------------------------


def body_refused(request: HttpRequest) -> dict | None:
    """{"size", "limit"} when the request's body was refused as too large (it arrives as a GET
    without it), else None."""
    scope = getattr(request, "scope", None)
    return scope.get("body_refused") if isinstance(scope, dict) else None


def shows_refused_body(view):
    """Mark a view that answers a refused body itself (the import page: where the upload was)."""
    view.shows_refused_body = True
    return view


def refused_bodies(get_response):
    """413 for a request whose body was refused (see the module docstring), before its view runs,
    unless the view says why itself."""

    def middleware(request: HttpRequest) -> HttpResponse:
        return get_response(request)

    def process_view(request: HttpRequest, view_func, view_args, view_kwargs) -> HttpResponse | None:
        refused = body_refused(request)
        if refused is None or getattr(view_func, "shows_refused_body", False):
            return None
        return HttpResponse(
            f"Request body too large: {megabytes(refused['size'])} sent, this page takes at most "
            f"{megabytes(refused['limit'])}.",
            status=413, content_type="text/plain; charset=utf-8",
        )

    middleware.process_view = process_view
    return middleware


def megabytes(size: int) -> str:
    """A body's size as a person reads it: "1,000 MB", "2.5 MB", "12 KB"."""
    if size >= 10 * MB:
        return f"{size / MB:,.0f} MB"
    if size >= MB:
        return f"{size / MB:.1f} MB"
    return f"{max(1, round(size / 1024)):,} KB"
