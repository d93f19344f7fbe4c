"""Fixtures shared by every test: two users (an owner and a stranger) on the real Postgres, and
a run that never reaches a real LLM or embedding provider, whatever the shell exported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.test import override_settings

from memory.models import Conversation

# Environment variables that point the app at a provider (an exported OPENAI_API_KEY would
# have tests call a real, paid model).
PROVIDER_PREFIXES = ("OPENAI_", "EMBEDDING_")


def _provider_variables() -> list[str]:
    return [name for name in os.environ if name.startswith(PROVIDER_PREFIXES)]


def _provider_settings_when_unset() -> dict[str, object]:
    """The provider settings config/settings.py derives with none of those variables set, read
    from a fresh interpreter (the settings were computed at import, from the shell's values)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(PROVIDER_PREFIXES)}
    # A placeholder database URL and key: reading the settings connects to nothing, writes nothing.
    env.update(DATABASE_URL="postgres://nobody@127.0.0.1:1/none", SECRET_KEY="settings-probe")
    probe = (
        "import json, config.settings as s; "
        f"print(json.dumps({{k: getattr(s, k) for k in dir(s) if k.startswith({PROVIDER_PREFIXES!r})}}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=django_settings.BASE_DIR, capture_output=True,
        text=True, check=True,
    )
    return json.loads(out.stdout)


@pytest.fixture(scope="session", autouse=True)
def _provider_settings_as_if_unset():
    """Session-wide (before the test database is built, whose vector size they decide): the
    settings derived from OPENAI_*/EMBEDDING_* take their unset values."""
    if not _provider_variables():
        yield
        return
    with override_settings(**_provider_settings_when_unset()):
        yield


@pytest.fixture(autouse=True)
def _no_provider_environment(monkeypatch):
    """Every test starts without OPENAI_*/EMBEDDING_* variables, so code that reads the
    environment, and servers the tests start, see none of the shell's."""
    for name in _provider_variables():
        monkeypatch.delenv(name)


@pytest.fixture
def owner(db):
    return get_user_model().objects.create_user("owner", password="owner-pass-123")


@pytest.fixture
def stranger(db):
    return get_user_model().objects.create_user("stranger", password="stranger-pass-123")


@pytest.fixture
def conversation(owner):
    return Conversation.objects.create(owner=owner, title="Test conversation")


@pytest.fixture
def stranger_conversation(stranger):
    return Conversation.objects.create(owner=stranger, title="Stranger's conversation")
