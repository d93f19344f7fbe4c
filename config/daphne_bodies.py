"""daphne, with request bodies that cannot fill the server's memory (config.bodies says why and
what the application then does).

daphne 4 leaves three holes, each measured with a real upload (issue 32): Twisted parses a
multipart body for its own `args` by reading it whole into memory (a 300 MB upload: 3.9 GB
peak); daphne queues a whole body, read back from Twisted's temporary file, as messages in
memory before the application asks for them (a 1,000 MB sign-in: +1 GB); and no size is
refused before the body has arrived. Here:

- a body whose Content-Length is beyond `largest_body()`, or a chunked one that grows past it,
  is dropped as it arrives, and the request goes on without it, marked REFUSED_HEADER;
- Twisted never parses form bodies (Django does, streaming files to disk);
- the body reaches the application from Twisted's temporary file a read at a time, when it
  asks (`_BodyQueue`).

Imported only where daphne runs (manage.py serve, `python -m config.serving`): importing daphne's
server installs Twisted's asyncio reactor.
"""

from __future__ import annotations

import asyncio
import io
from functools import partial

from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.server import Server

from config.bodies import REFUSED_HEADER, largest_body

# What one message to the application carries (daphne's default read is 8 KiB).
BODY_READ = 256 * 1024


class BoundedRequest(WebRequest):
    refused: int | None = None
    received = 0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Twisted would read a whole multipart body into memory (and parse it, a dozen times its
        # size) to fill `args`, which nothing uses.
        self._parsePOSTFormSubmission = False

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > largest_body():
            self.refused = length
            self.content = io.BytesIO()  # stays empty: the bytes are dropped as they come
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self.refused is not None:
            return
        self.received += len(data)
        if self.received > largest_body():  # a chunked body that declared no length
            self.refused = self.received
            self.content.close()
            self.content = io.BytesIO()
            return
        super().handleContentChunk(data)

    def process(self):
        if self.refused is not None:
            self.requestHeaders.setRawHeaders(REFUSED_HEADER, [str(self.refused).encode()])
            self.content = io.BytesIO()
        return super().process()


class BoundedHTTPFactory(HTTPFactory):
    def buildProtocol(self, addr):
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedRequest
        return protocol


class _BodyQueue(asyncio.Queue):
    """The application's input queue of one HTTP request: its body is read from `body` (a file)
    when the application asks for it, a message of BODY_READ bytes at a time; what daphne puts
    (its own reading of the body, dropped, and the client's going away) comes after, or first
    when the client has gone."""

    def __init__(self, body) -> None:
        super().__init__()
        self.body = body

    def put_nowait(self, message: dict) -> None:
        if message.get("type") == "http.request":
            return  # daphne's copy of the body: this queue reads it itself
        super().put_nowait(message)

    async def get(self) -> dict:
        if self.body is not None and self.empty():
            chunk = self.body.read(BODY_READ)
            more = len(chunk) == BODY_READ
            if not more:
                self.body.close()
                self.body = None
            return {"type": "http.request", "body": chunk, "more_body": more}
        return await super().get()


class BoundedServer(Server):
    """daphne's Server with BoundedRequest for HTTP, and each HTTP request's body read as the
    application asks for it."""

    @property
    def http_factory(self):
        return self._http_factory

    @http_factory.setter
    def http_factory(self, factory) -> None:
        # Server.run makes daphne's HTTPFactory; this one makes BoundedRequests.
        self._http_factory = BoundedHTTPFactory(self) if type(factory) is HTTPFactory else factory

    def create_application(self, protocol, scope):
        if not isinstance(protocol, BoundedRequest) or scope.get("type") != "http":
            return super().create_application(protocol, scope)
        # daphne's create_application, with a _BodyQueue over the request's body file; daphne
        # then reads (and queues, to be dropped) an empty body.
        assert "application_instance" not in self.connections[protocol]
        body, protocol.content = protocol.content, io.BytesIO()
        body.seek(0)
        input_queue = _BodyQueue(body)
        scope.setdefault("asgi", {"version": "3.0"})
        application_instance = self.application(
            scope=scope, receive=input_queue.get, send=partial(self.handle_reply, protocol)
        )
        if protocol not in self.connections:
            return None
        self.connections[protocol]["application_instance"] = asyncio.ensure_future(
            application_instance, loop=asyncio.get_event_loop()
        )
        return input_queue


class BoundedCommandLineInterface(CommandLineInterface):
    server_class = BoundedServer
