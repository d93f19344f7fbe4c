"""What memory knows beyond the messages: entities, their mentions and co-occurrences
(memory.knowledge.entities, memory.knowledge.graph), and facts (memory.knowledge.facts)."""

from __future__ import annotations

from django.conf import settings
from django.db import models, transaction
from django.db.models import Case, F, Q, Value, When
from django.dispatch import Signal

from memory.models.conversations import Message, OwnedQuerySet


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


# 1 for a statement ("about"), 0 for an attribute: the facts section lists a subject's
# attributes (home, work, partner, plans...) before its statements.
STATEMENT_LAST = Case(When(attribute="about", then=Value(1)), default=Value(0))


class FactQuerySet(OwnedQuerySet):
    def live(self) -> FactQuerySet:
        """Facts whose source message is not deleted (a restored message brings its facts back),
        and that the person has not forgotten."""
        return self.filter(message__deleted=False).exclude(kind=Fact.FORGOTTEN)

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


# A fact went with its message (forgotten), and these other messages had said the same: their
# facts are drawn again from their own words (memory.tasks listens). Arguments: owner_id,
# message_ids.
sources_lost = Signal()


def cascade_and_redraw(collector, field, sub_objs, using):
    """on_delete of a fact's message: the fact goes with it (forgetting the message forgets the
    fact), and the other messages that said the same are announced (sources_lost),
    so background upkeep draws the fact again from their own words."""
    others: dict[int, set[str]] = {}
    for fact in sub_objs:
        ids = fact.also_in.values_list("pk", flat=True)
        others.setdefault(fact.owner_id, set()).update(str(i) for i in ids)
    models.CASCADE(collector, field, sub_objs, using)
    for owner_id, ids in others.items():
        if ids:
            said = sorted(ids)
            transaction.on_commit(
                lambda o=owner_id, i=said: sources_lost.send(Fact, owner_id=o, message_ids=i), using=using
            )


class Fact(models.Model):
    """Something lasting about someone (the user, a person they name, a speaker of an imported
    history), drawn from one source message by memory.knowledge.facts. A newer fact on the same subject and
    attribute supersedes it: its valid_to closes and superseded_by links to the newer one; both
    stay. Forgetting the source message forgets the fact (CASCADE)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    message = models.ForeignKey(Message, on_delete=cascade_and_redraw, related_name="facts")
    # Other messages that say the same (one fact, several sources).
    also_in = models.ManyToManyField(Message, related_name="repeated_facts", blank=True)
    subject = models.CharField(max_length=200)
    subject_key = models.CharField(max_length=200)
    # "lives in", "works at", "partner", "favourite colour", "plan: trip", ...; "about" for a
    # statement that no newer one replaces (an event in someone's life).
    attribute = models.CharField(max_length=200)
    value = models.CharField(max_length=300, blank=True, default="")
    statement = models.TextField()
    # The speaker's own clause, first person ("I lead a team of five engineers"): the person reads
    # it in the second person, anyone else in the third (memory.knowledge.wording).
    wording = models.TextField(blank=True, default="")
    # What it is about (memory.knowledge.statements): health, family, work, plan, remember, ...
    kind = models.CharField(max_length=32, blank=True, default="")
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

    # The kind of a fact the person forgot (or undid under a reply): its words are gone, and the
    # row stays only so that its message is not read for it again.
    FORGOTTEN = "forgotten"

    class Meta:
        indexes = [
            models.Index(fields=["owner", "subject_key", "attribute"], name="fact_owner_subject_attr"),
            models.Index(fields=["owner", "-valid_from"], name="fact_owner_valid_from"),
            # A turn's FACTS section (memory.knowledge.facts.current_for_index): a subject's
            # current facts in the order it shows them, read from the top, and the distinct
            # subjects, one descent each; a memory holds tens of thousands of facts.
            models.Index(
                "owner", "subject_key", F("pinned").desc(), STATEMENT_LAST,
                F("valid_from").desc(), F("id").desc(),
                condition=Q(superseded_by__isnull=True), name="fact_current_rank",
            ),
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

    def forget(self) -> None:
        """The person forgets this fact: its words go, what it had superseded holds again, and
        its message is not read for it again (an edit of the message reads it anew)."""
        from django.utils import timezone

        with transaction.atomic():
            Fact.objects.filter(superseded_by_id=self.pk).update(valid_to=None, superseded_by=None)
            self.also_in.clear()
            self.kind = self.FORGOTTEN
            self.statement = self.wording = self.value = self.corrected = ""
            self.subject, self.subject_key, self.attribute = "", "", ""
            self.superseded_by, self.pinned, self.valid_to = None, False, timezone.now()
            self.save()

    def correct(self, text: str) -> Fact:
        """The person's wording replaces the drawn statement (empty: back to the drawn one)."""
        self.corrected = " ".join((text or "").split())[:2000]
        self.save(update_fields=["corrected"])
        return self
