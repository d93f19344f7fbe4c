"""The storage API of seed 000 §6, against the real Postgres."""

from __future__ import annotations

import pytest

from memory.embedders import get_embedder
from memory.errors import ChunkEditError, DeletedMessageError, InvalidContent, NotFound
from memory.finding.search import search
from memory.lifecycle import deleting, forgetting
from memory.models import Message, Passage, ToolCall
from memory.storage import store
from memory.tokens import count_tokens


@pytest.fixture
def small_chunks(settings):
    """Chunk above 100 tokens (with 10 overlapping) so chunking needs no huge texts."""
    settings.INDEX_CHUNK_THRESHOLD = 100
    settings.INDEX_CHUNK_OVERLAP = 10
    return settings


def words(n: int, word: str = "alpha") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


def test_it_stores_a_short_message_with_one_embedded_passage(owner, conversation):
    m = store.store_message(owner, conversation, "user", "My Redis ticket is INFRA-992.")
    assert m.position == 0
    assert m.token_count == count_tokens("My Redis ticket is INFRA-992.")
    assert m.snippet == "My Redis ticket is INFRA-992."
    [passage] = Passage.objects.filter(logical_message=m)
    assert passage.embedding is not None
    assert passage.embedding_model == get_embedder().name
    assert len(passage.embedding) == 384


def test_it_orders_messages_by_position_and_links_replies(owner, conversation):
    first = store.store_message(owner, conversation, "user", "question")
    second = store.store_message(owner, conversation, "assistant", "answer", parent_id=first.pk)
    assert (first.position, second.position) == (0, 1)
    assert second.parent_id == first.pk
    assert list(first.replies.all()) == [second]


def test_it_snips_to_the_snippet_length(owner, conversation, settings):
    settings.INDEX_SNIPPET_LENGTH = 20
    m = store.store_message(owner, conversation, "user", "one two three four five six seven eight")
    assert len(m.snippet) <= 20
    assert m.snippet.endswith("…")


@pytest.mark.parametrize("content", ["", "   ", "\n\t "])
def test_it_refuses_empty_messages(owner, conversation, content):
    with pytest.raises(InvalidContent, match="empty"):
        store.store_message(owner, conversation, "user", content)
    assert not Message.objects.exists()


def test_it_refuses_an_unknown_role(owner, conversation):
    with pytest.raises(InvalidContent, match="role"):
        store.store_message(owner, conversation, "robot", "hello")


def test_it_keeps_a_message_with_nul_bytes_and_says_so(owner, conversation):
    m = store.store_message(owner, conversation, "user", "before\x00after")
    m.refresh_from_db()
    assert m.content == "before\u2400after"
    assert m.metadata["nul_bytes_replaced"] == 1


def test_it_chunks_a_long_message_keeping_role_timestamp_and_parent(
    owner, conversation, small_chunks
):
    parent = store.store_message(owner, conversation, "user", "start")
    text = words(400)
    m = store.store_message(owner, conversation, "assistant", text, parent_id=parent.pk, embed=True)
    chunks = list(m.chunks.order_by("chunk_index"))
    assert len(chunks) >= 4
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert all(c.is_chunk and c.role == "assistant" for c in chunks)
    assert all(c.timestamp == m.timestamp and c.parent_id == parent.pk for c in chunks)
    assert all(c.token_count <= 100 for c in chunks)
    assert m.content == text  # the whole text is kept on the message itself
    assert m.snippet == chunks[0].snippet
    # The chunks cover the text: first starts it, last ends it, neighbours overlap.
    assert text.startswith(chunks[0].content)
    assert text.endswith(chunks[-1].content)
    # Passages hang off the chunks, not the whole message, so nothing is embedded twice.
    assert not Passage.objects.filter(message=m).exists()
    assert Passage.objects.filter(logical_message=m).count() >= len(chunks)


def test_it_refuses_editing_a_chunk(owner, conversation, small_chunks):
    m = store.store_message(owner, conversation, "user", words(300), embed=False)
    chunk = m.chunks.first()
    with pytest.raises(ChunkEditError, match=m.pk):
        store.update_message(owner, chunk.pk, "new text")
    chunk.refresh_from_db()
    assert chunk.content != "new text"


def test_an_edit_keeps_the_id_and_the_history(owner, conversation):
    m = store.store_message(owner, conversation, "user", "The deploy is on Monday.")
    edited = store.update_message(owner, m.pk, "The deploy is on Thursday.")
    assert edited.pk == m.pk
    edited.refresh_from_db()
    assert edited.edited
    assert edited.content == "The deploy is on Thursday."
    assert [h["previous_content"] for h in edited.edit_history] == ["The deploy is on Monday."]
    [passage] = Passage.objects.filter(logical_message=m)
    assert passage.text == "The deploy is on Thursday."
    assert passage.embedding is not None
    hits = search(owner, "Thursday deploy").hits
    assert hits and hits[0].id == m.pk
    assert not any("Monday" in h.snippet for h in hits)


def test_an_edit_rechunks_when_the_text_grows_past_the_threshold(owner, conversation, small_chunks):
    m = store.store_message(owner, conversation, "user", "short text")
    store.update_message(owner, m.pk, words(300, "grown"))
    m.refresh_from_db()
    assert m.chunks.count() >= 3
    assert not Passage.objects.filter(message=m).exists()
    assert Passage.objects.filter(logical_message=m).count() >= 3


def test_an_edit_unchunks_when_the_text_shrinks_below_the_threshold(
    owner, conversation, small_chunks
):
    m = store.store_message(owner, conversation, "user", words(300), embed=True)
    old_chunk_ids = set(m.chunks.values_list("pk", flat=True))
    store.update_message(owner, m.pk, "now it is short")
    assert not Message.objects.filter(pk__in=old_chunk_ids).exists()  # no orphaned chunks
    assert m.chunks.count() == 0
    [passage] = Passage.objects.filter(logical_message=m)
    assert passage.message_id == m.pk and passage.text == "now it is short"


def test_an_edit_of_an_empty_text_is_refused_and_loses_nothing(owner, conversation):
    m = store.store_message(owner, conversation, "user", "keep me")
    with pytest.raises(InvalidContent):
        store.update_message(owner, m.pk, "  ")
    m.refresh_from_db()
    assert m.content == "keep me" and not m.edited


def test_a_deleted_message_is_never_found_and_restore_brings_it_back(owner, conversation):
    m = store.store_message(owner, conversation, "user", "The vault code is 7714.")
    deleting.delete_message(owner, m.pk)
    assert search(owner, "vault code 7714").hits == []
    with pytest.raises(NotFound):
        store.get_message(owner, m.pk)
    with pytest.raises(DeletedMessageError):
        store.update_message(owner, m.pk, "changed")
    deleting.restore_message(owner, m.pk)
    assert [h.id for h in search(owner, "vault code 7714").hits] == [m.pk]


def test_deleting_a_chunked_message_hides_its_chunks_too(owner, conversation, small_chunks):
    m = store.store_message(owner, conversation, "user", words(300, "zebra"), embed=True)
    deleting.delete_message(owner, m.pk)
    assert search(owner, "zebra250").hits == []
    assert not Message.objects.visible_to(owner).filter(chunk_parent=m).exists()


def test_forget_removes_content_chunks_passages_and_tool_calls(owner, conversation, small_chunks):
    question = store.store_message(owner, conversation, "user", "question")
    m = store.store_message(
        owner, conversation, "assistant", words(300), parent_id=question.pk, embed=True
    )
    reply = store.store_message(owner, conversation, "user", "thanks", parent_id=m.pk)
    store.store_tool_call(owner, m, "vector_search", {"query": "x"}, {"hits": []})
    forgetting.forget_message(owner, m.pk)
    assert not Message.objects.filter(pk=m.pk).exists()
    assert not Message.objects.filter(chunk_parent_id=m.pk).exists()
    assert not Passage.objects.filter(logical_message_id=m.pk).exists()
    assert not ToolCall.objects.filter(message_id=m.pk).exists()
    reply.refresh_from_db()
    assert reply.parent_id == question.pk  # the thread stays connected


def test_it_stores_a_tool_call_and_chunks_a_large_result(owner, conversation, small_chunks):
    m = store.store_message(owner, conversation, "assistant", "let me look")
    call = store.store_tool_call(
        owner, m, "web_search", {"query": "oauth"}, {"text": words(300)}, embed=True
    )
    assert call.message_id == m.pk
    assert call.chunks.count() >= 3
    passages = Passage.objects.filter(tool_call__in=[call, *call.chunks.all()])
    assert passages.exists()
    small = store.store_tool_call(owner, m, "get_message_by_id", {"id": "x"}, {"error": "none"})
    [p] = Passage.objects.filter(tool_call=small)
    assert p.text.startswith('get_message_by_id: {"id": "x"} -> ')


def test_a_five_megabyte_message_is_stored_whole_and_chunked(owner, conversation):
    sentence = "The quick brown fox jumps over the lazy dog near the river bank. "
    text = sentence * (5_000_000 // len(sentence) + 1)
    m = store.store_message(owner, conversation, "user", text)  # long: embedded in background
    m.refresh_from_db()
    assert m.content == text
    chunks = list(m.chunks.order_by("chunk_index"))
    assert len(chunks) > 200
    assert text.endswith(chunks[-1].content)
    # Every passage is stored (keyword-searchable at once), vectors come from background work.
    assert Passage.objects.filter(logical_message=m).count() > len(chunks)


def test_the_last_sentence_of_a_20000_token_message_is_found_by_meaning_and_keyword(
    owner, conversation
):
    filler = " ".join(
        f"Paragraph {i} describes the quarterly logistics review of warehouse {i} in general terms."
        for i in range(1400)
    )
    last = "Finally, the launch password for the submarine is violet-harbor-58."
    m = store.store_message(owner, conversation, "user", f"{filler} {last}", embed=True)
    assert m.token_count >= 20000
    store.store_message(owner, conversation, "user", "Let us talk about cooking pasta instead.")
    by_meaning = search(owner, "What is the secret code to launch the submarine?", limit=3).hits
    assert by_meaning and by_meaning[0].message_id == m.pk
    assert by_meaning[0].vector_rank == 1
    assert "violet-harbor-58" in by_meaning[0].passage_text
    by_keyword = search(owner, "violet-harbor-58", limit=3).hits
    assert by_keyword and by_keyword[0].message_id == m.pk and by_keyword[0].keyword_rank == 1


def test_a_stranger_sees_none_of_it(owner, stranger, conversation, stranger_conversation):
    m = store.store_message(owner, conversation, "user", "secret plans for the heist")
    for call in (
        lambda: store.get_message(stranger, m.pk),
        lambda: store.get_message_with_chunks(stranger, m.pk),
        lambda: store.update_message(stranger, m.pk, "hijacked"),
        lambda: deleting.delete_message(stranger, m.pk),
        lambda: deleting.restore_message(stranger, m.pk),
        lambda: forgetting.forget_message(stranger, m.pk),
        lambda: store.store_message(stranger, conversation, "user", "sneaky"),
        lambda: store.store_message(
            stranger, stranger_conversation, "user", "reply", parent_id=m.pk
        ),
        lambda: store.store_tool_call(stranger, m, "x", {}, {}),
        lambda: store.get_conversation(stranger, conversation.pk),
    ):
        with pytest.raises(NotFound):
            call()
    assert search(stranger, "secret plans heist").hits == []
    m.refresh_from_db()
    assert m.content == "secret plans for the heist" and not m.deleted


def test_an_unknown_id_is_a_clear_not_found(owner):
    with pytest.raises(NotFound, match="message 01NOPE not found"):
        store.get_message(owner, "01NOPE")


def test_edit_history_keeps_the_newest_versions_within_its_bounds(owner, conversation, monkeypatch):
    monkeypatch.setattr(store, "EDIT_HISTORY_MAX_VERSIONS", 3)
    monkeypatch.setattr(store, "EDIT_HISTORY_MAX_CHARS", 910)
    m = store.store_message(owner, conversation, "user", "version 0")
    for i in range(1, 6):
        m = store.update_message(owner, m.pk, f"version {i}")
    assert [v["previous_content"] for v in m.edit_history] == ["version 2", "version 3", "version 4"]
    assert m.metadata["edit_history_dropped"] == 2
    m = store.update_message(owner, m.pk, "x" * 900)
    m = store.update_message(owner, m.pk, "short again")
    # The 900-character version nearly fills the character bound: one 9-character one fits too.
    assert [len(v["previous_content"]) for v in m.edit_history] == [9, 900]
    assert m.metadata["edit_history_dropped"] == 5
    assert Message.objects.get(pk=m.pk).content == "short again"


def test_a_message_its_chunks_passages_and_version_are_written_in_one_round_trip(
    owner, conversation, small_chunks
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory.embedders import text_hash
    from memory.storage import versions

    text = words(250)
    with CaptureQueriesContext(connection) as statements:
        m = store.store_message(owner, conversation, "user", text, embed=False)
    sent = [q["sql"] for q in statements.captured_queries]
    sent = [sql for sql in sent if not sql.startswith(("SAVEPOINT", "RELEASE"))]
    # The position taken, then every row and the version's bump in one message.
    assert len(sent) == 2 and sent[0].startswith("UPDATE memory_conversation")
    assert sent[1].count("INSERT INTO") == 4 and "memory_memoryversion" in sent[1]
    chunks = list(Message.objects.filter(chunk_parent_id=m.pk).order_by("chunk_index"))
    assert len(chunks) == len(store.chunk_spans(text)) > 1 and not m._state.adding
    passages = list(Passage.objects.filter(logical_message=m).order_by("message_id", "index"))
    assert {p.message_id for p in passages} == {c.pk for c in chunks}
    assert all(p.text_hash == text_hash(p.text) and p.embedding is None for p in passages)
    assert m.memory_version == versions.current(owner.pk) > 0
    assert Message.objects.get(pk=m.pk).position == m.position == 0
    assert Passage.objects.filter(logical_message=m, search_vector="alpha249").exists()


def test_a_large_store_sends_each_batch_on_its_own_and_loses_nothing(owner, conversation, monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(store, "WRITES_TOGETHER", 1)
    items = [store.NewMessage(role="user", content=f"note {i} about the harbour") for i in range(3)]
    with CaptureQueriesContext(connection) as statements:
        stored = store.store_messages(owner, conversation, items, embed=False)
    sent = [q["sql"] for q in statements.captured_queries]
    sent = [sql for sql in sent if not sql.startswith(("SAVEPOINT", "RELEASE"))]
    # The positions, the messages' batch, the passages' batch, then the bump alone.
    assert [sql.count("INSERT INTO") for sql in sent] == [0, 1, 1, 1]
    assert [m.position for m in stored] == [0, 1, 2]
    assert Passage.objects.filter(logical_message__in=stored).count() == 3
    assert all(m.memory_version == stored[0].memory_version > 0 for m in stored)
