"""Token counts: exact (cl100k), and a text counted again is not tokenized again."""

from __future__ import annotations

from memory import tokens
from memory.tokens import count_tokens, encoding


def _exact(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


def test_counts_are_exact_for_short_long_and_very_long_texts():
    for text in ("", "hello there", "word " * 1000, "word " * 20_000, "ünïcode ✓ " * 9000):
        assert count_tokens(text) == (_exact(text) if text else 0)


def test_a_long_text_counted_again_in_the_same_turn_is_not_tokenized_again(monkeypatch):
    # The memory index is counted when it is written, in the system prompt and in the prompt's
    # fit: the later counts come from the cache.
    index = "\n".join(f"[01J{i:023d}] 2026-11-24 user: note {i} about the garden" for i in range(400))
    assert tokens._CACHED_MAX_CHARS < len(index) <= tokens._CACHED_LONG_MAX_CHARS
    first = count_tokens(index)
    calls = []
    real = encoding().encode
    monkeypatch.setattr(encoding(), "encode", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert count_tokens(str(index)) == first == _exact(index)
    assert count_tokens("".join([index])) == first
    assert len(calls) == 1  # only _exact above tokenized it again


def test_a_text_over_the_long_cache_limit_is_counted_without_being_kept():
    huge = "token " * (tokens._CACHED_LONG_MAX_CHARS // 6 + 10)
    before = tokens._count_long.cache_info().currsize
    assert count_tokens(huge) == _exact(huge)
    assert tokens._count_long.cache_info().currsize == before
