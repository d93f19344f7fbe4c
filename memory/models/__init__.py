"""The memory data model, in Postgres with pgvector.

Every row carries its owner and every query goes through a QuerySet method that filters by
owner (`Message.objects.owned_by(user)`), so memory is shardable by user and never leaks.

The models live in modules by concern; every name is exported here, so `memory.models.X` is
where callers (and the migrations) find it.
"""

from __future__ import annotations

from memory.models.conversations import (
    EMBED_LATER,
    NOT_REMEMBERED,
    PASSAGE_HNSW,
    QUOTED_SHARE,
    QUOTES_MEMORY,
    Conversation,
    ConversationQuerySet,
    Message,
    MessageQuerySet,
    OwnedQuerySet,
    Passage,
    PassageQuerySet,
    Role,
    Tombstone,
    ToolCall,
    ToolCallQuerySet,
    is_remembered,
    is_system_text,
    new_ulid,
    passage_hnsw_sql,
    quoted_share,
    repeats_memory,
)
from memory.models.knowledge import STATEMENT_LAST, Entity, EntityEdge, EntityMention, Fact, FactQuerySet
from memory.models.preferences import Preferences
from memory.models.topics import PeriodSummary, Topic, TopicMembership
from memory.models.upkeep import (
    CacheCounter,
    ContextSnapshot,
    ConversationSummary,
    ImportJob,
    ImportJobQuerySet,
    IndexGeneration,
    MemoryVersion,
    SemanticCacheEntry,
    TaskLease,
    UpkeepRun,
)

__all__ = [
    "EMBED_LATER",
    "NOT_REMEMBERED",
    "PASSAGE_HNSW",
    "QUOTED_SHARE",
    "QUOTES_MEMORY",
    "STATEMENT_LAST",
    "CacheCounter",
    "ContextSnapshot",
    "Conversation",
    "ConversationQuerySet",
    "ConversationSummary",
    "Entity",
    "EntityEdge",
    "EntityMention",
    "Fact",
    "FactQuerySet",
    "ImportJob",
    "ImportJobQuerySet",
    "IndexGeneration",
    "MemoryVersion",
    "Message",
    "MessageQuerySet",
    "OwnedQuerySet",
    "Passage",
    "PassageQuerySet",
    "PeriodSummary",
    "Preferences",
    "Role",
    "SemanticCacheEntry",
    "TaskLease",
    "ToolCall",
    "ToolCallQuerySet",
    "Tombstone",
    "Topic",
    "TopicMembership",
    "UpkeepRun",
    "is_remembered",
    "is_system_text",
    "new_ulid",
    "passage_hnsw_sql",
    "quoted_share",
    "repeats_memory",
]
