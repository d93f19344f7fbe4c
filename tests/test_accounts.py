"""Accounts: the files holding secrets, signing in (throttled) and signing up."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
from django.core.management import call_command

from config import settings as config


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
