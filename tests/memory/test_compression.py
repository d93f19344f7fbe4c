"""Result compression (seed 003 A5): long texts cut to the sentences that answer the query, with
offsets to read the rest."""

from __future__ import annotations

import pytest

from memory.context.compression import compress
from memory.context.tools import execute_tool
from memory.models import Conversation
from memory.storage.store import store_message
from memory.text import sentence_spans

FILLER = (
    "The meeting went on about budgets and the quarterly plan for a long while. "
    "Everyone agreed the coffee machine on the third floor needs replacing soon. "
    "There was a long digression on the office plants and who waters them. "
)
FACT = "The spare key to the boathouse is hidden under the blue flowerpot by the gate."
LONG = FILLER * 12 + FACT + " " + FILLER * 12


def test_it_keeps_the_sentences_that_answer_the_query_with_their_offsets():
    cut = compress(LONG, "where is the boathouse key hidden?", max_chars=200)
    assert cut.text() == FACT
    [excerpt] = cut.excerpts
    assert LONG[excerpt.start : excerpt.end] == FACT
    assert cut.ratio > 20 and cut.matched == "words"


def test_neighbouring_matches_read_as_one_excerpt_in_the_texts_order():
    text = "Alpha likes tea. Bravo likes coffee. Nothing here. Charlie likes tea too."
    cut = compress(text, "who likes tea", max_chars=200)
    assert [e.text for e in cut.excerpts][0].startswith("Alpha likes tea.")
    assert cut.excerpts[-1].text.endswith("Charlie likes tea too.")
    assert [e.start for e in cut.excerpts] == sorted(e.start for e in cut.excerpts)


def test_with_no_word_in_common_it_keeps_the_start_or_asks_the_similarity():
    text = "First sentence here. Second one there. Third is last."
    assert compress(text, "zebra", max_chars=25).text() == "First sentence here."
    by_similarity = compress(text, "zebra", max_chars=25, similarity=lambda s: [0.1, 0.2, 0.9])
    assert by_similarity.text() == "Third is last." and by_similarity.matched == "similarity"


def test_long_lines_without_full_stops_are_cut_in_pieces():
    text = "word " * 300
    spans = sentence_spans(text)
    assert len(spans) > 2 and all(e - s <= 400 for s, e in spans)


@pytest.mark.django_db
def test_search_and_retrieve_shows_a_long_messages_best_sentences_and_where_to_read_on(
    owner, conversation, stranger
):
    message = store_message(owner, conversation, "user", LONG)
    outcome = execute_tool(owner, "search_and_retrieve", {"query": "boathouse spare key flowerpot"})
    assert outcome.ok, outcome.error
    [item] = [m for m in outcome.result["messages"] if m["id"] == message.pk]
    assert item["compressed"] and FACT in item["content"]
    assert len(item["content"]) * 3 <= len(LONG)  # at least 3:1
    offset = item["excerpts"][0]["offset"]
    assert LONG[offset:].startswith(FACT)
    # The rest is one paging call away, from the offset given.
    page = execute_tool(owner, "get_message_by_id", {"id": message.pk, "offset": offset})
    assert page.result["content"].startswith(FACT)
    # Short messages are shown as they are; another user's search finds none of it.
    short = store_message(owner, conversation, "user", "the boathouse key is blue")
    outcome = execute_tool(owner, "search_and_retrieve", {"query": "boathouse key"})
    [plain] = [m for m in outcome.result["messages"] if m["id"] == short.pk]
    assert "compressed" not in plain and plain["content"] == "the boathouse key is blue"
    Conversation.objects.create(owner=stranger)
    theirs = execute_tool(stranger, "search_and_retrieve", {"query": "boathouse spare key flowerpot"})
    assert theirs.ok and theirs.result["messages"] == []


@pytest.mark.django_db
def test_vector_search_snippets_are_the_passages_best_sentences_with_an_offset(owner, conversation, settings):
    message = store_message(owner, conversation, "user", LONG)
    outcome = execute_tool(owner, "vector_search", {"query": "boathouse spare key flowerpot"})
    [hit] = [h for h in outcome.result["results"] if h["message_id"] == message.pk][:1]
    assert hit["compressed"] and "boathouse" in hit["snippet"]
    assert LONG[hit["offset"] :].startswith(hit["snippet"][:40])
    settings.RESULT_COMPRESSION = False
    outcome = execute_tool(owner, "vector_search", {"query": "boathouse spare key flowerpot"})
    assert not any(h.get("compressed") for h in outcome.result["results"])
