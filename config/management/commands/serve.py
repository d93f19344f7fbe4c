"""manage.py serve: daphne (HTTP + websockets) and, by default, a task worker thread in the
same process, so a first run needs one command and no second process."""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils.crypto import get_random_string

from config.serving import daphne_args
from config.startup import freeze_long_lived_objects

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
                # The model's tokenizer and caches live as long as the server, like what
                # config.asgi froze: out of the garbage collector's full passes too.
                freeze_long_lived_objects()
        except Exception:  # noqa: BLE001 - the first turn that embeds will say what is wrong
            logger.exception("could not load the embedder in advance")

    thread = threading.Thread(target=load, name="embedder-load", daemon=True)
    thread.start()
    return thread


def announce_when_listening(host: str, port: int, lines: list[str], timeout: float = 120) -> threading.Thread:
    """Print `lines` set apart, once something accepts connections on the port: the last thing
    a person starting the server reads is how to sign in, not daphne's start-up log."""
    target = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host

    def wait_then_print() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((target, port), timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            return
        rule = "─" * min(78, max(len(line) for line in lines))
        sys.stdout.write("\n".join(["", rule, *lines, rule, ""]) + "\n")
        sys.stdout.flush()

    thread = threading.Thread(target=wait_then_print, name="sign-in-notice", daemon=True)
    thread.start()
    return thread


class Command(BaseCommand):
    help = "Serve Recollect with daphne (and a background task worker unless told not to)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-worker", action="store_true",
                            help="run background work in separate `manage.py db_worker` processes")
        parser.add_argument("--sign-in", action="store_true",
                            help="make a first account when there is none, and once the server answers, "
                                 "print how to sign in (what `make run` does)")

    def handle(self, *args, **opts) -> None:
        from config.daphne_bodies import BoundedCommandLineInterface

        start_embedder_load()
        if settings.RUN_WORKER_IN_SERVER and not opts["no_worker"] and settings.TASKS_BACKEND == "database":
            start_worker_thread()
            self.stdout.write("background task worker running in this process")
        from chat.drafts import recover_quietly
        from memory.tasks import queue_reembedding, resume_imports

        if resume_imports():
            self.stdout.write("resumed the imports a stopped server left unfinished")
        reembedding = queue_reembedding()  # after an upgrade that changed the embedding model
        if reembedding.notice:
            self.stdout.write(reembedding.notice)
        recovered = recover_quietly()
        if recovered:
            self.stdout.write(f"stored {len(recovered)} reply(s) a stopped server left half-written")
        url = f"http://{opts['host']}:{opts['port']}"
        self.stdout.write(f"starting the server on {url}/ (Ctrl+C to stop)")
        if opts["sign_in"]:
            from config.management.commands.ensure_account import sign_in_lines

            lines = [*sign_in_lines(url), "Stop the server with Ctrl+C."]
            announce_when_listening(opts["host"], opts["port"], lines)
        self.stdout.flush()
        BoundedCommandLineInterface().run(
            # No --proxy-headers: daphne would believe X-Forwarded-For from anyone. The app reads
            # it from TRUSTED_PROXIES only (config/proxies.py).
            daphne_args("-b", opts["host"], "-p", str(opts["port"]))
        )
