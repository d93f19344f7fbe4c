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
    source = Path(explorer.views.__file__).read_text(encoding="utf-8")
    found = [marker for marker in SQL_MARKERS if re.search(marker, source, re.IGNORECASE)]
    assert found == []
