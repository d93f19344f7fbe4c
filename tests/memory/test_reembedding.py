"""After an upgrade changes the embedding model (same dimensions), the server re-embeds the old
passages in the background by itself (memory.tasks.queue_reembedding, called by `serve`), one
queued run per person, in slices; vector search finds each passage again once it is done."""

from __future__ import annotations

import functools
import io

import pytest
from django.core.management import call_command
from django.db import connection
from django_tasks import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from memory import tasks
from memory.embedders import get_embedder
from memory.finding.search import search
from memory.management.commands.reembed import resize_vector_columns
from memory.models import Passage, UpkeepRun
from memory.storage import store
from tests.memory.conftest import add_turns

pytestmark = pytest.mark.django_db

OLD = "multilingual-e5-small-int8"  # the default before -int8-v3: same 384 dimensions
QUESTION = "who takes care of the felines at the coast"


def as_old_model(passages, vector=None) -> None:
    """Passages as an older install left them: the old model's name (and, given, a vector that
    is not this text's, so only a new vector lets search find it by meaning)."""
    passages.update(embedding_model=OLD, **({"embedding": vector} if vector is not None else {}))


def queued_embedding():
    return DBTaskResult.objects.filter(
        task_path=tasks.embed_pending_task.module_path, status=TaskResultStatus.READY
    )


def run_next_queued_embedding() -> bool:
    """Run the next queued embedding run as a worker would (highest priority, then oldest);
    whether there was one."""
    waiting = queued_embedding().order_by("-priority", "enqueued_at").first()
    if waiting is None:
        return False
    waiting.status = TaskResultStatus.SUCCESSFUL
    waiting.save(update_fields=["status"])
    tasks.embed_pending_task.call(*waiting.args_kwargs["args"])
    return True


def run_queued_embedding() -> int:
    """Run the queued embedding runs until none is left; returns how many ran."""
    for ran in range(50):
        if not run_next_queued_embedding():
            return ran
    raise AssertionError("the re-embedding never ended")


def test_the_start_queues_one_reembedding_per_person_and_only_once(owner, stranger, conversation,
                                                                    stranger_conversation):
    add_turns(owner, conversation, ["the heron nests by the lake", "it does, every spring"])
    add_turns(stranger, stranger_conversation, ["book the train tickets to Porto"])
    as_old_model(Passage.objects.all())
    DBTaskResult.objects.all().delete()

    first = tasks.queue_reembedding()
    assert (first.passages, first.people, first.queued) == (3, 2, 2)
    assert first.model == get_embedder().name
    assert first.notice == (
        f"re-embedding 3 passages of 2 people with {get_embedder().name} in the background; "
        "vector search finds them as they are done"
    )
    waiting = queued_embedding()
    assert sorted(w.args_kwargs["args"][0] for w in waiting) == sorted([owner.pk, stranger.pk])
    assert {w.priority for w in waiting} == {tasks.IMPORT_PRIORITY}  # a turn's upkeep goes first

    again = tasks.queue_reembedding()  # a second server process, or a restart
    assert (again.passages, again.queued) == (3, 0)
    assert queued_embedding().count() == 2


def test_nothing_is_queued_or_said_when_every_vector_is_the_models(owner, conversation):
    add_turns(owner, conversation, ["the heron nests by the lake"])
    DBTaskResult.objects.all().delete()
    done = tasks.queue_reembedding()
    assert (done.passages, done.queued, done.notice) == (0, 0, "")
    assert not queued_embedding().exists()


def test_the_queued_run_gives_every_passage_a_new_vector_and_search_finds_them_again(owner, conversation):
    kept = store.store_message(owner, conversation, "user", "The lighthouse keeper feeds seven cats.")
    add_turns(owner, conversation, ["my bike needs a new chain", "we planted tomatoes and basil"])
    unrelated = get_embedder().embed_query("quarterly tax forms for the bakery")
    as_old_model(Passage.objects.all(), unrelated)
    results = search(owner, QUESTION)
    assert all(h.vector_rank is None for h in results.hits)  # never mixed
    [fallback] = [f for f in results.fallbacks if f["kind"] == "embedding_model_mismatch"]
    assert "re-embedded, which the server does in the background" in fallback["detail"]

    assert tasks.queue_reembedding().queued == 1
    assert run_queued_embedding() == 1
    assert set(Passage.objects.values_list("embedding_model", flat=True)) == {get_embedder().name}
    results = search(owner, QUESTION)
    assert results.hits[0].id == kept.pk and results.hits[0].vector_rank == 1
    assert results.fallbacks == []
    assert UpkeepRun.objects.get(owner=owner, kind="embed_pending").detail["embedded"] == 3


def test_a_long_reembedding_goes_in_slices_that_each_write_what_they_did(owner, conversation, monkeypatch):
    add_turns(owner, conversation, [f"note {i} about the garden roses" for i in range(5)])
    as_old_model(Passage.objects.all())
    DBTaskResult.objects.all().delete()
    # In production a slice is 20 s of batches of 256; here every slice ends after one batch of 2.
    monkeypatch.setattr(tasks, "EMBED_SLICE_SECONDS", 0.0)
    monkeypatch.setattr(store, "embed_pending", functools.partial(store.embed_pending, batch=2))
    other = Passage.objects.exclude(embedding_model=get_embedder().name)

    assert tasks.queue_reembedding().queued == 1
    left = []
    while run_next_queued_embedding() and len(left) < 10:
        left.append(other.count())  # what the explorer's memory health counts meanwhile
    assert left == [3, 1, 0, 0]  # the last run finds nothing and queues no other
    runs = UpkeepRun.objects.filter(owner=owner, kind="embed_pending").order_by("started_at")
    assert [r.detail["embedded"] for r in runs] == [2, 2, 1, 0]


def test_a_column_of_other_dimensions_queues_nothing_and_says_to_run_reembed(owner, conversation):
    add_turns(owner, conversation, ["the heron nests by the lake"])
    with connection.cursor() as cursor:  # the rows just stored, checked now: ALTER TABLE may run
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    resize_vector_columns(8)  # what an install of an 8-dimension model had (rolled back after)
    Passage.objects.update(embedding=[1.0] + [0.0] * 7, embedding_model="a-small-model")
    DBTaskResult.objects.all().delete()
    found = tasks.queue_reembedding()
    assert (found.passages, found.queued, found.column_dimensions) == (1, 0, 8)
    assert "run `manage.py reembed` (it resizes the column)" in found.notice
    assert not queued_embedding().exists()


def test_with_tasks_run_inline_the_start_queues_nothing_and_says_to_run_reembed(owner, conversation,
                                                                                 immediate_tasks):
    add_turns(owner, conversation, ["the heron nests by the lake"])
    as_old_model(Passage.objects.all())
    found = tasks.queue_reembedding()
    assert found.queued == 0 and "run `manage.py reembed`" in found.notice
    assert set(Passage.objects.values_list("embedding_model", flat=True)) == {OLD}


def test_the_server_start_queues_the_reembedding_and_says_so(owner, conversation, monkeypatch):
    from daphne.cli import CommandLineInterface

    add_turns(owner, conversation, ["the heron nests by the lake"])
    as_old_model(Passage.objects.all())
    DBTaskResult.objects.all().delete()
    monkeypatch.setattr(CommandLineInterface, "run", lambda self, argv: None)  # serve, then stop at once
    out = io.StringIO()
    call_command("serve", "--no-worker", stdout=out)
    assert "re-embedding 1 passage of 1 person with" in out.getvalue()
    assert [w.args_kwargs["args"] for w in queued_embedding()] == [[owner.pk]]


def test_memory_health_shows_the_reembedding_as_progress_a_person_understands(owner, conversation, client):
    from django.urls import reverse

    add_turns(owner, conversation, ["the heron nests by the lake", "it does, every spring"])
    as_old_model(Passage.objects.all())
    client.force_login(owner)

    def health() -> str:
        page = client.get(reverse("explorer:advanced")).content.decode()
        start = page.index('id="health"')
        return " ".join(page[start : page.index("</section>", start)].split())

    tasks.queue_reembedding()
    assert (f"Passages embedded with another model</th><td>2 <span class=\"muted\">(being re-embedded "
            f"with {get_embedder().name} in the background") in health()
    run_queued_embedding()
    assert "Passages embedded with another model</th><td>0</td>" in health()
    assert "being re-embedded" not in health()
