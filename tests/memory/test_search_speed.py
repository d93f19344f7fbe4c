"""How search reads a large memory: which vector scan it picks, and keyword candidates scored
once. Sizes are shrunk with the module's own thresholds so a few turns stand for a big history."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import search as search_module
from memory.models import Conversation
from memory.search import SearchFilters, SearchResults, _keyword_candidates, _vector_candidates, search
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

pytestmark = pytest.mark.django_db

TEXTS = EVERYDAY_TEXTS[:6]


def vector_sql(captured) -> str:
    return next(q["sql"] for q in captured if "<=>" in q["sql"] and "LIMIT" in q["sql"])


def test_a_memory_with_many_vectors_is_searched_through_the_hnsw_index(owner, conversation, monkeypatch):
    monkeypatch.setattr(search_module, "EXACT_SEARCH_MAX", 3)
    add_turns(owner, conversation, TEXTS)
    with CaptureQueriesContext(connection) as captured:
        rows = _vector_candidates(owner, "where do herons nest?", SearchFilters(), 50, SearchResults(""))
    assert "+ 0" not in vector_sql(captured), "the graph walk, not an exact scan"
    assert any("enable_sort" in q["sql"] for q in captured)
    assert "heron" in rows[0][3]
    assert [r[4] for r in rows] == sorted((r[4] for r in rows), reverse=True)


def test_a_narrow_filter_on_a_large_memory_is_scanned_exactly(owner, conversation, monkeypatch):
    monkeypatch.setattr(search_module, "EXACT_SEARCH_MAX", 3)
    add_turns(owner, conversation, TEXTS)
    other = Conversation.objects.create(owner=owner)
    add_turns(owner, other, ["a grey heron stood in the reeds", "the bakery sells rye bread"])
    filters = SearchFilters(conversation_id=other.pk)
    with CaptureQueriesContext(connection) as captured:
        rows = _vector_candidates(owner, "where do herons nest?", filters, 50, SearchResults(""))
    assert "+ 0" in vector_sql(captured), "two vectors pass the filter: read them all"
    assert [r[3] for r in rows] == ["a grey heron stood in the reeds", "the bakery sells rye bread"]


def test_a_wide_filter_on_a_large_memory_keeps_to_the_filter(owner, conversation, monkeypatch):
    monkeypatch.setattr(search_module, "EXACT_SEARCH_MAX", 2)
    add_turns(owner, conversation, TEXTS)
    with CaptureQueriesContext(connection) as captured:
        rows = _vector_candidates(owner, "heron", SearchFilters(role="user"), 50, SearchResults(""))
    assert "+ 0" not in vector_sql(captured)
    assert sorted(r[3] for r in rows) == sorted(TEXTS[0::2])


def test_a_passage_found_by_both_keyword_branches_is_one_candidate(owner, conversation, monkeypatch):
    # A sample of the two newest passages misses "heron": it counts as rare, so both the
    # whole-history branch and the recent branch find the same passages.
    monkeypatch.setattr(search_module, "DF_SAMPLE", 2)
    add_turns(owner, conversation, ["a heron on the pier", "the heron again, a heron!", "bread", "rye"])
    rows = _keyword_candidates(owner, "heron", SearchFilters(), 50, SearchResults(""))
    assert sorted(r[3] for r in rows) == ["a heron on the pier", "the heron again, a heron!"]
    assert rows[0][3] == "the heron again, a heron!", "two mentions outrank one"
    assert rows[0][4] > rows[1][4] > 0


def test_hits_carry_what_a_result_shows(owner, conversation):
    add_turns(owner, conversation, TEXTS)
    hits = search(owner, "sourdough starter", limit=3).hits
    top = hits[0]
    assert top.snippet == "sourdough starter needs feeding twice a day"
    assert (top.role, top.conversation, top.type, top.is_chunk) == ("user", conversation.pk, "message", False)
    assert top.message_id == top.id


def test_search_never_returns_a_strangers_passages(owner, conversation, stranger, monkeypatch):
    monkeypatch.setattr(search_module, "EXACT_SEARCH_MAX", 1)
    add_turns(owner, conversation, TEXTS)
    assert search(stranger, "heron nests by the lake").hits == []
