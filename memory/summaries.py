"""Topic summaries written by the language model, as background work.

Every topic starts with an extractive summary (its sample messages' first sentences, or its
subtopics' labels), which needs no model. When a model is configured (OPENAI_API_KEY or
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

import logging
from typing import Any

from django.conf import settings

from memory.models import Message, Topic, TopicMembership

logger = logging.getLogger(__name__)

SYSTEM = (
    "You write the summary of one topic in a person's long-term chat memory. Use only the "
    "excerpts given. Write two or three plain sentences, at most 70 words, saying what the "
    "topic is about and the concrete facts, names, numbers and decisions in it. No preamble, "
    "no bullet points, no speculation."
)
EXCERPT_CHARS = 500
PROMPT_CHARS = 6000
SUMMARY_CHARS = 1000
GIVE_UP_AFTER = 3  # failures in a row


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
            .order_by("timestamp")
            .only("timestamp", "role", "content")
        )
        lines.append(f"{topic.message_count} messages; excerpts:")
        lines += [f"- [{m.timestamp:%Y-%m-%d}] {m.role}: {_clip(m.content, EXCERPT_CHARS)}" for m in messages]
    return "\n".join(lines)[:PROMPT_CHARS]


def write_summary(client, topic: Topic) -> str:
    response = client.chat.completions.create(
        model=settings.SUMMARY_MODEL,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": topic_prompt(topic)}],
        max_tokens=200,
        temperature=0.2,
    )
    text = (response.choices[0].message.content or "").strip() if response.choices else ""
    return _clip(text, SUMMARY_CHARS)


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
        if not summary:
            failed += 1
            continue
        # Only if the topic is as the model read it (an edit or delete may have re-derived it).
        done += Topic.objects.filter(
            pk=topic.pk, updated_at=topic.updated_at, summary_source="extractive"
        ).update(summary=summary, summary_source="llm")
    remaining = Topic.objects.owned_by(owner).filter(summary_source="extractive", message_count__gt=0).count()
    return {"summarized": done, "failed": failed, "remaining": remaining}
