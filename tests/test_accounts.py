"""Accounts: the files holding secrets, signing in (throttled) and signing up."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
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
