"""The records of background work and the caches: what a turn was shown, upkeep runs and task
leases, the rolling conversation summary, the memory version, the semantic caches and imports."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone
from pgvector.django import VectorField

from memory.models.conversations import Conversation, Message, OwnedQuerySet, new_ulid


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

    # Keys of the plan (ContextPlan.as_json) that the row holds in columns of their own: stored
    # there only. With them and the index text (the end of `text`) the plan was ~60% of a
    # snapshot's bytes, all compressed on every turn's write (docs/benchmarks.md, "Eleventh pass").
    PLAN_IN_COLUMNS = (
        "query", "strategy", "reason", "budget", "tokens_by_zone", "included_ids", "hits", "fallbacks",
        "build_ms",
    )
    # The parts of `text` before the index, in order (index_builder.ContextPlan.system_prompt).
    PROMPT_PARTS = ("custom_instructions", "instructions", "summary")

    @classmethod
    def plan_to_store(cls, plan: dict[str, Any]) -> dict[str, Any]:
        """The plan as a snapshot stores it: without what its columns and `text` hold."""
        return {k: v for k, v in plan.items() if k not in cls.PLAN_IN_COLUMNS and k != "text"}

    def whole_plan(self) -> dict[str, Any]:
        """The plan as the turn made it: the stored keys, those kept in columns, and the index
        text (what `text` holds after the custom instructions, the memory instructions and the
        summary). Snapshots stored before keep their whole plan, which is returned as stored.
        Keys in jsonb's order (shorter first), as a stored plan reads."""
        stored = self.plan if isinstance(self.plan, dict) else {}
        whole = {k: getattr(self, k) for k in self.PLAN_IN_COLUMNS}
        whole.update(stored)
        if "text" not in whole:
            parts = (stored.get(k) for k in self.PROMPT_PARTS)
            prefix = "\n\n".join(p for p in parts if isinstance(p, str) and p)
            text = self.text or ""
            if not prefix:
                whole["text"] = text
            elif text.startswith(prefix + "\n\n"):
                whole["text"] = text[len(prefix) + 2 :]
            else:  # no index, or a forget scrubbed the two apart: the whole prompt
                whole["text"] = "" if text == prefix else text
        return dict(sorted(whole.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode())))


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


class IndexGeneration(models.Model):
    """Numbers per owner that change whenever what a turn's index reads beside its search and
    keeps between turns changes (memory.context.kept_reads), one for each part: `facts` (the
    facts, or a message deleted or restored: a fact of a deleted message is not shown), `pins`
    (a message pinned, unpinned, or a pinned one changed) and `overview` (topics, period
    summaries: topic upkeep changes them after every stored message, the facts and the pins
    stay). Written only by triggers on those tables (migration 0020), in the writing transaction,
    from one sequence: a value is never given twice, even after a rollback.

    A log, not a row per owner to update: a part's generation is the largest of its rows, each
    write appends one and drops the older rows no other transaction holds (SKIP LOCKED). So two
    transactions that change the same owner's memory never wait for each other here (a pin
    does not wait for a topic rebuild's commit, nor a forget for a fact being learned)."""

    # No foreign key: deleting a person deletes their facts, whose trigger writes a row again in
    # the same transaction; rows left for a deleted owner are never read.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False,
        db_index=False,
    )
    part = models.CharField(max_length=8)  # facts | pins | overview
    generation = models.BigIntegerField()

    class Meta:
        indexes = [models.Index(fields=["owner", "part", "generation"], name="indexgeneration_latest")]


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
    in steps so nobody waits for vectors: its messages are stored first (keyword search, the
    chat and the explorer have them at once), then background work embeds them, then the topic
    tree is built, then the facts are drawn (memory.transfer.import_jobs). The counts are its
    progress; a run that stops (a server restart) is resumed by the next, which claims the job
    once its runner is gone."""

    class Status(models.TextChoices):
        STORING = "storing", "storing messages"
        EMBEDDING = "embedding", "embedding"
        TOPICS = "topics", "building topics"
        FACTS = "facts", "learning facts"
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
    # What search finds by meaning already: an import embeds the person's own messages first,
    # newest first, then the rest (replies, tool calls), newest first (import_jobs.embed).
    # own_ready: every own message has its vector; ready_back_to: the oldest timestamp embedded
    # in the part being embedded now (own messages until own_ready, the rest after).
    own_ready = models.BooleanField(default=False)
    ready_back_to = models.DateTimeField(null=True, blank=True)
    # The last step: messages read for facts, and the facts learned from them.
    facts_read = models.IntegerField(default=0, db_default=0)
    facts_learned = models.IntegerField(default=0, db_default=0)
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
        if self.status == self.Status.FACTS:
            return min(self.facts_read, self.messages_total), self.messages_total
        return min(self.passages_embedded, self.passages_total), self.passages_total

    @property
    def percent(self) -> int:
        done, total = self.done_count
        if self.status in (self.Status.TOPICS, self.Status.DONE):
            return 100
        return int(100 * done / total) if total else 0

    # The rate is read over at least this long before a time left is told: the first batches
    # (the embedder loading, a cold cache) say little about the rest.
    ETA_STABLE_AFTER_SECONDS = 20

    def eta_seconds(self, now=None) -> float | None:
        """Seconds the current step still needs, or None until the rate is known well enough.

        The rate is the current run's average up to its last progress (heartbeat_at), and the
        time since then counts down: progress that comes in batches (passages are embedded a
        batch at a time) no longer makes the estimate climb between batches and drop at each."""
        done, total = self.done_count
        if self.status not in (self.Status.STORING, self.Status.EMBEDDING) or not self.rate_since:
            return None
        if self.heartbeat_at is None:
            return None
        measured = (self.heartbeat_at - self.rate_since).total_seconds()
        progressed = done - self.rate_base
        if progressed <= 0 or measured < self.ETA_STABLE_AFTER_SECONDS:
            return None
        since = max(0.0, ((now or timezone.now()) - self.heartbeat_at).total_seconds())
        return max(0.0, (total - done) * measured / progressed - since)

    def new_conversations(self) -> list[Conversation]:
        """The first conversations this import started (its report keeps their ids), in order;
        those deleted since are left out."""
        ids = [str(i) for i in (self.report or {}).get("conversation_ids", [])]
        found = Conversation.objects.filter(owner_id=self.owner_id, pk__in=ids).in_bulk()
        return [found[i] for i in ids if i in found]
