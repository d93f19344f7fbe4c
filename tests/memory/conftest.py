"""Fixtures for the memory engine tests: small histories with real embeddings."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memory.storage.store import NewMessage, store_messages


@pytest.fixture
def immediate_tasks(settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}


def add_turns(owner, conversation, texts, *, start=None, gap_minutes=1, embed=True, linked=False):
    """Store alternating user/assistant messages `gap_minutes` apart; returns them. linked: each
    replies to the one before it, as in a chat."""
    start = start or timezone.now() - dt.timedelta(days=1)
    items = [
        NewMessage(
            role="user" if i % 2 == 0 else "assistant",
            content=text,
            timestamp=start + dt.timedelta(minutes=gap_minutes * i),
        )
        for i, text in enumerate(texts)
    ]
    if linked:
        for before, item in zip(items, items[1:], strict=False):
            item.parent_id = before.id
    return store_messages(owner, conversation, items, embed=embed)


@pytest.fixture
def turns():
    return add_turns


# Short everyday notes on unrelated subjects, for tests that need distinct small messages.
EVERYDAY_TEXTS = [
    "the heron nests by the lake every spring",
    "my bike needs a new chain before the race",
    "we planted tomatoes and basil in the garden",
    "the invoice for the roof repair is overdue",
    "sourdough starter needs feeding twice a day",
    "the train to Lisbon leaves at nine",
    "the garden shed roof leaks again",
    "book the train tickets to Porto",
]
