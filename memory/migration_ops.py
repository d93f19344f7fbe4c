"""Migration operations of our own."""

from __future__ import annotations

from django.db import migrations
from django.db.utils import DatabaseError


class CreatePgvectorExtension(migrations.RunPython):
    """CREATE EXTENSION vector, with one clear error when the server has no pgvector."""

    def __init__(self) -> None:
        super().__init__(self._create, migrations.RunPython.noop, elidable=False)

    @staticmethod
    def _create(apps, schema_editor) -> None:
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            if cursor.fetchone() is None:
                raise DatabaseError(
                    "This Postgres server has no pgvector extension. Recollect needs it: install "
                    "pgvector on the server (e.g. `apt-get install postgresql-NN-pgvector`, or the "
                    "pgvector/pgvector Docker image), or unset DATABASE_URL to use the embedded "
                    "Postgres, which ships with pgvector."
                )
            cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
