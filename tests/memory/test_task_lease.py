"""The lease a running background task holds: a task whose worker is alive is never queued
again, however long it runs; one whose worker died is, as soon as its lease runs out."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone
from django_tasks import TaskResultStatus
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult

from memory import tasks
from memory.models import TaskLease, UpkeepRun
from memory.storage import store

# Workers, heartbeats and sweeps each use their own connection: they must see committed rows.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def database_tasks(settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    settings.TASK_LEASE_SECONDS = 1.0


def make_worker(worker_id: str, *, batch: bool = True) -> Worker:
    return Worker(
        queue_names=["default"], interval=0.05, batch=batch, backend_name="default", startup_delay=False,
        max_tasks=None, worker_id=worker_id, excluded_queue_names=[],
    )


def run_in_thread(worker: Worker) -> threading.Thread:
    def work():
        try:
            worker.run()
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def other_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def claim(result, worker_id: str, *, started: dt.datetime) -> DBTaskResult:
    row = DBTaskResult.objects.get(pk=result.id)
    row.claim(worker_id)
    DBTaskResult.objects.filter(pk=row.pk).update(started_at=started)
    return row


def test_a_task_running_past_the_abandon_threshold_while_its_worker_renews_the_lease_runs_once(
    owner, database_tasks, monkeypatch
):
    calls, requeued, second = [], [], make_worker("second", batch=False)
    threads = []

    def slow_embed_pending(owner=None, **kwargs):
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            # The first worker holds the task; a second one now waits for work.
            threads.append(run_in_thread(second))
        wait_for(TaskLease.objects.exists, 5)  # the heartbeat's first beat, on a new connection
        # Three leases long and six times the abandon threshold, while what serves chat turns
        # keeps sweeping for abandoned tasks.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            requeued.append(tasks.requeue_abandoned(older_than=dt.timedelta(seconds=0.5)))
            time.sleep(0.05)
        return 0

    monkeypatch.setattr(store, "embed_pending", slow_embed_pending)
    result = tasks.embed_pending_task.enqueue(owner.pk)
    try:
        make_worker("first").run()
    finally:
        second.running = False
        for thread in threads:
            thread.join(10)

    row = DBTaskResult.objects.get(pk=result.id)
    assert len(calls) == 1
    assert sum(requeued) == 0 and len(requeued) > 10
    assert row.status == TaskResultStatus.SUCCESSFUL and row.worker_ids == ["first"]
    run = UpkeepRun.objects.get(kind="embed_pending")
    assert run.ok and run.finished_at and run.task_id == row.pk


def test_a_task_whose_worker_died_is_requeued_once_its_lease_runs_out_and_then_runs(
    owner, stranger, database_tasks
):
    now = timezone.now()
    # Claimed a minute ago by a worker since killed: its lease ran out ten seconds ago.
    dead = claim(tasks.embed_pending_task.enqueue(owner.pk), "killed", started=now - dt.timedelta(minutes=1))
    TaskLease.objects.create(task_id=dead.pk, expires_at=now - dt.timedelta(seconds=10))
    dead_run = UpkeepRun.objects.create(owner=owner, kind="embed_pending", task_id=dead.pk)
    # Running for two hours, far past the abandon threshold, on a worker that renews its lease.
    alive = claim(tasks.rebuild_topics.enqueue(stranger.pk), "busy", started=now - dt.timedelta(hours=2))
    TaskLease.objects.create(task_id=alive.pk, expires_at=now + dt.timedelta(minutes=2))
    alive_run = UpkeepRun.objects.create(owner=stranger, kind="rebuild_topics", task_id=alive.pk)
    UpkeepRun.objects.filter(pk=alive_run.pk).update(started_at=now - dt.timedelta(hours=2))

    assert tasks.requeue_abandoned() == 1

    dead.refresh_from_db()
    alive.refresh_from_db()
    assert dead.status == TaskResultStatus.READY and not TaskLease.objects.filter(task_id=dead.pk).exists()
    assert alive.status == TaskResultStatus.RUNNING and TaskLease.objects.filter(task_id=alive.pk).exists()
    dead_run.refresh_from_db()
    alive_run.refresh_from_db()
    assert not dead_run.ok and dead_run.finished_at and "queued again" in dead_run.detail["error"]
    assert alive_run.ok and alive_run.finished_at is None

    make_worker("replacement").run()
    dead.refresh_from_db()
    assert dead.status == TaskResultStatus.SUCCESSFUL and dead.worker_ids == ["killed", "replacement"]
    assert UpkeepRun.objects.get(task_id=dead.pk, ok=True).finished_at


def test_a_task_without_a_lease_is_requeued_by_how_long_ago_it_started(owner, stranger, database_tasks):
    now = timezone.now()
    # Claimed by workers from before leases: only the start tells whether the worker is gone.
    old = claim(tasks.topic_upkeep.enqueue(owner.pk, ["x"]), "w", started=now - dt.timedelta(hours=1))
    old_run = UpkeepRun.objects.create(owner=owner, kind="topic_upkeep")
    recent = claim(tasks.topic_upkeep.enqueue(stranger.pk, ["y"]), "w", started=now - dt.timedelta(minutes=5))
    recent_run = UpkeepRun.objects.create(owner=stranger, kind="topic_upkeep")
    # An hour-old run that never finished, of no task being requeued: not this sweep's to close.
    unrelated_run = UpkeepRun.objects.create(owner=stranger, kind="rebuild_topics")
    UpkeepRun.objects.filter(pk=unrelated_run.pk).update(started_at=now - dt.timedelta(hours=1))

    assert tasks.requeue_abandoned() == 1

    old.refresh_from_db()
    recent.refresh_from_db()
    assert old.status == TaskResultStatus.READY and recent.status == TaskResultStatus.RUNNING
    for run in (old_run, recent_run, unrelated_run):
        run.refresh_from_db()
    assert not old_run.ok and old_run.finished_at
    assert recent_run.ok and recent_run.finished_at is None
    assert unrelated_run.ok and unrelated_run.finished_at is None


def test_the_heartbeat_stops_with_its_task_and_leaves_no_thread_or_connection(
    owner, database_tasks, monkeypatch
):
    seen = {}

    def embed_pending(owner=None, **kwargs):
        wait_for(TaskLease.objects.exists, 5)
        seen["heartbeats"] = [t for t in threading.enumerate() if t.name.startswith("task-lease-")]
        seen["connections"] = other_connections()
        return 0

    monkeypatch.setattr(store, "embed_pending", embed_pending)
    before = other_connections()
    result = tasks.embed_pending_task.enqueue(owner.pk)
    make_worker("only").run()

    assert DBTaskResult.objects.get(pk=result.id).status == TaskResultStatus.SUCCESSFUL
    (heartbeat,) = seen["heartbeats"]
    assert seen["connections"] == before + 1  # the heartbeat renews on a connection of its own
    assert not heartbeat.is_alive()
    assert not TaskLease.objects.exists()
    # Its connection is closed (the server notices the closed socket a moment later).
    assert wait_for(lambda: other_connections() == before)
