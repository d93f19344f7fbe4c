from __future__ import annotations

import pytest

from memory import store
from memory.errors import ChunkEditError, InvalidContent, NotFound
from memory.models import Message, Passage


def test_it_stores_a_short_message_with_a_passage(owner, conversation):
    m = store.store_message(owner, conversation, "user", "My Redis ticket is INFRA-992.")
    assert m.position == 0
    assert m.token_count > 0
    assert m.snippet.startswith("My Redis")
    passages = list(Passage.objects.filter(logical_message=m))
    assert len(passages) == 1
    assert passages[0].embedding is not None
    assert passages[0].embedding_model == "all-MiniLM-L6-v2"


def test_it_refuses_empty_messages(owner, conversation):
    with pytest.raises(InvalidContent):
        store.store_message(owner, conversation, "user", "   \n ")
    assert not Message.objects.exists()


def test_it_refuses_editing_a_chunk(owner, conversation, settings):
    settings.INDEX_CHUNK_THRESHOLD = 100
    settings.INDEX_CHUNK_OVERLAP = 10
    m = store.store_message(owner, conversation, "user", "word " * 500)
    chunk = m.chunks.first()
    with pytest.raises(ChunkEditError):
        store.update_message(owner, chunk.pk, "new")


def test_it_hides_other_users_messages(owner, stranger, conversation):
    m = store.store_message(owner, conversation, "user", "secret plans")
    with pytest.raises(NotFound):
        store.get_message(stranger, m.pk)
