"""The project's modules form no import cycle, and each imports on its own.

An import inside a function is an edge like any other: it runs, just later, and a cycle that
only a late import keeps from failing is still a cycle."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("chat", "memory", "explorer", "config")


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(name: str, path: Path) -> list[tuple[str, int]]:
    """Every name an import statement of the module reaches, at module level or in a function,
    with the statement's line; `from a import b` reaches a.b when that is a module, else a."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *filter(None, [node.module])])
            found += [(base, node.lineno)] + [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """Project module -> the project modules it imports, each with the line of its import."""
    modules = project_modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for target, line in imported_names(name, path):
            while target and target not in modules:
                target = target.rpartition(".")[0]  # a name inside a module: the module
            if target and target != name and not name.startswith(f"{target}."):
                edges.setdefault(target, line)
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle as the path a -> b -> ... -> a, or None."""
    state: dict[str, str] = {}  # "open" while on the path, "done" once all below it is seen
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    graph = import_graph()
    assert "memory.models" in graph["memory.storage.store"]
    # memory.apps connects memory.tasks' receivers from inside ready().
    assert "memory.tasks" in graph["memory.apps"]
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {}}) == ["a", "b", "c", "a"]


def test_no_project_module_imports_itself_through_a_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle:
        steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:], strict=False)]
        raise AssertionError("import cycle:\n  " + "\n  ".join(steps))


# Run in a fresh interpreter: the third-party packages every module stands on are loaded once,
# then each module is imported in a forked child of its own, after django.setup() (as in any
# process of the project), so no module leans on another one having been imported before it.
EACH_ON_ITS_OWN = r"""
import importlib, os, sys, traceback
import django

for name in ("daphne.server", "psycopg", "django.db.backends.postgresql.base", "django.http",
             "django.urls", "django.template", "django.db.models", "channels.generic.websocket",
             "django_tasks", "numpy", "pgvector.django", "openai", "markdown", "nh3", "tiktoken"):
    importlib.import_module(name)

running, failed = {}, []


def reap():
    pid, status = os.wait()
    if status:
        failed.append(running[pid])
    del running[pid]


for name in sys.argv[1:]:
    if len(running) >= os.cpu_count():
        reap()
    pid = os.fork()
    if pid == 0:
        try:
            django.setup()
            importlib.import_module(name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    running[pid] = name
while running:
    reap()
print("failed:", " ".join(sorted(failed)))
sys.exit(1 if failed else 0)
"""


def test_each_module_imports_on_its_own():
    # Migrations are loaded by Django's migration loader, not imported by the project's code.
    names = [name for name in project_modules() if ".migrations" not in name]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", EACH_ON_ITS_OWN, *names],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
