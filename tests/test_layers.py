"""The layering written in pyproject.toml's import-linter contracts holds.

The contracts say which way imports run: the web apps (chat, explorer) over memory; inside
memory, background work over moving memory in and out, over the model's context, over the
lifecycle of a message, over organizing/knowledge/finding, over storage, over the models and
helpers; the explorer never imports chat; the product imports nothing of bench/ or tests/.
An import inside a function counts like any other."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
LINTER = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = [c["name"] for c in LINTER["contracts"]]


def lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    command = [str(LINT_IMPORTS), "--no-cache", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def report() -> str:
    done = lint_imports(ROOT)
    return done.stdout + done.stderr


@pytest.mark.parametrize("contract", CONTRACTS)
def test_the_contract_holds(report, contract):
    lines = [" ".join(line.split()) for line in report.splitlines()]
    text = " ".join(lines)
    assert f"{' '.join(contract.split())} KEPT" in text, report[-6000:]


def test_the_contracts_cover_the_layers_the_house_names():
    assert any("memory/ is layered" in c for c in CONTRACTS)
    assert any("explorer never imports chat" in c for c in CONTRACTS)
    assert any("benchmarks" in c for c in CONTRACTS)


def test_the_linter_sees_an_import_inside_a_function(tmp_path):
    package = tmp_path / "probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from probe import high\n    return high\n")
    (package / "high.py").write_text("from probe import low\n")
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [tool.importlinter]
            root_packages = ["probe"]

            [[tool.importlinter.contracts]]
            name = "high over low"
            type = "layers"
            layers = ["probe.high", "probe.low"]
            """
        )
    )
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "probe.low -> probe.high" in done.stdout


# A room a person can hold in their head: no module of the product's apps past this many lines.
MAX_MODULE_LINES = 800


def test_no_module_of_the_apps_is_over_800_lines():
    too_long = {
        str(path.relative_to(ROOT)): lines
        for app in ("memory", "explorer", "chat", "config")
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not too_long, f"split these by concern: {too_long}"
