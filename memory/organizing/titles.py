"""A conversation named by the model after its first exchange (background work, never on a
turn's path), unless the person named it meanwhile. Offline, or when the model's answer is not a
title a person would write, it keeps the name it got from its first message
(memory.text.auto_title: cut at a word)."""

from __future__ import annotations

import logging
import re

from django.conf import settings

from memory import signals
from memory.models import Conversation, Message
from memory.organizing import summaries
from memory.text import TITLE_CHARS, auto_title

logger = logging.getLogger(__name__)

SYSTEM = (
    "You name chat conversations for a list of chats. Answer with a title of two to six words "
    "that says what the conversation below is about, as a person would write it: no quotes, "
    "no final full stop, nothing else."
)
EXCERPT_CHARS = 1500
MAX_WORDS = 8
_PREFIX = re.compile(r"^\s*(title|conversation title)\s*[:\-–]\s*", re.IGNORECASE)
_WORD = re.compile(r"\w+")


def clean_title(answer: str) -> str:
    """The title in a model's answer (its first line, without quotes, markup or a "Title:"
    prefix), or "" when it is no title: empty, longer than MAX_WORDS words."""
    line = next((part for part in (answer or "").splitlines() if part.strip()), "")
    line = _PREFIX.sub("", line)
    line = " ".join(line.strip().strip("\"'“”‘’*#_`").split()).rstrip(" .;:")
    words = _WORD.findall(line)
    if not words or len(words) > MAX_WORDS:
        return ""
    return auto_title(line)[:TITLE_CHARS]


def first_exchange(conversation: Conversation) -> tuple[Message | None, Message | None]:
    """The conversation's first user message and the first reply to it (either may be None)."""
    messages = Message.objects.filter(owner_id=conversation.owner_id, conversation=conversation).logical()
    first = messages.filter(parent=None, role="user", deleted=False).order_by("position").first()
    if first is None:
        return None, None
    reply = messages.filter(parent=first, role="assistant", deleted=False).order_by("position").first()
    return first, reply


def title_conversation(owner, conversation_id: str) -> str | None:
    """Ask the model to name the conversation; the new title, or None (no model, a temporary
    chat, a name the person gave it, a provider problem, no usable answer)."""
    if not summaries.is_configured():
        return None
    conversation = (
        Conversation.objects.owned_by(owner).filter(pk=conversation_id, temporary=False).first()
    )
    if conversation is None:
        return None
    first, reply = first_exchange(conversation)
    if first is None or reply is None or conversation.title != auto_title(first.content):
        return None  # named by the person (or by the model already)
    said = f"User: {first.content[:EXCERPT_CHARS]}\n\nAssistant: {reply.content[:EXCERPT_CHARS]}"
    try:
        response = summaries._client().chat.completions.create(
            model=settings.SUMMARY_MODEL,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": said}],
            max_tokens=24,
            temperature=0.2,
        )
    except Exception as exc:  # noqa: BLE001 - a provider problem: the first message's name stays
        logger.warning("conversation title failed (%s): %s", type(exc).__name__, str(exc)[:200])
        return None
    answer = (response.choices[0].message.content or "") if response.choices else ""
    title = clean_title(answer)
    if not title or title == conversation.title:
        return None
    # Only over the name it had: a rename meanwhile wins.
    updated = Conversation.objects.filter(pk=conversation.pk, title=conversation.title)
    if not updated.update(title=title, titled_by_model=True):
        return None
    signals.conversation_titled.send(
        sender=Conversation, owner_id=owner.pk, conversation_id=conversation.pk, title=title
    )
    return title
