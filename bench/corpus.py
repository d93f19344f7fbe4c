"""Offline English prose for benchmarks: the docstrings of the Python standard library and the
installed packages (realistic technical English, never lorem ipsum), cut into blocks."""

from __future__ import annotations

import ast
import re
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

_PROSE = re.compile(r"[A-Za-z][a-z]+(?:[ ,.;:'()-]+[A-Za-z][a-z]+){8,}")


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="ignore"))
    except (SyntaxError, ValueError, RecursionError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc and len(doc) >= 300 and _PROSE.search(doc):
                # Keep the prose paragraphs; drop doctest and code-looking lines.
                lines = [
                    ln
                    for ln in doc.splitlines()
                    if not ln.lstrip().startswith((">>>", "...", "$", "#"))
                ]
                yield " ".join(" ".join(lines).split())


def prose(target_chars: int) -> Iterator[str]:
    """Docstrings, in a fixed order, until `target_chars` characters have been produced."""
    roots = [Path(sysconfig.get_paths()["stdlib"])]
    roots += [Path(p) for p in sys.path if p.endswith("site-packages")]
    seen: set[int] = set()
    produced = 0
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "test" in path.parts or "tests" in path.parts:
                continue
            for doc in _docstrings(path):
                key = hash(doc[:200])
                if key in seen:
                    continue
                seen.add(key)
                yield doc
                produced += len(doc)
                if produced >= target_chars:
                    return


def blocks(total_chars: int, block_chars: int = 2500) -> list[str]:
    """About `total_chars` of prose in blocks of about `block_chars`, cut at sentence ends."""
    out: list[str] = []
    current = ""
    for doc in prose(total_chars + block_chars):
        for sentence in re.split(r"(?<=[.!?])\s+", doc):
            current = f"{current} {sentence}".strip()
            if len(current) >= block_chars:
                out.append(current[: block_chars + 500])
                current = ""
                if sum(len(b) for b in out) >= total_chars:
                    return out
    if current:
        out.append(current)
    return out
