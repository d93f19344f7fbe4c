"""manage.py reembed: give every passage a vector of the configured embedding model."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection, transaction
from django.db.models import Q

from memory.embedders import get_embedder
from memory.models import PASSAGE_HNSW, Passage, Topic, passage_hnsw_sql
from memory.progress import Progress
from memory.storage.store import embed_pending


def column_dimensions(table: str, column: str) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s",
            [table, column],
        )
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] and row[0] > 0 else None


def resize_vector_columns(dimensions: int) -> None:
    """Switching to a model of another size: drop old vectors, resize the columns."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {PASSAGE_HNSW}")
        cursor.execute("UPDATE memory_passage SET embedding = NULL, embedding_model = ''")
        cursor.execute(f"ALTER TABLE memory_passage ALTER COLUMN embedding TYPE vector({dimensions})")
        cursor.execute("UPDATE memory_topic SET centroid = NULL")
        cursor.execute(f"ALTER TABLE memory_topic ALTER COLUMN centroid TYPE vector({dimensions})")
        cursor.execute(passage_hnsw_sql(dimensions))


class Command(BaseCommand):
    help = "Re-embed memory with the configured model (after switching EMBEDDING_* settings)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--all", action="store_true",
                            help="re-embed every passage, not only those of another model or none")

    def handle(self, *args, **opts) -> None:
        embedder = get_embedder()
        current = column_dimensions("memory_passage", "embedding")
        if current and current != settings.EMBEDDING_DIMENSIONS:
            target = settings.EMBEDDING_DIMENSIONS
            self.stdout.write(f"resizing vectors from {current} to {target} dimensions")
            resize_vector_columns(settings.EMBEDDING_DIMENSIONS)
        if opts["all"]:
            Passage.objects.update(embedding_model="")
        todo = Passage.objects.filter(Q(embedding__isnull=True) | ~Q(embedding_model=embedder.name)).count()
        self.stdout.write(f"{todo:,} passages to embed with {embedder.name}")
        with Progress(todo, "reembed") as progress:
            done = embed_pending(progress=progress.update)
        if Topic.objects.filter(centroid__isnull=True).exists():
            self.stdout.write("topic centroids were reset: run `manage.py build_topics` to rebuild topics")
        self.stdout.write(f"re-embedded {done:,} passages")
