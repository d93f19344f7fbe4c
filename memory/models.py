"""The memory data model, in Postgres with pgvector.

Every row carries its owner and every query goes through a QuerySet method that filters by
owner (`Message.objects.owned_by(user)`), so memory is shardable by user and never leaks.

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
from django.db.models import F, Q, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Cast
from django.utils import timezone
from pgvector.django import HalfVectorField, HnswIndex, VectorField
from ulid import ULID


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

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.id}"


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
        said, never from Recollect quoting memory back."""
        return self.exclude(
            Q(metadata__contains={"system_text": True})
            | Q(metadata__contains={"mode": "offline_recall"})
            | Q(metadata__contains={QUOTES_MEMORY: True})
        )

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
        """Memory may learn from this message (see MessageQuerySet.sources)."""
        return not repeats_memory(self.metadata)

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
            models.Index(
                fields=["owner", "embedding_model"],
                condition=Q(embedding__isnull=False),
                name="passage_owner_embedded_model",
            ),
        ]



class Topic(models.Model):
    """A node of the owner's topic tree (a temporally ordered tree; memory.organizing.hierarchy's levels
    read it).

    Leaves hold messages through TopicMembership (BELONGS_TO); inner nodes summarise their
    children. Width is bounded by TOPIC_MAX_CHILDREN.
    """

    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    level = models.IntegerField(default=0)  # 0 = top of the tree
    order = models.IntegerField(default=0)  # temporal order among siblings
    label = models.CharField(max_length=200)
    keywords = models.JSONField(default=list, blank=True)
    summary = models.TextField(blank=True, default="")
    summary_source = models.CharField(max_length=16, default="extractive")
    period_start = models.DateTimeField(null=True, blank=True)
    period_end = models.DateTimeField(null=True, blank=True)
    message_count = models.IntegerField(default=0)
    token_count = models.IntegerField(default=0)
    sample_message_ids = models.JSONField(default=list, blank=True)
    centroid = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS, null=True, blank=True)
    map_x = models.FloatField(null=True, blank=True)
    map_y = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["level", "order", "period_start"]
        indexes = [
            models.Index(fields=["owner", "level", "order"], name="topic_owner_level"),
            models.Index(fields=["parent"], name="topic_parent"),
        ]

    def __str__(self) -> str:
        return self.label


class TopicMembership(models.Model):
    """BELONGS_TO: a logical message in a (leaf) topic."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="memberships")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="topic_memberships")
    score = models.FloatField(default=0.0)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["topic", "message"], name="topic_membership_unique")
        ]
        indexes = [models.Index(fields=["message"], name="topic_membership_message")]


class PeriodSummary(models.Model):
    """Summaries of today / this week / this month / older, kept fresh by background upkeep."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    period = models.CharField(max_length=32)
    start = models.DateTimeField(null=True, blank=True)
    end = models.DateTimeField(null=True, blank=True)
    message_count = models.IntegerField(default=0)
    summary = models.TextField(blank=True, default="")
    top_topics = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "period"], name="period_summary_unique")
        ]


class Entity(models.Model):
    """A name, number with unit, identifier, date, URL, email or code identifier, found by
    memory.knowledge.entities' heuristics."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=300)
    normalized = models.CharField(max_length=300)
    kind = models.CharField(max_length=32)
    mention_count = models.IntegerField(default=0)
    first_seen = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    # Other spellings merged into this entity by graph upkeep ("Melanie's", "tulips").
    aliases = models.JSONField(default=list, blank=True, db_default=[])

    objects = OwnedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "normalized", "kind"], name="entity_unique")
        ]
        indexes = [models.Index(fields=["owner", "-mention_count"], name="entity_owner_count")]

    def __str__(self) -> str:
        return self.name


class EntityMention(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="mentions")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="entity_mentions")
    count = models.IntegerField(default=1)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["entity", "message"], name="entity_mention_unique")
        ]
        indexes = [models.Index(fields=["message"], name="entity_mention_message")]


class EntityEdge(models.Model):
    """Co-occurrence of two entities in messages; `source` has the smaller id.

    `weight` counts the visible messages that name both (a deleted or forgotten message takes
    its share away). `decay` (0..1) is how much of that still counts: graph upkeep lowers it for
    pairs no message has named together for a while (memory.knowledge.graph.decay_edges), and a new
    message naming both lifts it back. What search and the graph walk read is weight * decay."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    source = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="edges_out")
    target = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="edges_in")
    weight = models.IntegerField(default=1)
    decay = models.FloatField(default=1.0, db_default=1.0)
    # The newest message naming both, and when decay was last applied.
    last_seen = models.DateTimeField(null=True, blank=True)
    decayed_at = models.DateTimeField(null=True, blank=True)

    objects = OwnedQuerySet.as_manager()

    @property
    def strength(self) -> float:
        return self.weight * self.decay

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "target"], name="entity_edge_unique")
        ]
        indexes = [
            # A graph walk takes an entity's strongest edges from either end.
            models.Index(fields=["source", "-weight"], name="entity_edge_source_w"),
            models.Index(fields=["target", "-weight"], name="entity_edge_target_w"),
        ]


class ContextSnapshot(models.Model):
    """Exactly what the model was shown on one turn: the plan, its text and how it was built."""

    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="snapshots"
    )
    user_message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The assistant turn this plan was built for (set once that message is stored).
    message = models.OneToOneField(
        Message, null=True, blank=True, on_delete=models.CASCADE, related_name="context_snapshot"
    )
    query = models.TextField(blank=True, default="")
    strategy = models.CharField(max_length=32)
    reason = models.TextField(blank=True, default="")
    text = models.TextField(blank=True, default="")
    tokens_by_zone = models.JSONField(default=dict, blank=True)
    budget = models.IntegerField(default=0)
    included_ids = models.JSONField(default=list, blank=True)
    hits = models.JSONField(default=list, blank=True)
    fallbacks = models.JSONField(default=list, blank=True)
    tools_offered = models.JSONField(default=list, blank=True)
    plan = models.JSONField(default=dict, blank=True)
    build_ms = models.FloatField(default=0.0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "conversation", "-created_at"], name="snapshot_owner_conv")]


class UpkeepRun(models.Model):
    """A record of background upkeep (topic upkeep, rebuilds, re-embedding, cleanup)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    kind = models.CharField(max_length=64)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    ok = models.BooleanField(default=True)
    detail = models.JSONField(default=dict, blank=True)
    # The queued task (DBTaskResult id) this run belongs to, so a task requeued after its worker
    # died marks its own run as stopped and no other. Empty for runs made outside a worker.
    task_id = models.UUIDField(null=True, blank=True, editable=False)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["owner", "kind", "-started_at"], name="upkeep_owner_kind"),
            models.Index(fields=["task_id"], name="upkeep_task"),
        ]


class TaskLease(models.Model):
    """Proof that a background task's worker is alive: while the task runs, its worker pushes
    `expires_at` forward (memory.tasks). A RUNNING task whose lease has expired lost its worker
    and is queued again; one with a fresh lease is left alone however long it runs."""

    task = models.OneToOneField(
        "django_tasks_database.DBTaskResult", primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    expires_at = models.DateTimeField()


# --- the rolling conversation summary, the memory version, the caches -------------------------


class ConversationSummary(models.Model):
    """The rolling summary of a conversation beyond its recent window, kept by
    background upkeep (memory.context.rolling_summary). `blocks` is the chain, oldest first: each block
    digests a stretch of the conversation's branch, {first_id, last_id, first_position,
    last_position, count, text, source}. An edit, delete or forget drops the blocks from the
    one covering it onwards in its own transaction, so no removed text is ever shown."""

    conversation = models.OneToOneField(
        Conversation, primary_key=True, on_delete=models.CASCADE, related_name="rolling_summary"
    )
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    blocks = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = OwnedQuerySet.as_manager()


class MemoryVersion(models.Model):
    """A counter per owner, bumped once by every transaction that stores, edits, deletes,
    restores or forgets memory (memory.storage.versions): cached search results and replies are only
    reused at the version they were made at."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    version = models.BigIntegerField(default=0)
    # The transaction that made the last bump: one transaction bumps once.
    txid = models.BigIntegerField(default=0)


class SemanticCacheEntry(models.Model):
    """A memory search's results, or a reply, kept for near-identical queries of the same owner
    and conversation at the same memory version (memory.finding.semantic_cache)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    kind = models.CharField(max_length=16)  # search | response
    key = models.CharField(max_length=64)  # the search's parameters, hashed
    version = models.BigIntegerField()
    query = models.TextField()
    vector = VectorField()
    payload = models.JSONField(default=dict)
    hits = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["owner", "kind", "version"], name="semcache_owner_kind_version")]


class CacheCounter(models.Model):
    """Hits and misses of one owner's semantic caches, for the explorer."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16)
    hits = models.BigIntegerField(default=0)
    misses = models.BigIntegerField(default=0)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "kind"], name="cache_counter_unique")]


class ImportJobQuerySet(OwnedQuerySet):
    def active(self) -> ImportJobQuerySet:
        return self.exclude(status__in=[ImportJob.Status.DONE, ImportJob.Status.FAILED])

    def shown(self) -> ImportJobQuerySet:
        """Without the uploaded file, for pages that list jobs."""
        return self.defer("payload")


class ImportJob(models.Model):
    """One import of chat history (ChatGPT's, Claude's, JSON Lines or a Recollect export), done
    in three steps so nobody waits for vectors: its messages are stored first (keyword search,
    the chat and the explorer have them at once), then background work embeds them, then the
    topic tree is built (memory.transfer.import_jobs). The counts are its progress; a run that stops
    (a server restart) is resumed by the next, which claims the job once its runner is gone."""

    class Status(models.TextChoices):
        STORING = "storing", "storing messages"
        EMBEDDING = "embedding", "embedding"
        TOPICS = "topics", "building topics"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=16, blank=True, default="")  # chatgpt, claude, jsonl, recollect
    filename = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STORING)
    # The uploaded file until its messages are stored (a web upload; the CLI stores at once).
    payload = models.BinaryField(null=True, blank=True)
    messages_total = models.IntegerField(default=0)
    messages_stored = models.IntegerField(default=0)
    passages_total = models.IntegerField(default=0)
    passages_embedded = models.IntegerField(default=0)
    report = models.JSONField(default=dict, blank=True)  # added, skipped, bad, conversations, errors
    error = models.TextField(blank=True, default="")
    # Who runs it now ("host:pid:start", memory.processes) and when it last said so.
    runner = models.CharField(max_length=200, blank=True, default="")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Where the current run's rate is measured from (a resumed run starts its own).
    rate_since = models.DateTimeField(null=True, blank=True)
    rate_base = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    stored_at = models.DateTimeField(null=True, blank=True)  # keyword-searchable from here
    embedded_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ImportJobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"], name="importjob_owner_created")]

    def __str__(self) -> str:
        return f"import {self.pk} ({self.source}, {self.status})"

    @property
    def is_active(self) -> bool:
        return self.status not in (self.Status.DONE, self.Status.FAILED)

    @property
    def done_count(self) -> tuple[int, int]:
        """(done, total) of the current step: messages while storing, passages after."""
        if self.status == self.Status.STORING:
            return self.messages_stored, self.messages_total
        return min(self.passages_embedded, self.passages_total), self.passages_total

    @property
    def percent(self) -> int:
        done, total = self.done_count
        if self.status in (self.Status.TOPICS, self.Status.DONE):
            return 100
        return int(100 * done / total) if total else 0

    def eta_seconds(self, now=None) -> float | None:
        """Seconds the current step still needs at the rate of the current run, or None until
        there is a rate to go by."""
        done, total = self.done_count
        if self.status not in (self.Status.STORING, self.Status.EMBEDDING) or not self.rate_since:
            return None
        elapsed = ((now or timezone.now()) - self.rate_since).total_seconds()
        progressed = done - self.rate_base
        if progressed <= 0 or elapsed <= 0:
            return None
        return max(0.0, (total - done) * elapsed / progressed)


class FactQuerySet(OwnedQuerySet):
    def live(self) -> FactQuerySet:
        """Facts whose source message is not deleted (a restored message brings its facts back)."""
        return self.filter(message__deleted=False)

    def current(self) -> FactQuerySet:
        """What holds now: live facts nothing has superseded."""
        return self.live().filter(superseded_by__isnull=True)

    def superseded(self) -> FactQuerySet:
        return self.live().filter(superseded_by__isnull=False)

    def about(self, subject: str) -> FactQuerySet:
        return self.filter(subject_key=" ".join(subject.lower().split()))

    def in_order(self) -> FactQuerySet:
        """Current first (pinned ones at the top), then the superseded, newest first."""
        return self.annotate(
            is_superseded=models.Case(models.When(superseded_by__isnull=True, then=0), default=1)
        ).order_by("is_superseded", "-pinned", "-valid_from", "-id")


class Fact(models.Model):
    """Something lasting about someone (the user, a person they name, a speaker of an imported
    history), drawn from one source message by memory.knowledge.facts. A newer fact on the same subject and
    attribute supersedes it: its valid_to closes and superseded_by links to the newer one; both
    stay. Forgetting the source message forgets the fact (CASCADE)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="facts")
    subject = models.CharField(max_length=200)
    subject_key = models.CharField(max_length=200)
    # "lives in", "works at", "partner", "favourite colour", "plan: trip", ...; "about" for a
    # statement that no newer one replaces (an event in someone's life).
    attribute = models.CharField(max_length=200)
    value = models.CharField(max_length=300, blank=True, default="")
    statement = models.TextField()
    # What the person wrote instead, when they corrected the fact.
    corrected = models.TextField(blank=True, default="")
    said_at = models.DateTimeField()
    # The period the text names ("last year", "in May"), read as of said_at.
    refers_from = models.DateTimeField(null=True, blank=True)
    refers_to = models.DateTimeField(null=True, blank=True)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="supersedes"
    )
    pinned = models.BooleanField(default=False)
    origin = models.CharField(max_length=16, default="rules")  # rules | model
    score = models.FloatField(default=0.0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = FactQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["owner", "subject_key", "attribute"], name="fact_owner_subject_attr"),
            models.Index(fields=["owner", "-valid_from"], name="fact_owner_valid_from"),
        ]

    def __str__(self) -> str:
        return self.text

    @property
    def text(self) -> str:
        return self.corrected or self.statement

    @property
    def is_current(self) -> bool:
        return self.superseded_by_id is None

    def set_pinned(self, pinned: bool) -> Fact:
        """A pinned fact stays (upkeep never draws it again) and comes first."""
        self.pinned = pinned
        self.save(update_fields=["pinned"])
        return self

    def correct(self, text: str) -> Fact:
        """The person's wording replaces the drawn statement (empty: back to the drawn one)."""
        self.corrected = " ".join((text or "").split())[:2000]
        self.save(update_fields=["corrected"])
        return self
