from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from config.auth import LoginView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("explorer/", include("explorer.urls")),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("chat.urls")),
]
