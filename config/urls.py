from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from config.auth import LoginView, ThrottledAdminAuthenticationForm, admin_login
from config.pages import dismiss_banner

admin.site.login_form = ThrottledAdminAuthenticationForm
urlpatterns = [
    # Before the admin's own URLs, so its sign-in is under the same limit as /login/.
    path("admin/login/", admin_login, name="admin_login"),
    path("admin/", admin.site.urls),
    path("explorer/", include("explorer.urls")),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("banner/dismiss/", dismiss_banner, name="dismiss_banner"),
    path("", include("chat.urls")),
]
