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
