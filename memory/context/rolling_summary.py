"""The rolling summary of a conversation beyond its recent window.

Background upkeep (`update`, run by the topic-upkeep task after a turn, never on the turn's
path) walks the conversation's branch ending at its newest message and digests the messages
older than the recent window, CONVERSATION_SUMMARY_EVERY turns at a time, into a chain of
blocks: [digest 1] [digest 2] ... then the recent messages verbatim. Only the unsummarized
stretch is digested on each run; when the chain passes CONVERSATION_SUMMARY_MAX_TOKENS its two
oldest blocks are merged into one. A digest is extractive (each message's best sentences)
without a model, and written by SUMMARY_MODEL when one is configured (extractive again if the
provider fails).

An edit, delete, restore or forget drops the blocks from the one covering that message onwards
in the same transaction (`invalidate`, on storage's memory_changed signal), so removed words never reach a
prompt through the summary; the next upkeep writes them again.

`for_plan` is what the index builder shows: the blocks that lie on the turn's branch before its
recent window, saying which stretch they cover, and the messages between the summary and the
window that are not digested yet.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from memory.models import ConversationSummary, Message
from memory.organizing import summaries
from memory.storage import threads
from memory.text import sentence_spans
from memory.tokens import count_tokens

logger = logging.getLogger(__name__)

SYSTEM = (
    "You condense a stretch of a chat between a person and an assistant into a short digest "
    "that will stand in for it later. Use only the text given. Keep concrete facts, names, "
    "numbers, decisions and open questions; say who said what when it matters. At most {words} "
    "words of plain prose, no preamble, no bullet points."
)
PROMPT = "Conversation excerpt to condense"  # the user prompt starts so (tests match on it)
MESSAGE_CHARS = 1500  # of each message the model reads
GAP_LINES = 10  # undigested messages listed by id between the summary and the window


# --- invalidation (in the writing transaction) ---------------------------------------------------


def invalidate(conversation_id: str, position: int) -> None:
    """Drop the blocks covering `position` and every later one (called inside the transaction
    that edits, deletes, restores or forgets the message at that position)."""
    summary = (
        ConversationSummary.objects.select_for_update().filter(conversation_id=conversation_id).first()
    )
    if summary is None:
        return
    # Saved even when no block changes: an upkeep writing digests meanwhile sees the row moved
    # on and does not save what it read before this change.
    summary.blocks = [b for b in summary.blocks if b["last_position"] < position]
    summary.save(update_fields=["blocks", "updated_at"])


def invalidate_on_change(sender, *, conversation_id: str, position: int, **kwargs) -> None:
    """memory.signals.memory_changed's receiver (connected by memory.apps)."""
    invalidate(conversation_id, position)


# --- upkeep (background) -------------------------------------------------------------------------


def _branch(owner, conversation_id: str, leaf_id: str | None) -> list[Message]:
    """The visible messages of the thread through `leaf_id` (default: the conversation's
    newest message) down to its newest reply, oldest first; text that only repeats memory
    (offline recall, replies pasting tool results) left out."""
    if leaf_id is None:
        leaf_id = (
            Message.objects.visible_to(owner).logical().filter(conversation_id=conversation_id)
            .order_by("-position").values_list("pk", flat=True).first()
        )
    if leaf_id is None:
        return []
    # From the newest message down the thread: upkeep that runs late, or out of order, still
    # summarizes the whole branch.
    ids = threads.ancestor_ids(threads.newest_leaf_id(conversation_id, leaf_id))
    rows = (
        Message.objects.visible_to(owner).logical().filter(conversation_id=conversation_id, pk__in=ids)
        .only("id", "role", "content", "timestamp", "position", "metadata")
        .order_by("position")
    )
    return [m for m in rows if m.is_source]


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _fit(lines: list[str], tokens: int) -> str:
    """Lines joined, each shortened in turn until the whole fits `tokens`."""
    limit = max((len(line) for line in lines), default=0)
    text = "\n".join(lines)
    while lines and count_tokens(text) > tokens and limit > 40:
        limit = int(limit * 0.8)
        text = "\n".join(_clip(line, limit) for line in lines)
    return text


def extractive_digest(messages: list[Message], tokens: int) -> str:
    """Each message's leading sentences, shortened evenly until the digest fits `tokens`."""
    lines = []
    for m in messages:
        spans = sentence_spans(m.content)
        first = " ".join(m.content[s:e] for s, e in spans[:2]) if spans else m.content
        lines.append(f"{m.role}: {_clip(first, 300)}")
    return _fit(lines, tokens)


def _model_text(client, prompt: str, words: int) -> str:
    response = client.chat.completions.create(
        model=settings.SUMMARY_MODEL,
        messages=[
            {"role": "system", "content": SYSTEM.format(words=words)},
            {"role": "user", "content": prompt},
        ],
        max_tokens=max(64, words * 2),
        temperature=0.2,
    )
    text = (response.choices[0].message.content or "").strip() if response.choices else ""
    return _clip(text, words * 12)


def _digest(client, messages: list[Message], tokens: int) -> tuple[str, str]:
    """(text, source) of one block: by the model when there is a client, else extractive."""
    if client is not None:
        lines = [f"{PROMPT} ({len(messages)} messages):"] + [
            f"[{m.timestamp:%Y-%m-%d %H:%M}] {m.role}: {_clip(m.content, MESSAGE_CHARS)}" for m in messages
        ]
        try:
            text = _model_text(client, "\n".join(lines), words=int(tokens * 0.7))
            if text:
                return _fit([text], tokens), "llm"
        except Exception as exc:  # noqa: BLE001 - a provider problem: the extractive digest stands in
            logger.warning("conversation digest failed (%s): %s", type(exc).__name__, str(exc)[:200])
    return extractive_digest(messages, tokens), "extractive"


def _merge(client, first: dict, second: dict, tokens: int) -> dict:
    text, source = "", "extractive"
    if client is not None:
        prompt = f"{PROMPT} (two consecutive digests):\n{first['text']}\n{second['text']}"
        try:
            text, source = _fit([_model_text(client, prompt, words=int(tokens * 0.7))], tokens), "llm"
        except Exception as exc:  # noqa: BLE001
            logger.warning("conversation digest merge failed (%s)", type(exc).__name__)
            text = ""
    if not text:
        text, source = _fit(first["text"].splitlines() + second["text"].splitlines(), tokens), "extractive"
    return {
        "first_id": first["first_id"],
        "last_id": second["last_id"],
        "first_position": first["first_position"],
        "last_position": second["last_position"],
        "count": first["count"] + second["count"],
        "text": text,
        "source": source,
    }


def block_size() -> int:
    return max(1, settings.CONVERSATION_SUMMARY_EVERY) * 2  # turns of two messages


def update(owner, conversation_id: str, leaf_id: str | None = None) -> dict[str, Any]:
    """Bring the conversation's summary up to date with its branch ending at `leaf_id`:
    digest each full block of messages older than the recent window that is not digested yet."""
    if not settings.CONVERSATION_SUMMARY:
        return {"blocks": 0, "skipped": "CONVERSATION_SUMMARY is off"}
    # The row exists before anything is read, so an edit or delete from here on marks it
    # (`invalidate` saves it) and what was read before is not saved over it.
    try:
        summary, _ = ConversationSummary.objects.get_or_create(
            conversation_id=conversation_id, defaults={"owner_id": owner.pk}
        )
    except IntegrityError:  # the conversation is gone
        return {"blocks": 0, "skipped": "conversation gone"}
    if summary.owner_id != owner.pk:
        return {"blocks": 0, "skipped": "not this owner's"}
    branch = _branch(owner, conversation_id, leaf_id)
    older = branch[: max(0, len(branch) - settings.INDEX_RECENT_WINDOW)]
    blocks = list(summary.blocks)
    # Blocks off this branch (another branch was continued) are written again.
    on_branch = {m.pk for m in branch}
    valid = 0
    for b in blocks:
        if b["first_id"] not in on_branch or b["last_id"] not in on_branch:
            break
        valid += 1
    blocks = blocks[:valid]
    done_until = blocks[-1]["last_position"] if blocks else -1
    todo = [m for m in older if m.position > done_until]
    size = block_size()
    if len(todo) < size and valid == len(summary.blocks):
        return {"blocks": len(blocks), "added": 0}
    client = summaries._client() if summaries.is_configured() else None
    tokens = settings.CONVERSATION_SUMMARY_BLOCK_TOKENS
    added = merged = 0
    while len(todo) >= size:
        chunk, todo = todo[:size], todo[size:]
        text, source = _digest(client, chunk, tokens)
        blocks.append(
            {
                "first_id": chunk[0].pk,
                "last_id": chunk[-1].pk,
                "first_position": chunk[0].position,
                "last_position": chunk[-1].position,
                "count": len(chunk),
                "text": text,
                "source": source,
            }
        )
        added += 1
    cap = settings.CONVERSATION_SUMMARY_MAX_TOKENS
    while len(blocks) > 1 and sum(count_tokens(b["text"]) for b in blocks) > cap:
        blocks[:2] = [_merge(client, blocks[0], blocks[1], tokens)]
        merged += 1
    with transaction.atomic():
        current = ConversationSummary.objects.select_for_update().filter(pk=summary.pk).first()
        # An edit, delete or forget while the digests were written: what was read may hold
        # words that are gone, so nothing is saved (the upkeep it queued writes them again).
        if current is None or current.updated_at != summary.updated_at:
            return {"added": 0, "skipped": "changed meanwhile"}
        current.blocks = blocks
        current.save(update_fields=["blocks", "updated_at"])
    return {"blocks": len(blocks), "added": added, "merged": merged}


def update_for_messages(owner, message_ids: list[str]) -> dict[str, Any]:
    """Upkeep after a turn, an edit or a delete: the summaries of these messages' conversations,
    each along the branch ending at the newest of these messages (a turn's reply)."""
    if not settings.CONVERSATION_SUMMARY:
        return {"conversations": 0}
    rows = (
        Message.objects.owned_by(owner).logical().filter(pk__in=message_ids)
        .values_list("conversation_id", "pk", "position", "deleted", "edited")
    )
    leaves: dict[str, tuple[int, str | None]] = {}
    for conversation_id, pk, position, deleted, edited in rows:
        # A new message is the leaf of its branch; an edited or deleted one says nothing of it.
        leaf = None if (deleted or edited) else pk
        best = leaves.get(conversation_id)
        if best is None or (leaf is not None and position > best[0]):
            leaves[conversation_id] = (position, leaf)
    done = {cid: update(owner, cid, leaf) for cid, (_, leaf) in leaves.items()}
    return {"conversations": len(done), "blocks_added": sum(d.get("added", 0) for d in done.values())}


# --- the plan's history zone ---------------------------------------------------------------------


def for_plan(
    owner,
    conversation,
    *,
    window_start: int | None,
    active_message_ids: list[str] | None,
    allowance: int,
) -> tuple[str, dict[str, Any]]:
    """The summary text for a turn whose recent window starts at position `window_start`
    (None: no window, everything before the turn counts as older), and what it covers. Empty
    when the conversation has nothing before its window or no summary yet."""
    if not settings.CONVERSATION_SUMMARY or conversation is None or allowance <= 0:
        return "", {}
    # Written out: read on every turn, and the ORM's building of it cost more than running it.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT blocks FROM memory_conversationsummary WHERE conversation_id = %s AND owner_id = %s",
            [conversation.pk, owner.pk],
        )
        row = cursor.fetchone()
    # jsonb reaches a cursor as text (Django's adapters), as JSONField would read it.
    stored = json.loads(row[0]) if row is not None and row[0] is not None else None
    if not stored:
        return "", {}
    active = set(active_message_ids) if active_message_ids is not None else None
    blocks = []
    for b in stored:
        if window_start is not None and b["last_position"] >= window_start:
            break
        if active is not None and (b["first_id"] not in active or b["last_id"] not in active):
            break
        blocks.append(b)
    if not blocks:
        return "", {}
    # The branch's messages after the summary and before the window: not digested yet.
    between = Message.objects.visible_to(owner).logical().filter(
        conversation_id=conversation.pk, position__gt=blocks[-1]["last_position"]
    )
    if window_start is not None:
        between = between.filter(position__lt=window_start)
    if active is not None:
        between = between.filter(pk__in=list(active))
    gap = list(between.order_by("position").only("id", "role", "snippet", "content")[: GAP_LINES + 1])
    covered = sum(b["count"] for b in blocks)
    lines = [
        f"Conversation Summary: the first {covered} messages of this conversation "
        f"({blocks[0]['first_id']} to {blocks[-1]['last_id']}), before the recent messages, "
        "digested (read any of them with get_message_by_id):"
    ]
    used = count_tokens(lines[0])
    shown = 0
    for b in reversed(blocks):  # the newest digests matter most when the allowance is short
        cost = count_tokens(b["text"]) + 2
        if used + cost > allowance:
            break
        used += cost
        shown += 1
    if shown == 0:
        return "", {}
    skipped = blocks[: len(blocks) - shown]
    if skipped:
        lines.append(
            f"(the {sum(b['count'] for b in skipped)} messages before {blocks[len(skipped)]['first_id']} "
            "are left out here: search or get_conversation_thread finds them)"
        )
    for b in blocks[len(skipped):]:
        lines.append(f"[{b['first_id']}..{b['last_id']}, {b['count']} messages] {b['text']}")
    if gap:
        more = " (and more)" if len(gap) > GAP_LINES else ""
        header = f"Not digested yet, between the summary and the recent messages{more}:"
        if used + count_tokens(header) <= allowance:
            lines.append(header)
            used += count_tokens(header)
            for m in gap[:GAP_LINES]:
                line = f"- {m.pk} {m.role}: {_clip(m.snippet or m.content, settings.INDEX_SNIPPET_LENGTH)}"
                cost = count_tokens(line) + 1
                if used + cost > allowance:
                    break
                lines.append(line)
                used += cost
    covers = {
        "first_id": blocks[0]["first_id"],
        "last_id": blocks[-1]["last_id"],
        "messages": covered,
        "blocks": len(blocks),
        "blocks_shown": shown,
        "sources": sorted({b["source"] for b in blocks}),
        "undigested": len(gap),
    }
    return "\n".join(lines), covers
