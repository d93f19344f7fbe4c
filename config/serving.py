"""How daphne is started, so that its websocket limits agree with MAX_MESSAGE_CHARS.

daphne drops a websocket that sends a message over `--websocket-max-message-size` (or a frame
over `--websocket-max-frame-size`), 1 MiB each unless told otherwise, before the chat sees it,
and silently does not send an event over the message limit. Every daphne Recollect starts
(`manage.py serve`, so `make run`; the tests' servers, through `python -m config.serving`)
takes its command line from `daphne_args`, with limits derived from the MAX_MESSAGE_CHARS of
the process it runs in; the chat page is given the same MAX_MESSAGE_CHARS to check first.
"""

from __future__ import annotations

import os
import sys

from django.conf import settings
from django.http import HttpRequest

# The most bytes one character (a code point, what Python's len() and MAX_MESSAGE_CHARS count)
# can take in a valid JSON frame: one outside the Basic Multilingual Plane written as an
# escaped surrogate pair, "\ud83d\ude00" (Python's json.dumps does this by default). The
# chat page's JSON.stringify needs at most 6 ("\u0001"), but the server must not refuse a
# message it would accept because a client escaped it differently.
MAX_JSON_BYTES_PER_CHAR = 12
# The rest of a frame: its type, parent_id and client_id (the server keeps 100 chars of it).
FRAME_OVERHEAD_BYTES = 64 * 1024
# daphne's message limit also caps what it sends, and the server answers a message with events
# carrying it as HTML: rendered and raw, so twice, and a third time where Markdown turns a run
# of text into a link (its href). At 12 bytes a character each, that is 36 (measured worst:
# 34, a long autolink of emoji); an event over the limit would be dropped, not sent.
ECHO_COPIES = 3


def websocket_max_frame_bytes(max_message_chars: int | None = None) -> int:
    """The largest websocket frame daphne reads: any frame carrying a message of at most
    `max_message_chars` (default MAX_MESSAGE_CHARS) fits, however it is escaped. With the
    default 8,000,000 that is about 92 MiB; only a signed-in user's socket is ever accepted,
    and a frame that declares more is refused before it is read."""
    chars = settings.MAX_MESSAGE_CHARS if max_message_chars is None else max_message_chars
    return chars * MAX_JSON_BYTES_PER_CHAR + FRAME_OVERHEAD_BYTES


def websocket_max_message_bytes(max_message_chars: int | None = None) -> int:
    """The largest websocket message daphne reads (in fragments) or sends: room for the events
    that carry a message of `max_message_chars` back to the page."""
    return ECHO_COPIES * websocket_max_frame_bytes(max_message_chars)


def daphne_args(*options: str, application: str = "config.asgi:application") -> list[str]:
    """daphne's command line: `options` (binding, proxy headers), the websocket limits, the app."""
    return [
        *options,
        "--websocket-max-frame-size", str(websocket_max_frame_bytes()),
        "--websocket-max-message-size", str(websocket_max_message_bytes()),
        application,
    ]


def message_limits(request: HttpRequest) -> dict[str, object]:
    """Context processor: the longest message the server accepts, for the page to check first."""
    return {"max_message_chars": settings.MAX_MESSAGE_CHARS}


def main(argv: list[str]) -> None:
    """`python -m config.serving -b HOST -p PORT`: daphne on config.asgi with Recollect's limits,
    read from the settings of the environment it runs in (as the tests start servers).
    `--application MODULE:NAME` first serves another ASGI app the same way (bench_ws's relay)."""
    from config.daphne_bodies import BoundedCommandLineInterface

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    application = "config.asgi:application"
    if argv[:1] == ["--application"]:
        application, argv = argv[1], argv[2:]
    BoundedCommandLineInterface().run(daphne_args(*argv, application=application))


if __name__ == "__main__":
    main(sys.argv[1:])
