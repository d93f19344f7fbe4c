"""Scale-out and fault fixtures: a loopback Redis, daphne server processes on the test database,
the scripted LLM, and signed-in session cookies a subprocess server accepts.

A server process sees only committed rows, so tests that use one run with transactional_db.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import pytest

from bench import llm_server
from tests.chat.conftest import (  # noqa: F401 - fixtures re-exported for this folder
    llm_server_instance,
    no_llm,
    scripted_llm,
    warm_embedder,
)
from tests.servers import ARTIFACTS, ROOT, ServerProcess, free_port, session_cookie  # noqa: F401

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def wait_for_port(port: int, timeout: float = 20) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


class RedisProcess:
    """redis-server on loopback, no persistence: the channel layer's broker for the test."""

    def __init__(self) -> None:
        if not os.path.exists(REDIS_SERVER):
            pytest.fail("redis-server is not installed: `make test` installs it "
                        "(apt-get install redis-server)")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def database_name(django_db_blocker) -> str:
    from django.db import connection

    with django_db_blocker.unblock():
        return connection.settings_dict["NAME"]


@pytest.fixture(scope="module")
def module_llm():
    """A scripted LLM of this module's own (servers in subprocesses talk to it over HTTP)."""
    server = llm_server.start_in_thread()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def redis_server():
    redis = RedisProcess()
    yield redis
    redis.stop()
