"""The topic tree (memory.organizing.topics keeps it) and the period summaries."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from pgvector.django import VectorField

from memory.models.conversations import Message, OwnedQuerySet, new_ulid


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
