"""Imports nobody waits for: an ImportJob stores the messages first, so keyword search, the chat
and the explorer have them at once, then embeds them, then the topic tree is built.

The steps run wherever the job is claimed: a web upload's job in background work
(memory.tasks.run_import, a slice at a time so other background work keeps its turn),
`manage.py import_history --wait` in the command's own process. A job is claimed by one process
at a time (`claim`): a run that stops (a server restart, a killed command) leaves its runner
behind, and the next run takes over once that runner is gone (same host: at once; another host:
after STALL_SECONDS without a heartbeat). Embedding takes the owner's passages that have no
vector yet, a batch at a time, locked (SKIP LOCKED) until their vectors are written: a resumed or
concurrent run never embeds a passage twice.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import logging
import time
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from memory.embedders import get_embedder
from memory.models import ImportJob, Passage
from memory.processes import PROCESS, is_dead
from memory.transfer import importers, portability

logger = logging.getLogger(__name__)

# A runner on another host that has not been heard from for this long is gone.
STALL_SECONDS = 90
# Passages embedded (and locked) per transaction.
EMBED_BATCH = 32
# Progress is written to the job at most this often while messages are stored.
PROGRESS_EVERY_SECONDS = 0.5
KINDS = {"chatgpt": "ChatGPT", "claude": "Claude", "jsonl": "JSON Lines", "recollect": "Recollect export"}


class InvalidUpload(ValueError):
    """A file that is none of the formats an import reads (the message says why)."""


def read_upload(raw: bytes, name: str = "") -> str:
    """The text of an uploaded file: conversations.json from an export zip (ChatGPT's and
    Claude's come as one), or the file itself, as UTF-8."""
    if raw[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(raw)) as archive:
                names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "conversations.json"]
                if not names:
                    raise InvalidUpload(f"{name or 'the file'}: a zip file without conversations.json")
                raw = archive.read(min(names, key=len))
        except zipfile.BadZipFile as exc:
            raise InvalidUpload(f"{name or 'the file'}: a broken zip file ({exc})") from None
    return raw.decode("utf-8", errors="replace")


@dataclass
class Parsed:
    """An import's input, read and checked whole before anything is stored."""

    kind: str  # chatgpt, claude, jsonl, recollect
    text: str
    data: Any  # parsed conversations, a checked Recollect export, or None for JSON Lines
    messages: int


def parse(text: str) -> Parsed:
    """Tell the format apart and check it; raise portability.InvalidExport saying what is wrong."""
    kind, data = importers.detect_text_kind(text)
    if kind == "recollect":
        return recollect_export(text, data)
    if kind in ("chatgpt", "claude"):
        data = (importers.parse_chatgpt if kind == "chatgpt" else importers.parse_claude)(data)
        count = sum(len(c.messages) for c in data)
    else:
        count = text.count("\n") + (0 if text.endswith("\n") else 1)
        _some_good_line(text)
    return Parsed(kind, text, data, count)


def _some_good_line(text: str) -> None:
    """JSON Lines are imported line by line, a bad line costing only itself; but a file none of
    whose lines is a message is no history at all: say why its first line is not."""
    first_error = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            importers.parse_line(raw)
            return
        except importers.LineError as exc:
            first_error = first_error or f"line {lineno}: {exc}"
    raise portability.InvalidExport(
        "not a chat history: no line is a JSON Lines message, nor is the file a ChatGPT, Claude "
        f"or Recollect export ({first_error or 'the file is empty'})"
    )


def recollect_export(text: str, data: Any) -> Parsed:
    """A Recollect export (parsed JSON), checked whole."""
    portability.validate_export(data)
    return Parsed("recollect", text, data, sum(len(c.get("messages") or []) for c in data["conversations"]))


def create(owner, *, source: str = "", filename: str = "", payload: bytes | None = None,
           messages_total: int = 0, claimed: bool = False) -> ImportJob:
    """A new job; `claimed`: run by the caller from the start (a command that stores at once)."""
    now = timezone.now()
    return ImportJob.objects.create(
        owner=owner, source=source, filename=filename[:255], payload=payload,
        messages_total=messages_total, runner=new_runner() if claimed else "",
        heartbeat_at=now if claimed else None, rate_since=now,
    )


# --- claiming ------------------------------------------------------------------------------------


def new_runner() -> str:
    """A run's name: "token@host:pid:start" (the process, to tell when it is gone)."""
    return f"{uuid.uuid4().hex[:12]}@{PROCESS}"


def runner_gone(job: ImportJob, now: dt.datetime | None = None) -> bool:
    if not job.runner or is_dead(job.runner.partition("@")[2]):
        return True
    now = now or timezone.now()
    return job.heartbeat_at is None or job.heartbeat_at < now - dt.timedelta(seconds=STALL_SECONDS)


def claim(job_id: str) -> ImportJob | None:
    """The job, now this run's; None when it is finished or a live run has it."""
    with transaction.atomic():
        job = ImportJob.objects.shown().select_for_update().filter(pk=job_id).first()
        if job is None or not job.is_active or not runner_gone(job):
            return None
        now = timezone.now()
        job.runner, job.heartbeat_at = new_runner(), now
        job.rate_since, job.rate_base = now, job.done_count[0]
        job.save(update_fields=["runner", "heartbeat_at", "rate_since", "rate_base"])
    return job


def release(job: ImportJob) -> None:
    ImportJob.objects.filter(pk=job.pk, runner=job.runner).update(runner="")


class LostJob(RuntimeError):
    """Another runner took the job over (this one was taken for gone): this run stops."""


def _beat(job: ImportJob, **counts: Any) -> None:
    """Record progress (F expressions or values) and that this runner is alive."""
    mine = ImportJob.objects.filter(pk=job.pk, runner=job.runner)
    if not mine.update(heartbeat_at=timezone.now(), **counts):
        raise LostJob(job.pk)


def _set(job: ImportJob, **fields: Any) -> None:
    for name, value in fields.items():
        setattr(job, name, value)
    _beat(job, **fields)


# --- step 1: store the messages ------------------------------------------------------------------


LINKED_CONVERSATIONS = 20


def store(job: ImportJob, parsed: Parsed, progress: Callable[[int], None] | None = None,
          on_error: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Store the messages of `parsed` without vectors and move the job on to embedding
    (embed="upkeep": storing queues no embedding work, the job embeds them). Storing again
    after a stop adds nothing: every format skips what the owner already has. Bad lines or
    messages cost only themselves: each is told to `on_error` as it is met and kept (the first
    50) in the job's report."""
    owner = job.owner
    stored = 0
    last_write = 0.0

    def advance(n: int) -> None:
        nonlocal stored, last_write
        stored += n
        if progress:
            progress(n)
        if time.monotonic() - last_write >= PROGRESS_EVERY_SECONDS:
            last_write = time.monotonic()
            _beat(job, messages_stored=min(stored, job.messages_total))

    _set(job, source=parsed.kind, messages_total=parsed.messages)
    errors: list[str] = []

    def bad(error: str) -> None:
        errors.append(error)
        if on_error:
            on_error(error)

    if parsed.kind == "recollect":
        report = portability.import_memory(
            owner, parsed.data, embed="upkeep",
            progress=lambda stage, done, total: advance(done - stored) if stage == "messages" else None,
        )
        summary = {"added": report.messages, "skipped": 0, "bad": 0, "conversations": report.conversations,
                   "summary": report.summary()}
        for warning in report.warnings:
            bad(f"warning: {warning}")
    elif parsed.kind in ("chatgpt", "claude"):
        report = importers.import_conversations(owner, parsed.data, embed="upkeep", progress=advance)
        summary = {"added": report.added, "skipped": report.skipped, "bad": report.bad,
                   "conversations": report.conversations}
        for error in report.errors:
            bad(error)
    else:
        report = importers.import_json_lines(owner, io.StringIO(parsed.text), embed="upkeep",
                                             progress=advance, on_error=bad)
        summary = {"added": report.added, "skipped": report.skipped, "bad": report.bad,
                   "conversations": report.conversations}
    # The first conversations it started, for the finished import to link to.
    summary["conversation_ids"] = list(getattr(report, "conversation_ids", []))[:LINKED_CONVERSATIONS]
    summary["errors"] = errors[:50]
    summary["more_errors"] = max(0, len(errors) - 50)
    pending = Passage.objects.owned_by(owner).filter(embedding__isnull=True).count()
    now = timezone.now()
    _set(job, messages_stored=parsed.messages, report=summary, payload=None, stored_at=now,
         status=ImportJob.Status.EMBEDDING, passages_total=pending, passages_embedded=0,
         rate_since=now, rate_base=0)
    return summary


def store_payload(job: ImportJob) -> dict[str, Any]:
    """Step 1 for an uploaded file kept in the job (a web upload): its text, gzip-compressed.
    A job with no file left (a command's, stopped while storing) goes on to embed what it
    stored, and says so."""
    raw = ImportJob.objects.filter(pk=job.pk).values_list("payload", flat=True).first()
    if raw is None:
        # A command stopped while storing (it keeps no file): what it stored is embedded.
        summary = {**job.report, "errors": ["storing was interrupted: import the file again to add "
                                            "the rest (what is already stored is skipped)"]}
        pending = Passage.objects.owned_by(job.owner).filter(embedding__isnull=True).count()
        _set(job, report=summary, status=ImportJob.Status.EMBEDDING, passages_total=pending,
             passages_embedded=0, stored_at=timezone.now())
        return summary
    # The upload's text, gzip-compressed (explorer.views.imports keeps no zip).
    return store(job, parse(gzip.decompress(bytes(raw)).decode("utf-8", "surrogatepass")))


# --- step 2: embed -------------------------------------------------------------------------------


def embed(job: ImportJob, deadline: float | None = None,
          progress: Callable[[int], None] | None = None) -> bool:
    """Give vectors to the owner's passages that have none, until none is left (True) or
    time.monotonic() passes `deadline` (False)."""
    embedder = get_embedder()
    pending = Passage.objects.owned_by(job.owner).filter(embedding__isnull=True)
    while deadline is None or time.monotonic() < deadline:
        with transaction.atomic():
            batch = pending.select_for_update(skip_locked=True).only("id", "text", "context")
            rows = list(batch[:EMBED_BATCH])
            if not rows:
                break
            vectors = embedder.embed([r.embedding_input for r in rows])
            write_vectors(rows, vectors, embedder.name)
            # Counted in the same transaction: a stop never counts a batch it did not write.
            _beat(job, passages_embedded=F("passages_embedded") + len(rows))
        job.passages_embedded += len(rows)
        if progress:
            progress(len(rows))
    else:  # the deadline came before the last batch: the next run goes on
        return False
    job.passages_total = max(job.passages_total, job.passages_embedded)
    _set(job, status=ImportJob.Status.TOPICS, embedded_at=timezone.now(), passages_total=job.passages_total)
    return True


def write_vectors(rows: list[Passage], vectors, model: str) -> None:
    """One UPDATE for a batch of passages' vectors (Django's bulk_update builds a CASE per row)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Passage._meta.db_table} AS p SET embedding = v.e::vector, embedding_model = %s "
            "FROM unnest(%s::bigint[], %s::text[]) AS v(id, e) WHERE p.id = v.id",
            [model, [r.pk for r in rows], ["[" + ",".join(map(repr, map(float, v))) + "]" for v in vectors]],
        )


# --- step 3: topics (memory.tasks runs it, recorded as upkeep) -----------------------------------


def finish(job: ImportJob, facts: int | None = None) -> None:
    report = {**(job.report or {}), **({"facts": facts} if facts is not None else {})}
    _set(job, status=ImportJob.Status.DONE, finished_at=timezone.now(), report=report)
    release(job)


def fail(job: ImportJob, error: str) -> None:
    job.status, job.error = ImportJob.Status.FAILED, error[:2000]
    ImportJob.objects.filter(pk=job.pk).update(
        status=ImportJob.Status.FAILED, error=error[:2000], finished_at=timezone.now(), runner="",
        payload=None,
    )
