"""Pages of the chat: accounts, the conversation list and a conversation."""

from __future__ import annotations

import functools

from django.conf import settings
from django.contrib import messages as flash
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from chat import branches, conversation_list, drafts, llm
from chat.models import ReplyDraft
from config.limits import LimitReached
from config.models import ActionAllowance
from memory import tasks
from memory.knowledge import facts
from memory.lifecycle import deleting, echoes, erasing
from memory.models import Conversation, Message, Preferences, Role
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


def _list_context(request: HttpRequest, *, archived: bool = False, current: str = "") -> dict:
    """The conversation list as the page or its htmx swap shows it: a search's matches (`q`), or
    a page of conversations under their date groups (`page`; `last`: the group the page before
    ended with, whose heading is not repeated)."""
    q = (request.GET.get("q") or "").strip()[:200]
    page = _page_number(request.GET.get("page"))
    if q:
        rows, more = conversation_list.search(request.user, q, archived=archived), False
    else:
        rows, more = conversation_list.page_of(request.user, archived=archived, page=page)
    groups = conversation_list.grouped(rows)
    last = (request.GET.get("last") or "")[:40]
    if groups and groups[0].label == last:
        groups[0].continued = True
    return {
        "groups": groups,
        "q": q,
        "more": more,
        "next_page": page + 1,
        "archived": archived,
        "current": current or (request.GET.get("current") or "")[:40],
        "show_when": request.GET.get("when") == "1" or not current,
    }


def _page_number(raw: str | None) -> int:
    try:
        return max(1, min(int(raw or 1), 10_000))
    except ValueError:
        return 1


@login_required
@require_GET
@vary_on_headers("HX-Request")
def home(request: HttpRequest) -> HttpResponse:
    """The conversation list: searched (by title and content), or by date, a page at a time."""
    context = _list_context(request)
    if request.htmx:
        return render(request, "chat/_conversation_list.html#groups", context)
    return render(request, "chat/home.html", context)


@login_required
@require_GET
@vary_on_headers("HX-Request")
def archived(request: HttpRequest) -> HttpResponse:
    context = _list_context(request, archived=True)
    if request.htmx:
        return render(request, "chat/_conversation_list.html#groups", context)
    return render(request, "chat/archived.html", context)


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
    """A new chat: remembered unless the person switched "Remember new chats" off; a temporary
    one (temporary=1) is never remembered and ends when they leave it."""
    temporary = request.POST.get("temporary") in {"1", "true", "on"}
    remembered = not temporary and Preferences.of(request.user).remember_chats
    conversation = Conversation.objects.create(
        owner=request.user, title=_posted_title(request), temporary=temporary, remembered=remembered
    )
    if temporary:
        tasks.queue_temporary_chat_end(request.user.pk, conversation.created_at)
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
    return render(
        request,
        "chat/conversation.html",
        {
            "conversation": conv,
            "streaming_row": Message(role="assistant"),
            "prefs": Preferences.of(request.user),
            "conversation_model": llm.model_for(conv),
            "temporary_hours": settings.TEMPORARY_CHAT_HOURS,
            **_list_context(request, current=conv.pk),
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


def _refused(text: str, status: int = 400) -> HttpResponse:
    """A refusal the page shows as it is (chat.js shows a text/plain answer to htmx)."""
    return HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")


def _row(request: HttpRequest, conv: Conversation) -> HttpResponse:
    """A conversation's row of the list, as changed (htmx swaps it in)."""
    row = conversation_list.Row(conv)
    current = (request.POST.get("current") or "")[:40]
    context = {"row": row, "current": current, "show_when": request.POST.get("when") == "1"}
    return render(request, "chat/_conversation_list.html#row", context)


@login_required
@require_POST
def rename_conversation(request: HttpRequest, conversation_id: str) -> HttpResponse:
    conv = _get_conversation_for_user(request, conversation_id)
    conv.title = _posted_title(request)
    # A name the person gives is theirs (the model never renames it), and moves nothing up.
    Conversation.objects.filter(pk=conv.pk).update(title=conv.title, titled_by_model=False)
    if request.htmx:
        if request.POST.get("from") == "list":
            return _row(request, conv)
        return render(request, "chat/conversation.html#title", {"conversation": conv})
    return redirect("chat:conversation", conversation_id=conv.pk)


@login_required
@require_POST
def archive_conversation(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """Archive (archived=true) or bring back (archived=false): out of the list, still memory."""
    conv = _get_conversation_for_user(request, conversation_id)
    if conv.temporary:
        return _refused("A temporary chat cannot be archived.")
    archive = (request.POST.get("archived") or "true").strip().lower() in {"1", "true", "on", "yes"}
    conv.archived_at = timezone.now() if archive else None
    Conversation.objects.filter(pk=conv.pk).update(archived_at=conv.archived_at)
    if request.htmx:
        if request.POST.get("from") == "list":
            return HttpResponse("")  # it leaves the list it was in
        return HttpResponse(headers={"HX-Refresh": "true"})
    if archive:
        flash.success(request, f"Archived “{conv}”. It is under Archived chats, and still in memory.")
        return redirect("chat:home")
    return redirect("chat:conversation", conversation_id=conv.pk)


@login_required
@require_POST
@counted
def delete_conversation(request: HttpRequest, conversation_id: str) -> HttpResponse:
    conv = _get_conversation_for_user(request, conversation_id)
    deleting.delete_conversation(request.user, conv.pk)
    leaving = (request.POST.get("current") or "") == conv.pk or request.POST.get("from") != "list"
    if request.htmx:
        # The page of the conversation deleted has nothing left to show.
        return HttpResponse("", headers={"HX-Redirect": reverse("chat:home")} if leaving else None)
    return redirect("chat:home")


@login_required
@require_POST
def leave_temporary_chat(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """The person left a temporary chat (the page says so as it goes, navigator.sendBeacon): it
    is deleted with everything in it. Another conversation is never deleted here."""
    conv = _get_conversation_for_user(request, conversation_id)
    if not conv.temporary:
        return _refused("Only a temporary chat ends when it is left.")
    erasing.end_temporary_chat(request.user, conv.pk)
    return HttpResponse(status=204)


@login_required
@require_POST
def set_model(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """The model this conversation talks to, one of CHAT_MODELS (its next reply on)."""
    conv = _get_conversation_for_user(request, conversation_id)
    model = (request.POST.get("model") or "").strip()
    if model not in settings.CHAT_MODELS:
        return _refused(f"“{model[:80]}” is not one of the models this server offers.")
    Conversation.objects.filter(pk=conv.pk).update(model="" if model == settings.CHAT_MODEL else model)
    if request.htmx:
        return HttpResponse(status=204)
    return redirect("chat:conversation", conversation_id=conv.pk)
