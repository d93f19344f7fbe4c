"""Background embedding: passages stored without vectors (very long texts, imports with
--no-embed, a switch of model) get them here, off the path of a chat turn."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.utils import timezone
from django_tasks import task

from memory.models import UpkeepRun
from memory.store import embed_pending


@task()
def embed_pending_passages(owner_id: int) -> int:
    owner = get_user_model().objects.filter(pk=owner_id).first()
    if owner is None:
        return 0
    run = UpkeepRun.objects.create(owner=owner, kind="embed_pending")
    try:
        done = embed_pending(owner)
    except Exception as exc:
        run.ok = False
        run.detail = {"error": str(exc)[:500]}
        run.finished_at = timezone.now()
        run.save()
        raise
    run.detail = {"passages": done}
    run.finished_at = timezone.now()
    run.save()
    return done
