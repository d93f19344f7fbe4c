"""Plain-text helpers shared by the engine's layers: the stop words that carry no subject,
sentence boundaries (for extractive summaries, compressed results and scrubbing), and a
conversation's automatic title (an untitled conversation is named after its first message, and
renamed when that message is edited or forgotten; the models use it, so it lives below them)."""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

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
_KEPT_PER_MILLION = 0.2
_SUFFIXES = ("'s", "s", "es", "ed", "d", "ing", "ly")
# The word pieces MiniLM reads (Wikipedia and books), shipped in memory/data: its whole words
# are everyday words of written English that film subtitles rarely say (database, recipe).
_VOCABULARY = Path(__file__).parent / "data" / "all-MiniLM-L6-v2.tokenizer.json.gz"


@functools.cache
def _english_per_million() -> dict[str, float]:
    from spellchecker import SpellChecker

    counts = SpellChecker(language="en", distance=1).word_frequency
    scale = 1e6 / max(1, counts.total_words)
    return {w: n * scale for w, n in counts.dictionary.items() if n * scale >= _KEPT_PER_MILLION}


@functools.cache
def _written_words() -> frozenset[str]:
    with gzip.open(_VOCABULARY, "rt", encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    return frozenset(w for w in vocab if w.isalpha() and len(w) >= 3)


def _forms(word: str) -> list[str]:
    """`word` and the stems an inflection may hide ("reschedules": "reschedule")."""
    forms = [word]
    forms += [word[: -len(s)] for s in _SUFFIXES if word.endswith(s) and len(word) - len(s) >= 3]
    return forms


def english_frequency(word: str) -> float:
    """How often `word` (any case) is said in English, per million words; 0 for a word rarer
    than _KEPT_PER_MILLION (names, codes, made-up words, rare terms). An inflected form counts
    as its stem does."""
    table = _english_per_million()
    return max(table.get(form, 0.0) for form in _forms(word.lower()))


def everyday_word(word: str, per_million: float) -> bool:
    """Whether `word` is an ordinary English word: said at least `per_million` times per
    million words, or a whole word of written English's common vocabulary."""
    forms = _forms(word.lower())
    return english_frequency(word) >= per_million or any(f in _written_words() for f in forms)
_MD_FENCE = re.compile(r"^\s*(```|~~~).*$", re.M)
_MD_LINE_START = re.compile(r"^\s{0,3}(?:#{1,6}\s+|>\s?|[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,3}[.)]\s+)", re.M)
_MD_IMAGE_OR_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")
_MD_EMPHASIS = re.compile(r"(\*\*|__|~~)(?=\S)(.+?)(?<=\S)\1|(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?!\w)"
                          r"|(?<![\w_])_(?=\S)([^_\n]+?)(?<=\S)_(?!\w)")
_MD_CODE = re.compile(r"`+([^`\n]+)`+")
_MD_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$", re.M)
_MD_RULE = re.compile(r"^\s*(?:[-*_]\s*){3,}$|^\s*\|?(?:\s*:?-{3,}:?\s*\|)+\s*$", re.M)


def plain_text(markdown: str) -> str:
    """Markdown as the words a reader sees, for one-line snippets: "**Offline recall** found
    [this](https://…)" becomes "Offline recall found this" (marks, headings, bullets, quote
    marks, code fences and table rules go; the words and code stay)."""
    text = _MD_FENCE.sub("", markdown or "")
    text = _MD_RULE.sub("", text)
    text = _MD_LINE_START.sub("", text)
    text = _MD_IMAGE_OR_LINK.sub(r"\1", text)
    text = _MD_CODE.sub(r"\1", text)
    for _ in range(2):  # emphasis inside emphasis ("**a *b* c**")
        text = _MD_EMPHASIS.sub(lambda m: m.group(2) or m.group(3) or m.group(4) or "", text)
    return _MD_TABLE_ROW.sub(lambda m: m.group(0).replace("|", " "), text)
