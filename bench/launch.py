"""Start the processes tests and benchmarks run against: daphne on a given database, the scripted
LLM in a process of its own, and a loopback redis-server; and the session cookie a browser of a
user would send. No pytest here: the benchmark commands use it as the tests do."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"

# daphne under cProfile: each thread (the event loop, the database and embedding pools) gets a
# profile of its own counting its CPU time (not wall time, which on a busy machine would charge
# every preemption to whatever call was running), all written to argv[1] when it stops.
_PROFILED_DAPHNE = """
import cProfile, pstats, sys, threading, time
from config.serving import main
out = sys.argv.pop(1)
profiles = []

def _start(*args):
    profile = cProfile.Profile(time.thread_time)
    profiles.append(profile)
    profile.enable()

threading.setprofile(_start)
_start()
try:
    main(sys.argv[1:])
finally:
    for profile in profiles:
        profile.disable()
    pstats.Stats(*profiles).dump_stats(out)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 20) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def _stop(proc: subprocess.Popen | None, timeout: float = 10) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


class ServerProcess:
    """One daphne serving config.asgi (through config.serving, with the websocket limits `make
    run` gets) on the database `db_name`, talking to the scripted LLM at `llm_base_url`.

    By default it embeds through that LLM's deterministic /embeddings too (no 10-40 s model
    load per server); `llm_embeddings=False` keeps the configured embedder. With `profile` it
    runs under cProfile, the profile written to that path when it stops; `application` serves
    another ASGI application (config.serving's --application)."""

    def __init__(self, name: str, db_name: str, llm_base_url: str, *, redis_url: str = "",
                 port: int | None = None, extra_env: dict[str, str] | None = None,
                 llm_embeddings: bool = True, profile: str = "", application: str = "") -> None:
        self.name = name
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        self.env = {
            **os.environ, "RECOLLECT_DB_NAME": db_name, "OPENAI_BASE_URL": llm_base_url,
            "OPENAI_API_KEY": "sk-test-secret-key", "CHAT_MODEL": "test-llm", "LLM_MAX_RETRIES": "0",
            "RUN_WORKER_IN_SERVER": "false", "XDG_RUNTIME_DIR": "/tmp",
            "DJANGO_SETTINGS_MODULE": "config.settings", "REDIS_URL": redis_url,
        }
        if llm_embeddings:
            self.env.update({
                "EMBEDDING_BACKEND": "openai", "EMBEDDING_BASE_URL": llm_base_url,
                "EMBEDDING_API_KEY": "test", "EMBEDDING_MODEL": "test-embed", "EMBEDDING_DIMENSIONS": "384",
            })
        self.env.update(extra_env or {})
        self.launcher = ["-c", _PROFILED_DAPHNE, str(Path(profile).resolve())] if profile else [
            "-m", "config.serving"
        ]
        if application:  # another ASGI application than config.asgi (bench_ws's bare relay)
            self.launcher += ["--application", application]
        self.log_path = ARTIFACTS / f"daphne-{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120, *, wait: bool = True) -> ServerProcess:
        ARTIFACTS.mkdir(exist_ok=True)
        log = open(self.log_path, "a")  # noqa: SIM115 - kept open for the server's life
        self.proc = subprocess.Popen(
            [sys.executable, *self.launcher, "-b", "127.0.0.1", "-p", str(self.port)],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 120) -> ServerProcess:
        assert self.proc is not None
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/login/", timeout=2).read()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"daphne {self.name} exited; see {self.log_path}") from None
                time.sleep(0.3)
        self.kill()
        raise RuntimeError(f"daphne {self.name} did not answer in {timeout} s; see {self.log_path}")

    def kill(self) -> None:
        """Kill -9: no chance to finish anything, as a crash or an OOM kill would."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 10) -> None:
        _stop(self.proc, timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class LLMProcess:
    """`python -m bench.llm_server` on a free port: the scripted LLM in a process of its own, so
    its timing is not disturbed by the caller's event loop (and vice versa)."""

    def __init__(self, delay: float = 0.0, timeout: float = 30) -> None:
        port = free_port()
        self.root = f"http://127.0.0.1:{port}"
        self.base_url = self.root + "/v1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.llm_server", "--port", str(port), "--delay", str(delay)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.base_url + "/models", timeout=1).read()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the scripted LLM did not start")

    def post(self, path: str, payload: dict) -> None:
        request = urllib.request.Request(
            self.root + path, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(request, timeout=10).read()

    def requests(self) -> list[dict]:
        with urllib.request.urlopen(self.root + "/_requests", timeout=30) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        _stop(self.proc)


class RedisProcess:
    """redis-server on a free loopback port, no persistence: a throwaway channel-layer broker."""

    def __init__(self) -> None:
        server = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(server):
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(self.port)
        except RuntimeError:
            self.stop()
            raise
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        _stop(self.proc)


def session_cookie(user) -> str:
    """A committed session for `user`: the Cookie header a browser of theirs would send."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"
