"""manage.py bench_uploads: does any upload move the server's memory? (issue 32 §2)

Each input of the issue's table is sent to a `manage.py serve` of its own (daphne with its
background worker thread, as `make run` starts it; embeddings from the scripted LLM, so no model
is loaded) on a scratch database:

- a 1.15 MB export zip whose conversations.json expands to 1.125 GiB (a zip bomb);
- a 300 MB import upload from a signed-in person;
- a 1,000 MB POST /login/ from no one;
- a 50 MB ChatGPT conversations.json, most of it one huge field the import ignores (accepted);
- a file of 100,000 nested "[" (and one of {"a": nested 100,000 deep).

For each: the answer, the seconds until it came, the server's RSS before it (after a small
import was stored, embedded and placed in topics: what any import loads once is not counted)
and its peak while the request ran (VmHWM of /proc/<pid>/status, reset just before), and the
slowest answer to a small page another client asked for meanwhile. For the accepted upload, the
peak also covers its background work until the messages are stored. Bodies are streamed from generators: the
benchmark holds none of them whole either.

--scale shrinks every input and the server's IMPORT_MAX_UPLOAD_MB and
IMPORT_MAX_UNCOMPRESSED_MB alike (the tests run it at 0.01).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django_tasks_db.models import DBTaskResult

from bench.chatgpt_export import generate
from bench.launch import ARTIFACTS, ROOT, LLMProcess, free_port, session_cookie
from bench.scratch import add_database_argument, use_database
from memory.models import ImportJob

USER = "bench_uploads"
MB = 1024 * 1024
PIECE = 1024 * 1024


@dataclass
class Body:
    """A request body, made as it is sent: `size` bytes from `pieces()`."""

    size: int
    pieces: Callable[[], Iterator[bytes]]


def repeated(piece: bytes, size: int) -> Iterator[bytes]:
    """`size` bytes of `piece` over and over, a megabyte at a time."""
    block = (piece * (PIECE // len(piece) + 1))[:PIECE]
    left = size
    while left > 0:
        yield block[:left]
        left -= len(block)


def filled(piece: bytes, size: int) -> Body:
    return Body(size, lambda: repeated(piece, size))


def multipart(filename: str, body: Body, boundary: str) -> Body:
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    def pieces() -> Iterator[bytes]:
        yield head
        yield from body.pieces()
        yield tail

    return Body(len(head) + body.size + len(tail), pieces)


def zip_bomb(path: Path, size: int) -> Body:
    """An export zip whose conversations.json is `size` bytes of one short empty conversation over
    and over: a deflate stream of it shrinks about a thousandfold (the issue's: 1.15 MB for
    1.125 GiB). Cached in `path`."""
    if not path.exists():
        unit = b'{"title": "x", "mapping": {}},'
        copies = max(0, (size - 2 - len(unit)) // len(unit))
        with zipfile.ZipFile(path.with_suffix(".part"), "w", zipfile.ZIP_DEFLATED) as archive, \
                archive.open("conversations.json", "w", force_zip64=True) as member:
            member.write(b"[")
            for piece in repeated(unit, copies * len(unit)):
                member.write(piece)
            member.write(unit[:-1] + b"]")
            member.write(b" " * max(0, size - 1 - copies * len(unit) - len(unit)))
        path.with_suffix(".part").rename(path)
    data = path.read_bytes()
    return Body(len(data), lambda: iter([data]))


def huge_field_export(size: int) -> Body:
    """A ChatGPT conversations.json of `size` bytes: 40 ordinary messages, and one conversation
    carrying a field the import ignores that takes nearly all of it."""
    conversations = generate(40, seed=4)
    small = json.dumps(conversations).encode()
    filler = max(0, size - len(small) - 64)
    head = small[:-2] + b', "moderation_results": "'  # inside the last conversation object
    tail = b'"}]'

    def pieces() -> Iterator[bytes]:
        yield head
        yield from repeated(b"ignored ", filler)
        yield tail

    return Body(len(head) + filler + len(tail), pieces)


def nested(opening: bytes, closing: bytes, depth: int, middle: bytes = b"") -> Body:
    data = opening * depth + middle + closing * depth
    return Body(len(data), lambda: iter([data]))


class Server:
    """`manage.py serve` on the scratch database, its worker thread in the process."""

    def __init__(self, db_name: str, llm_base_url: str, scale: float) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "OPENAI_", "IMPORT_"))}
        env.update({
            "RECOLLECT_DB_NAME": db_name, "OPENAI_BASE_URL": llm_base_url, "OPENAI_API_KEY": "sk-test",
            "CHAT_MODEL": "test-llm", "RUN_WORKER_IN_SERVER": "true", "TASKS_BACKEND": "database",
            "EMBEDDING_BACKEND": "openai", "EMBEDDING_BASE_URL": llm_base_url, "EMBEDDING_API_KEY": "test",
            "EMBEDDING_MODEL": "test-embed", "EMBEDDING_DIMENSIONS": "384",
            "IMPORT_MAX_UPLOAD_MB": str(max(1, int(256 * scale))),
            "IMPORT_MAX_UNCOMPRESSED_MB": str(max(1, int(1024 * scale))),
            # The largest form body (DATA_UPLOAD_MAX_MEMORY_SIZE) is derived from it: scaled, the
            # largest body any page takes is scaled too, and daphne's refusal is what meets the
            # big sign-in, as at full size.
            "MAX_MESSAGE_CHARS": str(max(1000, int(8_000_000 * scale))),
            "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp"),
        })
        ARTIFACTS.mkdir(exist_ok=True)
        self.log_path = ARTIFACTS / "bench-uploads-server.log"
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )

    def reset_peak(self) -> int:
        """Reset the process's peak RSS (VmHWM) to its RSS now (Linux: clear_refs 5), and
        return that RSS."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
        return self.status("VmRSS")

    def status(self, field: str) -> int:
        """A /proc/<pid>/status figure in bytes (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise CommandError(f"no {field} in /proc/{self.proc.pid}/status")

    def request(self, method: str, path: str, body: Body | None = None, headers: dict | None = None,
                timeout: float = 600) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.putrequest(method, path)
            for name, value in (headers or {}).items():
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(body.size))
            conn.endheaders()
            if body is not None:
                try:
                    for piece in body.pieces():
                        conn.send(piece)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the server answered and closed before the whole body was sent
            response = conn.getresponse()
            return response.status, response.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise CommandError(f"the server exited; see {self.log_path}")
            try:
                self.request("GET", "/login/", timeout=5)
                return
            except OSError:
                time.sleep(0.3)
        raise CommandError(f"the server did not answer in {timeout} s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


class Prober:
    """Asks the server for a small page over and over while a big request runs: the slowest
    answer is how long others waited."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.slowest = 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.done.is_set():
            started = time.perf_counter()
            with contextlib.suppress(OSError):
                self.server.request("GET", "/login/", timeout=120)
            self.slowest = max(self.slowest, time.perf_counter() - started)
            self.done.wait(0.1)

    def __enter__(self) -> Prober:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(130)


def reason(text: str) -> str:
    """The sentence a person is shown: the page's alert, or a plain-text answer."""
    found = re.search(r'role="alert">([^<]+)<', text)
    said = found.group(1) if found else text
    return " ".join(said.replace("&#x27;", "'").replace("&quot;", '"').split())[:400]


class Command(BaseCommand):
    help = "The issue's uploads sent to a real serve: answer, seconds, RSS before and peak, others' wait."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--scale", type=float, default=1.0,
                            help="shrink every input and the server's import limits (0.01 for a quick run)")
        parser.add_argument("--only", default="", help="comma-separated input names to run (default all)")
        parser.add_argument("--no-warm-up", action="store_true",
                            help="measure from a server that has imported nothing yet (quicker; its "
                            "first import's one-time loads then count)")
        add_database_argument(parser, "uploads")

    def handle(self, *args, **opts) -> None:
        use_database(opts["database"], self.stdout)
        scale = opts["scale"]
        User = get_user_model()
        User.objects.filter(username=USER).delete()
        user = User.objects.create_user(USER)
        cookie = session_cookie(user)
        ARTIFACTS.mkdir(exist_ok=True)
        bomb_size = int(1.125 * 1024 * MB * scale)
        inputs = {
            "zip-bomb": (f"zip expanding to a {bomb_size / MB:,.0f} MB conversations.json", "upload",
                         lambda: zip_bomb(ARTIFACTS / f"bench-uploads-bomb2-{bomb_size}.zip", bomb_size)),
            "big-upload": (f"{300 * scale:,.0f} MB import upload, signed in", "upload",
                           lambda: filled(b"[", int(300 * MB * scale))),
            "big-login": (f"{1000 * scale:,.0f} MB POST /login/, signed out", "login",
                          lambda: filled(b"x", int(1000 * MB * scale))),
            "huge-field": (f"{50 * scale:,.0f} MB conversations.json, one huge ignored field", "upload",
                           lambda: huge_field_export(int(50 * MB * scale))),
            "deep-arrays": ("[ x 100,000 (deeply nested JSON)", "upload",
                            lambda: nested(b"[", b"]", 100_000)),
            "deep-objects": ('{"a": x 100,000 (deeply nested JSON)', "upload",
                             lambda: nested(b'{"a":', b"}", 100_000, b"1")),
        }
        wanted = [n.strip() for n in opts["only"].split(",") if n.strip()] or list(inputs)
        llm = LLMProcess()
        self.llm_url = llm.base_url
        rows = []
        try:
            for name in wanted:
                label, kind, make = inputs[name]
                warm_up = not opts["no_warm_up"]
                rows.append(self.measure(name, label, kind, make(), user, cookie, scale, warm_up))
        finally:
            llm.stop()
        self.stdout.write("")
        self.stdout.write(f"{'input':<48} {'answer':<7} {'seconds':>8} {'RSS before':>11} {'peak':>9} "
                          f"{'moved':>8} {'others waited':>14}  reason")
        for row in rows:
            self.stdout.write(
                f"{row['label']:<48} {row['status']:<7} {row['seconds']:>8.1f} {row['before_mb']:>8,.0f} MB "
                f"{row['peak_mb']:>6,.0f} MB {row['moved_mb']:>+5,.0f} MB {row['others_s']:>12.2f} s  "
                f"{row['reason']}"
            )
        self.stdout.write(f"load average {os.getloadavg()[0]:.1f}")
        self.stdout.write(json.dumps(rows))
        User.objects.filter(username=USER).delete()

    def measure(self, name: str, label: str, kind: str, body: Body, user, cookie: str, scale: float,
                warm_up: bool) -> dict:
        # Background work an earlier run left queued would run in this server and count.
        DBTaskResult.objects.all().delete()
        ImportJob.objects.filter(owner=user).delete()
        self.stderr.write(f"{name}: starting a server…")
        server = Server(connection.settings_dict["NAME"], self.llm_url, scale)
        try:
            server.wait_ready()
            if warm_up:
                self.warm_up(server, user, cookie)
            path, headers = "/login/", {"Content-Type": "application/x-www-form-urlencoded"}
            if kind == "upload":
                path = "/explorer/import/"
                body, headers = self.upload(server, cookie, "export.zip" if name == "zip-bomb" else
                                            "conversations.json", body)
            before = server.reset_peak()
            self.stderr.write(f"{name}: sending {body.size / MB:,.1f} MB…")
            with Prober(server) as prober:
                started = time.perf_counter()
                status, text = server.request("POST", path, body, headers)
                seconds = time.perf_counter() - started
                answered = server.status("VmHWM")
                if status == 200 and kind == "upload":
                    self.wait_for(user, server, ImportJob.Status.STORING)
            peak = server.status("VmHWM")
            row = {"input": name, "label": label, "status": status, "seconds": round(seconds, 2),
                   "before_mb": before / MB, "answered_mb": answered / MB, "peak_mb": peak / MB,
                   "moved_mb": (peak - before) / MB, "others_s": round(prober.slowest, 2),
                   "reason": reason(text) if status >= 400 else self.accepted(user)}
            self.stderr.write(f"{name}: {status} after {seconds:.1f} s, peak {peak / MB:,.0f} MB "
                              f"({(peak - before) / MB:+,.0f} MB)")
            return row
        finally:
            server.stop()

    def upload(self, server: Server, cookie: str, filename: str, body: Body) -> tuple[Body, dict]:
        """The multipart body of an upload of `body` and its headers (the CSRF token read from the
        import page, as a browser would)."""
        status, page = server.request("GET", "/explorer/import/", headers={"Cookie": cookie})
        token = re.search(r'"X-CSRFToken": "([^"]+)"', page)
        if status != 200 or token is None:
            raise CommandError(f"the import page answered {status}")
        boundary = uuid.uuid4().hex
        return multipart(filename, body, boundary), {
            "Cookie": f"{cookie}; csrftoken={token.group(1)}", "X-CSRFToken": token.group(1),
            "HX-Request": "true", "Content-Type": f"multipart/form-data; boundary={boundary}",
        }

    def warm_up(self, server: Server, user, cookie: str) -> None:
        """A small import, stored, embedded and placed in topics, before the baseline is read:
        what any import loads once (the embedder's client, clustering) is not counted as the
        cost of the input measured."""
        small = json.dumps(generate(6, seed=2)).encode()
        body, headers = self.upload(server, cookie, "warm-up.json", Body(len(small), lambda: iter([small])))
        status, _ = server.request("POST", "/explorer/import/", body, headers)
        if status != 200:
            raise CommandError(f"the warm-up import was answered {status}")
        for waiting in (ImportJob.Status.STORING, ImportJob.Status.EMBEDDING, ImportJob.Status.TOPICS):
            self.wait_for(user, server, waiting)
        server.request("GET", "/login/")
        ImportJob.objects.filter(owner=user).delete()

    def wait_for(self, user, server: Server, leaving: str, timeout: float = 1800) -> None:
        """Until the user's import job has left the status `leaving` (or failed): an accepted
        upload's storing is background work of the same server, and part of what it costs."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = ImportJob.objects.filter(owner=user).first()
            if job is not None and job.status != leaving:
                return
            if server.proc.poll() is not None:
                raise CommandError(f"the server died; see {server.log_path}")
            time.sleep(0.3)
        raise CommandError(f"the import did not get past {leaving} in time")

    def accepted(self, user) -> str:
        job = ImportJob.objects.filter(owner=user).first()
        if job is None:
            return "accepted"
        return (f"accepted: {job.messages_stored:,} messages stored in the background "
                f"({job.get_status_display().lower()})")
