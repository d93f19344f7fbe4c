"""Which server process holds a row (a reply draft, a turn's slot, an import job), and whether
it is gone."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot), which tells a reused pid apart."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


HOST = socket.gethostname()
# This process: "host:pid:start time".
PROCESS = f"{HOST}:{os.getpid()}:{start_time(os.getpid()) or '?'}"


def is_dead(process: str) -> bool:
    """True when `process` ran on this host and is gone (or its pid now names another)."""
    try:
        host, pid, started = process.rsplit(":", 2)
        pid_number = int(pid)
    except ValueError:
        return False
    return host == HOST and start_time(pid_number) != started
