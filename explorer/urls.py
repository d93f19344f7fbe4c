from __future__ import annotations

from django.urls import path

from explorer import views

app_name = "explorer"

urlpatterns = [
    path("", views.overview, name="overview"),
]
