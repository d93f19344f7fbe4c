"""The apps stand on their own: an installed copy has no tests/, and the benchmarks (bench/) may
use the apps but not the other way round."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = ["chat", "memory", "explorer", "config"]


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, nested ones (inside functions) included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def imports_of(package: str, forbidden: str) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, module in imported_modules(path)
        if module == forbidden or module.startswith(forbidden + ".")
    ]


@pytest.mark.parametrize("package", APPS)
def test_no_app_module_imports_from_tests(package):
    assert imports_of(package, "tests") == []


@pytest.mark.parametrize("package", APPS)
def test_no_app_module_imports_from_bench(package):
    assert imports_of(package, "bench") == []


def test_the_bench_imports_nothing_from_tests():
    assert imports_of("bench", "tests") == []


def test_the_walk_finds_a_nested_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from tests.servers import open_socket\n")
    assert imported_modules(module) == [(2, "tests.servers")]
