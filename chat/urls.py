from __future__ import annotations

from django.urls import path

from chat import preferences, views

app_name = "chat"

urlpatterns = [
    path("", views.home, name="home"),
    path("archived/", views.archived, name="archived"),
    path("settings/", preferences.settings_page, name="settings"),
    path("settings/switch/", preferences.switch, name="switch"),
    path("signup/", views.signup, name="signup"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("c/new/", views.new_conversation, name="new_conversation"),
    path("c/<str:conversation_id>/", views.conversation, name="conversation"),
    path("c/<str:conversation_id>/rename/", views.rename_conversation, name="rename_conversation"),
    path("c/<str:conversation_id>/delete/", views.delete_conversation, name="delete_conversation"),
    path("c/<str:conversation_id>/archive/", views.archive_conversation, name="archive_conversation"),
    path("c/<str:conversation_id>/leave/", views.leave_temporary_chat, name="leave_temporary_chat"),
    path("c/<str:conversation_id>/model/", views.set_model, name="set_model"),
    path(
        "c/<str:conversation_id>/branch/<str:message_id>/",
        views.switch_branch,
        name="switch_branch",
    ),
    path("m/<str:message_id>/", views.message, name="message"),
    path("m/<str:message_id>/history/", views.message_history, name="message_history"),
    path("m/<str:message_id>/forget/", views.forget_dialog, name="forget_dialog"),
    path("m/<str:message_id>/pin/", views.pin_message, name="pin_message"),
]
