"""Fixtures shared by every test: two users (an owner and a stranger) on the real Postgres."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from memory.models import Conversation


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
