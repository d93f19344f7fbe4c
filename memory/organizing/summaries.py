"""Topic summaries: extractive ones, and those written by the language model in the background.

Every topic starts with an extractive summary, which needs no model: a leaf's is dated and
made of its most telling sentences with who said them (`extractive`), a parent's is dated and
lists its subtopics (`parent_summary`). When a model is configured (OPENAI_API_KEY or
OPENAI_BASE_URL), the `summarize_topics` task asks SUMMARY_MODEL to rewrite the extractive
summaries: leaves from their sample and latest messages, parents from their subtopics'
summaries, deepest first so a parent reads its children's new summaries. The result is kept
with summary_source "llm".

Never on the path of a turn: topic upkeep queues the task after it has run. A topic that
changed while the model was writing (an edit or delete re-derived it) keeps its new extractive
summary, so deleted text never comes back through a summary; it is summarized again on the
next run. A provider that fails three times in a row ends the run; the extractive summaries
stay, and the next run tries again.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from memory.models import Message, Topic, TopicMembership
from memory.organizing import labels
from memory.text import sentence_spans

logger = logging.getLogger(__name__)

SYSTEM = (
    "You name and summarize one topic in a person's long-term chat memory. Use only the "
    "excerpts given, and write in their language. First line: \"Name: \" and a title of 2 to 5 "
    "words, as a person would title it (no ids, no dates). Second line: \"Summary: \" and two "
    "or three plain sentences, at most 70 words, saying when it happened (the dates given), who "
    "took part, and what happened: the concrete facts, names, numbers and decisions. No "
    "preamble, no bullet points, no speculation."
)
_NAME = re.compile(r"^\W*(?:name|title)\W*:", re.IGNORECASE)
_SUMMARY = re.compile(r"\bsummary\W*:\s*", re.IGNORECASE)
EXCERPT_CHARS = 500
PROMPT_CHARS = 6000
SUMMARY_CHARS = 1000
GIVE_UP_AFTER = 3  # failures in a row


# --- extractive summaries --------------------------------------------------------------------

SUMMARY_WORDS_PER_MESSAGE = 6
SUMMARY_WORDS_MIN, SUMMARY_WORDS_MAX = 30, 120
_USED = 0.3  # what a word still counts for once a chosen sentence holds it (SumBasic)


def period_text(start: dt.datetime | None, end: dt.datetime | None) -> str:
    """A period as a person writes it: "8 May 2023", "8–25 May 2023", "28 May – 2 June 2023"."""
    if start is None:
        return ""
    a = timezone.localtime(start) if timezone.is_aware(start) else start
    b = timezone.localtime(end) if end is not None and timezone.is_aware(end) else (end or start)
    if a.date() == b.date():
        return f"{a.day} {a:%B %Y}"
    if (a.year, a.month) == (b.year, b.month):
        return f"{a.day}–{b.day} {b:%B %Y}"
    if a.year == b.year:
        return f"{a.day} {a:%B} – {b.day} {b:%B %Y}"
    return f"{a.day} {a:%B %Y} – {b.day} {b:%B %Y}"


def month_span(start: dt.datetime | None, end: dt.datetime | None) -> str:
    """A period by its months, as a person names a stretch of their life: "May 2024",
    "May–June 2024", "December 2023 – February 2024"."""
    if start is None:
        return ""
    a = timezone.localtime(start) if timezone.is_aware(start) else start
    b = timezone.localtime(end) if end is not None and timezone.is_aware(end) else (end or start)
    if (a.year, a.month) == (b.year, b.month):
        return f"{a:%B %Y}"
    if a.year == b.year:
        return f"{a:%B}–{b:%B %Y}"
    return f"{a:%B %Y} – {b:%B %Y}"


def speaker_name(role: str, speaker: str | None) -> str:
    """Who said a message: the speaker an import recorded, else "You" or "Assistant"."""
    if isinstance(speaker, str) and speaker.strip():
        return " ".join(speaker.split())[:60]
    return {"user": "You", "assistant": "Assistant"}.get(role, role.title())


@dataclass
class Said:
    timestamp: dt.datetime
    who: str
    text: str
    closeness: float = 0.0  # the message's cosine to its topic's centroid


@dataclass
class _Sentence:
    order: tuple[int, int]
    who: str
    text: str
    length: int
    content: set[str]
    boost: float


def extractive(said: Sequence[Said], weights: dict[str, float], *, language: str = "en",
               budget: int | None = None) -> str:
    """What happened in a run of messages, dated: the sentences that hold most of the words
    that set this topic apart (`weights`, e.g. tf-idf against the owner's other topics), chosen
    one at a time (a word counts less once a chosen sentence holds it, so they do not repeat
    each other), up to `budget` words, in the order they were said, each after who said it:
    "8 May 2023. Caroline: I went to a LGBTQ support group yesterday. Melanie: …"."""
    if not said:
        return ""
    budget = budget or min(SUMMARY_WORDS_MAX, max(SUMMARY_WORDS_MIN, SUMMARY_WORDS_PER_MESSAGE * len(said)))
    stop = labels.STOP_WORDS.get(language, labels.STOP_WORDS["en"])
    top = max(weights.values(), default=0.0) or 1.0
    weight = {w: v / top for w, v in weights.items()}
    mean = sum(s.closeness for s in said) / len(said)
    spread = math.sqrt(sum((s.closeness - mean) ** 2 for s in said) / len(said)) or 1.0
    pool: list[_Sentence] = []
    for i, s in enumerate(said):
        z = (s.closeness - mean) / spread if s.closeness else 0.0
        for j, (a, b) in enumerate(sentence_spans(s.text[:4000])):
            text = " ".join(s.text[a:b].split())
            tokens = labels.TOKEN.findall(text)
            content = {labels.word_key(t) for t in tokens if labels.content_word(t, stop)}
            if len(tokens) < 4 or not content:
                continue
            # A question asks, a statement tells: what happened is mostly told.
            boost = (0.7 if text.endswith("?") else 1.0) * (1 + 0.1 * max(-2.0, min(2.0, z)))
            pool.append(_Sentence((i, j), s.who, text, len(tokens), content, boost))

    def score(x: _Sentence) -> float:
        return sum(weight.get(w, 0.0) for w in x.content) / math.sqrt(x.length) * x.boost

    chosen: list[_Sentence] = []
    used = 0
    while pool and used < budget:
        best = max(pool, key=score)
        if score(best) <= 0 and chosen:
            break
        pool.remove(best)
        if used and used + best.length > budget * 1.25:
            continue  # too long for what is left; a shorter one may fit
        chosen.append(best)
        used += best.length
        for w in best.content:
            weight[w] = weight.get(w, 0.0) * _USED
    if not chosen:
        first = said[0]
        return f"{period_text(first.timestamp, said[-1].timestamp)}. {first.who}: {_clip(first.text, 200)}"
    chosen.sort(key=lambda x: x.order)
    parts: list[str] = []
    who = None
    for x in chosen:
        parts.append(x.text if x.who == who else f"{x.who}: {x.text}")
        who = x.who
    text = f"{period_text(said[0].timestamp, said[-1].timestamp)}. " + " ".join(parts)
    return _clip(text, SUMMARY_CHARS)


def parent_summary(topic: Topic, kids: Sequence[Topic]) -> str:
    """A parent topic, dated: its subtopics in time order, each with when it happened."""
    shown = [f"{k.label} ({_day(k.period_start)})" if k.period_start else k.label for k in kids[:8]]
    more = f"; and {labels.count_of(len(kids) - 8, 'more subtopic')}" if len(kids) > 8 else ""
    head = period_text(topic.period_start, topic.period_end)
    return _clip(f"{head + '. ' if head else ''}{labels.count_of(len(kids), 'subtopic')}: "
                 + "; ".join(shown) + more + ".", SUMMARY_CHARS)


def _day(when: dt.datetime) -> str:
    local = timezone.localtime(when) if timezone.is_aware(when) else when
    return f"{local.day} {local:%B %Y}"


# --- model-written summaries ------------------------------------------------------------------


def is_configured() -> bool:
    """An OpenAI-compatible model is configured (the chat's and the summaries' alike)."""
    return bool(settings.OPENAI_API_KEY or settings.OPENAI_BASE_URL)


def _client():
    import openai

    return openai.OpenAI(
        base_url=settings.OPENAI_BASE_URL or None,
        api_key=settings.OPENAI_API_KEY or "not-needed",
        timeout=settings.LLM_TIMEOUT_SECONDS,
        max_retries=settings.LLM_MAX_RETRIES,
    )


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def topic_prompt(topic: Topic) -> str:
    """What the model reads for one topic: a leaf's messages, or a parent's subtopics."""
    lines = [f"Topic keywords: {', '.join(topic.keywords[:8]) or topic.label}"]
    if topic.period_start:
        lines.append(f"Period: {topic.period_start:%Y-%m-%d} to {topic.period_end:%Y-%m-%d}")
    kids = list(topic.children.order_by("order")[:12])
    if kids:
        lines.append(f"It has {topic.children.count()} subtopics:")
        lines += [f"- {k.label}: {_clip(k.summary, EXCERPT_CHARS)}" for k in kids]
    else:
        latest = list(
            TopicMembership.objects.filter(topic=topic, message__deleted=False)
            .order_by("-message__timestamp")
            .values_list("message_id", flat=True)[:5]
        )
        ids = list(dict.fromkeys([*topic.sample_message_ids, *latest]))
        messages = (
            Message.objects.filter(pk__in=ids, owner_id=topic.owner_id, deleted=False)
            .sources()
            .order_by("timestamp")
            .only("timestamp", "role", "content", "metadata")
        )
        lines.append(f"{labels.count_of(topic.message_count, 'message')}; excerpts:")
        lines += [
            f"- [{m.timestamp:%Y-%m-%d}] {speaker_name(m.role, (m.metadata or {}).get('speaker'))}: "
            f"{_clip(m.content, EXCERPT_CHARS)}"
            for m in messages
        ]
    return "\n".join(lines)[:PROMPT_CHARS]


def write_summary(client, topic: Topic) -> str:
    response = client.chat.completions.create(
        model=settings.SUMMARY_MODEL,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": topic_prompt(topic)}],
        max_tokens=200,
        temperature=0.2,
    )
    # Whole: its first line may be the topic's name (see `named`).
    text = (response.choices[0].message.content or "") if response.choices else ""
    return text.strip()[: SUMMARY_CHARS * 2]


def named(text: str) -> tuple[str | None, str]:
    """(name, summary) of a model's answer: "Name: …" then "Summary: …"; an answer without a
    name is all summary."""
    text = text.strip()
    name = _NAME.match(text)
    if name is None:
        return None, text
    body = text[name.end():]
    marker = _SUMMARY.search(body)
    if marker is None:  # a name line, then the summary
        first, _, rest = body.strip().partition("\n")
        return first.strip(" \"'*.“”"), rest.strip()
    return body[: marker.start()].strip(" \"'*.“”\n"), body[marker.end():].strip()


def acceptable_name(name: str | None, siblings: Sequence[str]) -> str | None:
    """The model's name for a topic, if it is one a person would write: 2-5 words, no id or
    word of Recollect's own, not a sibling's."""
    if not name:
        return None
    words = labels.TOKEN.findall(name)
    if not 2 <= len(words) <= 5 or len(name) > 80:
        return None
    if any(labels.is_id_like(w) or w.lower() in labels.SYSTEM_WORDS for w in words):
        return None
    if any(labels.same_label(name, s) for s in siblings):
        return None
    return labels.capitalised(name)


def summarize_topics(owner, limit: int | None = None) -> dict[str, Any]:
    """Rewrite up to `limit` extractive summaries with the model. Returns counts."""
    if not is_configured():
        return {"summarized": 0, "skipped": "no model configured"}
    limit = settings.SUMMARY_TOPICS_PER_RUN if limit is None else limit
    todo = list(
        Topic.objects.owned_by(owner)
        .filter(summary_source="extractive", message_count__gt=0)
        .order_by("-level", "-message_count")[:limit]
    )
    client = _client()
    done = failed = in_a_row = 0
    for topic in todo:
        try:
            summary = write_summary(client, topic)
        except Exception as exc:  # noqa: BLE001 - a provider problem; the extractive one stays
            failed += 1
            in_a_row += 1
            logger.warning("topic summary failed (%s): %s", type(exc).__name__, str(exc)[:200])
            if in_a_row >= GIVE_UP_AFTER:
                break
            continue
        in_a_row = 0
        name, summary = named(summary)
        if not summary:
            failed += 1
            continue
        siblings = list(
            Topic.objects.filter(owner_id=topic.owner_id, parent_id=topic.parent_id)
            .exclude(pk=topic.pk).values_list("label", flat=True)
        )
        label = acceptable_name(name, siblings) or topic.label
        # Only if the topic is as the model read it (an edit or delete may have re-derived it).
        done += Topic.objects.filter(
            pk=topic.pk, updated_at=topic.updated_at, summary_source="extractive"
        ).update(summary=_clip(summary, SUMMARY_CHARS), summary_source="llm", label=label[:200])
    remaining = Topic.objects.owned_by(owner).filter(summary_source="extractive", message_count__gt=0).count()
    return {"summarized": done, "failed": failed, "remaining": remaining}
