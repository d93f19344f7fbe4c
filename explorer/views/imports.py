"""The import page: upload chat history (ChatGPT's or Claude's conversations.json or export zip,
JSON Lines, or a Recollect export) and watch it arrive.

The upload is read and checked in the request, as a stream (a bad file is a clear error and
nothing is kept); its text goes into an ImportJob that background work runs (memory.transfer.import_jobs): the
messages are stored first, then embedded, then topics are built. The progress partial polls
itself with htmx while a job runs; it is also on the Memory overview.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from config.bodies import body_refused, import_limit, shows_refused_body
from memory import tasks
from memory.models import ImportJob
from memory.transfer import import_jobs, sources
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


def _too_large(name: str = "") -> str:
    return (f"{name or 'The file'} is larger than {settings.IMPORT_MAX_UPLOAD_MB:,} MB, the most an import "
            "takes (IMPORT_MAX_UPLOAD_MB); nothing was kept.")


@shows_refused_body
@login_required
@require_http_methods(["GET", "POST"])
def import_page(request: HttpRequest) -> HttpResponse:
    if body_refused(request):  # an upload over the limit, refused before it was read
        return _upload_error(request, _too_large(), 413)
    if request.method == "GET":
        jobs = list(ImportJob.objects.owned_by(request.user).shown()[:PAGE_JOBS])
        return render(request, "explorer/import.html", {
            "section": "import", "import_jobs": shown_jobs(request.user), "history": jobs,
            "max_mb": settings.IMPORT_MAX_UPLOAD_MB,
        })
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > import_limit():  # said before a byte of the file is read
        return _upload_error(request, _too_large(), 413)
    upload = request.FILES.get("file")
    if upload is None:
        return _upload_error(request, "Choose a file to import.", 400)
    if upload.size > settings.IMPORT_MAX_UPLOAD_MB * 1024 * 1024:
        return _upload_error(request, _too_large(upload.name), 413)
    # The upload is on disk (or in memory when small); it is read as a stream, a conversation
    # or a line at a time, never whole (memory.transfer.sources).
    try:
        source = sources.open_file(upload.file, upload.name)
        parsed = import_jobs.parse(source)
    except (import_jobs.InvalidUpload, InvalidExport) as exc:
        reason = _without_name(exc, upload.name)
        return _upload_error(request, f"{upload.name} cannot be imported: {reason}", 400)
    if parsed.messages == 0:
        return _upload_error(request, f"{upload.name} holds no messages to import.", 400)
    with transaction.atomic():  # the job is seen (and run) only with all of its file
        job = import_jobs.create(request.user, source=parsed.kind, filename=upload.name,
                                 messages_total=parsed.messages)
        # The text only (an export zip's pictures are not kept), compressed.
        import_jobs.save_payload(job, source)
    tasks.queue_import(job.pk)
    if request.htmx:
        return render(request, "explorer/import.html#upload-form", {
            "section": "import", "import_jobs": shown_jobs(request.user), "started": job,
            "max_mb": settings.IMPORT_MAX_UPLOAD_MB,
        })
    return redirect("explorer:import")


def _without_name(exc: Exception, name: str) -> str:
    """The reason, without the file's name in front (the message names it already)."""
    text = str(exc)
    return text[len(name) + 2:] if name and text.startswith(f"{name}: ") else text


@login_required
@require_GET
def import_progress(request: HttpRequest) -> HttpResponse:
    """The progress partial: the user's running and recent imports, or one (?job=ID)."""
    job_id = request.GET.get("job")
    jobs = [_get_job_for_user(request.user, job_id)] if job_id else shown_jobs(request.user)
    if any(job.is_active for job in jobs):
        tasks.resume_imports(request.user)  # a run that died (server restart) goes on
    return render(request, "explorer/_import_progress.html", {"import_jobs": jobs, "one_job": job_id})
