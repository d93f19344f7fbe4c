"""A conversation's automatic title: an untitled conversation is named after its first message,
and renamed when that message is edited or forgotten. Kept apart from memory.storage so the
models may use it."""

from __future__ import annotations

TITLE_CHARS = 60


def auto_title(content: str) -> str:
    """The title an untitled conversation gets from its first message: its first words, cut at
    a word and ended with an ellipsis when the message goes on."""
    words = " ".join(content[: TITLE_CHARS * 8].split())
    if len(words) <= TITLE_CHARS:
        return words
    cut = words[: TITLE_CHARS - 1]
    space = cut.rfind(" ")
    if space > TITLE_CHARS // 3:
        cut = cut[:space]
    return cut.rstrip(" ,.;:-–—") + "…"
