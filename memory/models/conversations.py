"""Conversations and what they hold: messages, tool calls and the passages search embeds.

Logical messages and tool calls hold their whole text. A text above the chunk threshold also
gets chunk rows (is_chunk, chunk_index, chunk_parent: CHUNK_OF). What is embedded and searched
is a Passage: a window of a message, chunk or tool call that fits the embedder's window, so
the end of a 20,000-token message is as findable as its start.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import ExpressionWrapper, F, Q, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Cast
from django.utils import timezone
from pgvector.django import HalfVectorField, HnswIndex, VectorField
from ulid import ULID

from memory.text import TITLE_CHARS, auto_title


def new_ulid() -> str:
    return str(ULID())


def is_system_text(metadata: dict | None) -> bool:
    """Text Recollect wrote (an offline-recall answer, a notice): shown in the chat, but never
    searched, clustered into topics or mined for entities, so its boilerplate and the ids it
    quotes do not become memory."""
    return bool((metadata or {}).get("system_text"))


# A reply that mostly pastes what its memory tools returned is flagged so in its metadata
# (MessageQuerySet.flag_quotes): it repeats memory, it adds nothing to it.
QUOTES_MEMORY = "quotes_memory"
QUOTED_SHARE = 0.5  # of a reply's 5-word runs found in its tool results
_SHINGLE = 5
_SHINGLE_WORD = re.compile(r"\w+")


# A message of a conversation memory does not keep (a temporary chat, or one started while
# "Remember new chats" was off): it is the conversation's history, never a source of topics,
# entities, facts or summaries, and no other conversation reads it (MessageQuerySet.sources,
# remembered_or_in).
NOT_REMEMBERED = "not_remembered"


def is_remembered(metadata: dict | None) -> bool:
    return not (metadata or {}).get(NOT_REMEMBERED)


def repeats_memory(metadata: dict | None) -> bool:
    """Text that only repeats memory: Recollect's own (an offline-recall answer; older ones carry
    only their mode) or a reply flagged as quoting its tool results. It is kept, shown and
    searched, but it is not a source of topics, entities, facts or summaries: memory must not
    feed on itself. MessageQuerySet.sources() is the same test in SQL."""
    m = metadata or {}
    return bool(m.get("system_text") or m.get("mode") == "offline_recall" or m.get(QUOTES_MEMORY))


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = [w.lower() for w in _SHINGLE_WORD.findall(text)]
    return {tuple(words[i : i + _SHINGLE]) for i in range(max(0, len(words) - _SHINGLE + 1))}


def quoted_share(text: str, quoted: list[str]) -> float:
    """The share of `text`'s 5-word runs that occur in one of the `quoted` texts (0 for a text
    of fewer than 5 words)."""
    own = _shingles(text)
    if not own:
        return 0.0
    found: set[tuple[str, ...]] = set()
    for source in quoted:
        found |= own & _shingles(source)
    return len(found) / len(own)


class Role(models.TextChoices):
    USER = "user", "user"
    ASSISTANT = "assistant", "assistant"
    SYSTEM = "system", "system"


class OwnedQuerySet(models.QuerySet):
    def owned_by(self, user) -> OwnedQuerySet:
        if user is None or not getattr(user, "pk", None):
            return self.none()
        return self.filter(owner_id=user.pk)


class ConversationQuerySet(OwnedQuerySet):
    def listed(self) -> ConversationQuerySet:
        """The conversations a person's list shows: not archived, not temporary."""
        return self.filter(archived_at__isnull=True, temporary=False)

    def archived(self) -> ConversationQuerySet:
        return self.filter(archived_at__isnull=False, temporary=False)

    def private(self) -> ConversationQuerySet:
        """Conversations memory does not keep: temporary ones, and those started while
        "Remember new chats" was off."""
        return self.filter(remembered=False)


class Conversation(models.Model):
    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Next free position; taken with an atomic UPDATE ... RETURNING so two turns written at
    # the same moment never share a position (two writers racing).
    next_position = models.BigIntegerField(default=0)
    # False: its messages are chat history only (NOT_REMEMBERED): no topic, entity, fact or
    # summary is drawn from them and no other conversation finds them. Set when it is started,
    # from the person's "Remember new chats" (memory.models.Preferences), and for a temporary chat.
    remembered = models.BooleanField(default=True, db_default=True)
    # Neither reads memory nor adds to it; deleted with everything in it when the person
    # leaves it, or TEMPORARY_CHAT_HOURS after it was started (memory.lifecycle.erasing).
    temporary = models.BooleanField(default=False, db_default=False)
    # Out of the conversation list (its own Archived view), still in memory.
    archived_at = models.DateTimeField(null=True, blank=True)
    # Its title was written by the model from its first exchange (memory.organizing.titles):
    # forgetting a message of that exchange names it again from what stays.
    titled_by_model = models.BooleanField(default=False, db_default=False)
    # The model the person picked for it (one of CHAT_MODELS); empty: CHAT_MODEL.
    model = models.CharField(max_length=200, blank=True, default="", db_default="")

    objects = ConversationQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["owner", "-updated_at"]),
            # The few conversations memory leaves out, read by every search (a tiny index).
            models.Index(fields=["owner"], condition=Q(remembered=False), name="conversation_private"),
            models.Index(fields=["created_at"], condition=Q(temporary=True), name="conversation_temporary"),
        ]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.id}"

    def retitle_after_edit(self, message: Message, previous: str) -> str | None:
        """Named after its first message (`message`, whose text was `previous` before an edit),
        the conversation is renamed after the new text; a title the person wrote stays. The new
        title, or None."""
        if message.role != "user" or message.parent_id is not None:
            return None
        new = auto_title(message.content)
        # The name it was given: now, or before titles were cut at a word.
        given = {auto_title(previous), " ".join(previous[:200].split())[:TITLE_CHARS]} - {new}
        if not given:
            return None
        if not Conversation.objects.filter(pk=self.pk, title__in=given).update(title=new):
            return None
        self.title = new
        return new


class MessageQuerySet(OwnedQuerySet):
    def visible(self) -> MessageQuerySet:
        return self.filter(deleted=False)

    def logical(self) -> MessageQuerySet:
        """Whole messages (not their chunks)."""
        return self.filter(is_chunk=False)

    def visible_to(self, user) -> MessageQuerySet:
        return self.owned_by(user).visible()

    def pinned(self) -> MessageQuerySet:
        """Messages the person marked important: they always reach the memory index."""
        return self.filter(pinned=True)

    def sources(self) -> MessageQuerySet:
        """Messages memory may learn from: not those that only repeat it (repeats_memory), so
        topics, labels, entities, facts and summaries are drawn from what people and models
        said, never from Recollect quoting memory back; nor those of a conversation memory
        does not keep (NOT_REMEMBERED)."""
        return self.exclude(
            Q(metadata__contains={"system_text": True})
            | Q(metadata__contains={"mode": "offline_recall"})
            | Q(metadata__contains={QUOTES_MEMORY: True})
            | Q(metadata__contains={NOT_REMEMBERED: True})
        )

    def remembered_or_in(self, conversation_id: str | None) -> MessageQuerySet:
        """What one conversation may read of memory: every remembered message, and its own."""
        mine = Q(conversation_id=conversation_id) if conversation_id else Q(pk__in=[])
        return self.filter(~Q(metadata__contains={NOT_REMEMBERED: True}) | mine)

    def flag_quotes(self) -> list[str]:
        """Flag the assistant messages here that mostly paste their tool calls' results
        (QUOTED_SHARE of their 5-word runs): they repeat memory. Returns the ids flagged now."""
        replies = list(
            self.filter(role=Role.ASSISTANT, is_chunk=False, tool_calls__isnull=False)
            .sources()
            .distinct()
            .only("id", "content", "metadata")
        )
        if not replies:
            return []
        results: dict[str, list[str]] = {}
        calls = ToolCall.objects.filter(message__in=[m.pk for m in replies], is_chunk=False)
        for message_id, result in calls.values_list("message_id", "result"):
            results.setdefault(message_id, []).append(result[:200_000])
        flagged = [m.pk for m in replies if quoted_share(m.content, results.get(m.pk, [])) >= QUOTED_SHARE]
        # Merged into the stored metadata in SQL: a key another writer set meanwhile stays.
        Message.objects.filter(pk__in=flagged).update(
            metadata=CombinedExpression(F("metadata"), "||", Value({QUOTES_MEMORY: True}, models.JSONField()))
        )
        return flagged


class Message(models.Model):
    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField()
    snippet = models.CharField(max_length=1000, blank=True, default="")
    timestamp = models.DateTimeField(db_index=True)
    # REPLIES_TO: messages form a tree, so edits and regenerations can branch.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replies"
    )
    token_count = models.IntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True)
    external_id = models.CharField(max_length=200, null=True, blank=True)
    edited = models.BooleanField(default=False)
    deleted = models.BooleanField(default=False)
    deleted_at = models.DateTimeField(null=True, blank=True)
    edit_history = models.JSONField(default=list, blank=True)
    is_chunk = models.BooleanField(default=False)
    chunk_index = models.IntegerField(null=True, blank=True)
    chunk_parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="chunks"
    )
    # Order within the conversation; chunks share their parent's position.
    position = models.BigIntegerField()
    # Marked important by the person: always shown in the memory index (unless deleted).
    pinned = models.BooleanField(default=False, db_default=False)
    pinned_at = models.DateTimeField(null=True, blank=True)

    objects = MessageQuerySet.as_manager()

    class Meta:
        ordering = ["conversation", "position", "chunk_index"]
        indexes = [
            models.Index(fields=["owner", "timestamp"], name="message_owner_ts"),
            models.Index(fields=["role"], name="message_role"),
            models.Index(fields=["chunk_parent"], name="message_chunk_parent"),
            models.Index(fields=["conversation", "position"], name="message_conv_pos"),
            models.Index(fields=["owner", "deleted", "is_chunk"], name="message_owner_live"),
            # The explorer's per-period counts and temporal overview, read from the index alone.
            models.Index(
                fields=["owner", "timestamp"],
                include=["role"],
                condition=Q(deleted=False, is_chunk=False),
                name="message_owner_live_ts",
            ),
            models.Index(
                fields=["owner", "-pinned_at"],
                condition=Q(pinned=True, deleted=False, is_chunk=False),
                name="message_owner_pinned",
            ),
            # A topic's messages in time order: members' timestamps read from the index alone.
            models.Index(
                fields=["id"],
                include=["owner", "timestamp"],
                condition=Q(deleted=False, is_chunk=False),
                name="message_live_id_ts",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "position"],
                condition=Q(is_chunk=False),
                name="message_unique_position",
            ),
            models.UniqueConstraint(
                fields=["owner", "external_id"],
                condition=Q(external_id__isnull=False, is_chunk=False),
                name="message_unique_external_id",
            ),
            models.UniqueConstraint(
                fields=["chunk_parent", "chunk_index"],
                condition=Q(is_chunk=True),
                name="message_unique_chunk_index",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} {self.id}"

    @property
    def logical_id(self) -> str:
        return self.chunk_parent_id if self.is_chunk else self.id

    @property
    def is_source(self) -> bool:
        """What this message says is not memory repeated (see repeats_memory)."""
        return not repeats_memory(self.metadata)

    @property
    def feeds_memory(self) -> bool:
        """Memory may learn from this message (MessageQuerySet.sources): it does not repeat
        memory, and its conversation is remembered."""
        return self.is_source and is_remembered(self.metadata)

    def set_pinned(self, pinned: bool) -> Message:
        """Pin or unpin; a chunk pins its whole message (the one that is returned)."""
        target = self.chunk_parent if self.is_chunk else self
        target.pinned = pinned
        target.pinned_at = timezone.now() if pinned else None
        target.save(update_fields=["pinned", "pinned_at"])
        return target


class ToolCallQuerySet(OwnedQuerySet):
    def visible(self) -> ToolCallQuerySet:
        return self.filter(message__deleted=False)

    def logical(self) -> ToolCallQuerySet:
        return self.filter(is_chunk=False)


class ToolCall(models.Model):
    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    # CALLED_BY
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="tool_calls")
    tool_name = models.CharField(max_length=100, db_index=True)
    arguments = models.TextField(default="{}")
    result = models.TextField(default="")
    timestamp = models.DateTimeField()
    token_count = models.IntegerField(default=0)
    is_error = models.BooleanField(default=False)
    duration_ms = models.IntegerField(null=True, blank=True)
    is_chunk = models.BooleanField(default=False)
    chunk_index = models.IntegerField(null=True, blank=True)
    chunk_parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="chunks"
    )

    objects = ToolCallQuerySet.as_manager()

    class Meta:
        ordering = ["timestamp", "chunk_index"]
        indexes = [
            models.Index(fields=["owner", "timestamp"], name="toolcall_owner_ts"),
            models.Index(fields=["chunk_parent"], name="toolcall_chunk_parent"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.id}"

    def embedding_text(self) -> str:
        if self.is_chunk:
            return f"{self.tool_name} [chunk {self.chunk_index}]: {self.result}"
        return f"{self.tool_name}: {self.arguments} -> {self.result}"


class PassageQuerySet(OwnedQuerySet):
    def searchable(self) -> PassageQuerySet:
        return self.filter(deleted=False)


def passage_hnsw_sql(dimensions: int) -> str:
    """CREATE INDEX for the passage graph by hand (bulk loads, a model of another size): the
    same index Passage.Meta declares."""
    return (
        f"CREATE INDEX IF NOT EXISTS {PASSAGE_HNSW} ON memory_passage USING hnsw "
        f"((embedding::halfvec({int(dimensions)})) halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )


PASSAGE_HNSW = "passage_embedding_hnsw_half"
# False for the person's own passages, True for the rest: embedded later by an import.
EMBED_LATER = ExpressionWrapper(~Q(role=Role.USER), output_field=models.BooleanField())


class Passage(models.Model):
    """One embedding unit: a window of a message, chunk or tool call that fits the embedder.

    owner, conversation, role, timestamp and deleted are copied from the source so search
    can filter on this table alone (and the HNSW index stays useful under filters).
    """

    class Kind(models.TextChoices):
        MESSAGE = "message", "message"
        TOOL_CALL = "tool_call", "tool call"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.MESSAGE)
    message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.CASCADE, related_name="passages"
    )
    tool_call = models.ForeignKey(
        ToolCall, null=True, blank=True, on_delete=models.CASCADE, related_name="passages"
    )
    # The logical message the source belongs to (a chunk's parent, a tool call's message), so
    # search can group hits per message without a join.
    logical_message = models.ForeignKey(
        Message, on_delete=models.CASCADE, related_name="+", db_index=True
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    timestamp = models.DateTimeField()
    deleted = models.BooleanField(default=False)
    index = models.IntegerField(default=0)
    start_char = models.IntegerField(default=0)
    end_char = models.IntegerField(default=0)
    text = models.TextField()
    # What a reader needs to understand `text` and that the source's own text does not say: who
    # spoke, and for a message's first passage the end of the turn it replies to. A short reply
    # ("Yeah, I painted that lake sunrise last year!") is found by the subject of the question
    # before it. Searched and embedded with `text`, never shown as the passage's own words.
    context = models.TextField(blank=True, default="", db_default="")
    # The periods the passage's words name, resolved against when they were said ("last
    # Saturday" said on 2023-05-24 is 2023-05-20): [{"text", "start", "end"}], ISO dates, end
    # exclusive (memory.dates.mentioned_periods). Search lifts a passage whose period is the one
    # a question names, as it lifts what was said then.
    periods = models.JSONField(default=list, blank=True, db_default=[])
    text_hash = models.CharField(max_length=40, db_index=True)
    embedding = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True, default="")
    search_vector = models.GeneratedField(
        expression=SearchVector("context", "text", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    objects = PassageQuerySet.as_manager()

    @property
    def embedding_input(self) -> str:
        """The text the vector is computed from: the context, then the passage's own words."""
        return f"{self.context}\n{self.text}" if self.context else self.text

    class Meta:
        ordering = ["id"]
        indexes = [
            # The graph holds half-precision copies of the vectors: half the pages to keep in
            # memory and to read per search (1M passages: 1.0 instead of 2.0 GB). Searches
            # order by the same expression (memory.finding.candidates.HALFVEC) and score in full precision.
            HnswIndex(
                OpClass(
                    Cast("embedding", HalfVectorField(dimensions=settings.EMBEDDING_DIMENSIONS)),
                    name="halfvec_cosine_ops",
                ),
                name=PASSAGE_HNSW,
                m=16,
                ef_construction=64,
            ),
            GinIndex(fields=["search_vector"], name="passage_search_gin"),
            models.Index(fields=["owner", "deleted", "kind"], name="passage_owner_live"),
            models.Index(fields=["owner", "timestamp"], name="passage_owner_ts"),
            models.Index(fields=["embedding_model"], name="passage_model"),
            models.Index(fields=["owner", "embedding_model"], name="passage_owner_model"),
            # The explorer's memory health: the embedding backlog and vectors of another model.
            models.Index(
                fields=["owner"],
                include=["logical_message_id"],
                condition=Q(embedding__isnull=True),
                name="passage_owner_unembedded",
            ),
            # The order an import embeds in (memory.transfer.import_jobs.EMBED_ORDER): the
            # person's own messages first, then the rest, newest first within each.
            models.Index(
                F("owner"),
                EMBED_LATER,
                F("timestamp").desc(),
                condition=Q(embedding__isnull=True),
                name="passage_embed_order",
            ),
            models.Index(
                fields=["owner", "embedding_model"],
                condition=Q(embedding__isnull=False),
                name="passage_owner_embedded_model",
            ),
        ]


class Tombstone(models.Model):
    """What is left of a forgotten message: keyed hashes (HMAC-SHA256 under SECRET_KEY, per
    owner) of its ids and of its text, and when it was forgotten; no text, no id. An import that
    meets the message again (a re-upload, a resumed import that still held it) leaves it out
    (memory.lifecycle.tombstones)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    digest = models.CharField(max_length=64)
    forgotten_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "digest"], name="tombstone_owner_digest")]

    def __str__(self) -> str:
        return f"tombstone {self.pk} of {self.owner_id}"
