"""Accounts: the files holding secrets, signing in (throttled) and signing up."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db.models import F
from django.urls import reverse

from config import settings as config
from config.auth import SIGN_IN_FAILURE_WINDOW
from config.models import SignInAttempt


@pytest.fixture
def private_at_creation(monkeypatch):
    """No chmod afterwards and a umask that hides nothing: a file is as private as it was
    created, so one written world-readable and chmodded later shows up as such."""
    monkeypatch.setattr(Path, "chmod", lambda *args, **kwargs: None)
    monkeypatch.setattr(os, "chmod", lambda *args, **kwargs: None)
    previous = os.umask(0)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_generated_secret_key_is_private_from_the_start(tmp_path, monkeypatch, private_at_creation):
    monkeypatch.setattr(config, "DATA_DIR", tmp_path / "data")
    monkeypatch.delenv("SECRET_KEY", raising=False)
    key = config._secret_key()
    key_file = tmp_path / "data" / "secret_key"
    assert len(key) > 40 and mode(key_file) == 0o600
    assert config._secret_key() == key  # generated once, then kept
    assert sorted(p.name for p in key_file.parent.iterdir()) == ["secret_key"]  # no temporary left


@pytest.mark.django_db
def test_the_first_accounts_password_file_is_private_from_the_start(settings, tmp_path, private_at_creation):
    settings.DATA_DIR = tmp_path
    call_command("ensure_account", stdout=io.StringIO())
    credentials = tmp_path / "first-account.txt"
    assert "password: " in credentials.read_text() and mode(credentials) == 0o600


def sign_in(client, username: str, password: str, address: str = "203.0.113.7"):
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address)


def test_sign_in_is_refused_after_five_failures_for_a_username_and_address(client, owner):
    for _ in range(5):
        response = sign_in(client, "owner", "wrong guess")
        assert response.status_code == 200 and "didn't match" in response.content.decode()
    # The right password no longer helps from this address...
    response = sign_in(client, "owner", "owner-pass-123")
    assert response.status_code == 429
    assert (
        "Too many failed sign-ins" in response.content.decode() and "15 minutes" in response.content.decode()
    )
    assert "_auth_user_id" not in client.session
    # ...nor another spelling of the name; another address, or another username, is not held up.
    assert sign_in(client, "OWNER", "owner-pass-123").status_code == 429
    assert sign_in(client, "stranger", "wrong guess").status_code == 200
    assert sign_in(client, "owner", "owner-pass-123", address="198.51.100.2").status_code == 302


def test_sign_in_works_again_once_the_failures_are_old(client, owner):
    for _ in range(5):
        sign_in(client, "owner", "wrong guess")
    assert sign_in(client, "owner", "owner-pass-123").status_code == 429
    SignInAttempt.objects.update(at=F("at") - SIGN_IN_FAILURE_WINDOW)
    assert sign_in(client, "owner", "owner-pass-123").status_code == 302
    assert not SignInAttempt.objects.exists()  # old failures are cleared, a success forgives


def test_a_successful_sign_in_forgives_earlier_failures(client, owner):
    for _ in range(4):
        sign_in(client, "owner", "wrong guess")
    assert sign_in(client, "owner", "owner-pass-123").status_code == 302
    client.logout()
    for _ in range(5):
        assert sign_in(client, "owner", "wrong guess").status_code == 200
    assert sign_in(client, "owner", "owner-pass-123").status_code == 429


@pytest.mark.parametrize(
    ("password", "why"),
    [
        ("password123", "too common"),
        ("qwertyuiop", "too common"),
        ("x7#k", "too short"),
        ("80417395262", "entirely numeric"),
    ],
)
def test_sign_up_refuses_common_short_and_numeric_passwords(client, db, password, why):
    response = client.post(
        reverse("chat:signup"), {"username": "newbie", "password1": password, "password2": password}
    )
    assert response.status_code == 200 and why in response.content.decode()
    assert not get_user_model().objects.filter(username="newbie").exists()


# --- the sign-in limit cannot be walked around ---------------------------------------------------

def test_the_admins_sign_in_is_under_the_same_limit(client, owner):
    owner.is_staff = owner.is_superuser = True
    owner.save()
    for _ in range(3):
        assert sign_in(client, "owner", "wrong guess").status_code == 200
    for _ in range(2):
        response = client.post("/admin/login/", {"username": "owner", "password": "wrong guess"},
                               REMOTE_ADDR="203.0.113.7")
        assert response.status_code == 200 and "correct username and password" in response.content.decode()
    response = client.post("/admin/login/", {"username": "owner", "password": "owner-pass-123"},
                           REMOTE_ADDR="203.0.113.7")
    assert response.status_code == 429 and "Too many failed sign-ins" in response.content.decode()
    assert "_auth_user_id" not in client.session
    response = client.post("/admin/login/", {"username": "owner", "password": "owner-pass-123"},
                           REMOTE_ADDR="198.51.100.2")
    assert response.status_code == 302 and client.session["_auth_user_id"] == str(owner.pk)


async def asgi_sign_in(peer: str, forwarded_for: str, username: str = "owner") -> int:
    """A failed sign-in posted through the ASGI application daphne serves, from `peer` with an
    X-Forwarded-For header; answers the HTTP status."""
    from asgiref.testing import ApplicationCommunicator

    from config.asgi import application

    token = "k" * 32  # a bare CSRF secret is accepted as the token
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/login/", "raw_path": b"/login/", "query_string": b"", "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"), (b"cookie", f"csrftoken={token}".encode()),
            (b"x-csrftoken", token.encode()), (b"content-type", b"application/x-www-form-urlencoded"),
            (b"x-forwarded-for", forwarded_for.encode()),
        ],
        "client": (peer, 40000), "server": ("127.0.0.1", 8000),
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input(
        {"type": "http.request", "body": f"username={username}&password=wrong+guess".encode()}
    )
    start = await communicator.receive_output(60)
    while (await communicator.receive_output(60)).get("more_body"):
        pass
    return start["status"]


@pytest.mark.django_db  # serve resumes unfinished imports before daphne starts
def test_serve_does_not_let_daphne_believe_proxy_headers(monkeypatch):
    from daphne.cli import CommandLineInterface

    started = []
    monkeypatch.setattr(CommandLineInterface, "run", lambda self, argv: started.append(argv))
    call_command("serve", "--no-worker", "--port", "8123")
    assert CommandLineInterface().parser.parse_args(started[0]).proxy_headers is False


@pytest.mark.django_db(transaction=True)
async def test_a_forwarded_for_header_from_an_untrusted_peer_does_not_reset_the_limit(owner):
    statuses = [await asgi_sign_in("203.0.113.7", f"198.51.100.{n}") for n in range(6)]
    assert statuses == [200] * 5 + [429]
    addresses = {a async for a in SignInAttempt.objects.values_list("address", flat=True)}
    assert addresses == {"203.0.113.7"}


@pytest.mark.django_db(transaction=True)
async def test_a_trusted_proxys_forwarded_for_names_the_client(owner, settings):
    settings.TRUSTED_PROXIES = config.env_networks("RECOLLECT_UNSET_KNOB", "10.0.0.0/8,203.0.113.7")
    # The client wrote the first address itself; the second proxy (10.1.2.3) is trusted too.
    assert await asgi_sign_in("203.0.113.7", "192.0.2.66, 198.51.100.4, 10.1.2.3") == 200
    assert await asgi_sign_in("198.51.100.9", "192.0.2.1") == 200  # not a proxy: header ignored
    addresses = [a async for a in SignInAttempt.objects.order_by("at").values_list("address", flat=True)]
    assert addresses == ["198.51.100.4", "198.51.100.9"]


def test_trusted_proxies_must_be_addresses_or_networks(monkeypatch):
    monkeypatch.setenv("RECOLLECT_TEST_KNOB", "10.0.0.0/8, proxy.example")
    with pytest.raises(ImproperlyConfigured, match="RECOLLECT_TEST_KNOB"):
        config.env_networks("RECOLLECT_TEST_KNOB", "")
    monkeypatch.setenv("RECOLLECT_TEST_KNOB", "10.0.0.0/8, ::1")
    assert [str(n) for n in config.env_networks("RECOLLECT_TEST_KNOB", "")] == ["10.0.0.0/8", "::1/128"]
