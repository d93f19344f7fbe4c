"""Imports nobody waits for: an ImportJob stores the messages first, so keyword search, the chat
and the explorer have them at once, then embeds them, then the topic tree is built, then the
facts a person would keep are drawn from them ("N facts learned").

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
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from memory.embedders import get_embedder
from memory.models import EMBED_LATER, Conversation, ImportJob, Message, Passage, Role
from memory.processes import PROCESS, is_dead
from memory.transfer import importers, portability, sources

logger = logging.getLogger(__name__)

# A runner on another host that has not been heard from for this long is gone.
STALL_SECONDS = 90
# Passages embedded (and locked) per transaction.
EMBED_BATCH = 32
# The order an import embeds in: the person's own messages first, newest first, then the rest,
# newest first (the passage_embed_order index's order).
EMBED_ORDER = (EMBED_LATER, F("timestamp").desc())
# Progress is written to the job at most this often while messages are stored.
PROGRESS_EVERY_SECONDS = 0.5
KINDS = {"chatgpt": "ChatGPT", "claude": "Claude", "jsonl": "JSON Lines", "recollect": "Recollect export"}


InvalidUpload = sources.InvalidUpload


def read_upload(raw: bytes, name: str = "") -> str:
    """The text of an uploaded file held in memory: conversations.json from an export zip, or
    the file itself, as UTF-8 (tests; the import page and commands read a Source)."""
    source = sources.open_file(io.BytesIO(raw), name)
    with source.text() as stream:
        return stream.read()


@dataclass
class Parsed:
    """An import's input, read and checked whole (a conversation or line at a time) before
    anything is stored; `source` reads it again to store it."""

    kind: str  # chatgpt, claude, jsonl, recollect
    source: sources.Source
    messages: int
    data: Any = None  # a checked Recollect export; None for the others (read again from source)
    conversations: int = 0  # in the file (ChatGPT, Claude)
    hidden: int = 0  # entries with nothing to import (hidden system prompts, tool output)


def parse(source: sources.Source | str) -> Parsed:
    """Tell the format apart and check it, reading the source as a stream; raise
    portability.InvalidExport (or InvalidUpload, for a zip over its caps) saying what is wrong.
    Text in memory is read the same way."""
    if isinstance(source, str):
        source = sources.open_text(source)
    error = sources.read_errors(source) if source.member else None
    if error:
        raise InvalidUpload(error)
    kind, data = importers.detect_kind_of(source)
    if kind == "recollect":
        return recollect_export(source, data)
    if kind in ("chatgpt", "claude"):
        parsed = Parsed(kind, source, 0)
        for conversation in importers.conversations_of(source, kind):
            parsed.messages += len(conversation.messages)
            parsed.conversations += 1
            parsed.hidden += conversation.skipped
        return parsed
    with source.text() as stream:
        count = _some_good_line(stream)
    return Parsed(kind, source, count)


def _some_good_line(stream) -> int:
    """The number of lines of a JSON Lines file (its messages, at most). They are imported line
    by line, a bad line costing only itself; but a file none of whose lines is a message is no
    history at all: say why its first line is not."""
    first_error = None
    good = False
    count = lines = 0
    too_deep = False  # the first line was nested too deeply
    for lineno, raw in enumerate(sources.lines(stream), start=1):
        count = lineno
        if good or sources.blank(raw):
            continue
        lines += 1
        try:
            importers.parse_line(raw)
            good = True
        except importers.LineError as exc:
            first_error = first_error or f"line {lineno}: {exc}"
            too_deep = too_deep or (lines == 1 and isinstance(exc, importers.LineTooDeep))
    if good:
        return count
    if lines == 1 and too_deep:  # one document, nested too deeply: say only that
        raise sources.TooDeep()
    raise portability.InvalidExport(
        "not a chat history: no line is a JSON Lines message, nor is the file a ChatGPT, Claude "
        f"or Recollect export ({first_error or 'the file is empty'})"
    )


def recollect_export(source: sources.Source | str, data: Any) -> Parsed:
    """A Recollect export (parsed JSON), checked whole."""
    if isinstance(source, str):
        source = sources.open_text(source)
    portability.validate_export(data)
    return Parsed("recollect", source, sum(len(c.get("messages") or []) for c in data["conversations"]),
                  data=data)


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
        data = parsed.data
        if data is None:
            with parsed.source.text() as stream:
                data = sources.loads(stream.read())
        report = portability.import_memory(
            owner, data, embed="upkeep",
            progress=lambda stage, done, total: advance(done - stored) if stage == "messages" else None,
        )
        summary = {"added": report.messages, "skipped": 0, "bad": 0, "conversations": report.conversations,
                   "summary": report.summary(), **report.left_out.as_report()}
        for warning in report.warnings:
            bad(f"warning: {warning}")
    elif parsed.kind in ("chatgpt", "claude"):
        report = importers.import_conversations(
            owner, importers.conversations_of(parsed.source, parsed.kind), embed="upkeep", progress=advance
        )
        summary = report.counts()
        for error in report.errors:
            bad(error)
    else:
        with parsed.source.text() as stream:
            report = importers.import_json_lines(owner, sources.lines(stream), embed="upkeep",
                                                 progress=advance, on_error=bad)
        summary = report.counts()
    # The first conversations it started, for the finished import to link to.
    summary["conversation_ids"] = list(getattr(report, "conversation_ids", []))[:LINKED_CONVERSATIONS]
    summary["errors"] = errors[:50]
    summary["more_errors"] = max(0, len(errors) - 50)
    summary["notes"] = report_notes(summary)
    analyze()
    pending = Passage.objects.owned_by(owner).filter(embedding__isnull=True).count()
    now = timezone.now()
    _set(job, messages_stored=parsed.messages, report=summary, payload=None, stored_at=now,
         status=ImportJob.Status.EMBEDDING, passages_total=pending, passages_embedded=0,
         rate_since=now, rate_base=0)
    return summary


def report_notes(summary: dict[str, Any]) -> list[str]:
    """What a person is told besides the counts: messages left out because they were forgotten,
    messages whose characters were replaced."""
    return [note for note in (summary.get("forgotten_note"), summary.get("replaced_note")) if note]


def store_payload(job: ImportJob) -> dict[str, Any]:
    """Step 1 for an uploaded file kept in the job (a web upload): its text, gzip-compressed,
    read back a piece at a time. A job with no file left (a command's, stopped while storing)
    goes on to embed what it stored, and says so."""
    if not ImportJob.objects.filter(pk=job.pk, payload__isnull=False).exists():
        # A command stopped while storing (it keeps no file): what it stored is embedded.
        summary = {**job.report, "errors": ["storing was interrupted: import the file again to add "
                                            "the rest (what is already stored is skipped)"]}
        pending = Passage.objects.owned_by(job.owner).filter(embedding__isnull=True).count()
        _set(job, report=summary, status=ImportJob.Status.EMBEDDING, passages_total=pending,
             passages_embedded=0, stored_at=timezone.now())
        return summary
    def payload() -> gzip.GzipFile:
        return gzip.GzipFile(fileobj=io.BufferedReader(PayloadReader(job.pk), PAYLOAD_PIECE), mode="rb")

    source = sources.Source(job.filename, payload)
    if job.source in KINDS and job.source != "recollect":
        # Checked when it was uploaded: read once more, to store it.
        return store(job, Parsed(job.source, source, job.messages_total))
    return store(job, parse(source))


# The upload's text goes into the job in pieces of about this many compressed bytes.
PAYLOAD_PIECE = 1024 * 1024


def save_payload(job: ImportJob, source: sources.Source) -> int:
    """Keep the text of `source` in the job, gzip-compressed, for background work to store:
    written a piece at a time (a large upload is never whole in memory). Returns its size."""
    table = ImportJob._meta.db_table
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: the gzip format
    size = 0
    pending: list[bytes] = []
    pending_size = 0

    def flush() -> None:
        nonlocal pending, pending_size
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET payload = coalesce(payload, ''::bytea) || %s WHERE id = %s",
                [b"".join(pending), job.pk],
            )
        pending, pending_size = [], 0

    with source.open() as stream:
        while True:
            data = stream.read(sources.READ_CHARS)
            piece = packer.compress(data) if data else packer.flush()
            pending.append(piece)
            pending_size += len(piece)
            size += len(piece)
            if pending_size >= PAYLOAD_PIECE or not data:
                flush()
            if not data:
                return size


class PayloadReader(io.RawIOBase):
    """A job's payload as a binary stream, read from the database a piece at a time."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        want = min(len(buffer), PAYLOAD_PIECE)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT substring(payload FROM %s FOR %s) FROM {ImportJob._meta.db_table} WHERE id = %s",
                [self.offset + 1, want, self.job_id],
            )
            row = cursor.fetchone()
        data = bytes(row[0]) if row and row[0] is not None else b""
        buffer[: len(data)] = data
        self.offset += len(data)
        return len(data)


# --- step 2: embed -------------------------------------------------------------------------------


def embed(job: ImportJob, deadline: float | None = None,
          progress: Callable[[int], None] | None = None) -> bool:
    """Give vectors to the owner's passages that have none, until none is left (True) or
    time.monotonic() passes `deadline` (False).

    What people search first is embedded first: their own messages, newest first, then the
    rest (the assistant's replies, tool calls), newest first (EMBED_ORDER, an index's order).
    After each batch the job says what search finds by meaning already (own_ready,
    ready_back_to)."""
    embedder = get_embedder()
    pending = Passage.objects.owned_by(job.owner).filter(embedding__isnull=True).order_by(*EMBED_ORDER)
    while deadline is None or time.monotonic() < deadline:
        with transaction.atomic():
            batch = pending.select_for_update(skip_locked=True).only(
                "id", "text", "context", "role", "timestamp")
            rows = list(batch[:EMBED_BATCH])
            if not rows:
                break
            vectors = embedder.embed([r.embedding_input for r in rows])
            write_vectors(rows, vectors, embedder.name)
            rest = [r.timestamp for r in rows if r.role != Role.USER]
            if rest and not job.own_ready:  # every own message is embedded: the rest begins
                job.own_ready, job.ready_back_to = True, min(rest)
            else:
                stamps = rest or [r.timestamp for r in rows]
                job.ready_back_to = min(stamps + ([job.ready_back_to] if job.ready_back_to else []))
            # Counted in the same transaction: a stop never counts a batch it did not write.
            _beat(job, passages_embedded=F("passages_embedded") + len(rows), own_ready=job.own_ready,
                  ready_back_to=job.ready_back_to)
        job.passages_embedded += len(rows)
        if progress:
            progress(len(rows))
    else:  # the deadline came before the last batch: the next run goes on
        return False
    job.passages_total = max(job.passages_total, job.passages_embedded)
    analyze()
    _set(job, status=ImportJob.Status.TOPICS, embedded_at=timezone.now(), passages_total=job.passages_total,
         own_ready=True)
    return True


def write_vectors(rows: list[Passage], vectors, model: str) -> None:
    """One UPDATE for a batch of passages' vectors (Django's bulk_update builds a CASE per row)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Passage._meta.db_table} AS p SET embedding = v.e::vector, embedding_model = %s "
            "FROM unnest(%s::bigint[], %s::text[]) AS v(id, e) WHERE p.id = v.id",
            [model, [r.pk for r in rows], ["[" + ",".join(map(repr, map(float, v))) + "]" for v in vectors]],
        )


def analyze() -> None:
    """Fresh planner statistics for the tables an import fills. An import can grow them many
    times over in minutes, well before autovacuum's next look: planned on the statistics of the
    small tables they were, the searches right after a 20,000-message import ran for minutes
    (after ANALYZE, a fifth of a second)."""
    tables = [m._meta.db_table for m in (Message, Passage, Conversation)]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE " + ", ".join(tables))


# --- step 3: topics (memory.tasks runs it, recorded as upkeep); step 4: facts -------------------


def to_facts(job: ImportJob) -> None:
    _set(job, status=ImportJob.Status.FACTS, facts_read=0, facts_learned=0)


def learn_facts(job: ImportJob, owner) -> int:
    """Draw the facts of the owner's messages that have none yet (memory.knowledge.facts), with
    the messages read as the job's progress; returns how many were learned."""
    from memory.knowledge import facts

    read = 0
    last_write = 0.0

    def advance(n: int) -> None:
        nonlocal read, last_write
        read += n
        if time.monotonic() - last_write >= PROGRESS_EVERY_SECONDS:
            last_write = time.monotonic()
            _beat(job, facts_read=read)

    learned = facts.extract_messages(owner, progress=advance)
    _set(job, facts_read=max(read, job.messages_total), facts_learned=learned)
    return learned


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
