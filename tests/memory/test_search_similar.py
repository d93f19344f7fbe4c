"""memory.finding.search.similar_messages: the explorer's "most similar", through search()'s vector search."""

from __future__ import annotations

import pytest

from memory.finding.search import similar_messages
from memory.lifecycle import deleting
from memory.models import Message
from memory.storage import store
from tests.memory.conftest import EVERYDAY_TEXTS


@pytest.fixture
def notes(owner, conversation, turns):
    return turns(owner, conversation, EVERYDAY_TEXTS)


def by_text(messages, text):
    return next(m for m in messages if m.content == text)


def test_it_finds_the_nearest_messages_but_never_the_message_itself(owner, notes):
    roof = by_text(notes, "the invoice for the roof repair is overdue")
    similar = similar_messages(owner, roof, limit=3)
    ids = [s["message"].pk for s in similar]
    assert roof.pk not in ids
    assert len(ids) == 3
    assert ids[0] == by_text(notes, "the garden shed roof leaks again").pk
    assert [s["similarity"] for s in similar] == sorted((s["similarity"] for s in similar), reverse=True)


def test_it_leaves_out_deleted_messages(owner, notes):
    roof = by_text(notes, "the invoice for the roof repair is overdue")
    shed = by_text(notes, "the garden shed roof leaks again")
    deleting.delete_message(owner, shed.pk)
    ids = [s["message"].pk for s in similar_messages(owner, roof, limit=7)]
    assert shed.pk not in ids and ids


def test_a_message_without_a_vector_has_no_neighbours_yet(owner, conversation, notes):
    bare = store.store_message(owner, conversation, "user", "not embedded yet", embed=False)
    assert similar_messages(owner, bare) is None


def test_a_stranger_gets_nothing_for_the_owners_message(owner, stranger, stranger_conversation, notes, turns):
    turns(stranger, stranger_conversation, ["the roof of my house leaks"])
    roof = by_text(notes, "the invoice for the roof repair is overdue")
    assert similar_messages(stranger, roof) is None
    theirs = Message.objects.owned_by(stranger).get()
    found = similar_messages(owner, theirs)
    assert found is None
    assert all(s["message"].owner_id == owner.pk for s in similar_messages(owner, roof, limit=7))
