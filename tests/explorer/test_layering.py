"""The explorer is a web layer: its views call memory for anything that reads the database in SQL."""

from __future__ import annotations

import re
from pathlib import Path

import explorer.views

SQL_MARKERS = [
    r"\bcursor\(",
    r"\.execute\(",
    r"\.raw\(",
    r"\.extra\(",
    r"\bconnection\b",
    r"\bSELECT\s",
    r"\bWITH\s+RECURSIVE\b",
    r"\bSET\s+LOCAL\b",
    r"ef_search",
]


def test_explorer_views_hold_no_sql():
    modules = sorted(Path(explorer.views.__file__).parent.rglob("*.py"))
    assert len(modules) > 1  # the package's modules, not just its __init__
    found = {
        module.name: marker
        for module in modules
        for marker in SQL_MARKERS
        if re.search(marker, module.read_text(encoding="utf-8"), re.IGNORECASE)
    }
    assert found == {}
