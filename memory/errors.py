"""Errors memory raises, each with a message fit to show a person."""

from __future__ import annotations


class MemoryStoreError(Exception):
    """Base class: a request on memory that cannot be carried out."""


class NotFound(MemoryStoreError):
    """Unknown id, or an id that belongs to someone else (never told apart)."""

    def __init__(self, kind: str, ident: object) -> None:
        shown = str(ident)
        shown = shown if len(shown) <= 60 else shown[:59] + "…"  # never a whole long input back
        super().__init__(f"{kind} {shown} not found")
        self.kind = kind
        self.ident = ident


class InvalidContent(MemoryStoreError, ValueError):
    pass


class ChunkEditError(MemoryStoreError, ValueError):
    def __init__(self, chunk_id: str, parent_id: str) -> None:
        super().__init__(
            f"message {chunk_id} is chunk of {parent_id}: chunks cannot be edited on their own; "
            f"edit the whole message {parent_id} instead"
        )


class DeletedMessageError(MemoryStoreError):
    pass


class EmbeddingModelMismatch(MemoryStoreError):
    pass
