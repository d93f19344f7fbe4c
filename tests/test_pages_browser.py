"""Pages of the whole site as a person sees them in Debian's Chromium: the error pages (404,
403, a refused form, 500) in the app's layout on a 390 px phone, and the offline banner, one
line that stays dismissed for the session. Screenshots in test-artifacts/pages/."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import include, path, reverse

from tests.browser import CHROMIUM, CHROMIUM_ARGS, MISSING, serious_accessibility_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(settings.BASE_DIR) / "test-artifacts" / "pages"
PHONE = {"width": 390, "height": 844}

if not Path(CHROMIUM).exists():  # pragma: no cover - `make test` installs it
    pytest.fail(MISSING, pytrace=False)


def _forbidden(request):
    raise PermissionDenied


def _broken(request):
    raise RuntimeError("a bug, for the 500 page")


# The site's own URLs and two that fail as a bug or a refusal would (ROOT_URLCONF in these tests).
urlpatterns = [
    path("test-forbidden/", _forbidden),
    path("test-broken/", _broken),
    path("", include("config.urls")),
]


@pytest.fixture
def phone(live_server, owner, monkeypatch, settings):
    """A signed-in Chromium tab at 390 px, and a way to switch it to dark mode."""
    from playwright.sync_api import sync_playwright

    settings.ROOT_URLCONF = __name__
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    signed_in = Client()
    signed_in.force_login(owner)
    session = signed_in.cookies[settings.SESSION_COOKIE_NAME].value
    cookie = {"name": settings.SESSION_COOKIE_NAME, "value": session,
              "domain": live_server.url.split("//")[1].split(":")[0], "path": "/"}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        tab_context = chromium.new_context(viewport=PHONE)
        tab_context.add_cookies([cookie])
        tab = tab_context.new_page()
        tab.base = live_server.url
        yield tab
        tab_context.close()
        chromium.close()


def _sideways(tab) -> int:
    return tab.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")


@pytest.mark.parametrize(
    ("where", "status", "heading"),
    [
        ("/explorer/messages/01NOSUCHMESSAGE0000000000/", 404, "This page does not exist"),
        ("/no/such/page/", 404, "This page does not exist"),
        ("/test-forbidden/", 403, "Not allowed"),
        ("/test-broken/", 500, "Something went wrong"),
    ],
)
def test_an_error_page_is_a_page_of_the_app_on_a_phone(phone, where, status, heading):
    response = phone.goto(phone.base + where)
    assert response.status == status
    assert phone.get_by_role("heading", level=1).inner_text() == heading
    assert phone.locator("header.topbar .brand").is_visible()  # the app's own layout
    assert phone.get_by_role("link", name="Your chats").is_visible()
    assert _sideways(phone) <= 0, "the page scrolls sideways at 390 px"
    for scheme in ("light", "dark"):
        phone.emulate_media(color_scheme=scheme)
        name = f"error-{status}-{where.strip('/').replace('/', '-')}-{scheme}"
        phone.screenshot(path=str(ARTIFACTS / f"{name}-390.png"), full_page=True)
        assert serious_accessibility_violations(phone) == [], scheme
    phone.set_viewport_size({"width": 1280, "height": 800})
    phone.screenshot(path=str(ARTIFACTS / f"{name}-1280.png"), full_page=True)
    assert _sideways(phone) <= 0


def test_a_form_refused_for_its_expired_token_says_nothing_was_changed(phone):
    phone.goto(phone.base + reverse("chat:home"))
    # The form as an old tab would send it: with a token that is no longer valid.
    phone.evaluate(
        """(action) => { const f = document.createElement('form'); f.method = 'post'; f.action = action;
             const t = document.createElement('input');
             t.name = 'csrfmiddlewaretoken'; t.value = 'x'.repeat(64);
             f.appendChild(t); document.body.appendChild(f); f.submit(); }""",
        reverse("dismiss_banner"),
    )
    phone.wait_for_selector("h1#error-title")
    assert phone.get_by_role("heading", level=1).inner_text() == "The form had expired"
    assert "nothing was changed" in phone.locator(".error-page").inner_text()
    assert _sideways(phone) <= 0
    assert serious_accessibility_violations(phone) == []


def test_the_offline_banner_is_one_line_and_stays_dismissed_for_the_session(phone):
    phone.goto(phone.base + reverse("chat:home"))
    banner = phone.locator("#offline-banner")
    assert banner.is_visible() and "Offline recall" in banner.inner_text()
    line = phone.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.banner')).lineHeight)")
    height = banner.bounding_box()["height"]
    phone.screenshot(path=str(ARTIFACTS / "offline-banner-phone.png"))
    assert height < 1.5 * line + 12, (height, line)  # one line and its padding, not five
    for scheme in ("light", "dark"):
        phone.emulate_media(color_scheme=scheme)
        assert serious_accessibility_violations(phone) == [], scheme
    # How to connect a model opens below it on demand.
    phone.get_by_text("Set one up").click()
    assert phone.get_by_text("OPENAI_API_KEY").is_visible()
    phone.get_by_role("button", name="Dismiss this notice").click()
    banner.wait_for(state="detached")
    phone.goto(phone.base + reverse("explorer:overview"))
    assert phone.get_by_role("heading", level=1).count() >= 1
    assert phone.locator("#offline-banner").count() == 0  # still gone on the next page
