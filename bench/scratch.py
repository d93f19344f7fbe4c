"""The scratch database a benchmark runs in, so that it never reads or changes anyone's memory."""

from __future__ import annotations

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection


def add_database_argument(parser, bench: str) -> None:
    """--database, defaulting to `recollect_bench_<bench>`."""
    parser.add_argument(
        "--database",
        default=f"recollect_bench_{bench}",
        help="the scratch database the benchmark runs in, created and migrated if missing "
        "(default %(default)s); '' = the database in use (the tests pass it)",
    )


def use_database(name: str, stdout=None) -> None:
    """Point the default connection (and the settings, which subprocesses read through
    RECOLLECT_DB_NAME) at database `name`, created and migrated if missing. '' changes nothing."""
    if not name:
        return
    if not name.replace("_", "").isalnum():
        raise CommandError("--database must be a plain identifier")
    if name != connection.settings_dict["NAME"]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{name}"')
        connection.close()
        connection.settings_dict["NAME"] = name
        settings.DATABASES["default"]["NAME"] = name
    call_command("migrate", verbosity=0, interactive=False)
    if stdout is not None:
        stdout.write(f"bench database: {name}")
