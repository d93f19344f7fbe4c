"""The client's address behind a reverse proxy, believed only from TRUSTED_PROXIES.

daphne's own `--proxy-headers` takes X-Forwarded-For from whoever sends it, so a client could
name any address: each guess at a password under a new one would get a fresh sign-in limit,
and naming a victim's address would lock the victim out. Here the headers count only when the
peer that sent them is a trusted proxy, and the client is the last address of the chain that
is not one (the ones before it are whatever the client wrote)."""

from __future__ import annotations

import ipaddress

from django.conf import settings


def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return False
    return any(ip in network for network in settings.TRUSTED_PROXIES)


def _header(scope: dict, name: bytes) -> str | None:
    values = [v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == name]
    return ",".join(values) if values else None


def forwarded_client(scope: dict) -> tuple[tuple[str, int] | None, str | None]:
    """The (client, scheme) a trusted proxy reports for this connection, or (None, None)."""
    peer = scope.get("client")
    if not peer or not _trusted(peer[0]):
        return None, None
    client = None
    chain = _header(scope, b"x-forwarded-for")
    if chain:
        hops = [hop.strip() for hop in chain.split(",") if hop.strip()]
        while hops and _trusted(hops[-1]) and len(hops) > 1:
            hops.pop()
        if hops:
            client = (hops[-1].strip("[]")[:45], 0)
    proto = _header(scope, b"x-forwarded-proto")
    scheme = proto.split(",")[0].strip().lower() if proto else None
    if scheme not in {"http", "https"}:
        scheme = None
    if scheme and scope["type"] == "websocket":
        scheme = {"http": "ws", "https": "wss"}[scheme]
    return client, scheme


class TrustedProxyHeaders:
    """ASGI middleware: the client address and scheme from a trusted proxy's headers."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] in {"http", "websocket"} and settings.TRUSTED_PROXIES:
            client, scheme = forwarded_client(scope)
            if client or scheme:
                scope = dict(scope)
                if client:
                    scope["client"] = client
                if scheme:
                    scope["scheme"] = scheme
        return await self.app(scope, receive, send)
