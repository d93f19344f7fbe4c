"""Background work on memory, with the Django tasks framework (a database-backed queue).

The chat calls `queue_upkeep(owner_id, message_ids)` after each turn (and the explorer after an
edit or delete): it only enqueues, so the turn never waits for clustering or entity extraction.
Every run is recorded as an UpkeepRun so the explorer can show what ran and what failed.

A task a database worker runs holds a lease that its worker renews while the task runs
(`take_lease`): a task whose lease ran out lost its worker and is queued again
(`requeue_abandoned`), and a long task whose worker is alive is never run twice.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.functions import Now
from django.dispatch import receiver
from django.utils import timezone
from django_tasks import TaskResult, TaskResultStatus, task
from django_tasks.signals import task_finished, task_started

from memory import signals
from memory.context import rolling_summary
from memory.knowledge import entities, fact_refresh, facts
from memory.lifecycle import tombstones
from memory.models import ImportJob, Message, TaskLease, UpkeepRun
from memory.models.knowledge import sources_lost as fact_sources_lost
from memory.organizing import periods, summaries, topic_updates, topics
from memory.storage import store
from memory.transfer import import_jobs

logger = logging.getLogger(__name__)


def _record(owner_id: int | None, kind: str, work) -> dict[str, Any]:
    run = UpkeepRun.objects.create(owner_id=owner_id, kind=kind, task_id=getattr(_running, "task_id", None))
    started = time.perf_counter()
    try:
        detail = work()
    except Exception as exc:
        logger.exception("%s failed for owner %s", kind, owner_id)
        run.ok = False
        run.detail = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        run.finished_at = timezone.now()
        run.save(update_fields=["ok", "detail", "finished_at"])
        raise
    run.detail = {**(detail or {}), "seconds": round(time.perf_counter() - started, 3)}
    run.finished_at = timezone.now()
    run.save(update_fields=["detail", "finished_at"])
    return run.detail


def _owner(owner_id: int):
    return get_user_model().objects.get(pk=owner_id)


# One upkeep run takes at most this many messages (one transaction stays small); an import that
# stores thousands at once is queued as several runs (queue_upkeep), so none is left out.
UPKEEP_BATCH = 500


def run_upkeep(owner, message_ids: Iterable[str]) -> dict[str, Any]:
    """Synchronous upkeep for these messages: new ones join topics and get their entities;
    edited or deleted ones have their topics re-derived (so no deleted text stays in a label,
    summary or sample)."""
    ids = [str(i) for i in message_ids][:UPKEEP_BATCH]
    # Replies that mostly paste their tool results are flagged first: like Recollect's own text
    # (offline-recall answers) they are shown, never mined for topics or entities.
    quoting = Message.objects.owned_by(owner).filter(pk__in=ids).flag_quotes()
    messages = list(Message.objects.owned_by(owner).logical().filter(pk__in=ids))
    # What memory learns from: not the replies quoting it, nor a conversation it does not keep
    # (those are still embedded below, for their own conversation's searches).
    live = [m for m in messages if not m.deleted and m.feeds_memory]
    kept = [m for m in messages if not m.deleted and m.is_source]
    changed = [m.pk for m in messages if m.deleted or m.edited] + [
        i for i in ids if i not in {m.pk for m in messages}
    ] + quoting
    mentions = entities.index_messages(owner, live)
    if changed:
        # Deleted messages left the graph when they were deleted (memory.storage.store); this catches
        # any that did not (deleted before that was so), and prunes after forgotten ones.
        entities.remove_mentions(owner, [m.pk for m in messages if m.deleted or not m.feeds_memory])
        if len(messages) < len(ids):  # some were forgotten: their mentions went with them
            entities.prune_orphans(owner)
    refreshed = (
        topic_updates.refresh(owner, topic_updates.topics_mentioning(owner, changed)) if changed else {}
    )
    # A turn stores its messages without vectors (the model call stays off the turn's path);
    # they get them here, before joining topics by similarity (the embedding cache of the
    # server that ran the turn usually has them already).
    try:
        with transaction.atomic():  # a savepoint: a failure here leaves the upkeep usable
            embedded = store.embed_pending(owner, message_ids=[m.pk for m in kept]) if kept else 0
    except Exception:  # noqa: BLE001 - topics then go by session; embed_pending_task retries
        logger.exception("could not embed new messages before topic upkeep")
        embedded = 0
    assigned = topic_updates.assign_messages(owner, [m.pk for m in live])
    periods.update_period_summaries(owner)
    return {
        "messages": len(ids),
        "embedded": embedded,
        "entity_mentions": mentions,
        "topics": assigned,
        "refreshed": refreshed,
    }


@task()
def topic_upkeep(owner_id: int, message_ids: list[str]) -> dict[str, Any]:
    owner = _owner(owner_id)

    def work():
        # All or nothing: a worker killed halfway leaves no half-made topic behind, and the
        # task, queued again, starts from a clean slate.
        with transaction.atomic():
            return run_upkeep(owner, message_ids)

    detail = _record(owner_id, "topic_upkeep", work)
    update_conversation_summaries(owner, message_ids)
    queue_summaries(owner_id)
    queue_graph_upkeep(owner_id)
    queue_facts(owner_id, message_ids)
    return detail


def update_conversation_summaries(owner, ids: list[str]) -> None:
    """The rolling summaries of these messages' conversations, after topic upkeep
    and in transactions of their own: a failure here leaves the topics done."""
    if not settings.CONVERSATION_SUMMARY:
        return
    # A failure is recorded as a failed run (and logged); the next upkeep tries again.
    with contextlib.suppress(Exception):
        _record(owner.pk, "conversation_summary", lambda: rolling_summary.update_for_messages(owner, ids))


@task()
def graph_upkeep(owner_id: int) -> dict[str, Any]:
    """Graph upkeep: merge entity aliases, decay edges not reinforced lately, prune orphans."""
    from memory.knowledge import graph

    owner = _owner(owner_id)

    def work():
        with transaction.atomic():
            return graph.upkeep(owner)

    return _record(owner_id, "graph_upkeep", work)


# Graph upkeep reads every entity of the owner: at most once per this long, after topic upkeep.
GRAPH_UPKEEP_EVERY = dt.timedelta(hours=6)


def _queue_once(task: Any, owner_id: int) -> bool:
    """Enqueue `task` for the owner unless one already waits in the queue; whether it did."""
    return _enqueue_unless_waiting(task, int(owner_id))


def _enqueue_unless_waiting(task: Any, *args: Any) -> bool:
    """Enqueue `task(*args)` unless the same call already waits in the queue; whether it did."""
    from django_tasks_db.models import DBTaskResult

    waiting = DBTaskResult.objects.filter(
        status=TaskResultStatus.READY, task_path=task.module_path, args_kwargs__args=list(args)
    )
    if waiting.exists():
        return False
    task.enqueue(*args)
    return True


def _never_fails(what: str) -> Callable[[Callable[..., bool]], Callable[..., bool]]:
    """For the queue_* functions, which never fail their caller: a problem queueing `what` is
    logged and reported as False (a later run catches up)."""

    def decorate(queue: Callable[..., bool]) -> Callable[..., bool]:
        @functools.wraps(queue)
        def guarded(owner_id, *args, **kwargs) -> bool:
            try:
                return queue(owner_id, *args, **kwargs)
            except Exception:
                logger.exception("could not queue %s for owner %s", what, owner_id)
                return False

        return guarded

    return decorate


@_never_fails("graph upkeep")
def queue_graph_upkeep(owner_id: int) -> bool:
    """Queue graph upkeep unless it ran within GRAPH_UPKEEP_EVERY or waits in the queue. Never
    fails the caller."""
    recent = UpkeepRun.objects.filter(
        owner_id=owner_id, kind="graph_upkeep", started_at__gte=timezone.now() - GRAPH_UPKEEP_EVERY
    )
    if recent.exists():
        return False
    return _queue_once(graph_upkeep, owner_id)


@task()
def fact_upkeep(owner_id: int, message_ids: list[str]) -> dict[str, Any]:
    """Facts of new, edited and re-flagged messages (memory.knowledge.facts), after topic upkeep has
    flagged the replies that only quote memory."""
    owner = _owner(owner_id)
    return _record(owner_id, "fact_upkeep", lambda: fact_refresh.refresh_messages(owner, message_ids))


@_never_fails("fact upkeep")
def queue_facts(owner_id: int, message_ids: Iterable[str]) -> bool:
    ids = [str(i) for i in message_ids if i]
    if not ids:
        return False
    fact_upkeep.enqueue(int(owner_id), ids)
    return True


@task()
def title_conversation(owner_id: int, conversation_id: str) -> dict[str, Any]:
    """The model names a conversation after its first exchange (memory.organizing.titles)."""
    from memory.organizing import titles

    owner = _owner(owner_id)
    return _record(
        owner_id, "title", lambda: {"titled": bool(titles.title_conversation(owner, conversation_id))}
    )


@_never_fails("a conversation title")
def queue_title(owner_id: int, conversation_id: str) -> bool:
    if not summaries.is_configured():
        return False
    return _enqueue_unless_waiting(title_conversation, int(owner_id), str(conversation_id))


@task()
def end_temporary_chats() -> dict[str, Any]:
    """Delete the temporary chats older than TEMPORARY_CHAT_HOURS (memory.lifecycle.erasing)."""
    from memory.lifecycle import erasing

    return {"ended": erasing.end_expired_temporary_chats()}


@_never_fails("the end of a temporary chat")
def queue_temporary_chat_end(owner_id: int, started: dt.datetime) -> bool:
    """A temporary chat was started: it is deleted TEMPORARY_CHAT_HOURS later, unless the person
    leaves it first (a backend that cannot run a task later leaves it to the sweep of
    queue_upkeep)."""
    if not getattr(end_temporary_chats.get_backend(), "supports_defer", False):
        return False
    later = started + dt.timedelta(hours=settings.TEMPORARY_CHAT_HOURS, seconds=1)
    end_temporary_chats.using(run_after=later).enqueue()
    return True


@task()
def rebuild_topics(owner_id: int) -> dict[str, Any]:
    owner = _owner(owner_id)

    def work():
        ents = entities.rebuild(owner)
        tree = topics.rebuild(owner)
        # Messages that never went through upkeep (an import) get their facts here.
        return {"entities_indexed_messages": ents, **tree, "facts": facts.extract_messages(owner)}

    detail = _record(owner_id, "rebuild_topics", work)
    queue_summaries(owner_id)
    return detail


@task()
def summarize_topics(owner_id: int) -> dict[str, Any]:
    owner = _owner(owner_id)
    return _record(owner_id, "summarize_topics", lambda: summaries.summarize_topics(owner))


@_never_fails("topic summaries")
def queue_summaries(owner_id: int) -> bool:
    """With a model configured, queue model-written summaries for topics that only have
    extractive ones (one queued run per owner at a time). Never fails the caller."""
    from memory.models import Topic

    if not summaries.is_configured():
        return False
    extractive = Topic.objects.filter(owner_id=owner_id, summary_source="extractive", message_count__gt=0)
    if not extractive.exists():
        return False
    return _queue_once(summarize_topics, owner_id)


# A run of embed_pending_task works this long, then queues its continuation below other work: a
# whole history re-embedded after the model changed does not hold the worker for an hour while a
# turn's topic upkeep or a new conversation's title waits.
EMBED_SLICE_SECONDS = 20.0


@task()
def embed_pending_task(owner_id: int | None = None) -> dict[str, Any]:
    """Vectors for the owner's passages that have none or one of another model, for at most
    EMBED_SLICE_SECONDS; then the rest is queued as the next run."""
    owner = _owner(owner_id) if owner_id else None
    deadline = time.monotonic() + EMBED_SLICE_SECONDS
    detail = _record(owner_id, "embed_pending", lambda: {
        "embedded": store.embed_pending(owner, deadline=deadline)
    })
    if detail["embedded"] and time.monotonic() >= deadline:  # maybe stopped with work left
        _enqueue_unless_waiting(embed_pending_task.using(priority=IMPORT_PRIORITY), owner_id)
    return detail


@dataclass(frozen=True)
class Reembedding:
    """What queue_reembedding found and did, and the line that tells the operator."""

    passages: int  # passages holding vectors of another model
    people: int  # their owners
    model: str  # the configured model
    queued: int  # runs queued now (the others already waited in the queue)
    column_dimensions: int | None = None  # set when the column is not the model's size
    in_background: bool = True

    @property
    def notice(self) -> str:
        if not self.passages:
            return ""
        people = "1 person" if self.people == 1 else f"{self.people:,} people"
        passages = "1 passage" if self.passages == 1 else f"{self.passages:,} passages"
        hold = "holds" if self.passages == 1 else "hold"
        if self.column_dimensions is not None:
            return (
                f"{passages} of {people} {hold} vectors of {self.column_dimensions} "
                f"dimensions, and {self.model} makes {settings.EMBEDDING_DIMENSIONS}: run `manage.py "
                "reembed` (it resizes the column); until then vector search leaves them out"
            )
        if not self.in_background:
            return (
                f"{passages} of {people} {hold} vectors of another model: run "
                f"`manage.py reembed` to re-embed them with {self.model}; until then vector search "
                "leaves them out"
            )
        return (
            f"re-embedding {passages} of {people} with {self.model} in the "
            "background; vector search finds them as they are done"
        )


def queue_reembedding() -> Reembedding:
    """After the embedding model changed (same dimensions), queue one embed_pending_task per
    owner whose passages hold another model's vectors (never twice: a run already waiting is
    enough), so nobody needs to know `manage.py reembed`. Called when a server starts.

    A column of other dimensions must be resized first (`manage.py reembed` does it): nothing is
    queued then. Neither is anything when tasks run inline (the immediate backend), which would
    hold the server's start for the whole re-embedding."""
    from django_tasks_db.backend import DatabaseBackend

    from memory.embedders import get_embedder
    from memory.management.commands.reembed import column_dimensions
    from memory.models import Passage

    model = get_embedder().name
    # Two ranges rather than "<>" (and '' is "no vector yet"), so the embedding_model index
    # finds just these rows: with nothing to do, one index descent.
    other = Passage.objects.filter(
        Q(embedding_model__gt="", embedding_model__lt=model) | Q(embedding_model__gt=model)
    )
    counts = dict(other.order_by().values_list("owner_id").annotate(n=Count("pk")))
    found = {"passages": sum(counts.values()), "people": len(counts), "model": model}
    current = column_dimensions("memory_passage", "embedding")
    if counts and current and current != settings.EMBEDDING_DIMENSIONS:
        return Reembedding(**found, queued=0, column_dimensions=current)
    if counts and not isinstance(embed_pending_task.get_backend(), DatabaseBackend):
        return Reembedding(**found, queued=0, in_background=False)
    later = embed_pending_task.using(priority=IMPORT_PRIORITY)
    queued = sum(_queue_once(later, owner_id) for owner_id in sorted(counts))
    return Reembedding(**found, queued=queued)


# --- imports (memory.transfer.import_jobs) --------------------------------------------------------------

# A background run of an import works this long, then queues its continuation: background work
# queued meanwhile (a chat turn's topic upkeep) runs in between instead of waiting for the end.
IMPORT_SLICE_SECONDS = 20.0
# Below other background work: an import is long, a turn's upkeep is short and awaited sooner.
IMPORT_PRIORITY = -10


def run_import_job(job: ImportJob, *, deadline: float | None = None, progress=None) -> bool:
    """Take a claimed import job as far as `deadline` (time.monotonic()) allows: store an
    upload's messages, embed, build the topic tree, draw the facts. True once it is done."""
    try:
        if job.status == ImportJob.Status.STORING:
            import_jobs.store_payload(job)
        if job.status == ImportJob.Status.EMBEDDING and not import_jobs.embed(job, deadline, progress):
            return False
        if job.status == ImportJob.Status.TOPICS:
            owner = _owner(job.owner_id)
            _record(job.owner_id, "import_topics", lambda: {
                "entities_indexed_messages": entities.rebuild(owner), **topics.rebuild(owner)
            })
            import_jobs.to_facts(job)
        if job.status == ImportJob.Status.FACTS:
            owner = _owner(job.owner_id)
            _record(job.owner_id, "import_facts", lambda: {"facts": import_jobs.learn_facts(job, owner)})
            import_jobs.finish(job)
            queue_summaries(job.owner_id)
        return True
    except import_jobs.LostJob:
        logger.warning("import %s was taken over by another runner", job.pk)
        return False
    except Exception as exc:
        import_jobs.fail(job, f"{type(exc).__name__}: {exc}")
        raise


@task(priority=IMPORT_PRIORITY)
def run_import(job_id: str) -> dict[str, Any]:
    """One slice of an import job's background work (memory.transfer.import_jobs); queues the next."""
    job = import_jobs.claim(job_id)
    if job is None:  # finished, or a live run has it (resume_imports queues it if that run dies)
        return {"job": job_id, "claimed": False}
    done = run_import_job(job, deadline=time.monotonic() + IMPORT_SLICE_SECONDS)
    if not done:
        import_jobs.release(job)
        queue_import(job.pk)
    return {"job": job_id, "status": job.status, "embedded": job.passages_embedded}


def queue_import(job_id: str) -> bool:
    return _enqueue_unless_waiting(run_import, str(job_id))


# A job touched this recently without a runner is between two slices, or queued and about to be
# claimed: left alone.
RESUME_GRACE = dt.timedelta(seconds=15)


def resume_imports(owner=None) -> int:
    """Queue the imports whose runner is gone (a server restarted mid-import, a command was
    stopped): each goes on where it stopped. Called when a server starts, with the sweep for
    abandoned tasks, and when a page shows an import's progress. Returns how many were queued."""
    jobs = ImportJob.objects.shown().active()
    if owner is not None:
        jobs = jobs.owned_by(owner)
    now = timezone.now()
    queued = 0
    for job in jobs:
        idle = job.runner == "" and (job.heartbeat_at or job.created_at) > now - RESUME_GRACE
        if import_jobs.runner_gone(job, now) and not idle:
            queued += queue_import(job.pk)
    return queued


# How long a task's lease lasts unless renewed. Its worker renews it every third of that, so it
# only runs out when the worker is gone (killed, out of memory, host down) or has not reached the
# database for a whole lease. The TASK_LEASE_SECONDS setting overrides it (tests use seconds).
LEASE_SECONDS = 120.0
# A task still "running" after this long without a lease lost its worker. Only tasks claimed
# before leases existed, or whose worker never reached the database to take one, have none.
ABANDONED_AFTER = dt.timedelta(minutes=30)

_running = threading.local()  # the database task this worker thread runs, and its heartbeat


class _Heartbeat(threading.Thread):
    """Renews one running task's lease from a thread and database connection of its own, so a
    task busy in one long query or model call still shows that its worker is alive."""

    def __init__(self, task_id: str) -> None:
        super().__init__(name=f"task-lease-{task_id}", daemon=True)
        self.task_id = task_id
        self.worker = threading.current_thread()
        self.lease = dt.timedelta(seconds=float(getattr(settings, "TASK_LEASE_SECONDS", LEASE_SECONDS)))
        self.stopped = threading.Event()

    def run(self) -> None:
        if self.stopped.is_set():
            return  # the task finished before the first beat: nothing was leased
        try:
            if not self._renew(first=True):
                return
            # A worker thread that died without telling us (its task is never finished) must
            # not keep its task's lease alive: the lease then runs out and the task is requeued.
            while not self.stopped.wait(self.lease.total_seconds() / 3):
                if not self.worker.is_alive() or not self._renew(first=False):
                    return
        finally:
            self._release()
            connection.close()  # this thread's own connection

    def _renew(self, *, first: bool) -> bool:
        """Push the lease's end forward; False once there is no running task left to lease."""
        expires_at = Now() + self.lease  # the database's clock, the one requeue_abandoned reads
        try:
            if first:
                TaskLease.objects.update_or_create(task_id=self.task_id, defaults={"expires_at": expires_at})
                return True
            if TaskLease.objects.filter(task_id=self.task_id, task__status=TaskResultStatus.RUNNING).update(
                expires_at=expires_at
            ):
                return True
            # Nothing left to renew: the task finished, or its lease ran out (renewals failed for
            # a whole lease) and it was queued again while it still runs here.
            from django_tasks_db.models import DBTaskResult

            finished = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
            if DBTaskResult.objects.filter(pk=self.task_id).exclude(status__in=finished).exists():
                logger.warning("task %s lost its lease while running and was queued again", self.task_id)
            return False
        except DatabaseError:
            # The lease still runs for a while: try again at the next beat, on a fresh connection.
            logger.warning("could not renew the lease of task %s", self.task_id, exc_info=True)
            connection.close()
            return True

    def _release(self) -> None:
        # A finished task's lease has served. One still RUNNING here lost its worker thread: its
        # lease is left to run out, so the task is queued again.
        try:
            TaskLease.objects.filter(task_id=self.task_id).exclude(task__status=TaskResultStatus.RUNNING).delete()
        except DatabaseError:
            logger.warning("could not release the lease of task %s", self.task_id, exc_info=True)

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)  # a database that hangs must not hold the worker for long


def take_lease(task_result: TaskResult) -> None:
    """Called (through the task_started signal) in the worker thread about to run
    a task: a task from the database queue gets a heartbeat that renews its lease until
    `end_lease`. Never raises: a lease that cannot be taken leaves the task to the older rule."""
    end_lease()  # whatever this thread still holds belongs to a task that is over
    try:
        from django_tasks_db.backend import DatabaseBackend

        if not isinstance(task_result.task.get_backend(), DatabaseBackend):
            return  # the immediate backend runs a task inside its caller: nothing to requeue
        _running.task_id = task_result.id
        _running.heartbeat = _Heartbeat(task_result.id)
        _running.heartbeat.start()
    except Exception:
        logger.exception("could not take a lease for task %s", task_result.id)


def end_lease() -> None:
    """Called (through the task_finished signal) once the worker has stored the task's outcome:
    stops this thread's heartbeat and waits for it, so no thread or connection outlives it."""
    heartbeat = getattr(_running, "heartbeat", None)
    _running.task_id = _running.heartbeat = None
    if heartbeat is not None:
        try:
            heartbeat.stop()
        except Exception:
            logger.exception("could not stop the heartbeat of task %s", heartbeat.task_id)


def _owner_argument(args_kwargs: dict) -> tuple[bool, int | None]:
    args, kwargs = args_kwargs.get("args") or [], args_kwargs.get("kwargs") or {}
    owner = args[0] if args else kwargs.get("owner_id")
    return (owner is None or isinstance(owner, int)), owner


def requeue_abandoned(older_than: dt.timedelta = ABANDONED_AFTER, *, task_ids: Iterable | None = None) -> int:
    """Put tasks a worker claimed but never finished back in the queue, and mark their upkeep
    runs as stopped so the explorer says what happened. Returns how many tasks were requeued.

    A task is abandoned when its lease ran out (its worker stopped renewing it), never while
    its lease is fresh, however long it has run. A task without a lease falls back to its
    start: abandoned once it started longer ago than `older_than`. Upkeep is idempotent
    (topic_upkeep is one transaction and skips messages that already have a topic), so running
    such a task again is safe. With `task_ids`, only those tasks are considered (bench_faults
    requeues the one task it abandoned, never another user's)."""
    from django_tasks_db.models import DBTaskResult

    cutoff = timezone.now() - older_than
    leases = TaskLease.objects.filter(task=OuterRef("pk"))
    lease_ran_out = Exists(leases.filter(expires_at__lt=Now()))
    with transaction.atomic():
        abandoned = list(
            DBTaskResult.objects.select_for_update(skip_locked=True)
            .filter(status=TaskResultStatus.RUNNING)
            .filter(lease_ran_out | (~Exists(leases) & Q(started_at__lt=cutoff)))
            .filter(Q(pk__in=list(task_ids)) if task_ids is not None else Q())
            .values_list("pk", "started_at", "args_kwargs")
        )
        if not abandoned:
            return 0
        ids = [pk for pk, _, _ in abandoned]
        DBTaskResult.objects.filter(pk__in=ids).update(status=TaskResultStatus.READY, started_at=None)
        TaskLease.objects.filter(task_id__in=ids).delete()
        runs = Q(task_id__in=ids)
        named = set(UpkeepRun.objects.filter(task_id__in=ids).values_list("task_id", flat=True))
        for pk, started_at, args_kwargs in abandoned:
            known, owner = _owner_argument(args_kwargs)
            if pk not in named and known and started_at:
                # A run that does not name its task (recorded before runs did, or by a task
                # that does not say): its owner's unfinished run that started after the task.
                runs |= Q(task_id=None, owner_id=owner, started_at__gte=started_at)
        UpkeepRun.objects.filter(runs, finished_at=None).update(
            ok=False,
            finished_at=timezone.now(),
            detail={"error": "the worker stopped before finishing; the task was queued again"},
        )
    logger.warning("requeued %d task(s) abandoned by a stopped worker", len(ids))
    return len(ids)


REQUEUE_SWEEP_SECONDS = 30.0
_requeue_swept_at = -REQUEUE_SWEEP_SECONDS


@_never_fails("topic upkeep")
def queue_upkeep(owner_id: int, message_ids: Iterable[str]) -> bool:
    """Enqueue topic upkeep for these messages. Cheap, and never fails the caller: a queue
    problem is logged and reported as False (the next rebuild catches up). Tasks abandoned by
    a dead worker are requeued on the way, so the queue heals without an operator."""
    global _requeue_swept_at
    # A sweep is a locked query over the task table: once in a while is enough (a
    # hundred turns a second each sweeping would cost more than their upkeep).
    if time.monotonic() - _requeue_swept_at >= REQUEUE_SWEEP_SECONDS:
        _requeue_swept_at = time.monotonic()
        requeue_abandoned()
        resume_imports()
        from memory.lifecycle import erasing

        erasing.end_expired_temporary_chats()
    ids = [str(i) for i in message_ids if i]
    if not ids:
        return False
    for start in range(0, len(ids), UPKEEP_BATCH):
        topic_upkeep.enqueue(int(owner_id), ids[start : start + UPKEEP_BATCH])
    return True


@_never_fails("a topic rebuild")
def queue_rebuild(owner_id: int) -> bool:
    rebuild_topics.enqueue(int(owner_id))
    return True


# Connected when the app is ready (memory.apps), so every process, web or worker, has them.
@receiver(signals.messages_changed, dispatch_uid="memory.queue_upkeep")
def _messages_changed(sender, owner_id: int, message_ids: list[str], **kwargs) -> None:
    queue_upkeep(owner_id, message_ids)


@receiver(fact_sources_lost, dispatch_uid="memory.queue_facts")
def _sources_lost(sender, owner_id: int, message_ids: list[str], **kwargs) -> None:
    queue_facts(owner_id, message_ids)


@receiver(signals.passages_unembedded, dispatch_uid="memory.queue_embedding")
def _passages_unembedded(sender, owner_id: int, **kwargs) -> None:
    embed_pending_task.enqueue(owner_id)


@receiver(task_started, dispatch_uid="memory.take_task_lease")
def _take_task_lease(sender, task_result, **kwargs) -> None:
    take_lease(task_result)


@receiver(task_finished, dispatch_uid="memory.end_task_lease")
def _end_task_lease(sender, task_result, **kwargs) -> None:
    end_lease()


@receiver(task_finished, dispatch_uid="memory.forget_task_arguments")
def _forget_task_arguments(sender, task_result, **kwargs) -> None:
    """A finished task keeps no id of a message forgotten while it waited or ran (a forget
    queues upkeep for the very ids it removed)."""
    try:
        from django_tasks_db.backend import DatabaseBackend

        if isinstance(task_result.task.get_backend(), DatabaseBackend):
            tombstones.forget_task_arguments(task_id=task_result.id)
    except Exception:
        logger.exception("could not drop forgotten ids from task %s", task_result.id)
