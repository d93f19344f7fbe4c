"""Facts kept up to date in the background (memory.tasks' fact_upkeep): after a message is
stored, edited or stops being a source, its facts are drawn again by the rules
(memory.knowledge.facts), and, with a model configured, the model proposes the facts of the
messages it has not read yet. What the rules find, how facts are stored and superseded and what
the model is shown stay in memory.knowledge.facts."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Iterable

from django.db import transaction
from django.db.models import Q
from django.db.models.expressions import RawSQL

from memory.knowledge import statements
from memory.knowledge.facts import (
    ABOUT,
    Found,
    Ledger,
    _day,
    _key,
    extract_messages,
    store_found,
    subject_of,
)
from memory.models import Fact, Message

logger = logging.getLogger(__name__)


def refresh_messages(owner, message_ids: Iterable[str]) -> dict[str, int]:
    """Background upkeep for these messages: an edited message's facts are drawn again (those the
    person pinned or corrected stay), a message that no longer is a source loses its facts, and
    new messages get theirs."""
    ids = [str(i) for i in message_ids]
    stale = Fact.objects.owned_by(owner).filter(message_id__in=ids, pinned=False, corrected="").filter(
        Q(message__edited=True) | Q(pk__in=Fact.objects.exclude(message__in=Message.objects.sources()))
    )
    removed = 0
    with transaction.atomic():
        for fact in stale:
            if fact.message.edited and fact.created_at > _last_edit(fact.message):
                continue  # drawn from the edited text already
            fact.delete()
            removed += 1
    done = {"facts_removed": removed, "facts": extract_messages(owner, ids)}
    return done | propose_with_model(owner, ids)


def _last_edit(message: Message) -> dt.datetime:
    times = [e.get("timestamp") for e in message.edit_history or [] if isinstance(e, dict)]
    parsed = [dt.datetime.fromisoformat(t) for t in times if isinstance(t, str)]
    return max(parsed, default=message.timestamp)


# --- With a model ---------------------------------------------------------------------------

MODEL_SYSTEM = (
    "You keep a list of lasting facts about people from their messages. Messages to read follow, "
    "each as [n] speaker (date): text. For each message that states something lasting about "
    "someone (who they are, family and the names in it, pets, home, work, education, health, diet "
    "and allergies, possessions, recurring commitments, counts, preferences, plans with dates), "
    "write one line: [n] subject | attribute | value | fact. subject: the speaker's name as given "
    "(or a person the message names); attribute: one of lives in, works at, partner, favourite "
    "<thing>, plan: <thing>, likes <thing>, or about; value: the place, employer, name, date or "
    "thing (empty for about); fact: at most 25 words, in the speaker's own first person ('I lead a "
    "team of five engineers'), or about the person named ('Tom doesn't eat mushrooms'). Never a "
    "fact: text the speaker pasted (code, documents, letters), requests or instructions to the "
    "assistant, questions, greetings, thanks, reactions to an answer, the assistant's advice. If "
    "no message states a fact, answer NONE."
)
MODEL_BATCH = 20
MODEL_READ = "facts_model"  # a message's metadata key: the model that read it for facts
MODEL_EXCERPT_CHARS = 600
_MODEL_LINE = re.compile(r"^\s*\[(\d{1,3})\]\s*([^|]{1,200})\|([^|]{1,200})\|([^|]{0,300})\|(.{3,400})$")
_EXCLUSIVE = ("lives in", "works at", "partner")


def _model_attribute(attribute: str) -> str | None:
    attribute = " ".join(attribute.lower().split())
    if attribute in (*_EXCLUSIVE, ABOUT) or attribute.startswith(("favourite ", "plan: ", "likes ")):
        return attribute[:200]
    return None


def model_prompt(messages: list[Message]) -> str:
    lines = ["Messages to read:"]
    for i, m in enumerate(messages, 1):
        text = " ".join(m.content.split())[:MODEL_EXCERPT_CHARS]
        lines.append(f"[{i}] {subject_of(m)} ({_day(m.timestamp)}): {text}")
    return "\n".join(lines)


def parse_model_facts(answer: str, messages: list[Message]) -> list[tuple[Message, str, Found]]:
    """(message, subject, found) for each well-formed line of the model's answer that names a
    message of the batch, an attribute it knows, and a subject that is the message's speaker or
    named in it (anything else is dropped: a fact must come from its source)."""
    proposed = []
    for line in (answer or "").splitlines():
        m = _MODEL_LINE.match(line.strip())
        if not m or not 1 <= int(m[1]) <= len(messages):
            continue
        message = messages[int(m[1]) - 1]
        subject, attribute = " ".join(m[2].split()), _model_attribute(m[3])
        value, statement = " ".join(m[4].split()), " ".join(m[5].split())
        speaker = subject_of(message) or ""
        if attribute is None or (attribute != ABOUT and not value):
            continue
        named = re.search(rf"\b{re.escape(subject)}\b", message.content, re.I)
        if _key(subject) != _key(speaker) and not named:
            continue
        # The same "never a fact" rules as the rules' own clauses, and grounded in the
        # speaker's own words (not in what they pasted).
        if not statements.acceptable(statement, message.content):
            continue
        found = Found(attribute, value, statement, kind="model", wording=statement)
        proposed.append((message, speaker if _key(subject) == _key(speaker) else subject, found))
    return proposed


def propose_with_model(owner, message_ids: Iterable[str], client=None) -> dict[str, int]:
    """With a model configured (memory.organizing.summaries.is_configured), ask FACTS_MODEL for the facts of
    these messages, MODEL_BATCH at a time; each proposed fact is stored with its source message
    (origin "model") and supersedes as a rule's would. The model's statements replace the rules'
    statement facts of the messages it read (not the pinned or corrected ones). A provider
    failure leaves the rules' facts as they are."""
    from django.conf import settings

    from memory.organizing import summaries

    if not summaries.is_configured():
        return {"proposed": 0}
    # A message the model has read already is read again only once edited.
    unread = Q(edited=True) | ~Q(metadata__has_key=MODEL_READ)
    messages = [
        m for m in Message.objects.owned_by(owner).logical().visible().sources()
        .filter(unread, pk__in=[str(i) for i in message_ids]).order_by("timestamp", "position")
        if subject_of(m) is not None
    ]
    client = client or summaries._client()
    stored = failed = 0
    for start in range(0, len(messages), MODEL_BATCH):
        batch = messages[start : start + MODEL_BATCH]
        try:
            response = client.chat.completions.create(
                model=settings.FACTS_MODEL,
                messages=[{"role": "system", "content": MODEL_SYSTEM},
                          {"role": "user", "content": model_prompt(batch)}],
                max_tokens=800, temperature=0,
            )
            answer = (response.choices[0].message.content or "") if response.choices else ""
        except Exception as exc:  # noqa: BLE001 - a provider problem; the rules' facts stay
            failed += 1
            logger.warning("fact proposal failed (%s): %s", type(exc).__name__, str(exc)[:200])
            continue
        proposed = parse_model_facts(answer, batch)
        with transaction.atomic():
            # Read: not asked again unless edited (even when it gave no fact). Merged in SQL, so a
            # concurrent edit's own metadata stays.
            Message.objects.filter(pk__in=[m.pk for m in batch]).update(
                metadata=RawSQL("metadata || %s::jsonb", [json.dumps({MODEL_READ: settings.FACTS_MODEL})])
            )
            read = {m.pk for m, _, _ in proposed}
            replaced = Fact.objects.filter(message_id__in=read, pinned=False, corrected="").filter(
                Q(origin="model") | Q(origin="rules", attribute=ABOUT)
            )
            for fact in replaced:
                fact.delete()
            ledger = Ledger(owner)
            for message, subject, found in proposed:
                fact = store_found(owner, message, subject, found, origin="model", ledger=ledger)
                stored += fact is not None
    return {"proposed": stored, "failed_batches": failed}
