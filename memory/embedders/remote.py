"""Any OpenAI-compatible `/embeddings` endpoint."""

from __future__ import annotations

import numpy as np
from django.conf import settings

from memory.embedders.base import Embedder, EmbeddingError
from memory.tokens import token_windows


class OpenAIEmbedder(Embedder):
    """Any OpenAI-compatible /embeddings endpoint (OpenAI, Ollama, vLLM, ...)."""

    def __init__(self, model_name: str, dimensions: int, batch_size: int, cache_size: int,
                 window: int, overlap: int, base_url: str, api_key: str, timeout: float) -> None:
        super().__init__(batch_size, cache_size)
        from openai import OpenAI

        self.name = model_name
        self.dimensions = dimensions
        self.window = window
        self.overlap = overlap
        self.client = OpenAI(base_url=base_url or None, api_key=api_key or "unused",
                             timeout=timeout, max_retries=settings.LLM_MAX_RETRIES)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        try:
            response = self.client.embeddings.create(model=self.name, input=texts)
        except Exception as exc:
            raise EmbeddingError(f"embedding endpoint failed: {exc}") from exc
        data = sorted(response.data, key=lambda d: d.index)
        return np.asarray([d.embedding for d in data], dtype=np.float32)

    def passages(self, text: str) -> list[tuple[int, int]]:
        return token_windows(text, self.window, self.overlap)
