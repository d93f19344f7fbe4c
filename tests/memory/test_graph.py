"""The entity graph at work (seed 003 B3, B4): graph-aware search, aliases, decay, pruning, and
deleted or forgotten messages leaving the graph."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memory.context.tools import execute_tool
from memory.knowledge import graph
from memory.knowledge.entities import index_messages, normalize
from memory.lifecycle import deleting, forgetting
from memory.models import Entity, EntityEdge, EntityMention, Message
from memory.storage import store
from memory.tasks import graph_upkeep
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

# Elena Rostova is tied to Project Vanguard by the first message; the fact about her (the last
# one) never names the project, and a distractor shares the query's other words.
VANGUARD = [
    "Dr. Elena Rostova leads Project Vanguard from the Oslo office",
    "The Oslo office reviews every budget line",
    *EVERYDAY_TEXTS,
    "what is the latest news on the new drilling site budget?",
    "Elena Rostova moved it to the second week of March",
]


def edge(a: str, b: str) -> EntityEdge | None:
    ea, eb = Entity.objects.get(normalized=normalize(a)), Entity.objects.get(normalized=normalize(b))
    return EntityEdge.objects.filter(source_id=min(ea.pk, eb.pk), target_id=max(ea.pk, eb.pk)).first()


def ranked_ids(owner, query: str) -> list[str]:
    result = execute_tool(owner, "vector_search", {"query": query, "limit": 5})
    assert result.ok
    return [r["message_id"] for r in result.result["results"]]


@pytest.fixture
def graph_settings(settings):
    settings.GRAPH_SEARCH = True
    settings.GRAPH_SEARCH_HOPS = 1
    settings.GRAPH_MAX_SHARE = 0.5  # a small history: most of its names are rare enough
    return settings


def test_search_lifts_a_message_tied_to_the_entity_the_query_names(
    owner, conversation, graph_settings, monkeypatch
):
    from memory.finding import fusion

    # The graph's lift alone: the links from the first hits (fusion.LINK_SHARE) would lift the
    # other turns naming the Oslo office and the budget as well.
    monkeypatch.setattr(fusion, "LINK_SHARE", 0.0)
    msgs = add_turns(owner, conversation, VANGUARD)
    index_messages(owner, msgs)
    fact = msgs[-1].pk
    query = "Project Vanguard launch news"

    graph_settings.GRAPH_SEARCH = False
    without = ranked_ids(owner, query)
    graph_settings.GRAPH_SEARCH = True
    graph_settings.GRAPH_SEARCH_WEIGHT = 3.0
    with_graph = ranked_ids(owner, query)

    # One hop: the query names Project Vanguard, the fact names only Elena Rostova.
    assert fact in with_graph[:3]
    assert with_graph.index(fact) < (without.index(fact) if fact in without else 99)
    relevance = graph.related(owner, query)
    rostova = Entity.objects.get(normalized="elena rostova").pk
    assert 0 < relevance[rostova] < relevance[Entity.objects.get(normalized="project vanguard").pk]


def test_a_name_in_much_of_the_history_boosts_nothing(owner, conversation, graph_settings):
    msgs = add_turns(
        owner, conversation, [f"then Melanie said {t}" for t in EVERYDAY_TEXTS[:6]] + EVERYDAY_TEXTS
    )
    index_messages(owner, msgs)
    assert Entity.objects.get(normalized="melanie").mention_count == 6  # 6 of 14 messages
    graph_settings.GRAPH_MAX_SHARE = 0.4
    assert graph.related(owner, "what did melanie say?") == {}
    graph_settings.GRAPH_MAX_SHARE = 0.9
    assert graph.related(owner, "what did melanie say?")


def test_the_graph_boost_never_reads_another_users_graph(
    owner, stranger, conversation, stranger_conversation, graph_settings
):
    index_messages(stranger, add_turns(stranger, stranger_conversation, VANGUARD))
    index_messages(owner, add_turns(owner, conversation, EVERYDAY_TEXTS))
    assert graph.related(owner, "Project Vanguard launch news") == {}


def test_deleting_a_message_takes_its_mentions_and_edges_out_of_the_graph(
    owner, conversation, graph_settings
):
    msgs = add_turns(owner, conversation, VANGUARD)
    index_messages(owner, msgs)
    first, second = msgs[0], msgs[1]
    assert edge("Elena Rostova", "Project Vanguard").weight == 1
    assert edge("Elena Rostova", "Oslo").weight == 1

    deleting.delete_message(owner, first.pk)

    assert not EntityMention.objects.filter(message_id=first.pk).exists()
    # The only message tying Elena to the project and to Oslo is gone, and so is the name only
    # it held; the other messages' entities stay, recounted.
    assert not Entity.objects.filter(normalized="project vanguard").exists()
    assert edge("Elena Rostova", "Oslo") is None
    assert Entity.objects.get(normalized="elena rostova").mention_count == 1
    assert Entity.objects.get(normalized="oslo").mention_count == 1
    graph_settings.GRAPH_SEARCH_WEIGHT = 3.0
    assert first.pk not in ranked_ids(owner, "Project Vanguard launch news")
    assert not execute_tool(owner, "memory_graph_query", {"entity": "Project Vanguard"}).ok

    # Forgetting: the edge it shared with a message still there loses its share.
    index_messages(
        owner,
        add_turns(owner, conversation, ["Elena Rostova flew to Madrid", "Elena Rostova is back from Madrid"]),
    )
    assert edge("Elena Rostova", "Madrid").weight == 2
    last = Message.objects.filter(content="Elena Rostova is back from Madrid").get()
    # The dialog offers the names that hold its rare words (ticked): a person who unticks them
    # keeps the names, and the edge loses only this message's share.
    names = Entity.objects.owned_by(owner).filter(normalized__in=["elena rostova", "madrid"])
    kept = [f"entity:{pk}" for pk in names.values_list("pk", flat=True)]
    forgetting.forget_message(owner, last.pk, keep=kept)
    assert edge("Elena Rostova", "Madrid").weight == 1
    forgetting.forget_message(owner, Message.objects.get(content="Elena Rostova flew to Madrid").pk)
    assert not Entity.objects.filter(normalized="madrid").exists()
    assert second.pk in set(EntityMention.objects.values_list("message_id", flat=True))


def test_editing_a_message_does_not_count_its_edges_twice(owner, conversation):
    (msg,) = add_turns(owner, conversation, ["Elena Rostova leads Project Vanguard"], embed=False)
    index_messages(owner, [msg])
    index_messages(owner, [msg])
    assert edge("Elena Rostova", "Project Vanguard").weight == 1
    msg = store.update_message(owner, msg.pk, "Elena Rostova left Project Vanguard for Oslo")
    index_messages(owner, [msg])
    assert edge("Elena Rostova", "Project Vanguard").weight == 1
    assert edge("Oslo", "Project Vanguard").weight == 1


def test_case_possessives_and_plurals_are_one_entity(owner, conversation, immediate_tasks):
    assert normalize("Melanie") == normalize("melanie") == normalize("Melanie's") == normalize("Melanie’s")
    msgs = add_turns(
        owner,
        conversation,
        [
            "We watched the Pride Parade with Caroline",
            "There were two Pride Parades this year, said Caroline",
        ],
        embed=False,
    )
    index_messages(owner, msgs)
    parade = Entity.objects.get(normalized="pride parade")
    assert parade.mention_count == 2
    assert not Entity.objects.filter(normalized="pride parades").exists()

    # Spellings stored apart (before they were folded, or plural first) merge in graph upkeep.
    older = add_turns(
        owner, conversation, ["Visited the Art Galleries in town", "then Melanie called"], embed=False
    )
    index_messages(owner, older)
    legacy = Entity.objects.create(owner=owner, name="Melanie's", normalized="melanie's", kind="name")
    EntityMention.objects.create(owner=owner, entity=legacy, message=msgs[0])
    index_messages(owner, add_turns(owner, conversation, ["The Art Gallery opened late"], embed=False))
    assert Entity.objects.filter(normalized__in=["art gallery", "art galleries"]).count() == 2

    graph_upkeep.enqueue(owner.pk)

    gallery = Entity.objects.get(normalized="art gallery")
    assert gallery.mention_count == 2 and "Art Galleries" in gallery.aliases
    melanie = Entity.objects.get(normalized="melanie")
    assert melanie.mention_count == 2 and "Melanie's" in melanie.aliases
    assert not Entity.objects.filter(normalized__in=["art galleries", "melanie's"]).exists()
    found = execute_tool(owner, "memory_graph_query", {"entity": "Art Galleries"})
    assert found.ok and found.result["entity"]["name"] == "Art Gallery"
    assert "Art Galleries" in found.result["entity"]["aliases"]


def test_a_name_that_ends_in_s_is_not_a_plural(owner, conversation):
    msgs = add_turns(
        owner,
        conversation,
        ["I met Lucas today", "so Lucas and I went out", "saw Lucas again", "then Luca came"],
        embed=False,
    )
    index_messages(owner, msgs)
    graph.merge_aliases(owner)
    assert Entity.objects.get(normalized="lucas").mention_count == 3
    assert Entity.objects.get(normalized="luca").mention_count == 1


def test_upkeep_decays_edges_not_reinforced_and_prunes_orphans(owner, conversation, immediate_tasks):
    long_ago = timezone.now() - dt.timedelta(days=180)
    old = add_turns(
        owner, conversation, ["Elena Rostova leads Project Vanguard"], start=long_ago, embed=False
    )
    recent = add_turns(owner, conversation, ["Elena Rostova met Tom Baker"], embed=False)
    index_messages(owner, old + recent)
    Entity.objects.create(owner=owner, name="Nobody", normalized="nobody", kind="name")

    graph_upkeep.enqueue(owner.pk)

    vanguard = edge("Elena Rostova", "Project Vanguard")
    assert vanguard.weight == 1 and vanguard.decay == pytest.approx(0.25, abs=0.01)  # two half-lives
    assert edge("Elena Rostova", "Tom Baker").decay == 1.0
    assert not Entity.objects.filter(normalized="nobody").exists()
    # Running it again soon after changes almost nothing (decay counts from the last run).
    graph.decay_edges(owner)
    assert edge("Elena Rostova", "Project Vanguard").decay == pytest.approx(0.25, abs=0.01)
    # A new message naming both lifts the edge again.
    index_messages(owner, add_turns(owner, conversation, ["Project Vanguard: Elena Rostova"], embed=False))
    reinforced = edge("Elena Rostova", "Project Vanguard")
    assert reinforced.weight == 2 and reinforced.decay == pytest.approx(0.625, abs=0.01)


def test_the_boost_with_relevance_looked_up_already_opens_no_savepoint_for_it(
    owner, conversation, graph_settings
):
    """Speed only: the same boost whether boost_scores looks the entities up or is handed them
    (as search does), and only the mentions' read is in a savepoint then."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    graph_settings.GRAPH_SEARCH_WEIGHT = 3.0
    msgs = add_turns(owner, conversation, VANGUARD)
    index_messages(owner, msgs)
    query = "Project Vanguard launch news"
    info = {("message", m.pk): {"logical": m.pk} for m in msgs}

    def boosted(relevance):
        scores = dict.fromkeys(info, 0.0)
        with CaptureQueriesContext(connection) as queries:
            boost = graph.boost_scores(owner, query, scores, info, relevance=relevance)
        return boost, scores, [q["sql"] for q in queries.captured_queries]

    looked_up, scores_looked_up, _ = boosted(None)
    handed, scores_handed, sql = boosted(graph.related(owner, query))
    assert looked_up == handed and scores_looked_up == scores_handed and handed
    assert sum(s.startswith("SAVEPOINT") for s in sql) == 1 and len(sql) == 3  # savepoint, read, release
