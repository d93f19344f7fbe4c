"""How search reads a large memory: which vector scan it picks, and keyword candidates scored
once. Sizes are shrunk with the module's own thresholds so a few turns stand for a big history."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from memory.finding import candidates
from memory.finding.candidates import _keyword_candidates, _vector_candidates
from memory.finding.search import SearchFilters, SearchResults, search
from memory.models import Conversation
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

pytestmark = pytest.mark.django_db

TEXTS = EVERYDAY_TEXTS[:6]


def explain(sql: str) -> str:
    """Postgres' plan for a captured "SELECT set_config(...); SELECT ..." message, under its settings."""
    settings_sql, query_sql = sql.split("; ", 1)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(settings_sql)
        cursor.execute("EXPLAIN " + query_sql)
        return "\n".join(r[0] for r in cursor.fetchall())


def vector_plan(captured) -> str:
    return explain(next(q["sql"] for q in captured if "<=>" in q["sql"] and "set_config" in q["sql"]))


def test_a_memory_with_many_vectors_is_searched_through_the_hnsw_index(owner, conversation, monkeypatch):
    monkeypatch.setattr(candidates, "EXACT_SEARCH_MAX", 3)
    add_turns(owner, conversation, TEXTS)
    with CaptureQueriesContext(connection) as captured:
        rows = _vector_candidates(owner, "where do herons nest?", SearchFilters(), 50, SearchResults(""))
    assert "hnsw" in vector_plan(captured), "the graph walk, not an exact scan"
    assert "heron" in rows[0][3]
    assert [r[4] for r in rows] == sorted((r[4] for r in rows), reverse=True)


def test_a_narrow_filter_on_a_large_memory_is_scanned_exactly(owner, conversation, monkeypatch):
    monkeypatch.setattr(candidates, "EXACT_SEARCH_MAX", 3)
    add_turns(owner, conversation, TEXTS)
    other = Conversation.objects.create(owner=owner)
    add_turns(owner, other, ["a grey heron stood in the reeds", "the bakery sells rye bread"])
    filters = SearchFilters(conversation_id=other.pk)
    with CaptureQueriesContext(connection) as captured:
        rows = _vector_candidates(owner, "where do herons nest?", filters, 50, SearchResults(""))
    assert "hnsw" not in vector_plan(captured), "two vectors pass the filter: read them all"
    assert [r[3] for r in rows] == ["a grey heron stood in the reeds", "the bakery sells rye bread"]


def test_a_wide_filter_on_a_large_memory_keeps_to_the_filter(owner, conversation, monkeypatch):
    monkeypatch.setattr(candidates, "EXACT_SEARCH_MAX", 2)
    add_turns(owner, conversation, TEXTS)
    with CaptureQueriesContext(connection) as captured:
        rows = _vector_candidates(owner, "heron", SearchFilters(role="user"), 50, SearchResults(""))
    assert "hnsw" in vector_plan(captured)
    assert sorted(r[3] for r in rows) == sorted(TEXTS[0::2])


def keyword_texts(owner, query: str) -> list[str]:
    return [r[3] for r in _keyword_candidates(owner, query, SearchFilters(), 50, SearchResults(""))]


def test_a_passage_found_by_both_keyword_branches_is_one_candidate(owner, conversation, monkeypatch):
    # A sample of the two newest passages misses "heron": it counts as rare and is looked up in
    # the whole history, while "bread" is common and read from the newest matches.
    monkeypatch.setattr(candidates, "DF_SAMPLE", 2)
    add_turns(owner, conversation, ["the heron stole my bread", "rye bread", "fresh bread"])
    texts = keyword_texts(owner, "heron bread")
    assert sorted(texts) == ["fresh bread", "rye bread", "the heron stole my bread"]
    assert texts[0] == "the heron stole my bread", "both words outrank one"


def test_a_rare_word_leaves_the_recent_window_to_the_common_ones(owner, conversation, monkeypatch):
    # The newest passage is the whole sample: "bread" is common, "heron" rare. The heron's
    # match is found anyway; it must not take one of the two places of the newest breads.
    monkeypatch.setattr(candidates, "DF_SAMPLE", 1)
    monkeypatch.setattr(candidates, "RECENT_WINDOW", 2)
    add_turns(owner, conversation, ["old bread", "bread loaf", "a heron on the pier", "fresh bread"])
    assert sorted(keyword_texts(owner, "heron bread")) == ["a heron on the pier", "bread loaf", "fresh bread"]


def test_a_rare_word_with_more_matches_than_the_cap_keeps_its_newest(owner, conversation, monkeypatch):
    # A word absent from the newest passages may have been common once: past the cap, the
    # newest of its matches are the ones kept.
    monkeypatch.setattr(candidates, "DF_SAMPLE", 1)
    monkeypatch.setattr(candidates, "RARE_CAP", 2)
    add_turns(owner, conversation, ["heron one", "heron two", "heron three", "bread"])
    assert sorted(keyword_texts(owner, "heron")) == ["heron three", "heron two"]


def test_keyword_search_never_reads_the_passages_sequentially(owner, conversation, monkeypatch):
    monkeypatch.setattr(candidates, "DF_SAMPLE", 2)
    add_turns(owner, conversation, ["the heron stole my bread", "rye bread", "fresh bread", "bread"])
    with CaptureQueriesContext(connection) as captured:
        assert keyword_texts(owner, "heron bread")
    # The settings and the query go in one message: "SELECT set_config(...); SELECT ...".
    plan = explain(next(q["sql"] for q in captured if "ts_rank" in q["sql"] and "set_config" in q["sql"]))
    assert "Seq Scan" not in plan, plan


def test_hits_carry_what_a_result_shows(owner, conversation):
    add_turns(owner, conversation, TEXTS)
    hits = search(owner, "sourdough starter", limit=3).hits
    top = hits[0]
    assert top.snippet == "sourdough starter needs feeding twice a day"
    assert (top.role, top.conversation, top.type, top.is_chunk) == ("user", conversation.pk, "message", False)
    assert top.message_id == top.id


def test_search_never_returns_a_strangers_passages(owner, conversation, stranger, monkeypatch):
    monkeypatch.setattr(candidates, "EXACT_SEARCH_MAX", 1)
    add_turns(owner, conversation, TEXTS)
    assert search(stranger, "heron nests by the lake").hits == []
