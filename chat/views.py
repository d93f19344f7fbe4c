"""Pages of the chat: accounts, the conversation list and a conversation."""

from __future__ import annotations

import functools

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from chat import branches, drafts
from chat.models import ReplyDraft
from config.limits import LimitReached
from config.models import ActionAllowance
from memory.knowledge import facts
from memory.lifecycle import deleting, echoes
from memory.models import Conversation, Message, Role
from memory.storage import store


def _get_conversation_for_user(request: HttpRequest, conversation_id: str) -> Conversation:
    """The signed-in user's conversation, or 404 (also for someone else's id)."""
    conversation = Conversation.objects.owned_by(request.user).filter(pk=conversation_id).first()
    if conversation is None:
        raise Http404("No such conversation")
    return conversation


def counted(view):
    """A conversation made or deleted, or a pin, counts against the same per-user limit as the
    chat's messages (CHAT_RATE_LIMIT_PER_MINUTE): past it, 429 and nothing is done."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        try:
            ActionAllowance.count_action(request.user)
        except LimitReached as exc:
            return HttpResponse(exc.message, status=429, content_type="text/plain; charset=utf-8")
        return view(request, *args, **kwargs)

    return wrapper


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    conversations = Conversation.objects.owned_by(request.user).order_by("-updated_at")[:200]
    return render(request, "chat/home.html", {"conversations": conversations})


FAVICON = settings.BASE_DIR / "static" / "recollect" / "favicon.ico"


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """The icon browsers ask for at /favicon.ico, whatever the page links."""
    response = HttpResponse(FAVICON.read_bytes(), content_type="image/x-icon")
    response["Cache-Control"] = "public, max-age=86400"
    return response


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


def _posted_title(request: HttpRequest) -> str:
    # Postgres cannot store NUL: shown as ␀, as in a message.
    return (request.POST.get("title") or "").replace("\x00", store.NUL_REPLACEMENT).strip()[:200]


@login_required
@require_POST
@counted
def new_conversation(request: HttpRequest) -> HttpResponse:
    conversation = Conversation.objects.create(owner=request.user, title=_posted_title(request))
    return redirect("chat:conversation", conversation_id=conversation.pk)


def _get_message_for_user(request: HttpRequest, message_id: str) -> Message:
    """The signed-in user's (logical) message, or 404 (also for someone else's id)."""
    # An id holding NUL (?at=…%00) names nothing, and Postgres cannot compare one.
    mine = Message.objects.owned_by(request.user)
    message = None if "\x00" in message_id else mine.filter(pk=message_id).first()
    if message is None:
        raise Http404("No such message")
    return message.chunk_parent if message.is_chunk else message


THREAD_LIMIT = 200


def _thread(conv: Conversation, leaf: Message | None) -> dict:
    """The chat page's thread: the last THREAD_LIMIT messages of the branch ending at `leaf`,
    and the reply being written to its last message, as far as its draft was last saved."""
    path, truncated = branches.recent_path(conv, leaf, THREAD_LIMIT)
    siblings = branches.siblings_for(conv, path)
    # What each message asked to be remembered, shown under its reply: one query for the page.
    saved = facts.explicitly_saved_for(conv.owner_id, [m.pk for m in path if m.role == Role.USER])
    for m in path:
        if m.role == Role.ASSISTANT:
            m.saved_facts = saved.get(m.parent_id, [])
    draft = (
        ReplyDraft.objects.filter(conversation=conv, parent_id=path[-1].pk)
        .only("pk", "parent_id", "text")
        .first()
        if path
        else None
    )
    return {
        "rows": [{"m": m, "sib": siblings[m.pk]} for m in path],
        "truncated": truncated,
        "draft": Message(pk=draft.pk, role="assistant", parent_id=draft.parent_id, content=draft.text)
        if draft
        else None,
    }


@login_required
@require_GET
@vary_on_headers("HX-Request")
def conversation(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """The chat page: the active branch (or, with ?at=<id>, the branch through that message).
    For htmx, the thread alone: a tab that reconnects reads again what it missed."""
    conv = _get_conversation_for_user(request, conversation_id)
    # A reply a stopped server left half-written is stored before the thread is shown.
    drafts.recover_quietly(conv)
    at = request.GET.get("at")
    if at:
        message = _get_message_for_user(request, at)
        if message.conversation_id != conv.pk:
            raise Http404("No such message")
        leaf = branches.descend(conv, message)
    else:
        leaf = branches.active_leaf(conv)
    if request.htmx:
        return render(request, "chat/conversation.html#thread", {"conversation": conv, **_thread(conv, leaf)})
    conversations = Conversation.objects.owned_by(request.user).order_by("-updated_at")[:200]
    return render(
        request,
        "chat/conversation.html",
        {
            "conversation": conv,
            "conversations": conversations,
            "streaming_row": Message(role="assistant"),
            **_thread(conv, leaf),
        },
    )


@login_required
@require_POST
def switch_branch(request: HttpRequest, conversation_id: str, message_id: str) -> HttpResponse:
    """‹ 1/2 ›: make the branch through this message the active one."""
    conv = _get_conversation_for_user(request, conversation_id)
    message = _get_message_for_user(request, message_id)
    if message.conversation_id != conv.pk:
        raise Http404("No such message")
    branches.select_branch(conv, message)
    if request.htmx:
        return render(
            request,
            "chat/conversation.html#thread",
            {"conversation": conv, **_thread(conv, branches.active_leaf(conv))},
        )
    return redirect("chat:conversation", conversation_id=conv.pk)


def _redirect_to_message(msg: Message) -> HttpResponse:
    """To the message in its conversation, on the branch it is on."""
    url = reverse("chat:conversation", args=[msg.conversation_id])
    return redirect(f"{url}?at={msg.pk}#msg-{msg.pk}")


@login_required
@require_GET
def message(request: HttpRequest, message_id: str) -> HttpResponse:
    """A cited message: its conversation, showing the branch it is on."""
    msg = _get_message_for_user(request, message_id)
    return _redirect_to_message(msg)


@login_required
@require_GET
def message_history(request: HttpRequest, message_id: str) -> HttpResponse:
    msg = _get_message_for_user(request, message_id)
    versions = [
        {"when": parse_datetime(v.get("timestamp") or ""), "content": v.get("previous_content", "")}
        for v in msg.edit_history
    ]
    return render(request, "chat/_history.html", {"message": msg, "versions": versions})


@login_required
@require_GET
def forget_dialog(request: HttpRequest, message_id: str) -> HttpResponse:
    """The chat's forget dialog: the messages that quote or restate this one, to forget with it
    (the socket's forget frame does the forgetting)."""
    msg = _get_message_for_user(request, message_id)
    return render(request, "chat/_forget.html", {"message": msg, "dialog": echoes.dialog(request.user, msg)})


def _wants_pinned(request: HttpRequest) -> bool:
    return (request.POST.get("pinned") or "true").strip().lower() in {"1", "true", "on", "yes"}


@login_required
@require_POST
@counted
def pin_message(request: HttpRequest, message_id: str) -> HttpResponse:
    """Pin (pinned=true) or unpin (pinned=false) a message: a pinned one is always shown to the
    model in its memory index, until unpinned or deleted."""
    msg = _get_message_for_user(request, message_id).set_pinned(_wants_pinned(request))
    if request.htmx:
        return render(request, "chat/_pin.html", {"m": msg})
    return _redirect_to_message(msg)


@login_required
@require_POST
def rename_conversation(request: HttpRequest, conversation_id: str) -> HttpResponse:
    conv = _get_conversation_for_user(request, conversation_id)
    conv.title = _posted_title(request)
    conv.save(update_fields=["title", "updated_at"])
    if request.htmx:
        template = (
            "chat/conversation.html#title"
            if request.POST.get("from") != "list"
            else "chat/home.html#conversation-row"
        )
        return render(request, template, {"c": conv, "conversation": conv})
    return redirect("chat:conversation", conversation_id=conv.pk)


@login_required
@require_POST
@counted
def delete_conversation(request: HttpRequest, conversation_id: str) -> HttpResponse:
    conv = _get_conversation_for_user(request, conversation_id)
    deleting.delete_conversation(request.user, conv.pk)
    if request.htmx:
        return HttpResponse("")
    return redirect("chat:home")
