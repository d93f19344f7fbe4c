"""The Settings page: what a person decides about their memory (memory.models.Preferences),
and the same two switches in the chat's menu."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages as flash
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from memory.models import Preferences

SWITCHES = {
    "use_memory": "Use memory in replies",
    "remember_chats": "Remember new chats",
}


class PreferencesForm(forms.ModelForm):
    class Meta:
        model = Preferences
        fields = ["use_memory", "remember_chats", "custom_instructions"]
        labels = {
            "use_memory": SWITCHES["use_memory"],
            "remember_chats": SWITCHES["remember_chats"],
            "custom_instructions": "Custom instructions",
        }
        help_texts = {
            "use_memory": (
                "Replies draw on what Recollect remembers from all your chats. Off: each chat "
                "sees only itself, with no memory tools and no facts about you."
            ),
            "remember_chats": (
                "What you say in new chats becomes memory: facts, people and topics are drawn from "
                "it, and other chats can recall it. Off: new chats are kept as history only."
            ),
            "custom_instructions": (
                "What Recollect should know about you and how it should answer, sent with every "
                "message (“I'm vegetarian. Answer briefly.”)."
            ),
        }
        widgets = {"custom_instructions": forms.Textarea(attrs={"rows": 5})}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["custom_instructions"]
        field.widget.attrs["maxlength"] = settings.CUSTOM_INSTRUCTIONS_MAX_CHARS

    def clean_custom_instructions(self) -> str:
        # Postgres cannot store NUL; a line of spaces is no instruction.
        text = (self.cleaned_data.get("custom_instructions") or "").replace("\x00", "").strip()
        limit = settings.CUSTOM_INSTRUCTIONS_MAX_CHARS
        if len(text) > limit:
            raise forms.ValidationError(
                f"Custom instructions can be at most {limit:,} characters long; these are "
                f"{len(text):,}. Nothing was saved."
            )
        return text


@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    prefs = Preferences.of(request.user)
    form = PreferencesForm(request.POST or None, instance=prefs)
    context = {"form": form, "instructions_limit": f"{settings.CUSTOM_INSTRUCTIONS_MAX_CHARS:,}"}
    if request.method == "POST":
        if form.is_valid():
            form.save()
            flash.success(request, "Settings saved.")
            return redirect("chat:settings")
        return render(request, "chat/settings.html", context, status=400)
    return render(request, "chat/settings.html", context)


@login_required
@require_POST
def switch(request: HttpRequest) -> HttpResponse:
    """One of the memory switches from the chat's menu: name (use_memory or remember_chats),
    value (on or off). htmx gets the switches back, and the chat's memory notice."""
    name, value = request.POST.get("name"), (request.POST.get("value") or "").lower()
    if name not in SWITCHES or value not in {"on", "off"}:
        return HttpResponse(
            "That is not a memory switch.", status=400, content_type="text/plain; charset=utf-8"
        )
    prefs = Preferences.of(request.user)
    setattr(prefs, name, value == "on")
    prefs.save()
    if request.htmx:
        # The chat's memory notice changes with them, where the page has one (not a temporary chat).
        notice = "1" if request.POST.get("notice") == "1" else "0"
        context = {"prefs": prefs, "oob": notice == "1", "notice": notice}
        return render(request, "chat/_memory_switches.html", context)
    target = request.POST.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return redirect(target)
    return redirect("chat:settings")
