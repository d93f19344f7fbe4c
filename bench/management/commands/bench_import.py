"""manage.py bench_import: a realistic import through the web upload, timed as a person feels it.

A generated ChatGPT export (bench/chatgpt_export.py: 10,000 messages over two years, edited
prompts as branches, code blocks, long pastes) is uploaded to the explorer's import page of a
`manage.py serve` (daphne with its background worker thread, the configured embedder, the
scripted LLM) on a scratch database. Measured: seconds until the upload is answered, until a
fact of the last conversation is found by the explorer's search (keyword-searchable), until
every passage has its vector, until the topic tree is built; the server's peak RSS; chat turns
(a new message over the websocket, to its first token and to the end of the reply) before the
import, as the baseline, and while the embedding runs. Progress is printed as it goes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from bench.chatgpt_export import PROBE, generate
from bench.launch import ARTIFACTS, ROOT, LLMProcess, free_port, session_cookie
from bench.scratch import add_database_argument, use_database
from memory.models import Conversation, ImportJob, Message, Topic

USER = "bench_import"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Browser:
    """Just enough of a browser for the upload: cookies kept, pages read, a multipart POST."""

    def __init__(self, cookie: str) -> None:
        name, _, value = cookie.partition("=")
        self.cookies = {name: value}

    def _open(self, request: urllib.request.Request, timeout: float) -> tuple[int, str]:
        request.add_header("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            response = exc
        for header in response.headers.get_all("Set-Cookie") or []:
            name, _, rest = header.partition("=")
            self.cookies[name.strip()] = rest.split(";", 1)[0]
        return response.status, response.read().decode("utf-8", "replace")

    def get(self, url: str, timeout: float = 60) -> str:
        return self._open(urllib.request.Request(url), timeout)[1]

    def upload(self, url: str, filename: str, content: bytes, headers: dict) -> tuple[int, str]:
        boundary = uuid.uuid4().hex
        head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                "Content-Type: application/json\r\n\r\n")
        body = head.encode() + content + f"\r\n--{boundary}--\r\n".encode()
        request = urllib.request.Request(url, data=body, method="POST", headers={
            **headers, "Content-Type": f"multipart/form-data; boundary={boundary}", "Referer": url})
        return self._open(request, 600)


class Server:
    """`manage.py serve` (daphne and the in-process task worker, as `make run` starts it) on the
    scratch database, with its RSS sampled until it stops."""

    def __init__(self, db_name: str, llm_base_url: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "OPENAI_"))}
        env.update({k: v for k, v in os.environ.items() if k.startswith("EMBEDDING_")})
        env.update({
            "RECOLLECT_DB_NAME": db_name, "OPENAI_BASE_URL": llm_base_url, "OPENAI_API_KEY": "sk-test",
            "CHAT_MODEL": "test-llm", "RUN_WORKER_IN_SERVER": "true", "TASKS_BACKEND": "database",
            "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp"),
        })
        ARTIFACTS.mkdir(exist_ok=True)
        self.log_path = ARTIFACTS / "bench-import-server.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        self.peak_rss = 0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        path = Path(f"/proc/{self.proc.pid}/status")
        while not self._stop.wait(0.25):
            try:
                for line in path.read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak_rss = max(self.peak_rss, int(line.split()[1]) * 1024)
            except OSError:
                return

    def wait_ready(self, client, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise CommandError(f"the server exited; see {self.log_path}")
            try:
                client.get(self.url + "/login/", timeout=2)
                return
            except Exception:  # noqa: BLE001 - not listening yet
                time.sleep(0.3)
        raise CommandError(f"the server did not answer in {timeout} s; see {self.log_path}")

    def stop(self) -> None:
        self._stop.set()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Command(BaseCommand):
    help = "A 10,000-message ChatGPT export through the web upload: searchable, embedded, topics, chat p95."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--messages", type=int, default=10_000)
        parser.add_argument("--turn-every", type=float, default=3.0,
                            help="seconds between chat turns while the import runs")
        parser.add_argument("--baseline-turns", type=int, default=10)
        parser.add_argument("--timeout", type=float, default=4 * 3600, help=(
            "stop watching after this long: the figures so far are printed, with the time to embed "
            "everything projected from the embedding rate measured until then"))
        add_database_argument(parser, "import")

    def handle(self, *args, **opts) -> None:
        use_database(opts["database"], self.stdout)
        User = get_user_model()
        User.objects.filter(username=USER).delete()
        user = User.objects.create_user(USER)
        self.say(f"generating a ChatGPT export of {opts['messages']:,} messages…")
        export = json.dumps(generate(opts["messages"])).encode()
        self.say(f"conversations.json: {len(export) / 1e6:.1f} MB")
        llm = LLMProcess()
        server = Server(connection.settings_dict["NAME"], llm.base_url)
        cookie = session_cookie(user)
        figures: dict = {"messages": opts["messages"], "export_mb": round(len(export) / 1e6, 1)}
        try:
            client = Browser(cookie)
            server.wait_ready(client)
            chat = ChatTurns(server, cookie, user)
            self.say(f"baseline: {opts['baseline_turns']} chat turns before the import…")
            baseline = chat.run_turns(opts["baseline_turns"], every=0.5)
            figures["turns_before"] = summary(baseline)
            self.say(f"baseline turns: {figures['turns_before']}")
            figures.update(self.upload_and_watch(client, server, user, export, chat, opts))
        finally:
            server.stop()
            llm.stop()
        figures["server_peak_rss_mb"] = round(server.peak_rss / 2**20)
        figures["load_average"] = round(os.getloadavg()[0], 1)
        self.stdout.write("\n" + json.dumps(figures))
        User.objects.filter(username=USER).delete()

    def say(self, text: str) -> None:
        self.stderr.write(text)

    def upload_and_watch(self, client, server: Server, user, export: bytes, chat: ChatTurns, opts) -> dict:
        page = client.get(server.url + "/explorer/import/")
        token = re.search(r'"X-CSRFToken": "([^"]+)"', page).group(1)
        started = time.perf_counter()
        status, text = client.upload(server.url + "/explorer/import/", "conversations.json", export,
                                     {"X-CSRFToken": token, "HX-Request": "true"})
        if status != 200:
            raise CommandError(f"the upload was answered {status}: {text[:500]}")
        out = {"upload_answered_s": round(time.perf_counter() - started, 1)}
        self.say(f"upload answered after {out['upload_answered_s']} s")
        job = ImportJob.objects.get(owner=user)
        turns: list[tuple[float, float]] = []
        watching = threading.Event()
        watching.set()
        turning = threading.Thread(target=lambda: turns.extend(chat.turns_while(
            lambda: watching.is_set()
            and ImportJob.objects.filter(pk=job.pk, status__in=["storing", "embedding"]).exists(),
            opts["turn_every"])), daemon=True)
        turning.start()
        last_print = 0.0
        while True:
            elapsed = time.perf_counter() - started
            job.refresh_from_db()
            if "stored_s" not in out and job.status != ImportJob.Status.STORING:
                out["stored_s"] = round(elapsed, 1)
            if elapsed > opts["timeout"]:
                out.update(projection_of(job, elapsed, out))
                self.say(f"stopped watching after {elapsed:.0f} s (--timeout): {out}")
                break
            probe = list(Message.objects.owned_by(user).filter(content__contains=PROBE)
                         .values_list("pk", flat=True)[:1])
            if "searchable_s" not in out and probe:
                found = client.get(server.url + "/explorer/search/?q=" + PROBE)
                if f"/explorer/messages/{probe[0]}/" in found:
                    out["searchable_s"] = round(elapsed, 1)
                    self.say(f"{elapsed:7.1f} s  keyword-searchable ({job.messages_stored:,} stored)")
            if "embedded_s" not in out and job.embedded_at:
                out["embedded_s"] = round(elapsed, 1)
                out["passages"] = job.passages_total
            if job.status == ImportJob.Status.FAILED:
                raise CommandError(f"the import failed: {job.error}")
            if job.status == ImportJob.Status.DONE:
                out["topics_s"] = round(elapsed, 1)
                break
            if elapsed - last_print >= 10:
                last_print = elapsed
                eta = job.eta_seconds()
                done = list(turns)
                self.say(f"{elapsed:7.1f} s  {job.get_status_display()}: messages {job.messages_stored:,}/"
                         f"{job.messages_total:,}, passages {job.passages_embedded:,}/{job.passages_total:,}"
                         + (f", eta {eta:.0f} s" if eta is not None else "")
                         + (f"; {len(done)} chat turns, p95 {percentile([t[1] for t in done], .95):.2f} s"
                            if done else ""))
            time.sleep(0.5)
        watching.clear()
        turning.join(300)
        out["turns_during"] = summary(turns)
        out["topics"] = Topic.objects.owned_by(user).count()
        imported = Conversation.objects.owned_by(user).exclude(title__startswith="bench turn")
        out["conversations"] = imported.count()
        self.say(f"embedded after {out.get('embedded_s')} s, topics after {out.get('topics_s')} s; "
                 f"turns during the embedding: {out['turns_during']}")
        return out


def projection_of(job: ImportJob, elapsed: float, out: dict) -> dict:
    """Where an import stood when the watch stopped, and when its embedding would end at the
    rate measured since the messages were stored."""
    done = {"stopped_watching_s": round(elapsed, 1), "passages": job.passages_total,
            "passages_embedded": job.passages_embedded}
    embedding_for = elapsed - out.get("stored_s", elapsed)
    if job.passages_embedded and embedding_for > 0:
        rate = job.passages_embedded / embedding_for
        done["passages_per_s"] = round(rate, 2)
        done["embedded_projected_s"] = round(out["stored_s"] + job.passages_total / rate)
    return done


def summary(turns: list[tuple[float, float]]) -> dict:
    if not turns:
        return {"turns": 0}
    first, whole = [t[0] for t in turns], [t[1] for t in turns]
    return {"turns": len(turns), "first_token_p50_s": round(statistics.median(first), 2),
            "first_token_p95_s": round(percentile(first, .95), 2),
            "reply_p50_s": round(statistics.median(whole), 2),
            "reply_p95_s": round(percentile(whole, .95), 2)}


class ChatTurns:
    """Chat turns over the websocket, each in a new conversation of the user: (seconds to the
    first token, seconds to the end of the reply)."""

    def __init__(self, server: Server, cookie: str, user) -> None:
        self.server, self.cookie, self.user = server, cookie, user
        self.n = 0

    async def _turn(self) -> tuple[float, float]:
        from websockets.asyncio.client import connect

        self.n += 1
        conversation = await asyncio.to_thread(self._conversation)
        async with connect(f"{self.server.ws_url}/ws/chat/{conversation}/", open_timeout=60,
                           additional_headers={"Cookie": self.cookie, "Origin": self.server.url},
                           max_size=None) as ws:
            started = time.perf_counter()
            question = f"What did we decide about the Postgres migration? (turn {self.n})"
            await ws.send(json.dumps({"type": "send", "content": question}))
            first = None
            async with asyncio.timeout(300):
                while True:
                    event = json.loads(await ws.recv())
                    if event["type"] == "token" and first is None:
                        first = time.perf_counter() - started
                    if event["type"] == "reply_done":
                        whole = time.perf_counter() - started
                        return (first if first is not None else whole), whole

    def _conversation(self) -> str:
        from django.db import close_old_connections

        close_old_connections()
        return Conversation.objects.create(owner=self.user, title=f"bench turn {self.n}").pk

    def run_turns(self, count: int, every: float) -> list[tuple[float, float]]:
        async def go():
            out = []
            for _ in range(count):
                out.append(await self._turn())
                await asyncio.sleep(every)
            return out

        return asyncio.run(go())

    def turns_while(self, going, every: float) -> list[tuple[float, float]]:
        async def go():
            out = []
            while await asyncio.to_thread(going):
                out.append(await self._turn())
                await asyncio.sleep(every)
            return out

        return asyncio.run(go())
