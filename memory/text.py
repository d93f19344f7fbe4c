"""Plain-text helpers shared by the engine's layers: the stop words that carry no subject,
sentence boundaries (for extractive summaries, compressed results and scrubbing), and a
conversation's automatic title (an untitled conversation is named after its first message, and
renamed when that message is edited or forgotten; the models use it, so it lives below them)."""

from __future__ import annotations

import functools
import re

# A sentence ends at . ! ? (followed by a space or the end) or at a line break.
_SENTENCE = re.compile(r"[^\n]+?(?:[.!?]+(?=\s|$)|(?=\n)|$)", re.S)
LONG_SENTENCE = 400  # characters; longer "sentences" (lists, logs, code) are cut in pieces
STOP_WORDS = frozenset(
    [
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "did", "do", "does", "for", "from",
        "had", "has", "have", "he", "her", "his", "how", "i", "if", "in", "is", "it", "its", "me",
        "my", "no", "not", "of", "on", "or", "our", "she", "so", "that", "the", "their", "them",
        "then", "there", "they", "this", "to", "was", "we", "were", "what", "when", "where",
        "which", "who", "why", "will", "with", "would", "you", "your", "about", "remember",
        "recall", "tell", "mention", "mentioned", "said", "say", "again", "earlier", "please",
        "know",
    ]
)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text`, whitespace trimmed; long ones in pieces."""
    spans = []
    for m in _SENTENCE.finditer(text):
        start, end = m.start(), m.end()
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        while end - start > LONG_SENTENCE:
            cut = text.rfind(" ", start + LONG_SENTENCE // 2, start + LONG_SENTENCE)
            cut = cut if cut > start else start + LONG_SENTENCE
            spans.append((start, cut))
            start = cut
            while start < end and text[start].isspace():
                start += 1
        if end > start:
            spans.append((start, end))
    return spans


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


# --- how common a word is in English ------------------------------------------------------------

# English words used at least this often (per million words of pyspellchecker's English list,
# drawn from film subtitles) are kept; anything rarer reads as 0.
_KEPT_PER_MILLION = 1.0
_SUFFIXES = ("'s", "s", "es", "ed", "d", "ing", "ly")


@functools.cache
def _english_per_million() -> dict[str, float]:
    from spellchecker import SpellChecker

    counts = SpellChecker(language="en", distance=1).word_frequency
    scale = 1e6 / max(1, counts.total_words)
    return {w: n * scale for w, n in counts.dictionary.items() if n * scale >= _KEPT_PER_MILLION}


def english_frequency(word: str) -> float:
    """How often `word` (any case) is used in English, per million words; 0 for a word rarer
    than once per million (names, codes, made-up words, rare terms). An inflected form counts
    as common when its stem is ("reschedules" as "reschedule")."""
    table = _english_per_million()
    word = word.lower()
    found = table.get(word, 0.0)
    if found:
        return found
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            found = max(found, table.get(word[: -len(suffix)], 0.0))
    return found
