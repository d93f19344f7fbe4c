"""What import_history and import_memory share: the import job a command runs, with its
progress bars (memory.transfer.import_jobs)."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memory import tasks
from memory.models import ImportJob
from memory.progress import Progress
from memory.transfer import import_jobs


def add_import_arguments(parser, file_help: str) -> None:
    parser.add_argument("file", help=file_help)
    parser.add_argument("--user", required=True, help="username (created if missing)")
    parser.add_argument("--wait", action="store_true",
                        help="embed and build topics here, with a progress bar, not in background work")
    parser.add_argument("--no-embed", action="store_true",
                        help="(the default) leave embedding to background work")


def check_file(path: str) -> str:
    """`path` when it names a file (or is - for standard input); a CommandError otherwise."""
    if path != "-" and not Path(path).is_file():
        raise CommandError(f"{path}: no such file")
    return path


def run_import(command: BaseCommand, user, parsed: import_jobs.Parsed, path: str, *, wait: bool) -> ImportJob:
    """Store `parsed` for `user` now (keyword search has it when this returns), then embed and
    build topics here (`wait`) or queue that as background work; progress bars on stderr."""
    stream = getattr(command.stderr, "_out", sys.stderr)
    job = import_jobs.create(user, source=parsed.kind, filename=Path(path).name if path != "-" else "stdin",
                             messages_total=parsed.messages, claimed=True)
    with Progress(parsed.messages, f"import {parsed.kind}", stream=stream) as bar:
        import_jobs.store(job, parsed, progress=bar.update, on_error=command.stderr.write)
    if not wait:
        import_jobs.release(job)
        tasks.queue_import(job.pk)
        command.stderr.write(
            f"{job.passages_total:,} passages to embed, your own messages first and newest first, in "
            "background work (a running `manage.py serve` "
            "or `db_worker`; progress on the explorer's Memory page), then topics are built and facts "
            "learned; keyword "
            "search finds the messages now"
        )
        return job
    command.stderr.write("embedding your own messages first, newest first, then the replies")
    with Progress(job.passages_total, "embed", stream=stream) as bar:
        tasks.run_import_job(job, progress=bar.update)
    command.stderr.write(f"embedded {job.passages_embedded:,} passages; topics built; "
                         f"{job.facts_learned:,} fact{'' if job.facts_learned == 1 else 's'} learned")
    return job
