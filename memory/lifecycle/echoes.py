"""What the forget dialog offers to forget with a message: its echoes.

An echo repeats what is distinctive in the message: one of its rare words (rare in this
person's memory and in English: a name, a code, a made-up word, a number), a run of its words
that holds uncommon ones, or most of a line of it. Common phrases never make one.

- `copies_of`: the person's other messages that echo it. Replies (and Recollect's own
  offline-recall answers) that do are ticked by default; the person's own other messages are
  offered unticked: they are statements of their own.
- `echoes_of`: what memory made that holds one of its rare words: tool calls (arguments and
  results), conversation titles, topics, names and facts. All ticked by default; one a person
  unticks keeps the word (memory.lifecycle.forgetting.forget_message's `keep`).

Both come with the pieces of text to show, the copied ones marked, for the dialog to highlight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.postgres.search import SearchQuery
from django.db.models import Exists, OuterRef

from memory import models
from memory.lifecycle.forgetting import MAX_COPIES_LISTED, candidates, overlap_of
from memory.lifecycle.overlap import MAX_PROBES, Overlap, excerpt
from memory.models import Message, Passage, repeats_memory
from memory.text import auto_title

ECHOES_LISTED = 50  # of each kind
TICK_SHARE = 0.5  # a reply at least this much copied is ticked even without a rare word


@dataclass
class Copy:
    """A message that echoes one being forgotten, for the forget dialog."""

    message: Any
    share: float  # of its words copied
    only_a_copy: bool  # repeats memory (an offline-recall reply, pasted tool results)
    words: list[str] = field(default_factory=list)  # the rare words it repeats
    pieces: list[tuple[str, bool]] = field(default_factory=list)  # its text, copied pieces marked

    @property
    def percent(self) -> int:
        return max(1, round(self.share * 100))

    @property
    def ticked(self) -> bool:
        """Ticked by default: only a copy, or a reply that repeats a rare word or is mostly a
        copy. The person's own messages never are."""
        if self.only_a_copy:
            return True
        return self.message.role != "user" and (bool(self.words) or self.share >= TICK_SHARE)


@dataclass
class Echo:
    """A row memory made that holds a rare word of the message being forgotten."""

    key: str  # "toolcall:<id>", "title:<id>", "topic:<id>", "entity:<id>", "fact:<id>"
    kind: str  # what a person calls it
    label: str
    words: list[str]
    pieces: list[tuple[str, bool]]
    target: str = ""  # the id the explorer shows it under (a tool call, conversation, topic)

    @property
    def prefix(self) -> str:
        return self.key.split(":", 1)[0]


def copies_of(owner, message, overlap: Overlap | None = None) -> list[Copy]:
    """The owner's other messages that echo `message` or name its id, ticked ones first, then
    most copied. Candidates come from the passages' full-text index (its rare words and probe
    words), and Recollect's own texts (which have no passages) are read whole: the dialog stays
    quick on a large memory."""
    overlap = overlap or overlap_of([message], owner)
    probes = overlap.probes(limit=None) or []
    probes = sorted(probes, key=lambda w: (w not in overlap.rare, not any(c.isdigit() for c in w), -len(w)))
    words = [w for w in probes[:MAX_PROBES] if w.isalnum()]
    base = (
        Message.objects.owned_by(owner).logical().exclude(pk=message.pk)
        .only("id", "content", "metadata", "role", "timestamp", "conversation_id", "deleted")
    )
    indexed = Passage.objects.none()
    if words:
        query = SearchQuery(" | ".join(words), config="english", search_type="raw")
        indexed = Passage.objects.filter(owner_id=owner.pk, kind=Passage.Kind.MESSAGE, search_vector=query)
    own_text = base.filter(metadata__contains={"system_text": True})
    found_in = base.filter(pk__in=indexed.values("logical_message_id")) | candidates(
        own_text, ["content"], overlap, every_row=False
    )
    found = []
    for other in found_in.distinct().iterator(chunk_size=500):
        spans = overlap.spans(other.content)
        if not spans:
            continue
        words = [overlap.as_written(w) for w in overlap.rare_in(other.content)]
        found.append(Copy(other, overlap.copied_share(other.content), repeats_memory(other.metadata),
                          words, excerpt(other.content, spans)))
    found.sort(key=lambda c: (not c.ticked, not c.only_a_copy, -c.share, c.message.timestamp))
    return found[:MAX_COPIES_LISTED]


def _holding(overlap: Overlap, model, owner, fields: tuple[str, ...]):
    """Rows of `model` whose `fields` may hold a rare word (every one is checked after)."""
    return candidates(model.objects.filter(owner_id=owner.pk), fields, Overlap([], rare=overlap.rare))


def _echo(
    overlap: Overlap, key: str, kind: str, label: str, texts: list[str], target: str = ""
) -> Echo | None:
    text = next((t for t in texts if overlap.rare_in(t)), "")
    if not text:
        return None
    words = list(dict.fromkeys(overlap.as_written(w) for t in texts for w in overlap.rare_in(t)))
    return Echo(key, kind, label, words, excerpt(text, overlap.spans(text), width=140), target)


def echoes_of(owner, message, overlap: Overlap | None = None) -> list[Echo]:
    """What memory made that holds one of `message`'s rare words (not what goes with it anyway:
    its own tool calls, facts and names): tool calls, titles, topics, names, facts, up to
    ECHOES_LISTED of each."""
    overlap = overlap or overlap_of([message], owner)
    if not overlap.rare:
        return []
    echoes: list[Echo | None] = []
    words = " | ".join(w for w in sorted(overlap.rare) if w.isalnum())
    call_ids: set[str] = set()
    if words:
        hits = Passage.objects.filter(
            owner_id=owner.pk, kind=Passage.Kind.TOOL_CALL,
            search_vector=SearchQuery(words, config="english", search_type="raw"),
        ).values_list("tool_call__chunk_parent_id", "tool_call_id")[: ECHOES_LISTED * 4]
        call_ids = {parent or own for parent, own in hits}
    calls = (
        models.ToolCall.objects.owned_by(owner).filter(pk__in=call_ids, is_chunk=False)
        .exclude(message_id=message.pk).order_by("-timestamp")
    )
    for call in calls[:ECHOES_LISTED]:
        echoes.append(_echo(overlap, f"toolcall:{call.pk}", "Tool call", call.tool_name,
                            [call.arguments, call.result], call.pk))
    # A title made from it is made again anyway (forgetting._retitle).
    made_from_it = {auto_title(t).lower() for t in overlap.texts}
    titles = _holding(overlap, models.Conversation, owner, ("title",)).order_by("-updated_at")
    for conv in titles[:ECHOES_LISTED]:
        if conv.title.lower() not in made_from_it:
            echoes.append(_echo(overlap, f"title:{conv.pk}", "Conversation title", "", [conv.title], conv.pk))
    topic_fields = ("label", "keywords", "summary")
    topics = _holding(overlap, models.Topic, owner, topic_fields).order_by("level", "order")
    for topic in topics[:ECHOES_LISTED]:
        echoes.append(_echo(overlap, f"topic:{topic.pk}", "Topic", topic.label,
                            [topic.label, topic.summary, " ".join(map(str, topic.keywords or []))], topic.pk))
    # A name only it gave goes with it anyway.
    elsewhere = models.EntityMention.objects.filter(entity=OuterRef("pk")).exclude(message_id=message.pk)
    named_elsewhere = Exists(elsewhere)
    names = _holding(overlap, models.Entity, owner, ("name",)).filter(named_elsewhere)
    names = names.order_by("-mention_count")
    for entity in names[:ECHOES_LISTED]:
        echoes.append(
            _echo(overlap, f"entity:{entity.pk}", "Name", entity.kind, [entity.name], str(entity.pk))
        )
    facts = (
        _holding(overlap, models.Fact, owner, ("subject", "value", "statement", "corrected"))
        .exclude(message_id=message.pk).order_by("-valid_from")
    )
    for fact in facts[:ECHOES_LISTED]:
        echoes.append(_echo(overlap, f"fact:{fact.pk}", "Fact", fact.subject,
                            [fact.corrected or fact.statement, fact.value, fact.subject], str(fact.pk)))
    return [e for e in echoes if e is not None]


@dataclass
class Dialog:
    """Everything the forget dialog shows for a message."""

    copies: list[Copy]
    echoes: list[Echo]
    words: list[str]  # its rare words


def dialog(owner, message) -> Dialog:
    overlap = overlap_of([message], owner)
    return Dialog(copies_of(owner, message, overlap), echoes_of(owner, message, overlap),
                  sorted((overlap.as_written(w) for w in overlap.rare), key=str.lower))
