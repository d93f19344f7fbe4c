#!/usr/bin/env python
"""Django's command-line utility for Recollect."""

import os
import sys


def missing_tables_advice(exc: BaseException) -> str | None:
    """What to do when a command finds no tables: the database is new (a command run before
    `make run`, or with another RECOLLECT_DATA_DIR) or older than the code. None for any other
    error."""
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) != "42P01":  # undefined_table
        return None
    from django.conf import settings

    database = settings.DATABASES["default"]
    return (
        f"Recollect's database has no tables yet, or not all of them ({cause}).\n"
        f"Database: {database.get('NAME')} on {database.get('HOST') or 'localhost'}"
        f" (RECOLLECT_DATA_DIR={settings.DATA_DIR}).\n"
        "Run `make run` once (it creates the tables and a first account), or\n"
        "`.venv/bin/python manage.py migrate`, then run this command again.\n"
        "A command run with another RECOLLECT_DATA_DIR (or DATABASE_URL) than the server's\n"
        "uses another database: give it the same one.\n"
    )


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line
    from django.db.utils import ProgrammingError

    try:
        execute_from_command_line(sys.argv)
    except ProgrammingError as exc:
        advice = missing_tables_advice(exc)
        if advice is None:
            raise
        sys.stderr.write(advice)
        sys.exit(1)


if __name__ == "__main__":
    main()
