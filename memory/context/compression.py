"""Result compression: a long text cut to the sentences that answer a query.

What the model reads of a long message in a search result is its best-matching sentences, in
their order, each with its character offsets in the whole text, so the model can read on
around any of them with the paging tools (get_message_by_id(id, offset)). Scoring is cheap:
overlap of the query's words with each sentence, rarer words in the text weighing more; when
no sentence shares a word with the query, a similarity function (the embedder's, passed in by
the caller) ranks them instead, and failing that the text's first sentences are kept.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory.text import STOP_WORDS, sentence_spans

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_'-]*")
WEAK_MATCH = 0.5  # a sentence scoring below this share of the best one is left out
@dataclass
class Excerpt:
    start: int
    end: int
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"offset": self.start, "end": self.end, "text": self.text}


@dataclass
class Compressed:
    excerpts: list[Excerpt] = field(default_factory=list)
    total_chars: int = 0
    matched: str = "words"  # words | similarity | start (nothing matched: the text's start)

    @property
    def kept_chars(self) -> int:
        return sum(len(e.text) for e in self.excerpts)

    @property
    def ratio(self) -> float:
        """Characters of the whole text per character kept (3.0 is 3:1)."""
        return self.total_chars / max(1, self.kept_chars)

    def text(self) -> str:
        return " … ".join(e.text for e in self.excerpts)


def _stem(word: str) -> str:
    # A crude stem (first five letters) so "planted" meets "planting"; enough for ranking.
    word = word.lower()
    return word[:5] if len(word) > 5 else word


def terms(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text) if w.lower() not in STOP_WORDS}


def compress(
    text: str,
    query: str,
    *,
    max_chars: int,
    similarity: Callable[[Sequence[str]], Sequence[float]] | None = None,
) -> Compressed:
    """The sentences of `text` that best answer `query`, at most `max_chars` characters of
    them (at least one sentence, cut if it alone is longer), in the text's order."""
    spans = sentence_spans(text)
    out = Compressed(total_chars=len(text))
    if not spans:
        return out
    wanted = terms(query)
    sentence_terms = [terms(text[s:e]) for s, e in spans]
    # Rarer words in this text tell more about where the answer is.
    weight = {
        t: math.log(1 + len(spans) / (1 + sum(t in st for st in sentence_terms))) for t in wanted
    }
    scores = [sum(weight[t] for t in wanted & st) for st in sentence_terms]
    if not any(scores):
        scores = []
        if similarity is not None and len(spans) <= 128:
            try:
                scores = [float(x) for x in similarity([text[s:e] for s, e in spans])]
                out.matched = "similarity"
            except Exception:  # noqa: BLE001 - ranking is a nicety; the start is kept instead
                scores = []
        if not scores:
            out.matched = "start"
            scores = [-i for i in range(len(spans))]
    order = sorted(range(len(spans)), key=lambda i: (-scores[i], i))
    if out.matched == "words":
        # Sentences sharing no word, or far weaker matches than the best, add only noise.
        floor = max(scores) * WEAK_MATCH
        order = [i for i in order if scores[i] > 0 and scores[i] >= floor]
    chosen: list[int] = []
    used = 0
    for i in order:
        s, e = spans[i]
        if chosen and used + (e - s) > max_chars:
            continue
        chosen.append(i)
        used += e - s
        if used >= max_chars:
            break
    for i in sorted(chosen):
        s, e = spans[i]
        e = min(e, s + max_chars)
        last = out.excerpts[-1] if out.excerpts else None
        if last is not None and not text[last.end : s].strip():
            # Neighbouring sentences read as one excerpt.
            last.end = e
            last.text = text[last.start : e]
        else:
            out.excerpts.append(Excerpt(s, e, text[s:e]))
    return out


def embedder_similarity(query_vector) -> Callable[[Sequence[str]], Sequence[float]] | None:
    """Cosine similarity of sentences to the query with the memory's embedder (a model call
    for the sentences: used only when no sentence shares a word with the query)."""
    if query_vector is None:
        return None

    def similarity(sentences: Sequence[str]) -> Sequence[float]:
        import numpy as np

        from memory.embedders import get_embedder

        vectors = np.asarray(get_embedder().embed(list(sentences)), dtype=float)
        q = np.asarray(query_vector, dtype=float)
        norms = np.linalg.norm(vectors, axis=1) * (np.linalg.norm(q) or 1.0)
        return list((vectors @ q) / np.where(norms == 0, 1.0, norms))

    return similarity


# --- in the memory tools -----------------------------------------------------------------------


def search_results(owner, query: str, hits) -> list[dict[str, Any]]:
    """Search hits for the model; a hit whose passage is longer than its snippet shows the
    passage's best sentences instead, with their offset in the message (get_message_by_id)."""
    from django.conf import settings
    from django.db import connection

    out = [h.as_result() for h in hits]
    if not settings.RESULT_COMPRESSION:
        return out
    length = settings.INDEX_SNIPPET_LENGTH * 2
    located: list[tuple[int, str, str]] = []
    for i, h in enumerate(hits):
        if h.type != "message" or len(h.passage_text or "") <= length:
            continue
        cut = compress(h.passage_text, query, max_chars=length)
        if cut.matched != "words" or not cut.excerpts:
            continue  # nothing matched a word: the passage's start (the snippet) stays
        out[i]["snippet"] = cut.text()
        out[i]["compressed"] = True
        located.append((i, h.message_id, cut.excerpts[0].text))
    if located:
        # Where the first excerpt sits in the whole message, for get_message_by_id(id, offset).
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT h.i, strpos(m.content, h.needle) - 1 FROM unnest(%s::int[], %s::text[], %s::text[])"
                " AS h(i, mid, needle) JOIN memory_message m ON m.id = h.mid AND m.owner_id = %s",
                [
                    [i for i, _, _ in located],
                    [m for _, m, _ in located],
                    [t for _, _, t in located],
                    owner.pk,
                ],
            )
            for i, offset in cursor.fetchall():
                if offset >= 0:
                    out[i]["offset"] = offset
    return out
