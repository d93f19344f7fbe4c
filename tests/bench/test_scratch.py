"""A benchmark's scratch database: made and migrated when missing, never the one in use."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

from bench.scratch import use_database


@pytest.mark.django_db(transaction=True)
def test_a_benchmark_gets_a_scratch_database_created_and_migrated():
    old = connection.settings_dict["NAME"]
    name = f"{old}_scratch"
    try:
        use_database(name)
        assert connection.settings_dict["NAME"] == settings.DATABASES["default"]["NAME"] == name
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_database(), to_regclass('memory_message') IS NOT NULL")
            assert cursor.fetchone() == (name, True)
    finally:
        connection.close()
        connection.settings_dict["NAME"] = settings.DATABASES["default"]["NAME"] = old
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')


@pytest.mark.django_db
def test_an_empty_name_keeps_the_database_in_use():
    old = connection.settings_dict["NAME"]
    use_database("")
    assert connection.settings_dict["NAME"] == old


def test_a_name_that_is_not_a_plain_identifier_is_refused():
    with pytest.raises(CommandError):
        use_database('x"; DROP DATABASE y; --')
