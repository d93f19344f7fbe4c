"""The import page: upload chat history (ChatGPT's or Claude's conversations.json or export zip,
JSON Lines, or a Recollect export) and watch it arrive.

The upload is read and checked in the request (a bad file is a clear error and nothing is
kept); its text goes into an ImportJob that background work runs (memory.transfer.import_jobs): the
messages are stored first, then embedded, then topics are built. The progress partial polls
itself with htmx while a job runs; it is also on the Memory overview.
"""

from __future__ import annotations

import datetime as dt
import gzip

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from memory import tasks
from memory.models import ImportJob
from memory.transfer import import_jobs
from memory.transfer.portability import InvalidExport

# Finished jobs stay on the progress partial this long.
RECENT = dt.timedelta(hours=1)
PAGE_JOBS = 20


def _get_job_for_user(user, job_id: str) -> ImportJob:
    job = ImportJob.objects.owned_by(user).shown().filter(pk=str(job_id)[:26]).first()
    if job is None:
        raise Http404("no such import")
    return job


def shown_jobs(user, now: dt.datetime | None = None) -> list[ImportJob]:
    """The user's imports worth showing: running ones and those finished within RECENT."""
    now = now or timezone.now()
    jobs = ImportJob.objects.owned_by(user).shown()
    running = list(jobs.active())
    finished = list(jobs.exclude(pk__in=[j.pk for j in running]).filter(finished_at__gte=now - RECENT)[:5])
    return running + finished


def _upload_error(request: HttpRequest, message: str, status: int) -> HttpResponse:
    context = {"section": "import", "error": message, "import_jobs": shown_jobs(request.user),
               "max_mb": settings.IMPORT_MAX_UPLOAD_MB}
    name = "explorer/import.html#upload-form" if request.htmx else "explorer/import.html"
    return render(request, name, context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def import_page(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        jobs = list(ImportJob.objects.owned_by(request.user).shown()[:PAGE_JOBS])
        return render(request, "explorer/import.html", {
            "section": "import", "import_jobs": shown_jobs(request.user), "history": jobs,
            "max_mb": settings.IMPORT_MAX_UPLOAD_MB,
        })
    limit = settings.IMPORT_MAX_UPLOAD_MB * 1024 * 1024
    declared = int(request.META.get("CONTENT_LENGTH") or 0)
    if declared > limit + 64 * 1024:  # said before a byte of the file is read
        return _upload_error(request, f"The file is larger than {settings.IMPORT_MAX_UPLOAD_MB} MB "
                                      "(IMPORT_MAX_UPLOAD_MB).", 413)
    upload = request.FILES.get("file")
    if upload is None:
        return _upload_error(request, "Choose a file to import.", 400)
    if upload.size > limit:
        return _upload_error(request, f"{upload.name} is larger than {settings.IMPORT_MAX_UPLOAD_MB} MB "
                                      "(IMPORT_MAX_UPLOAD_MB).", 413)
    try:
        text = import_jobs.read_upload(upload.read(), upload.name)
        parsed = import_jobs.parse(text)
    except (import_jobs.InvalidUpload, InvalidExport) as exc:
        return _upload_error(request, f"{upload.name} cannot be imported: {exc}", 400)
    if parsed.messages == 0:
        return _upload_error(request, f"{upload.name} holds no messages to import.", 400)
    job = import_jobs.create(
        request.user, source=parsed.kind, filename=upload.name,
        # The text only (an export zip's pictures are not kept), compressed.
        payload=gzip.compress(text.encode("utf-8", "surrogatepass"), compresslevel=1),
        messages_total=parsed.messages,
    )
    tasks.queue_import(job.pk)
    if request.htmx:
        return render(request, "explorer/import.html#upload-form", {
            "section": "import", "import_jobs": shown_jobs(request.user), "started": job,
            "max_mb": settings.IMPORT_MAX_UPLOAD_MB,
        })
    return redirect("explorer:import")


@login_required
@require_GET
def import_progress(request: HttpRequest) -> HttpResponse:
    """The progress partial: the user's running and recent imports, or one (?job=ID)."""
    job_id = request.GET.get("job")
    jobs = [_get_job_for_user(request.user, job_id)] if job_id else shown_jobs(request.user)
    if any(job.is_active for job in jobs):
        tasks.resume_imports(request.user)  # a run that died (server restart) goes on
    return render(request, "explorer/_import_progress.html", {"import_jobs": jobs, "one_job": job_id})
