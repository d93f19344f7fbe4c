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


def accessibility_in_both_themes(page) -> list[str]:
    """serious_accessibility_violations of the page as it stands, in the light theme and then
    the dark one (the page is left in the light theme)."""
    found = []
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        found += [f"{scheme}: {v}" for v in serious_accessibility_violations(page)]
    page.emulate_media(color_scheme="light")
    return found


WIDTHS = ((1280, 900), (390, 844))  # a laptop and a phone


def screenshots(page, folder, name: str, *, full_page: bool = True) -> None:
    """`name`-1280.png and `name`-390.png of the page as it stands (whole, or what a screen
    shows of a long list) in `folder`; the page is left at 1280 px."""
    folder.mkdir(parents=True, exist_ok=True)
    for width, height in reversed(WIDTHS):
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=str(folder / f"{name}-{width}.png"), full_page=full_page)
