"""Settings read from the environment, failing loudly on values they cannot read."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from config import settings as config


def test_database_url_is_parsed_into_django_settings():
    db = config.database_from_url("postgres://bob:s%40cret@db.example:6543/recollect?sslmode=require")
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "recollect", "bob", "s@cret", "db.example", "6543"
    )
    assert db["OPTIONS"] == {"sslmode": "require"}


def test_a_socket_host_in_the_url_is_understood():
    db = config.database_from_url("postgresql://postgres@/postgres?host=/tmp/pg")
    assert db["HOST"] == "/tmp/pg" and db["OPTIONS"] == {}


def test_sqlite_is_refused():
    with pytest.raises(ImproperlyConfigured, match="Postgres"):
        config.database_from_url("sqlite:///db.sqlite3")


@pytest.mark.parametrize(
    ("helper", "value"),
    [(config.env_int, "ten"), (config.env_bool, "maybe"), (config.env_float, "x")],
)
def test_bad_values_fail_loudly(monkeypatch, helper, value):
    monkeypatch.setenv("RECOLLECT_TEST_KNOB", value)
    with pytest.raises(ImproperlyConfigured, match="RECOLLECT_TEST_KNOB"):
        helper("RECOLLECT_TEST_KNOB", 1)


def test_a_value_below_its_minimum_fails_loudly(monkeypatch):
    monkeypatch.setenv("RECOLLECT_TEST_KNOB", "-3")
    with pytest.raises(ImproperlyConfigured, match="at least 0"):
        config.env_int("RECOLLECT_TEST_KNOB", 1, minimum=0)


def test_the_database_is_postgres_with_pgvector(db):
    from django.db import connection

    assert connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert cursor.fetchone() is not None


@pytest.mark.django_db
def test_a_first_run_creates_an_account_and_says_how_to_sign_in(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    out = io.StringIO()
    call_command("ensure_account", stdout=out)
    assert get_user_model().objects.filter(username="admin", is_superuser=True).exists()
    assert "Sign in as 'admin' with the password" in out.getvalue()
    assert "password" in (tmp_path / "first-account.txt").read_text()
    out = io.StringIO()
    call_command("ensure_account", stdout=out)
    assert get_user_model().objects.count() == 1
    assert "Recollect is ready: http://127.0.0.1:8000/" in out.getvalue()
    assert "the first account's details are in" in out.getvalue() and "password" not in out.getvalue()


def test_the_embedded_server_is_sized_for_the_machine():
    from config.embedded_db import server_settings

    assert server_settings(24 * 2**30) == {"shared_buffers": "4096MB", "effective_cache_size": "12288MB"}
    assert server_settings(2 * 2**30) == {"shared_buffers": "512MB", "effective_cache_size": "1024MB"}
    assert server_settings(256 * 2**20)["shared_buffers"] == "128MB"  # never below the default
    assert server_settings(None) == {}  # memory unknown: Postgres' own defaults


def test_the_embedded_server_settings_are_written_once_and_included(tmp_path):
    from config.embedded_db import SETTINGS_FILE, write_server_settings

    conf = tmp_path / "postgresql.conf"
    conf.write_text("max_connections = 100\n")
    write_server_settings(tmp_path)
    write_server_settings(tmp_path)  # idempotent: one include line
    lines = conf.read_text().splitlines()
    assert lines[0] == "max_connections = 100"
    assert lines.count(f"include_if_exists = '{SETTINGS_FILE}'") == 1
    assert "shared_buffers = '" in (tmp_path / SETTINGS_FILE).read_text()


def test_memory_levels_out_of_order_fail_loudly():
    env = {**os.environ, "HIERARCHY_META_THRESHOLD": "300"}  # above the archive threshold
    run = subprocess.run(
        [sys.executable, "-c", "import config.settings"], env=env, capture_output=True, text=True
    )
    assert run.returncode != 0
    assert "HIERARCHY_RECENT_NODES < HIERARCHY_META_THRESHOLD < HIERARCHY_ARCHIVE_THRESHOLD" in run.stderr


def test_provider_settings_are_read_as_unset_whatever_the_shell_exported(monkeypatch):
    from tests.conftest import _provider_settings_when_unset

    monkeypatch.setenv("OPENAI_API_KEY", "sk-bogus")
    monkeypatch.setenv("EMBEDDING_BACKEND", "openai")
    unset = _provider_settings_when_unset()
    assert unset["OPENAI_API_KEY"] == "" and unset["EMBEDDING_API_KEY"] == ""
    assert (unset["EMBEDDING_BACKEND"], unset["EMBEDDING_DIMENSIONS"]) == ("e5", 384)


def test_a_test_sees_no_provider_whatever_the_shell_exported(settings):
    # Meaningful when run with e.g. OPENAI_API_KEY=sk-bogus EMBEDDING_BACKEND=openai exported.
    import os

    assert not [name for name in os.environ if name.startswith(("OPENAI_", "EMBEDDING_"))]
    assert (settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL, settings.EMBEDDING_API_KEY) == ("", "", "")
    assert (settings.EMBEDDING_BACKEND, settings.EMBEDDING_DIMENSIONS) == ("e5", 384)


@pytest.mark.django_db(transaction=True)  # CREATE DATABASE runs outside a transaction
def test_a_command_run_before_the_database_has_tables_says_what_to_do():
    from django.db import connection

    empty = "recollect_test_no_tables"
    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{empty}"')
        cursor.execute(f'CREATE DATABASE "{empty}"')
    try:
        env = {**os.environ, "RECOLLECT_DB_NAME": empty, "DJANGO_SETTINGS_MODULE": "config.settings"}
        run = subprocess.run(
            [sys.executable, "manage.py", "recall", "tulips", "--user", "ada"],
            env=env, capture_output=True, text=True, cwd=config.BASE_DIR, timeout=300,
        )
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{empty}"')
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    assert "no tables yet" in run.stderr and "make run" in run.stderr
    assert ".venv/bin/python manage.py migrate" in run.stderr and "RECOLLECT_DATA_DIR" in run.stderr


def test_serve_loads_the_embedder_while_the_server_starts():
    from config.management.commands.serve import start_embedder_load
    from memory.embedders import get_embedder

    start_embedder_load().join(timeout=600)
    assert get_embedder()._model is not None  # the first chat turn finds it loaded
@pytest.mark.django_db(transaction=True)
def test_serve_tells_how_to_sign_in_last_once_the_server_answers(tmp_path):
    """What `make run` ends with: daphne's start-up lines first, then, set apart once the port
    answers, where to sign in and the first account's password."""
    import urllib.request

    from django.conf import settings as live
    from django.db import connection

    from bench.launch import free_port

    port = free_port()
    env = {**os.environ, "RECOLLECT_DATA_DIR": str(tmp_path), "RECOLLECT_PG_DIR": str(live.EMBEDDED_PG_DIR),
           "RECOLLECT_DB_NAME": connection.settings_dict["NAME"], "RUN_WORKER_IN_SERVER": "false",
           "EMBEDDING_BACKEND": "openai", "EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1",
           "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--sign-in"], cwd=live.BASE_DIR, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        seen: list[str] = []
        while sum(line.startswith("─") for line in seen) < 2:
            line = server.stdout.readline()
            assert line, "".join(seen)
            seen.append(line.rstrip("\n"))
        # Told only once the server answers.
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=10).status == 200
    finally:
        server.terminate()
        server.wait(20)
    rule = next(i for i, line in enumerate(seen) if line.startswith("─"))
    block = seen[rule:]
    assert seen[rule - 1] == "" and block[0] == block[-1] and len(block) == 6  # set apart by rules
    assert block[1] == f"Recollect is ready: http://127.0.0.1:{port}/"
    assert block[3:5] == [f"Anyone else can make an account at http://127.0.0.1:{port}/signup/",
                          "Stop the server with Ctrl+C."]
    password = (tmp_path / "first-account.txt").read_text().split("password: ")[1].strip()
    kept = tmp_path / "first-account.txt"
    assert block[2] == f"Sign in as 'admin' with the password {password!r} (also kept in {kept})."
    assert not any("Listening" in line or "Starting server" in line for line in block)
