"""What one turn of memory work does, whatever the size of the memory: the query is embedded
once, nothing is asked of a topic tree that does not exist, counts are not taken twice, and
bench_scale measures each size on the history it names."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.context.index_builder import prepare_context, save_snapshot
from memory.embedders import get_embedder
from memory.models import Conversation, Message, Passage, Topic
from memory.storage.store import store_message
from memory.tokens import count_tokens
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

TEXTS = EVERYDAY_TEXTS


@pytest.fixture
def hierarchical(settings):
    settings.INDEX_FULL_MAX = 1
    settings.INDEX_SNIPPET_MAX = 2
    settings.INDEX_CLUSTER_MAX = 3


@pytest.fixture
def model_calls(monkeypatch):
    """Texts the embedding model is asked for, with the embedder's cache switched off."""
    embedder = get_embedder()
    asked: list[str] = []
    real = embedder._embed_batch

    def counted(texts):
        asked.extend(texts)
        return real(texts)

    monkeypatch.setattr(embedder, "_embed_batch", counted)
    monkeypatch.setattr(embedder, "_cache_size", 0)
    return asked


@pytest.mark.django_db
@pytest.mark.parametrize("strategy_max", [{}, {"INDEX_CLUSTER_MAX": 100}], ids=["hierarchical", "clusters"])
def test_a_turn_asks_the_model_for_its_query_vector_once(
    owner, conversation, hierarchical, settings, model_calls, strategy_max
):
    for name, value in strategy_max.items():
        setattr(settings, name, value)
    add_turns(owner, conversation, TEXTS, embed=False)
    model_calls.clear()
    query = "when does the train leave?"
    plan = prepare_context(owner, conversation, query)
    assert plan.strategy == ("clusters" if strategy_max else "hierarchical")
    # Once, as a query (e5 tags a query's text for its "query: " prefix).
    assert len(model_calls) == 1 and model_calls[0].endswith(query)


@pytest.mark.django_db
def test_an_owner_without_topics_is_not_searched_for_topics(owner, conversation, hierarchical):
    add_turns(owner, conversation, TEXTS)
    assert not Topic.objects.owned_by(owner).exists()
    with CaptureQueriesContext(connection) as captured:
        plan = prepare_context(owner, conversation, "what leaks in the garden?")
    assert plan.strategy == "hierarchical"
    topic_queries = [q["sql"] for q in captured if "memory_topic" in q["sql"]]
    assert len(topic_queries) == 1, "only the top-level list, which is empty"
    assert "Relevant Clusters" not in plan.text


@pytest.mark.django_db
def test_an_owner_with_topics_still_gets_relevant_clusters(owner, conversation, hierarchical, settings):
    settings.INDEX_MIN_CLUSTER_SIZE = 2  # the topic below holds two messages
    messages = add_turns(owner, conversation, TEXTS)
    vector = get_embedder().embed_one("trains to Lisbon and Porto")
    topic = Topic.objects.create(
        owner=owner,
        level=0,
        order=0,
        label="train trips",
        message_count=2,
        centroid=[float(x) for x in vector],
        sample_message_ids=[messages[5].pk, messages[7].pk],
    )
    plan = prepare_context(owner, conversation, "which trains did I take?")
    assert "Relevant Clusters:" in plan.text
    assert f'get_cluster("{topic.pk}")' in plan.text


@pytest.mark.django_db
@pytest.mark.parametrize("budget", [300, 800, 10000])
def test_the_memory_zone_counts_the_text_the_model_sees(owner, conversation, hierarchical, budget):
    add_turns(owner, conversation, TEXTS)
    plan = prepare_context(owner, conversation, "the roof and the garden", max_index_tokens=budget)
    assert plan.tokens_by_zone["memory"] == count_tokens(plan.text)
    assert plan.total_tokens <= plan.budget


@pytest.mark.django_db
def test_the_snapshot_keeps_the_hits_and_the_plan_as_json(owner, conversation, hierarchical):
    add_turns(owner, conversation, TEXTS)
    today = Conversation.objects.create(owner=owner)
    message = store_message(owner, today, "user", "when does the train leave?")
    plan = prepare_context(owner, today, message.content, user_message=message)
    snapshot = save_snapshot(plan, owner, today, message)
    snapshot.refresh_from_db()
    assert plan.hits and snapshot.hits == json.loads(json.dumps(plan.hits))
    assert snapshot.whole_plan()["hits"] == snapshot.hits
    assert snapshot.whole_plan()["text"] == plan.text
    assert snapshot.plan["recent_ids"] == [m.pk for m in plan.recent]


@pytest.mark.django_db(transaction=True)
def test_bench_scale_skips_a_size_smaller_than_the_history_it_holds(capsys):
    opts = {"database": "", "turns": 1, "user": "bench_test", "keep": True}
    call_command("bench_scale", sizes="60", **opts)
    first = capsys.readouterr().out
    assert "       60 msgs  fill" in first
    call_command("bench_scale", sizes="30,60", **opts)
    second = capsys.readouterr().out
    assert "reusing 60 synthetic messages already loaded" in second
    assert "       30 msgs  skipped: 60 already loaded" in second
    assert "       60 msgs  fill    0.0s" in second
    loaded = Message.objects.filter(owner__username="bench_test", conversation__title="synthetic history")
    assert loaded.count() == 60


@pytest.mark.django_db(transaction=True)
def test_bench_scale_refuses_a_kept_history_whose_vectors_are_of_another_model(capsys):
    opts = {"database": "", "turns": 1, "user": "bench_other_model", "keep": True}
    call_command("bench_scale", sizes="40", **opts)
    capsys.readouterr()
    Passage.objects.filter(owner__username="bench_other_model").update(embedding_model="an-older-model")
    with pytest.raises(CommandError, match="labelled 'an-older-model'.*EMBEDDING_MODEL=an-older-model"):
        call_command("bench_scale", sizes="40", **opts)


@pytest.mark.django_db(transaction=True)
def test_bench_scale_prints_what_the_model_is_sent_against_the_whole_history(capsys, settings):
    settings.CHAT_CONTEXT_TOKENS = 4096
    call_command("bench_scale", sizes="200", database="", turns=2, user="bench_window")
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "sent to the model per turn" in x)
    assert "window 4,096" in line
    numbers = {
        name: float(line.split(f"{name} ")[1].split()[0].replace(",", ""))
        for name in ("index", "recent turns", "current message", "tool results")
    }
    assert numbers["index"] > 0 and numbers["current message"] > 0 and numbers["tool results"] > 0
    sent = float(line.split(") = ")[1].split()[0])
    answer = float(line.split("answer ")[1].split(";")[0].replace(",", ""))
    assert sent + answer <= 4096
    history = float(line.split("full history ")[1].split(":")[0].replace(",", ""))
    ratio = float(line.split(": ")[-1].split("x")[0].replace(",", ""))
    assert history > sent and ratio == pytest.approx(history / sent, abs=0.06)


@pytest.mark.django_db(transaction=True)
def test_bench_scale_prints_the_turns_cpu_and_keeps_its_profile(capsys, monkeypatch, tmp_path):
    import pstats

    dump = tmp_path / "turns.prof"
    monkeypatch.setenv("BENCH_PROFILE_DUMP", str(dump))
    call_command("bench_scale", sizes="60", database="", turns=2, user="bench_cpu", profile=True)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "60 msgs  fill" in x)
    turn_p50 = float(line.split("turn p50")[1].split("ms")[0])
    cpu = float(line.split("cpu p50")[1].split("ms")[0])
    # The process's CPU over the turn: some, and no more than two cores' worth of its time.
    assert 0 < cpu <= 2 * turn_p50 + 1
    tool = next(x for x in out.splitlines() if "search_and_retrieve call" in x)
    assert float(tool.split("p50 ")[1].split(" ms")[0]) > 0
    assert "Ordered by: internal time" in out and "Ordered by: cumulative time" in out
    assert any("prepare_context" in f[2] for f in pstats.Stats(str(dump)).stats)


@pytest.mark.django_db(transaction=True)
def test_bench_scale_shows_the_collector_postgres_and_where_slow_turns_lost_time(capsys):
    import gc

    call_command("bench_scale", sizes="60", database="", turns=10, user="bench_tail")
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "garbage collector during the turns" in x)
    collections = int(line.split(": ")[1].split(" collections")[0])
    by_generation = [int(line.split(f"gen{g} ")[1].split(",")[0].rstrip(")")) for g in range(3)]
    assert collections == sum(by_generation)
    # Measured with what the server freezes at start-up (config.startup) frozen the same way.
    assert int(line.split("freeze ")[1].split(" objects")[0].replace(",", "")) > 0
    assert gc.get_freeze_count() == 0, "the bench leaves the process as it found it"
    postgres = next(x for x in out.splitlines() if "Postgres from the first measured turn" in x)
    assert "checkpoints" in postgres and int(postgres.split("WAL bytes ")[1].split()[0].replace(",", "")) > 0
    questions = next(x for x in out.splitlines() if "turn p50 by question" in x)
    assert questions.count("…") == 5  # the five probes, two turns each
    tails = next(x for x in out.splitlines() if x.strip().startswith("p95 ms:"))
    medians = next(x for x in out.splitlines() if x.strip().startswith("median ms:"))
    assert "search_vector_other" in tails and "search_vector_other" in medians
    for step in ("store_message", "prepare_context", "save_snapshot"):
        tail = float(tails.split(f"{step} ")[1].split()[0])
        assert tail >= float(medians.split(f"{step} ")[1].split()[0])
    slow = next(x for x in out.splitlines() if "the slowest 1 turns, ms over" in x)
    assert "prepare_context" in slow or "store_message" in slow or "search" in slow


@pytest.mark.django_db
def test_the_tools_recently_used_are_this_conversations_and_read_with_a_bound(owner, conversation):
    from memory.context.index_builder import _recent_tool_names
    from memory.storage.store import store_tool_call

    other = Conversation.objects.create(owner=owner, title="elsewhere")
    here = store_message(owner, conversation, "assistant", "I looked it up", embed=False)
    there = store_message(owner, other, "assistant", "I looked that up", embed=False)
    store_tool_call(owner, here, "memory_graph_query", {"entity": "INFRA-992"}, {"ok": 1}, embed=False)
    store_tool_call(owner, there, "find", {"pattern": "x"}, {"ok": 1}, embed=False)
    assert _recent_tool_names(owner, conversation) == ["memory_graph_query"]
    assert _recent_tool_names(owner, Conversation.objects.create(owner=owner, title="new")) == []
    # Only the conversation's latest 25 replies count: a call made 25 replies ago is forgotten.
    for i in range(24):
        store_message(owner, conversation, "assistant", f"reply {i}", embed=False)
    assert _recent_tool_names(owner, conversation) == ["memory_graph_query"]
    store_message(owner, conversation, "assistant", "reply 24", embed=False)
    assert _recent_tool_names(owner, conversation) == []
    with CaptureQueriesContext(connection) as queries:
        _recent_tool_names(owner, conversation)
    assert len(queries) == 1


@pytest.mark.django_db(transaction=True)
def test_bench_scales_history_holds_facts_and_each_turn_shows_them(capsys):
    from memory.models import Fact

    call_command("bench_scale", sizes="400", database="", turns=1, user="bench_facts", keep=True)
    out = capsys.readouterr().out
    assert "so are its facts (one per 4 messages)" in out
    held = Fact.objects.filter(owner__username="bench_facts")
    assert held.count() == 100  # one per 4 of the 400 messages
    assert held.filter(subject_key="the user").count() == 80
    assert held.exclude(subject_key="the user").values("subject_key").distinct().count() == 20
    assert held.filter(superseded_by__isnull=False).exists()  # newer attributes replaced older
    # A history loaded before gets its facts when reused, once.
    held.delete()
    call_command("bench_scale", sizes="400", database="", turns=1, user="bench_facts", keep=True)
    assert Fact.objects.filter(owner__username="bench_facts").count() == 100
    from memory.models import ContextSnapshot

    snapshots = ContextSnapshot.objects.filter(owner__username="bench_facts")
    assert snapshots.exists() and all("FACTS (" in s.text for s in snapshots)


@pytest.mark.django_db(transaction=True)
def test_bench_scale_loads_the_same_history_wherever_it_is_loaded():
    from memory.models import Passage

    for name in ("bench_same_a", "bench_same_b"):
        call_command("bench_scale", sizes="60", database="", turns=1, user=name, keep=True)

    def history(name):
        rows = Passage.objects.filter(
            owner__username=name, conversation__title="synthetic history"
        ).order_by("timestamp")
        return [(p.text, [round(float(x), 6) for x in p.embedding]) for p in rows]

    a, b = history("bench_same_a"), history("bench_same_b")
    assert len(a) == 60 and a == b


@pytest.mark.django_db(transaction=True)
def test_bench_scale_sequential_runs_every_step_of_a_turn_on_its_thread(capsys, monkeypatch):
    import threading

    from memory.finding import candidates

    threads = set()
    real = candidates._vector_candidates

    def vector_candidates(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(candidates, "_vector_candidates", vector_candidates)
    call_command("bench_scale", sizes="60", database="", turns=2, user="bench_sequential", sequential=True)
    assert "search_vector_query" in capsys.readouterr().out
    assert threads == {threading.current_thread().name}
    assert candidates.PARALLEL_SEARCH  # only for the run


@pytest.mark.django_db(transaction=True)
def test_bench_scale_prints_the_time_until_the_models_request_beside_the_turns(capsys):
    call_command("bench_scale", sizes="120", database="", turns=3, user="bench_request")
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "120 msgs  fill" in x)
    turn_p50 = float(line.split("turn p50")[1].split("ms")[0])  # the turn's figure stays
    medians = next(x for x in out.splitlines() if x.strip().startswith("median ms:"))
    request = next(x for x in out.splitlines() if "until the model's request" in x)
    until = float(request.split("p50 ")[1].split(" ms")[0])
    until_p95 = float(request.split("p95 ")[1].split(" ms")[0])
    snapshot = float(medians.split("save_snapshot ")[1].split()[0])
    # The turn but its snapshot: shorter than the turn, by about the snapshot's time.
    assert 0 < until <= until_p95 and until < turn_p50 and snapshot > 0
