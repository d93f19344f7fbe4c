from __future__ import annotations

from django.urls import path

from explorer.views import (
    contexts,
    entities,
    facts,
    imports,
    messages,
    my_data,
    overview,
    search,
    timeline,
    tool_calls,
    topics,
)

app_name = "explorer"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("advanced/", overview.advanced, name="advanced"),
    path("topics/", topics.topics, name="topics"),
    path("topics/<str:topic_id>/", topics.topic_detail, name="topic"),
    path("timeline/", timeline.timeline, name="timeline"),
    path("messages/<str:message_id>/", messages.message_detail, name="message"),
    path("messages/<str:message_id>/diff/<int:version>/", messages.message_diff, name="diff"),
    path("messages/<str:message_id>/edit/", messages.message_edit, name="edit"),
    path("messages/<str:message_id>/delete/", messages.message_delete, name="delete"),
    path("messages/<str:message_id>/restore/", messages.message_restore, name="restore"),
    path("messages/<str:message_id>/pin/", messages.message_pin, name="pin"),
    path("messages/<str:message_id>/forget/", messages.message_forget, name="forget"),
    path("messages/<str:message_id>/context/", messages.message_context, name="message_context"),
    path("tools/", tool_calls.tool_calls, name="tool_calls"),
    path("tools/<str:call_id>/", tool_calls.tool_call_detail, name="tool_call"),
    path("context/", contexts.contexts, name="contexts"),
    path("context/<str:snapshot_id>/", contexts.context_detail, name="context"),
    path("search/", search.search, name="search"),
    path("entities/", entities.entities, name="entities"),
    path("entities/<int:entity_id>/", entities.entity_detail, name="entity"),
    path("import/", imports.import_page, name="import"),
    path("import/progress/", imports.import_progress, name="import_progress"),
    path("facts/", facts.facts, name="facts"),
    path("facts/<int:fact_id>/pin/", facts.fact_pin, name="fact_pin"),
    path("facts/<int:fact_id>/correct/", facts.fact_correct, name="fact_correct"),
    path("facts/<int:fact_id>/forget/", facts.fact_forget, name="fact_forget"),
    path("download/<str:fmt>/", my_data.download, name="download"),
    path("forget-everything/", my_data.forget_everything, name="forget_everything"),
]
