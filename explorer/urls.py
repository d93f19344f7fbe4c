from __future__ import annotations

from django.urls import path

from explorer import fact_views, imports, views

app_name = "explorer"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("advanced/", views.advanced, name="advanced"),
    path("topics/", views.topics, name="topics"),
    path("topics/<str:topic_id>/", views.topic_detail, name="topic"),
    path("timeline/", views.timeline, name="timeline"),
    path("messages/<str:message_id>/", views.message_detail, name="message"),
    path("messages/<str:message_id>/diff/<int:version>/", views.message_diff, name="diff"),
    path("messages/<str:message_id>/edit/", views.message_edit, name="edit"),
    path("messages/<str:message_id>/delete/", views.message_delete, name="delete"),
    path("messages/<str:message_id>/restore/", views.message_restore, name="restore"),
    path("messages/<str:message_id>/pin/", views.message_pin, name="pin"),
    path("messages/<str:message_id>/forget/", views.message_forget, name="forget"),
    path("messages/<str:message_id>/context/", views.message_context, name="message_context"),
    path("tools/", views.tool_calls, name="tool_calls"),
    path("tools/<str:call_id>/", views.tool_call_detail, name="tool_call"),
    path("context/", views.contexts, name="contexts"),
    path("context/<str:snapshot_id>/", views.context_detail, name="context"),
    path("search/", views.search, name="search"),
    path("entities/", views.entities, name="entities"),
    path("entities/<int:entity_id>/", views.entity_detail, name="entity"),
    path("import/", imports.import_page, name="import"),
    path("import/progress/", imports.import_progress, name="import_progress"),
    path("facts/", fact_views.facts, name="facts"),
    path("facts/<int:fact_id>/pin/", fact_views.fact_pin, name="fact_pin"),
    path("facts/<int:fact_id>/correct/", fact_views.fact_correct, name="fact_correct"),
    path("facts/<int:fact_id>/forget/", fact_views.fact_forget, name="fact_forget"),
]
