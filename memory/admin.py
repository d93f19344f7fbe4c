from __future__ import annotations

from django.contrib import admin

from memory import models


@admin.register(models.Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("id", "title", "owner", "updated_at")
    search_fields = ("title", "owner__username")
    list_select_related = ("owner",)


@admin.register(models.Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("id", "role", "snippet", "owner", "timestamp", "is_chunk", "deleted", "edited")
    list_filter = ("role", "is_chunk", "deleted", "edited")
    search_fields = ("id", "snippet", "external_id")
    raw_id_fields = ("owner", "conversation", "parent", "chunk_parent")
    list_select_related = ("owner",)


@admin.register(models.ToolCall)
class ToolCallAdmin(admin.ModelAdmin):
    list_display = ("id", "tool_name", "owner", "timestamp", "is_chunk", "is_error")
    list_filter = ("tool_name", "is_error")
    raw_id_fields = ("owner", "message", "chunk_parent")


@admin.register(models.Passage)
class PassageAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "owner", "logical_message", "index", "embedding_model", "deleted")
    list_filter = ("kind", "embedding_model", "deleted")
    raw_id_fields = ("owner", "conversation", "message", "tool_call", "logical_message")
    exclude = ("embedding",)


@admin.register(models.Topic)
class TopicAdmin(admin.ModelAdmin):
    list_display = ("id", "label", "owner", "level", "message_count", "period_start", "period_end")
    raw_id_fields = ("owner", "parent")
    exclude = ("centroid",)


@admin.register(models.Entity)
class EntityAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "owner", "mention_count", "last_seen")
    list_filter = ("kind",)
    search_fields = ("name",)


@admin.register(models.ContextSnapshot)
class ContextSnapshotAdmin(admin.ModelAdmin):
    list_display = ("id", "owner", "conversation", "strategy", "build_ms", "created_at")
    list_filter = ("strategy",)
    raw_id_fields = ("owner", "conversation", "user_message", "message")


@admin.register(models.UpkeepRun)
class UpkeepRunAdmin(admin.ModelAdmin):
    list_display = ("kind", "owner", "started_at", "finished_at", "ok")
    list_filter = ("kind", "ok")


admin.site.register([models.TopicMembership, models.PeriodSummary, models.EntityMention, models.EntityEdge])
