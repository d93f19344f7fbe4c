"""Debian's Chromium for browser tests, launched as this machine needs it (never downloaded)."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
MISSING = "Debian's chromium is not installed: `make test` installs it (apt-get install chromium)"
