"""manage.py serve: daphne (HTTP + websockets) and, by default, a task worker thread in the
same process, so a first run needs one command and no second process."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils.crypto import get_random_string

from config.serving import daphne_args

logger = logging.getLogger(__name__)


def start_worker_thread() -> threading.Thread:
    from django_tasks_db.management.commands.db_worker import Worker

    worker = Worker(
        queue_names=["*"], interval=1.0, batch=False, backend_name="default",
        startup_delay=False, max_tasks=None, worker_id=f"serve-{get_random_string(8)}",
        excluded_queue_names=[],
    )
    thread = threading.Thread(target=worker.run, name="task-worker", daemon=True)
    thread.start()
    return thread


def start_embedder_load() -> threading.Thread:
    """Load the on-device embedder while the server starts (e5 reads its tokenizer's 250,000
    pieces and its graph in ~3 s, more on a busy machine), so the first chat turn does not wait."""

    def load() -> None:
        from memory.embedders import get_embedder

        try:
            embedder = get_embedder()
            if embedder.micro_batch:  # an on-device model (a remote one has nothing to load)
                embedder.embed_query("load the model")
        except Exception:  # noqa: BLE001 - the first turn that embeds will say what is wrong
            logger.exception("could not load the embedder in advance")

    thread = threading.Thread(target=load, name="embedder-load", daemon=True)
    thread.start()
    return thread


class Command(BaseCommand):
    help = "Serve Recollect with daphne (and a background task worker unless told not to)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-worker", action="store_true",
                            help="run background work in separate `manage.py db_worker` processes")

    def handle(self, *args, **opts) -> None:
        from config.daphne_bodies import BoundedCommandLineInterface

        start_embedder_load()
        if settings.RUN_WORKER_IN_SERVER and not opts["no_worker"] and settings.TASKS_BACKEND == "database":
            start_worker_thread()
            self.stdout.write("background task worker running in this process")
        from chat.drafts import recover_quietly
        from memory.tasks import resume_imports

        if resume_imports():
            self.stdout.write("resumed the imports a stopped server left unfinished")
        recovered = recover_quietly()
        if recovered:
            self.stdout.write(f"stored {len(recovered)} reply(s) a stopped server left half-written")
        self.stdout.write(f"serving on http://{opts['host']}:{opts['port']}/ (Ctrl+C to stop)")
        BoundedCommandLineInterface().run(
            # No --proxy-headers: daphne would believe X-Forwarded-For from anyone. The app reads
            # it from TRUSTED_PROXIES only (config/proxies.py).
            daphne_args("-b", opts["host"], "-p", str(opts["port"]))
        )
