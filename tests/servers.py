"""Server processes for tests and benchmarks: daphne on a given database, talking to the scripted
LLM, and the session cookie a browser of a user would send it. No pytest here, so management
commands (bench_faults) use it too."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from django.test import Client

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """One daphne serving config.asgi on the test database (RECOLLECT_DB_NAME)."""

    def __init__(self, name: str, db_name: str, llm_base_url: str, *, redis_url: str = "",
                 port: int | None = None, extra_env: dict[str, str] | None = None) -> None:
        self.name = name
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        self.env = {
            **os.environ, "RECOLLECT_DB_NAME": db_name, "OPENAI_BASE_URL": llm_base_url,
            "OPENAI_API_KEY": "sk-test-secret-key", "CHAT_MODEL": "test-llm", "LLM_MAX_RETRIES": "0",
            "RUN_WORKER_IN_SERVER": "false", "XDG_RUNTIME_DIR": "/tmp",
            "DJANGO_SETTINGS_MODULE": "config.settings", "REDIS_URL": redis_url,
            # The scripted LLM's deterministic embeddings: no 10-40 s model load per server.
            "EMBEDDING_BACKEND": "openai", "EMBEDDING_BASE_URL": llm_base_url,
            "EMBEDDING_API_KEY": "test", "EMBEDDING_MODEL": "test-embed", "EMBEDDING_DIMENSIONS": "384",
            **(extra_env or {}),
        }
        self.log_path = ARTIFACTS / f"daphne-{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120, *, wait: bool = True) -> ServerProcess:
        ARTIFACTS.mkdir(exist_ok=True)
        log = open(self.log_path, "a")  # noqa: SIM115 - kept open for the server's life
        self.proc = subprocess.Popen(
            # config.serving: daphne with the websocket limits `make run` gets, taken from this
            # server's own settings (extra_env may change MAX_MESSAGE_CHARS).
            [sys.executable, "-m", "config.serving", "-b", "127.0.0.1", "-p", str(self.port)],
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
        raise RuntimeError(f"daphne {self.name} did not answer in {timeout} s")

    def kill(self) -> None:
        """Kill -9: no chance to finish anything, as a crash or an OOM kill would."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def session_cookie(user) -> str:
    """A committed session for `user`: the Cookie header a browser of theirs would send."""
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def open_socket(server: ServerProcess, cookie: str, conversation_id: str):
    """A signed-in websocket to a conversation on `server`. max_size=None: the server echoes a
    long message back as its rendered HTML."""
    from websockets.asyncio.client import connect as ws_connect

    return await ws_connect(
        f"{server.ws_url}/ws/chat/{conversation_id}/",
        additional_headers={"Cookie": cookie, "Origin": server.url},
        open_timeout=30, max_size=None,
    )


async def events_until(ws, event_type: str, timeout: float = 120) -> list[dict]:
    """The events a socket receives up to and including the first of `event_type`."""
    events: list[dict] = []
    async with asyncio.timeout(timeout):
        while True:
            event = json.loads(await ws.recv())
            events.append(event)
            if event["type"] == event_type:
                return events
