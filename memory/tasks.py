"""Background work on memory, with the Django tasks framework (a database-backed queue).

The chat calls `queue_upkeep(owner_id, message_ids)` after each turn (and the explorer after an
edit or delete): it only enqueues, so the turn never waits for clustering or entity extraction.
Every run is recorded as an UpkeepRun so the explorer can show what ran and what failed.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django_tasks import task

from memory import entities, store, summaries, topics
from memory.models import Message, UpkeepRun

logger = logging.getLogger(__name__)


def _record(owner_id: int | None, kind: str, work) -> dict[str, Any]:
    run = UpkeepRun.objects.create(owner_id=owner_id, kind=kind)
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


def run_upkeep(owner, message_ids: Iterable[str]) -> dict[str, Any]:
    """Synchronous upkeep for these messages: new ones join topics and get their entities;
    edited or deleted ones have their topics re-derived (so no deleted text stays in a label,
    summary or sample)."""
    ids = [str(i) for i in message_ids][:500]
    messages = list(Message.objects.owned_by(owner).logical().filter(pk__in=ids))
    # Recollect's own text (offline-recall answers) is shown, never mined for topics or entities.
    live = [m for m in messages if not m.deleted and not store.is_system_text(m.metadata)]
    changed = [m.pk for m in messages if m.deleted or m.edited] + [
        i for i in ids if i not in {m.pk for m in messages}
    ]
    mentions = entities.index_messages(owner, live)
    if changed:
        # Deleted (or forgotten) messages: their mentions no longer count.
        from memory.models import EntityMention

        touched = set(
            EntityMention.objects.filter(owner_id=owner.pk, message_id__in=changed).values_list(
                "entity_id", flat=True
            )
        )
        EntityMention.objects.filter(
            owner_id=owner.pk, message_id__in=[m.pk for m in messages if m.deleted]
        ).delete()
        entities.refresh_counts(owner, touched)
        if len(messages) < len(ids):  # some were forgotten: their mentions went with them
            entities.forget_orphans(owner)
    refreshed = topics.refresh(owner, topics.topics_mentioning(owner, changed)) if changed else {}
    # A turn stores its messages without vectors (the model call stays off the turn's path);
    # they get them here, before joining topics by similarity (the embedding cache of the
    # server that ran the turn usually has them already).
    try:
        with transaction.atomic():  # a savepoint: a failure here leaves the upkeep usable
            embedded = store.embed_pending(owner, message_ids=[m.pk for m in live]) if live else 0
    except Exception:  # noqa: BLE001 - topics then go by session; embed_pending_passages retries
        logger.exception("could not embed new messages before topic upkeep")
        embedded = 0
    assigned = topics.assign_messages(owner, [m.pk for m in live])
    topics.update_period_summaries(owner)
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
    queue_summaries(owner_id)
    return detail


@task()
def rebuild_topics(owner_id: int) -> dict[str, Any]:
    owner = _owner(owner_id)

    def work():
        ents = entities.rebuild(owner)
        tree = topics.rebuild(owner)
        return {"entities_indexed_messages": ents, **tree}

    detail = _record(owner_id, "rebuild_topics", work)
    queue_summaries(owner_id)
    return detail


@task()
def summarize_topics(owner_id: int) -> dict[str, Any]:
    owner = _owner(owner_id)
    return _record(owner_id, "summarize_topics", lambda: summaries.summarize_topics(owner))


def queue_summaries(owner_id: int) -> bool:
    """With a model configured, queue model-written summaries for topics that only have
    extractive ones (one queued run per owner at a time). Never fails the caller."""
    try:
        from django_tasks import TaskResultStatus
        from django_tasks_db.models import DBTaskResult

        from memory.models import Topic

        if not summaries.is_configured():
            return False
        extractive = Topic.objects.filter(owner_id=owner_id, summary_source="extractive", message_count__gt=0)
        if not extractive.exists():
            return False
        waiting = DBTaskResult.objects.filter(
            status=TaskResultStatus.READY,
            task_path=summarize_topics.module_path,
            args_kwargs__args=[owner_id],
        )
        if waiting.exists():
            return False
        summarize_topics.enqueue(int(owner_id))
        return True
    except Exception:
        logger.exception("could not queue topic summaries for owner %s", owner_id)
        return False


@task()
def embed_pending_task(owner_id: int | None = None) -> dict[str, Any]:
    from memory.store import embed_pending

    owner = _owner(owner_id) if owner_id else None
    return _record(owner_id, "embed_pending", lambda: {"embedded": embed_pending(owner)})


# A task still "running" after this long lost its worker (killed, out of memory, host gone).
ABANDONED_AFTER = dt.timedelta(minutes=30)


def requeue_abandoned(older_than: dt.timedelta = ABANDONED_AFTER) -> int:
    """Put tasks a worker claimed but never finished back in the queue, and mark their upkeep
    runs as stopped so the explorer says what happened. Returns how many tasks were requeued.

    The database backend has no heartbeat: a worker killed mid-task leaves its task RUNNING
    forever. Upkeep is idempotent (topic_upkeep is one transaction and skips messages that
    already have a topic), so running such a task again is safe."""
    from django_tasks import TaskResultStatus
    from django_tasks_db.models import DBTaskResult

    cutoff = timezone.now() - older_than
    requeued = DBTaskResult.objects.filter(status=TaskResultStatus.RUNNING, started_at__lt=cutoff).update(
        status=TaskResultStatus.READY, started_at=None
    )
    if requeued:
        logger.warning("requeued %d task(s) abandoned by a stopped worker", requeued)
        UpkeepRun.objects.filter(finished_at=None, started_at__lt=cutoff).update(
            ok=False,
            finished_at=timezone.now(),
            detail={"error": "the worker stopped before finishing; the task was queued again"},
        )
    return requeued


def queue_upkeep(owner_id: int, message_ids: Iterable[str]) -> bool:
    """Enqueue topic upkeep for these messages. Cheap, and never fails the caller: a queue
    problem is logged and reported as False (the next rebuild catches up). Tasks abandoned by
    a dead worker are requeued on the way, so the queue heals without an operator."""
    try:
        requeue_abandoned()
        ids = [str(i) for i in message_ids if i]
        if not ids:
            return False
        topic_upkeep.enqueue(int(owner_id), ids)
        return True
    except Exception:
        logger.exception("could not queue topic upkeep for owner %s", owner_id)
        return False


def queue_rebuild(owner_id: int) -> bool:
    try:
        rebuild_topics.enqueue(int(owner_id))
        return True
    except Exception:
        logger.exception("could not queue a topic rebuild for owner %s", owner_id)
        return False
