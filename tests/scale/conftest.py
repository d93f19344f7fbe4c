"""Scale-out and fault fixtures: a loopback Redis, daphne server processes on the test database,
the scripted LLM, and signed-in session cookies a subprocess server accepts.

A server process sees only committed rows, so tests that use one run with transactional_db.
"""

from __future__ import annotations

import pytest

from bench import llm_server
from bench.launch import RedisProcess
from tests.chat.conftest import (  # noqa: F401 - fixtures re-exported for this folder
    llm_server_instance,
    no_llm,
    scripted_llm,
    warm_embedder,
)


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
