"""manage.py bench_ws: N concurrent websocket chats against daphne and the scripted test LLM.

Each client is its own user with its own conversation, connects over a real websocket, and
sends one message at the same moment as the others; the test LLM streams each reply at
--rate tokens per second. Reported:

- messages lost: user messages or replies not stored whole, plus token events that never
  reached the client (must be 0);
- added latency per token relayed, p50 / p95: from the moment the LLM wrote a token to the
  moment the browser-side client received it;
- turn overhead before the first token, p95: the time to the first token minus the LLM's own
  time to first token (storing the message, building the context, relaying);
- server peak RSS (VmHWM of the daphne process).

By default it starts the test LLM and daphne in subprocesses on free ports, on a scratch
database (--database, default recollect_bench_ws); it deletes only the users it made.
With --servers N (N > 1) it starts a loopback redis-server and N daphne processes sharing it as
the channel layer; clients alternate between servers, and each client also watches its
conversation through a second socket on another server, so every token also crosses Redis.

With --baseline it measures, in one run and side by side, a bare relay (chat/bench_relay.py)
and Recollect: the highest turn rate each sustains (stepping --rates, --step-seconds each, a
new user's turn arriving every 1/rate s) with the first token's p95 under 1 s and nothing lost,
and the server processes' CPU (from /proc) per turn before the first token and per streamed
token. The machine is shared, so the figures to read are the ratios between the two rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from bench.launch import LLMProcess, RedisProcess, ServerProcess, free_port
from bench.scratch import add_database_argument, use_database
from memory.models import Conversation, Message

BENCH_PREFIX = "bench_ws_"


def _start_redis():
    redis = RedisProcess()
    return redis.proc, redis.url


def _stop(procs: list[subprocess.Popen], redis: subprocess.Popen | None) -> None:
    """End the bench's server processes (killed if they have not left in 15 s), then Redis."""
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
    if redis is not None:
        redis.terminate()
        redis.wait(10)


def _delete_users(user_ids: list[int]) -> None:
    """The users a run made, with what they left: their rows (by cascade) and the background
    tasks their turns queued (no worker runs during a benchmark; a task row names its owner
    only in its arguments)."""
    from django_tasks_db.models import DBTaskResult

    get_user_model().objects.filter(pk__in=user_ids).delete()
    for start in range(0, len(user_ids), 500):
        DBTaskResult.objects.filter(args_kwargs__args__0__in=user_ids[start : start + 500]).delete()


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _cpu_seconds(pid: int | None, thread: int | None = None) -> float | None:
    """User + system CPU time of a process (or of one of its threads) so far."""
    if not pid:
        return None
    stat = f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat"
    try:
        fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Command(BaseCommand):
    help = "Benchmark the chat websocket: N concurrent clients, test LLM streaming."

    def add_arguments(self, parser):
        parser.add_argument("--clients", type=int, default=100)
        parser.add_argument("--tokens", type=int, default=50, help="tokens per reply")
        parser.add_argument("--rate", type=float, default=50.0, help="tokens per second per stream")
        parser.add_argument("--url", default="", help="a running server (default: start daphne)")
        parser.add_argument("--server-pid", type=int, default=0, help="pid of --url's server, for RSS")
        parser.add_argument("--timeout", type=float, default=180.0)
        parser.add_argument(
            "--ramp",
            type=float,
            default=0.0,
            help="spread the clients' first sends evenly over this many seconds (0: all at once)",
        )
        parser.add_argument(
            "--conn-max-age",
            type=int,
            default=60,
            help="DB_CONN_MAX_AGE for the started daphne (persistent database connections)",
        )
        parser.add_argument(
            "--embedding-threads",
            type=int,
            default=1,
            help="EMBEDDING_THREADS for the started daphne (1 suits many concurrent turns)",
        )
        parser.add_argument("--keep", action="store_true", help="keep the bench users and their data")
        add_database_argument(parser, "ws")
        parser.add_argument(
            "--servers",
            type=int,
            default=1,
            help="daphne processes to start; more than one shares a loopback Redis channel layer",
        )
        parser.add_argument(
            "--profile-server",
            default="",
            metavar="PATH",
            help="run the (first) started daphne (with --baseline: Recollect's) under cProfile, the "
            "CPU time of all its threads written to PATH when it stops (python -m pstats PATH)",
        )
        parser.add_argument(
            "--llm-only",
            action="store_true",
            help="no server and no websockets: stream --clients replies at once through the chat's "
            "LLM client (the openai package) in this process and print its CPU per streamed token, "
            "the floor under any relay built on it",
        )
        parser.add_argument(
            "--baseline",
            action="store_true",
            help="in one run, a bare relay (chat/bench_relay.py: the same clients, LLM client and "
            "token frames, no memory, storage or tools) and Recollect: for each, the highest turn "
            "rate (stepping --rates) with first-token p95 under 1 s and nothing lost, the server "
            "CPU per turn before the first token and per streamed token",
        )
        parser.add_argument(
            "--rates",
            # Up to well past what the bare relay sustains on 2 cores (192/s in November 2026): a
            # list that ends below the relay's limit reports it as ">=" and flatters the ratio.
            default="2,4,6,8,12,16,24,32,48,64,96,128,192,256,384",
            help="--baseline: turns per second to step through, each for --step-seconds",
        )
        parser.add_argument(
            "--step-seconds", type=float, default=5.0, help="--baseline: seconds per rate step"
        )
        parser.add_argument(
            "--cpu-clients", type=int, default=20, help="--baseline: turns at once when measuring CPU"
        )
        parser.add_argument(
            "--cpu-pairs", type=int, default=3,
            help="--baseline: pairs of CPU runs (a short and a long reply) per server, alternating "
            "between the servers; the medians are reported",
        )
        parser.add_argument(
            "--cpu-hold",
            type=float,
            default=6.0,
            help="--baseline: seconds the test LLM holds each request of the CPU runs before it "
            "streams (long enough for all of them to arrive)",
        )
        parser.add_argument(
            "--remote-embeddings",
            action="store_true",
            help="the started daphne embeds through the test LLM's /embeddings instead of the local "
            "model (separates the chat path from local model inference)",
        )

    def handle(self, *args, **opts):
        try:
            import websockets  # noqa: F401
        except ImportError:
            raise CommandError("bench_ws needs the `websockets` package (pip install websockets)") from None
        n = opts["clients"]
        if not opts["llm_only"]:
            use_database(opts["database"], self.stdout)
        # The test LLM runs in a process of its own, so its timing is not disturbed by the
        # clients' event loop (and vice versa).
        llm = LLMProcess(delay=0)
        script = {
            "match": "[bench]",
            "repeat": True,
            "steps": [{"words": opts["tokens"], "delay": 1.0 / opts["rate"]}],
        }
        llm.post("/_scripts", script)
        if opts["llm_only"]:
            try:
                self._llm_only(llm, n, opts)
            finally:
                llm.stop()
            return
        if opts["baseline"]:
            baseline = Baseline(self, llm, opts)
            try:
                baseline.run()
            finally:
                llm.stop()
                if not opts["keep"]:  # only the users this run made
                    _delete_users([u["user"].pk for u in baseline.users])
            return
        procs: list[subprocess.Popen] = []
        redis = None
        users: list[dict] = []
        urls = [opts["url"].rstrip("/")] if opts["url"] else []
        pids = [opts["server_pid"]] if opts["server_pid"] else []
        try:
            if not urls:
                redis_url = ""
                if opts["servers"] > 1:
                    redis, redis_url = _start_redis()
                for _ in range(max(1, opts["servers"])):
                    url, proc = self._start_daphne(
                        llm.base_url, opts["remote_embeddings"], opts["conn_max_age"],
                        opts["embedding_threads"], redis_url,
                        profile="" if procs else opts["profile_server"],
                    )
                    urls.append(url)
                    procs.append(proc)
                    pids.append(proc.pid)
            layer = " sharing a Redis channel layer" if redis else ""
            self.stdout.write(f"servers {', '.join(urls)}{layer}, test LLM {llm.base_url}, {n} clients")
            users = self._make_users(n + len(urls), users)
            # One warm-up turn per server loads the embedding model in each server process.
            for i, url in enumerate(urls):
                asyncio.run(self._run_clients([url], users[i : i + 1], opts, warmup=True))
            llm.post("/_reset", {})
            llm.post("/_scripts", script)
            started = time.time()
            cpu_before = [_cpu_seconds(pid) for pid in pids]
            load_before = (time.process_time(), _cpu_seconds(llm.proc.pid))
            results = asyncio.run(self._run_clients(urls, users[len(urls) :], opts))
            wall = time.time() - started
            clients_cpu = time.process_time() - load_before[0]
            llm_after = _cpu_seconds(llm.proc.pid)
            self._report(results, llm, users[len(urls) :], opts, wall, pids[0] if pids else None)
            for pid, before in zip(pids, cpu_before, strict=True):
                after = _cpu_seconds(pid)
                if before is not None and after is not None:
                    rss = _peak_rss_mb(pid)
                    self.stdout.write(
                        f"server pid {pid}: CPU {after - before:.1f} s over {wall:.1f} s of wall time, "
                        f"peak RSS {rss:.0f} MB" if rss else f"server pid {pid}: CPU {after - before:.1f} s"
                    )
            if load_before[1] is not None and llm_after is not None:
                # The load generator shares the machine's cores with the server it measures.
                self.stdout.write(
                    f"load generator on the same cores: clients CPU {clients_cpu:.1f} s, "
                    f"test LLM CPU {llm_after - load_before[1]:.1f} s"
                )
            self.stdout.write(f"machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        finally:
            _stop(procs, redis)
            llm.stop()
            if not opts["keep"]:
                # Only the users this run made: another run's, or a person's, are not ours.
                _delete_users([u["user"].pk for u in users])

    def _llm_only(self, llm, n: int, opts) -> None:
        from django.test.utils import override_settings

        from chat import llm as chat_llm

        with override_settings(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="bench", CHAT_MODEL="test-llm"):
            self._llm_only_run(chat_llm, n, opts)

    def _llm_only_run(self, chat_llm, n: int, opts) -> None:
        async def one() -> tuple[int, int]:
            tokens = pieces = 0
            async for event in chat_llm.stream_chat([{"role": "user", "content": "[bench] go"}]):
                if isinstance(event, chat_llm.TextDelta):
                    # A piece is all the text of one network read: one token or several.
                    tokens += len(event.text.split())
                    pieces += 1
            return tokens, pieces

        async def all_at_once(k: int) -> tuple[int, int]:
            counts = await asyncio.gather(*[one() for _ in range(k)])
            return sum(t for t, _ in counts), sum(p for _, p in counts)

        asyncio.run(all_at_once(2))  # imports and the client's first connection
        cpu, started = time.process_time(), time.perf_counter()
        tokens, pieces = asyncio.run(all_at_once(n))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - started
        per_token = cpu / max(1, tokens)
        self.stdout.write(
            f"LLM client only: {n} streams at once, {tokens} tokens ({pieces} pieces) in {wall:.1f} s; "
            f"CPU {cpu:.2f} s = {per_token * 1e6:.0f} us per token"
        )
        self.stdout.write(
            f"at {opts['rate']:g} tokens/s per stream, {n} streams need {n * opts['rate'] * per_token:.2f} "
            "CPU seconds per second for reading the model's streams alone (one event loop: at most 1)"
        )

    # --- setup -----------------------------------------------------------------------------------

    def _start_daphne(
        self, llm_url: str, remote_embeddings: bool, conn_max_age: int, threads: int, redis_url: str = "",
        profile: str = "", application: str = "",
    ):
        env = {
            "OPENAI_API_KEY": "bench",
            "LLM_MAX_RETRIES": str(settings.LLM_MAX_RETRIES),
            "DB_CONN_MAX_AGE": str(conn_max_age),
            "EMBEDDING_THREADS": str(threads),
        }
        port = free_port()  # names the server's log: test-artifacts/daphne-bench-ws-PORT.log
        server = ServerProcess(
            f"bench-ws-{port}", connection.settings_dict["NAME"], llm_url, port=port, redis_url=redis_url,
            extra_env=env,
            # The test LLM's embeddings separate the chat path from local model inference.
            llm_embeddings=remote_embeddings, profile=profile, application=application,
        )
        try:
            server.start()
        except RuntimeError as exc:
            raise CommandError(str(exc)) from None
        return server.url, server.proc

    def _make_users(self, count: int, users: list[dict]) -> list[dict]:
        """`count` users, each with a conversation and a session, appended to `users` as they
        are made (so that a failure halfway still deletes them)."""
        User = get_user_model()
        run = uuid.uuid4().hex[:8]
        for i in range(count):
            # Sessions are made directly, so no (slow to hash) password is needed.
            user = User(username=f"{BENCH_PREFIX}{run}_{i:04d}")
            user.set_unusable_password()
            user.save()
            conversation = Conversation.objects.create(owner=user, title=f"bench {i}")
            session = SessionStore()
            session[SESSION_KEY] = str(user.pk)
            session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
            session[HASH_SESSION_KEY] = user.get_session_auth_hash()
            session.create()
            users.append({"user": user, "conversation": conversation, "session": session.session_key})
        return users

    # --- clients ---------------------------------------------------------------------------------

    async def _run_clients(
        self, urls: list[str], users: list[dict], opts, warmup: bool = False, *, quiet: bool = False,
        marker: str = "[bench]", on_go=None, watchers: bool = True,
    ) -> list[dict]:
        import websockets

        go = asyncio.Event()
        ready = 0
        # Connections are opened 20 at a time; the turns then all start at the same moment.
        opening = asyncio.Semaphore(20)

        async def connect(url: str, u: dict):
            headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={u['session']}", "Origin": url}
            async with opening:
                return await websockets.connect(
                    f"{url.replace('http://', 'ws://')}/ws/chat/{u['conversation'].pk}/",
                    additional_headers=headers,
                    open_timeout=60,
                    max_size=None,
                )

        async def watch(ws, result: dict) -> None:
            """A second tab on another server: counts the tokens that reach it through Redis."""
            try:
                while True:
                    event = json.loads(await asyncio.wait_for(ws.recv(), opts["timeout"]))
                    if event["type"] == "token":
                        result["watched_tokens"] += len(event["delta"].split())
                    elif event["type"] == "reply_done":
                        result["watched_done"] = True
                        return
            except Exception as exc:  # noqa: BLE001 - counted as lost below
                result["watch_error"] = f"{type(exc).__name__}: {exc}"

        async def client(i: int, u: dict) -> dict:
            nonlocal ready
            text = f"{marker} client {i} {uuid.uuid4().hex} tell me something"
            result = {"text": text, "tokens": [], "events": 0, "user_stored": False, "done": None,
                      "error": None, "watched_tokens": 0, "watched_done": False, "watching": False}
            url = urls[i % len(urls)]
            watcher = None
            try:
                ws = await connect(url, u)
                if len(urls) > 1 and not warmup and watchers:
                    watcher = await connect(urls[(i + 1) % len(urls)], u)
                    result["watching"] = True
                async with ws:
                    watching = asyncio.ensure_future(watch(watcher, result)) if watcher else None
                    ready += 1
                    await go.wait()
                    if opts["ramp"] and len(users) > 1:
                        await asyncio.sleep(opts["ramp"] * i / (len(users) - 1))
                    result["sent"] = time.time()
                    await ws.send(json.dumps({"type": "send", "content": text}))
                    while True:
                        event = json.loads(await asyncio.wait_for(ws.recv(), opts["timeout"]))
                        now = time.time()
                        if event["type"] == "token":
                            # A token event carries every token that queued up since the last
                            # one (the test LLM's tokens are single words): each counts as
                            # received now.
                            result["tokens"].extend((now, word) for word in event["delta"].split())
                            result["events"] += 1
                        elif event["type"] == "message":
                            result["user_stored"] = True
                        elif event["type"] == "reply_done":
                            result["done"] = event
                            result["done_at"] = now
                            break
                        elif event["type"] == "error":
                            result["error"] = event
                            break
                    if watching is not None:
                        await asyncio.wait_for(watching, opts["timeout"])
            except Exception as exc:  # counted as lost below
                result["error"] = {"message": f"{type(exc).__name__}: {exc}"}
            finally:
                if watcher is not None:
                    await watcher.close()
            return result

        tasks = [asyncio.ensure_future(client(i, u)) for i, u in enumerate(users)]
        deadline = time.time() + 120
        while ready < len(users) and time.time() < deadline and not all(t.done() for t in tasks):
            await asyncio.sleep(0.05)
        if not warmup and not quiet:
            self.stdout.write(f"{ready}/{len(users)} clients connected; sending")
        if on_go is not None:
            on_go()
        go.set()
        return await asyncio.gather(*tasks)

    # --- figures ---------------------------------------------------------------------------------

    def _report(self, results, llm, users, opts, wall, pid) -> None:
        requests = {r["last_user"]: r for r in llm.requests() if r["stream"]}
        expected_text = "".join(f"w{i} " for i in range(opts["tokens"]))
        expected_words = expected_text.split()
        garbled = 0
        per_token, first_overhead, before_llm, lost_tokens = [], [], [], 0
        errors = [r["error"] for r in results if r["error"]]
        errors += [
            {"reply": r["done"]["status"], "message": r["done"]["error"]}
            for r in results
            if r["done"] and r["done"]["status"] != "complete"
        ]
        for r in results:
            req = requests.get(r["text"])
            got = len(r["tokens"])
            lost_tokens += max(0, opts["tokens"] - got)
            if got and [w for _, w in r["tokens"]] != expected_words[:got]:
                garbled += 1
            if req is None or not r["tokens"]:
                continue
            for (recv, _), emitted in zip(r["tokens"], req["emitted"], strict=False):
                per_token.append((recv - emitted) * 1000)
            llm_ttft = req["emitted"][0] - req["arrived"]
            first_overhead.append((r["tokens"][0][0] - r["sent"] - llm_ttft) * 1000)
            before_llm.append((req["arrived"] - r["sent"]) * 1000)
        # What is stored is what counts: both messages of every turn, the reply whole.
        stored_ok = 0
        for u, r in zip(users, results, strict=True):
            rows = list(
                Message.objects.filter(conversation=u["conversation"], is_chunk=False)
                .order_by("position")
                .values_list("role", "content")
            )
            if rows == [("user", r["text"]), ("assistant", expected_text)]:
                stored_ok += 1
        lost_messages = 2 * len(results) - 2 * stored_ok
        steps: dict[str, list[float]] = {}
        for timings in Message.objects.filter(
            role="assistant",
            conversation__in=[u["conversation"] for u in users],
        ).values_list("metadata__timings_ms", flat=True):
            for name, ms in (timings or {}).items():
                steps.setdefault(name, []).append(ms)
        rss = _peak_rss_mb(pid) if pid else None
        watched = [r for r in results if r["watching"]]
        lost_watched = sum(
            max(0, opts["tokens"] - r["watched_tokens"]) + (0 if r["watched_done"] else 1) for r in watched
        )
        lines = [
            f"clients: {len(results)}, tokens per reply: {opts['tokens']} at {opts['rate']:g}/s, "
            f"sends spread over {opts['ramp']:g} s, wall time {wall:.1f} s",
            f"messages lost: {lost_messages + lost_tokens} "
            f"({lost_messages} stored messages, {lost_tokens} tokens); errors: {len(errors)}; "
            f"replies streamed out of order: {garbled}",
            f"token events per reply: p50 {_percentile([r['events'] for r in results], 50):.0f} "
            f"(several tokens share an event when they queue up)",
            f"added latency per token relayed: p50 {_percentile(per_token, 50):.1f} ms, "
            f"p95 {_percentile(per_token, 95):.1f} ms, max {max(per_token, default=float('nan')):.1f} ms "
            f"({len(per_token)} tokens)",
            f"turn overhead before the first token: p50 {_percentile(first_overhead, 50):.0f} ms, "
            f"p95 {_percentile(first_overhead, 95):.0f} ms "
            f"(of which before the LLM request: p50 {_percentile(before_llm, 50):.0f} ms, "
            f"p95 {_percentile(before_llm, 95):.0f} ms)",
            f"server peak RSS: {rss:.0f} MB" if rss else "server peak RSS: unknown (pass --server-pid)",
        ]
        if watched:
            lines.insert(
                2,
                f"second tabs on another server (through Redis): {len(watched)}, "
                f"tokens or replies lost there: {lost_watched}",
            )
        lines.append(
            "server-side steps from the start of a turn: "
            + ", ".join(
                f"{name} p50 {_percentile(v, 50):.0f} / p95 {_percentile(v, 95):.0f} ms"
                for name, v in steps.items()
            )
        )
        if errors:
            lines.append(f"first error: {errors[0]}")
        short = [r["watched_tokens"] for r in watched if r["watched_tokens"] < opts["tokens"]]
        if short:
            lines.append(
                f"second tabs short of tokens: {len(short)} ({sum(1 for n in short if n == 0)} saw none; "
                f"tokens seen by the others: {sorted(n for n in short if n)[:12]})"
            )
        watch_errors = [r["watch_error"] for r in watched if r.get("watch_error")]
        if watch_errors:
            lines.append(f"second-tab errors: {len(watch_errors)}, first: {watch_errors[0]}")
        if per_token:
            lines.append(f"mean relay {statistics.mean(per_token):.1f} ms")
        for line in lines:
            self.stdout.write(line)


# --- --baseline: a bare relay and Recollect in one run ---------------------------------------------

RELAY_APP = "chat.bench_relay:application"
FIRST_TOKEN_GOAL_MS = 1000


@dataclass
class _Server:
    name: str
    application: str  # "" is Recollect (config.asgi)
    urls: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)
    best: float = 0.0  # the highest rate passed so far
    over: float | None = None  # the lowest rate failed
    best_step: dict | None = None
    cpu_first_ms: float | None = None
    cpu_token_us: float | None = None
    cpu_note: str = ""
    cpu_firsts: list[float] = field(default_factory=list)  # ms per turn, one per pair of runs
    cpu_tokens: list[float] = field(default_factory=list)  # us per token, one per pair of runs
    lost: int = 0

    @property
    def stores(self) -> bool:
        return not self.application

    def cpu(self) -> float:
        return sum(_cpu_seconds(p.pid) or 0.0 for p in self.procs)

    def loop_cpu(self) -> float:
        """CPU of the processes' main threads: daphne's event loop (the rest is worker threads:
        database calls and, for Recollect, the embedding model)."""
        return sum(_cpu_seconds(p.pid, thread=p.pid) or 0.0 for p in self.procs)


class Baseline:
    """`bench_ws --baseline`: see the option's help. Both servers run side by side, and each
    rate is tried on one and then the other, so both meet the same machine load."""

    def __init__(self, command: Command, llm: LLMProcess, opts) -> None:
        self.command = command
        self.llm = llm
        self.opts = opts
        self.out = command.stdout
        self.expected_text = "".join(f"w{i} " for i in range(opts["tokens"]))
        self.users: list[dict] = []  # made by this run (and deleted after it)

    def run(self) -> None:
        opts = self.opts
        try:
            rates = sorted({float(r) for r in opts["rates"].split(",") if r.strip()})
        except ValueError:
            raise CommandError(f"--rates: numbers separated by commas, not {opts['rates']!r}") from None
        if not rates or rates[0] <= 0:
            raise CommandError("--rates needs positive rates")
        servers = [_Server("bare relay", RELAY_APP), _Server("Recollect", "")]
        count = max(1, opts["servers"])
        redis = None
        try:
            redis_url = ""
            if count > 1:
                redis, redis_url = _start_redis()
            for server in servers:
                for _ in range(count):
                    url, proc = self.command._start_daphne(
                        self.llm.base_url, opts["remote_embeddings"], opts["conn_max_age"],
                        opts["embedding_threads"], redis_url if server.stores else "",
                        profile="" if server.procs or not server.stores else opts["profile_server"],
                        application=server.application,
                    )
                    server.urls.append(url)
                    server.procs.append(proc)
            layer = ", Recollect's sharing a Redis channel layer" if redis else ""
            self.out.write(
                f"--baseline: {count} daphne process(es) each for the bare relay and Recollect{layer}; "
                f"{opts['tokens']} tokens per reply at {opts['rate']:g}/s; first-token goal p95 < "
                f"{FIRST_TOKEN_GOAL_MS} ms with nothing lost; {os.cpu_count()} cores"
            )
            # Users are made as the steps need them (a step of 384 turns/s needs 1,920).
            self.command._make_users(opts["cpu_clients"], self.users)
            for server in servers:  # the embedding model, the LLM client, database connections
                self._step(server, 2.0, warmup=True)
            load = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
            for server in servers:
                self._measure_cpu(server, warmup=True)
            # The pairs alternate between the servers, so both meet the same moments of the
            # machine; the medians of --cpu-pairs are reported.
            for _ in range(max(1, opts["cpu_pairs"])):
                for server in servers:
                    self._measure_cpu(server)
            for rate in rates:
                for server in servers:
                    if server.over is None:
                        self._try_rate(server, rate)
                if all(s.over is not None for s in servers):
                    break
            load_after = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
            self._table(servers, load, load_after)
        finally:
            _stop([proc for server in servers for proc in server.procs], redis)

    # --- one step ----------------------------------------------------------------------------------

    def _script(self, marker: str, tokens: int, hold: float = 0.0) -> None:
        step = {"words": tokens, "delay": 1.0 / self.opts["rate"]}
        if hold:
            step["hang"] = hold
        self.llm.post("/_scripts", {"match": marker, "repeat": True, "steps": [step]})

    def _fresh_conversations(self, users: list[dict]) -> list[dict]:
        """Each turn of a step in a conversation of its own, so what is stored can be checked."""
        made = Conversation.objects.bulk_create(
            [Conversation(owner=u["user"], title="") for u in users]
        )
        return [{**u, "conversation": c} for u, c in zip(users, made, strict=True)]

    def _run(self, server: _Server, users: list[dict], spread: float, marker: str, on_go=None):
        opts = {**self.opts, "ramp": spread}
        return asyncio.run(
            self.command._run_clients(
                server.urls, users, opts, quiet=True, marker=marker, on_go=on_go, watchers=False
            )
        )

    def _lost(self, server: _Server, users: list[dict], results: list[dict], tokens: int) -> int:
        """Tokens not received, replies not finished, and (Recollect) messages not stored whole."""
        expected = [f"w{i}" for i in range(tokens)]
        lost = 0
        for r in results:
            words = [w for _, w in r["tokens"]]
            lost += max(0, tokens - len(words)) + (words[: len(expected)] != expected[: len(words)])
            lost += 0 if r["done"] and r["done"]["status"] == "complete" and not r["error"] else 1
        if server.stores:
            expected_text = "".join(f"w{i} " for i in range(tokens))
            rows: dict[str, list] = {}
            for conversation_id, role, content in (
                Message.objects.filter(conversation__in=[u["conversation"] for u in users], is_chunk=False)
                .order_by("position")
                .values_list("conversation_id", "role", "content")
            ):
                rows.setdefault(conversation_id, []).append((role, content))
            for u, r in zip(users, results, strict=True):
                if rows.get(u["conversation"].pk) != [("user", r["text"]), ("assistant", expected_text)]:
                    lost += 2
        return lost

    def _step(self, server: _Server, rate: float, warmup: bool = False) -> dict:
        n = 1 if warmup else max(1, round(rate * self.opts["step_seconds"]))
        users = self._users(server, n)
        self.llm.post("/_reset", {})
        self._script("[bench]", self.opts["tokens"])
        cpu = {}
        results = self._run(
            server, users, (n - 1) / rate, "[bench]",
            on_go=lambda: cpu.setdefault(0, (server.cpu(), server.loop_cpu(), self._load_cpu())),
        )
        cpu_used = server.cpu() - cpu[0][0]
        loop_used = server.loop_cpu() - cpu[0][1]
        load_used = self._load_cpu() - cpu[0][2]
        first = [(r["tokens"][0][0] - r["sent"]) * 1000 for r in results if r["tokens"] and "sent" in r]
        errors = [r["error"] for r in results if r["error"]]
        return {
            "rate": rate, "turns": n, "lost": self._lost(server, users, results, self.opts["tokens"]),
            "p50": _percentile(first, 50), "p95": _percentile(first, 95) if len(first) == n else float("inf"),
            "cpu_ms": cpu_used / n * 1000, "loop_ms": loop_used / n * 1000,
            "load_ms": load_used / n * 1000, "error": errors[0] if errors else None,
        }

    def _load_cpu(self) -> float:
        """CPU of the load generator on the same cores: this process's clients and the test LLM."""
        return time.process_time() + (_cpu_seconds(self.llm.proc.pid) or 0.0)

    def _users(self, server: _Server, n: int) -> list[dict]:
        if len(self.users) < n:  # made outside the timed steps
            self.out.write(f"  making {n - len(self.users)} more bench users ...")
            self.command._make_users(n - len(self.users), self.users)
        users = self.users[:n]
        return self._fresh_conversations(users) if server.stores else users

    def _try_rate(self, server: _Server, rate: float) -> None:
        """A rate passes when one of two tries meets the goal (the machine is shared: one busy
        moment must not end the stepping)."""
        for attempt in (1, 2):
            step = self._step(server, rate)
            ok = step["lost"] == 0 and step["p95"] < FIRST_TOKEN_GOAL_MS
            load = Path("/proc/loadavg").read_text().split()[0]
            error = f", first error: {step['error']}" if step["error"] else ""
            self.out.write(
                f"  {server.name:<10} {rate:>6g} turns/s{' again' if attempt > 1 else ''}: {step['turns']} "
                f"turns, first token p50 {step['p50']:.0f} / p95 {step['p95']:.0f} ms, lost {step['lost']}, "
                f"server CPU {step['cpu_ms']:.0f} ms per turn ({step['loop_ms']:.0f} on the event loop), "
                f"load generator {step['load_ms']:.0f} ms per turn, load {load} -> "
                f"{'ok' if ok else 'over the goal'}{error}"
            )
            self.out.flush()
            if ok:
                server.best, server.best_step = rate, step
                return
        server.over, server.lost = rate, step["lost"]

    # --- CPU per turn before the first token, and per streamed token -------------------------------

    def _measure_cpu(self, server: _Server, *, warmup: bool = False) -> None:
        """One pair of runs of --cpu-clients turns at once, the LLM holding every request
        --cpu-hold seconds before it streams: CPU until all requests arrived = CPU before the
        first token; the difference between a short and a long reply = CPU per streamed token.
        Each pair's figures are kept; the table shows their medians. With warmup, one round
        not counted instead: it meets every user's first turn on this server (their rows
        created, their memory's size learnt), so the counted pairs meet the same state."""
        k, hold = self.opts["cpu_clients"], self.opts["cpu_hold"]
        short, long = 10, 10 + 2 * self.opts["tokens"]
        totals = {}
        firsts = []
        for tokens in (short,) if warmup else (short, long):
            marker = f"[cpu{tokens}]"
            users = self._users(server, k)
            self.llm.post("/_reset", {})
            self._script(marker, tokens, hold=0 if warmup else hold)
            marks: dict[str, float] = {}

            async def run(users=users, marker=marker, marks=marks):
                clients = asyncio.ensure_future(
                    self.command._run_clients(
                        server.urls, users, {**self.opts, "ramp": 0}, quiet=True, marker=marker,
                        on_go=lambda: marks.setdefault("go", server.cpu()), watchers=False,
                    )
                )
                arrived: list[float] = []
                while not clients.done():
                    requests = await asyncio.to_thread(self.llm.requests)
                    arrived = [r["arrived"] for r in requests if r["stream"] and marker in r["last_user"]]
                    if len(arrived) >= k:
                        marks["arrived"] = server.cpu()
                        marks["spread"] = max(arrived) - min(arrived)
                        break
                    await asyncio.sleep(0.05)
                results = await clients
                marks["end"] = server.cpu()
                return results

            results = asyncio.run(run())
            if warmup:
                return
            lost = self._lost(server, users, results, tokens)
            if lost or "arrived" not in marks:
                server.cpu_note = f"lost {lost} in the CPU runs"
            elif marks["spread"] >= hold:
                server.cpu_note = "approximate: turns reached the LLM further apart than its hold"
            firsts.append((marks.get("arrived", marks["end"]) - marks["go"]) / k)
            totals[tokens] = marks["end"] - marks["go"]
        server.cpu_firsts.append(statistics.mean(firsts) * 1000)
        server.cpu_tokens.append((totals[long] - totals[short]) / (k * (long - short)) * 1e6)
        server.cpu_first_ms = statistics.median(server.cpu_firsts)
        server.cpu_token_us = statistics.median(server.cpu_tokens)
        note = f"; {server.cpu_note}" if server.cpu_note else ""
        self.out.write(
            f"  {server.name:<10} CPU, pair {len(server.cpu_tokens)}: {server.cpu_firsts[-1]:.1f} ms per "
            f"turn before the first token, {server.cpu_tokens[-1]:.0f} us per streamed token ({k} turns "
            f"at once, replies of {short} and {long} tokens){note}"
        )
        self.out.flush()

    # --- the table ---------------------------------------------------------------------------------

    def _table(self, servers: list[_Server], load: list[float], load_after: list[float]) -> None:
        relay, recollect = servers
        self.out.write("")
        self.out.write(
            f"{'server':<11} {'turns/s':>8} {'first token p95':>16} {'lost':>5} "
            f"{'CPU/turn before 1st token':>26} {'CPU/token':>10}"
        )
        for s in servers:
            rate = f"{s.best:g}" if s.over is not None else f">={s.best:g}"
            p95 = f"{s.best_step['p95']:.0f} ms" if s.best_step else "-"
            lost = s.best_step["lost"] if s.best_step else s.lost
            first = f"{s.cpu_first_ms:.1f} ms" if s.cpu_first_ms is not None else "-"
            token = f"{s.cpu_token_us:.0f} us" if s.cpu_token_us is not None else "-"
            self.out.write(f"{s.name:<11} {rate:>8} {p95:>16} {lost:>5} {first:>26} {token:>10}")
        def ratio(mine, theirs, digits: int) -> str:
            # A figure of 0 or less is under /proc's 10 ms clock tick (a short run): no ratio.
            if mine is None or theirs is None or theirs <= 0:
                return "n/a (the relay's figure is under the CPU clock's resolution)"
            return f"{mine / theirs:.{digits}f}x"

        self.out.write(
            f"Recollect / bare relay: turn rate {ratio(recollect.best, relay.best, 2)} (goal >= 0.5), "
            f"CPU per token {ratio(recollect.cpu_token_us, relay.cpu_token_us, 2)} (goal <= 1.5), "
            f"CPU before the first token {ratio(recollect.cpu_first_ms, relay.cpu_first_ms, 1)}"
        )
        self.out.write(
            "load average (1/5/15 min) at the start of the steps "
            + " ".join(f"{x:.2f}" for x in load)
            + ", at the end "
            + " ".join(f"{x:.2f}" for x in load_after)
            + f"; {os.cpu_count()} cores shared with the clients, the test LLM and Postgres"
        )
