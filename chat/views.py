"""Pages of the chat: accounts, the conversation list and a conversation."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memory.models import Conversation, Message


def _get_conversation_for_user(request: HttpRequest, conversation_id: str) -> Conversation:
    """The signed-in user's conversation, or 404 (also for someone else's id)."""
    conversation = Conversation.objects.owned_by(request.user).filter(pk=conversation_id).first()
    if conversation is None:
        raise Http404("No such conversation")
    return conversation


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    conversations = Conversation.objects.owned_by(request.user).order_by("-updated_at")[:200]
    return render(request, "chat/home.html", {"conversations": conversations})


@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    if not settings.ALLOW_SIGNUP:
        raise Http404("Sign-up is switched off on this server")
    form = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user)
        return redirect("chat:home")
    return render(request, "registration/signup.html", {"form": form})


@login_required
@require_POST
def new_conversation(request: HttpRequest) -> HttpResponse:
    title = (request.POST.get("title") or "").strip()[:200]
    conversation = Conversation.objects.create(owner=request.user, title=title)
    return redirect("chat:conversation", conversation_id=conversation.pk)


@login_required
@require_GET
def conversation(request: HttpRequest, conversation_id: str) -> HttpResponse:
    conv = _get_conversation_for_user(request, conversation_id)
    messages = (
        Message.objects.visible_to(request.user)
        .logical()
        .filter(conversation=conv)
        .order_by("-position")[:200]
    )
    conversations = Conversation.objects.owned_by(request.user).order_by("-updated_at")[:200]
    return render(
        request,
        "chat/conversation.html",
        {"conversation": conv, "messages": list(reversed(messages)), "conversations": conversations},
    )


@login_required
@require_POST
def rename_conversation(request: HttpRequest, conversation_id: str) -> HttpResponse:
    conv = _get_conversation_for_user(request, conversation_id)
    conv.title = (request.POST.get("title") or "").strip()[:200]
    conv.save(update_fields=["title", "updated_at"])
    if request.htmx:
        return render(request, "chat/home.html#conversation-row", {"c": conv})
    return redirect("chat:conversation", conversation_id=conv.pk)


@login_required
@require_POST
def delete_conversation(request: HttpRequest, conversation_id: str) -> HttpResponse:
    conv = _get_conversation_for_user(request, conversation_id)
    conv.delete()
    if request.htmx:
        return HttpResponse("")
    return redirect("chat:home")
