"""Debian's Chromium for browser tests, launched as this machine needs it (never downloaded)."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
MISSING = "Debian's chromium is not installed: `make test` installs it (apt-get install chromium)"


def serious_accessibility_violations(page) -> list[str]:
    """What axe-core finds serious or critical on the page as it stands (axe runs in the page:
    its script comes with the package, nothing is fetched)."""
    from axe_playwright_python.sync_playwright import Axe

    violations = Axe().run(page).response["violations"]
    return [
        f"{v['id']} ({v['impact']}) at {n['target']}: {n['any'][0]['message'] if n['any'] else v['help']}"
        for v in violations
        if v["impact"] in {"serious", "critical"}
        for n in v["nodes"]
    ]
