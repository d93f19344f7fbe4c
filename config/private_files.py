"""Files only their owner may read (the secret key, the first account's password)."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def write_private_file(path: Path, text: str, *, replace: bool = True) -> bool:
    """Write `text` to `path` with mode 0600 from its first byte.

    The text goes to a new file created 0600 (O_EXCL: never one that someone else made first),
    which is then moved into place, so no reader ever sees it world-readable or half-written.
    With replace=False an existing `path` is kept and False returned: two processes starting at
    once agree on one secret key instead of each keeping its own.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(temporary, path)
            return True
        try:
            os.link(temporary, path)  # unlike rename, fails when `path` exists
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
