"""Signing in, throttled: a username tried from one address fails at most
SIGN_IN_FAILURE_LIMIT times per SIGN_IN_FAILURE_WINDOW; then it is refused until the oldest of
those failures is that old."""

from __future__ import annotations

import datetime as dt
import math

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.http import HttpResponse
from django.utils import timezone

from config.models import SignInAttempt

SIGN_IN_FAILURE_LIMIT = 5
SIGN_IN_FAILURE_WINDOW = dt.timedelta(minutes=15)


class ThrottledAuthenticationForm(AuthenticationForm):
    """The sign-in form of /login/; ThrottledAdminAuthenticationForm is /admin/login/'s, under
    the same limit and the same counts (the first account is a superuser)."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "throttled": (
            "Too many failed sign-ins for this username from your address. Try again in %(minutes)d minutes."
        ),
    }

    def clean(self) -> dict:
        username = self.cleaned_data.get("username")
        if not username or not self.cleaned_data.get("password"):
            return super().clean()
        key = {"username": username.lower()[:150], "address": _address(self.request)}
        now = timezone.now()
        # The attempt is recorded before it is counted, so attempts made at the same moment
        # (from several server processes too) cannot all slip under the limit.
        attempt = SignInAttempt.objects.create(**key, at=now)
        earlier = list(
            SignInAttempt.objects.filter(**key, at__gt=now - SIGN_IN_FAILURE_WINDOW)
            .exclude(pk=attempt.pk)
            .order_by("-at")
            .values_list("at", flat=True)[:SIGN_IN_FAILURE_LIMIT]
        )
        if len(earlier) >= SIGN_IN_FAILURE_LIMIT:
            attempt.delete()  # a refused attempt does not push the wait further out
            wait = earlier[-1] + SIGN_IN_FAILURE_WINDOW - now
            raise ValidationError(
                self.error_messages["throttled"],
                code="throttled",
                params={"minutes": max(1, math.ceil(wait.total_seconds() / 60))},
            )
        try:
            cleaned = super().clean()
        except ValidationError:
            SignInAttempt.objects.filter(at__lte=now - SIGN_IN_FAILURE_WINDOW).delete()
            raise
        SignInAttempt.objects.filter(**key).delete()  # signed in: earlier failures are forgiven
        return cleaned


class ThrottledAdminAuthenticationForm(ThrottledAuthenticationForm, AdminAuthenticationForm):
    error_messages = {**AdminAuthenticationForm.error_messages, **ThrottledAuthenticationForm.error_messages}


def throttle_message(form: AuthenticationForm | None) -> str:
    """The refusal a throttled sign-in form holds, or ""."""
    if form is None or not form.is_bound:
        return ""
    refused = [e for e in form.errors.as_data().get(NON_FIELD_ERRORS, []) if e.code == "throttled"]
    return refused[0].messages[0] if refused else ""


def _address(request) -> str:
    # REMOTE_ADDR only: a forwarded-for header is whatever the client says it is.
    return (request.META.get("REMOTE_ADDR") or "unknown")[:45] if request else "unknown"


class LoginView(auth_views.LoginView):
    authentication_form = ThrottledAuthenticationForm
    template_name = "registration/login.html"

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        throttled = throttle_message(form)
        context = self.get_context_data(form=form, throttled=throttled)
        return self.render_to_response(context, status=429 if throttled else 200)


def admin_login(request) -> HttpResponse:
    """/admin/login/: the admin's own page (its form is ThrottledAdminAuthenticationForm, set in
    config/urls.py), answering 429 when the limit refuses."""
    response = admin.site.login(request)
    if throttle_message((getattr(response, "context_data", None) or {}).get("form")):
        response.status_code = 429
    return response
