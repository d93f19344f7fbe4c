"""One message: its page, its versions and their diffs, and what may be done to it (edit,
delete and restore, pin, forget), each change counted against the user's action allowance.
"""

from __future__ import annotations

import functools
from typing import Any

from django.contrib import messages as flash
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from config.limits import LimitReached
from config.models import ActionAllowance
from explorer.views.common import MAX_ID, paginate, render_page
from explorer.views.diff import diff_segments
from memory.errors import MemoryStoreError, NotFound
from memory.finding.search import similar_messages
from memory.lifecycle import deleting, echoes, forgetting
from memory.models import ContextSnapshot, Message
from memory.storage import store

CONTENT_PREVIEW_CHARS = 60_000


def _get_message_for_user(user, message_id: str) -> Message:
    """The user's message, deleted or not (the explorer is where deleted ones are restored)."""
    if len(message_id) > MAX_ID:
        raise Http404("no such message")
    message = Message.objects.owned_by(user).select_related("conversation").filter(pk=message_id).first()
    if message is None:
        raise Http404("no such message")
    return message


def _versions(message: Message) -> list[dict[str, Any]]:
    """Every version oldest first: the edit history's previous texts, then the current text."""
    versions = []
    for i, entry in enumerate(message.edit_history or []):
        if not isinstance(entry, dict):
            continue
        versions.append(
            {
                "number": i,
                "content": str(entry.get("previous_content", "")),
                "replaced_at": str(entry.get("timestamp", ""))[:19].replace("T", " "),
                "tokens": entry.get("previous_token_count"),
            }
        )
    versions.append(
        {
            "number": len(versions),
            "content": message.content,
            "replaced_at": None,
            "tokens": message.token_count,
            "current": True,
        }
    )
    return versions


def _message_context(request: HttpRequest, message: Message) -> dict[str, Any]:
    user = request.user
    chunks_page = paginate(request, message.chunks.order_by("chunk_index"), param="chunks", per_page=5)
    related = Message.objects.owned_by(user).select_related("conversation")
    parent = related.filter(pk=message.parent_id).first() if message.parent_id else None
    replies_qs = related.logical().filter(parent_id=message.pk).order_by("position")
    siblings_qs = (
        related.logical().filter(parent_id=message.parent_id).exclude(pk=message.pk).order_by("position")
        if message.parent_id
        else Message.objects.none()
    )
    in_conv = Message.objects.owned_by(user).logical().filter(conversation_id=message.conversation_id)
    previous = in_conv.filter(position__lt=message.position).order_by("-position").first()
    following = in_conv.filter(position__gt=message.position).order_by("position").first()
    versions = _versions(message)
    tool_calls_qs = message.tool_calls.filter(is_chunk=False).order_by("timestamp")
    snapshot = ContextSnapshot.objects.owned_by(user).filter(message=message).only("id").first()
    content = message.content
    return {
        "section": "message",  # no tab: a message is reached from many pages
        "message": message,
        "content": content[:CONTENT_PREVIEW_CHARS],
        "content_truncated": len(content) > CONTENT_PREVIEW_CHARS,
        "chunks_page": chunks_page,
        "parent": parent,
        "replies": list(replies_qs[:20]),
        "replies_count": replies_qs.count(),
        "siblings": list(siblings_qs[:20]),
        "siblings_count": siblings_qs.count() if message.parent_id else 0,
        "previous": previous,
        "following": following,
        "versions": versions,
        "edits": versions[:-1],
        "tool_calls": list(tool_calls_qs[:20]),
        "tool_calls_count": tool_calls_qs.count(),
        "memberships": list(message.topic_memberships.select_related("topic").order_by("-score")[:10]),
        "mentions": list(message.entity_mentions.select_related("entity").order_by("-count")[:30]),
        "similar": similar_messages(user, message) if not message.deleted else [],
        "snapshot": snapshot,
    }


@login_required
@require_GET
@vary_on_headers("HX-Request")
def message_detail(request: HttpRequest, message_id: str) -> HttpResponse:
    message = _get_message_for_user(request.user, message_id)
    if message.is_chunk:
        url = reverse("explorer:message", args=[message.chunk_parent_id])
        return redirect(f"{url}#chunk-{message.chunk_index}")
    context = _message_context(request, message)
    return render_page(request, "explorer/message.html", "chunk-list", context)


def counted(view):
    """A change to memory made here counts against the same per-user limit as the chat's
    (CHAT_RATE_LIMIT_PER_MINUTE): past it the change is refused with 429 and nothing is done."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, message_id: str, *args, **kwargs) -> HttpResponse:
        if request.method == "POST":
            try:
                ActionAllowance.count_action(request.user)
            except LimitReached as exc:
                if request.htmx:
                    return HttpResponse(exc.message, status=429, content_type="text/plain; charset=utf-8")
                flash.error(request, exc.message)
                response = redirect("explorer:message", message_id=message_id)
                response.status_code = 303
                return response
        return view(request, message_id, *args, **kwargs)

    return wrapper


@login_required
@require_POST
@counted
def message_edit(request: HttpRequest, message_id: str) -> HttpResponse:
    """Correct a message's text: same id, the old text kept in the edit history, re-chunked and
    re-embedded by memory.storage.store; topic upkeep then places it again in the background."""
    message = _get_message_for_user(request.user, message_id)
    text = request.POST.get("content", "")
    try:
        edited = store.update_message(request.user, message.pk, text)
    except MemoryStoreError as exc:
        if message.is_chunk:
            message = _get_message_for_user(request.user, message.chunk_parent_id)
        context = _message_context(request, message)
        context.update(edit_error=str(exc), edit_text=text[:CONTENT_PREVIEW_CHARS])
        return render(request, "explorer/message.html", context, status=400)
    if edited.edit_history != message.edit_history:
        # A conversation named after its first message takes the new text's name.
        message.conversation.retitle_after_edit(edited, message.content)
        # The store queued topic upkeep for the edit when it committed.
        flash.success(request, "Saved: the old text is kept in the edit history below.")
    else:
        flash.info(request, "The text is unchanged, so nothing was saved.")
    return redirect("explorer:message", message_id=edited.pk)


@login_required
@require_GET
def message_diff(request: HttpRequest, message_id: str, version: int) -> HttpResponse:
    """The diff from version `version` to the one after it."""
    message = _get_message_for_user(request.user, message_id)
    versions = _versions(message)
    if version >= len(versions) - 1:
        raise Http404("no such edit")
    before, after = versions[version], versions[version + 1]
    context = {
        "section": "message",  # no tab: a message is reached from many pages
        "message": message,
        "before": before,
        "after": after,
        "segments": diff_segments(before["content"], after["content"]),
    }
    if request.htmx:
        return render(request, "explorer/message.html#edit-diff", context)
    return render(request, "explorer/diff.html", context)


def _change_state(request: HttpRequest, message_id: str, *, delete: bool) -> HttpResponse:
    message = _get_message_for_user(request.user, message_id)
    error = ""
    try:
        if delete:
            message = deleting.delete_message(request.user, message.pk)
        else:
            message = deleting.restore_message(request.user, message.pk)
    except MemoryStoreError as exc:
        error = str(exc)
    if request.htmx:
        return render(request, "explorer/message.html#message-state", {"message": message, "error": error})
    if error:
        flash.error(request, error)
    elif delete:
        flash.success(request, "Deleted: the assistant will not recall this message. Restore undoes it.")
    else:
        flash.success(request, "Restored: the assistant can recall this message again.")
    return redirect("explorer:message", message_id=message.pk)


@login_required
@require_POST
@counted
def message_delete(request: HttpRequest, message_id: str) -> HttpResponse:
    return _change_state(request, message_id, delete=True)


@login_required
@require_POST
@counted
def message_restore(request: HttpRequest, message_id: str) -> HttpResponse:
    return _change_state(request, message_id, delete=False)


@login_required
@require_POST
@counted
def message_pin(request: HttpRequest, message_id: str) -> HttpResponse:
    """Pin (pinned=true) or unpin (pinned=false): a pinned message is always in the model's memory
    index, until it is unpinned or deleted."""
    pinned = (request.POST.get("pinned") or "true").strip().lower() in {"1", "true", "on", "yes"}
    message = _get_message_for_user(request.user, message_id).set_pinned(pinned)
    if request.htmx:
        return render(request, "explorer/message.html#pin-state", {"message": message})
    flash.success(request, "Pinned: always shown to the assistant." if pinned else "Unpinned.")
    return redirect("explorer:message", message_id=message.pk)


@login_required
@require_http_methods(["GET", "POST"])
@counted
def message_forget(request: HttpRequest, message_id: str) -> HttpResponse:
    """Forgetting is permanent, so it asks first and needs the confirmation box ticked. The
    messages that echo it are listed, to forget with it (replies that repeat its rare words or
    copy it are ticked already), and so is what memory made that holds its rare words (ticked:
    they lose them)."""
    message = _get_message_for_user(request.user, message_id)
    if message.is_chunk:
        return redirect("explorer:forget", message_id=message.chunk_parent_id)
    error = ""
    if request.method == "POST":
        if request.POST.get("confirm") == "forget":
            conversation_id = message.conversation_id
            try:
                # The echoes it listed and a person unticked keep the rare words.
                keep = set(request.POST.getlist("listed")) - set(request.POST.getlist("echoes"))
                forgotten = forgetting.forget_message(
                    request.user, message.pk, copies=request.POST.getlist("copies"), keep=keep
                )
            except NotFound:
                raise Http404("No such message.") from None
            except MemoryStoreError as exc:
                error = str(exc)
            else:
                also = len(forgotten) - 1
                flash.success(
                    request,
                    "Forgotten: the message, its chunks and its tool calls are gone for good"
                    + (f", with {also} message{'s' if also != 1 else ''} echoing it." if also else "."),
                )
                return redirect(f"{reverse('explorer:timeline')}?conversation={conversation_id}")
        else:
            error = "Tick the box to confirm: forgetting cannot be undone."
    return render(
        request,
        "explorer/forget.html",
        {
            "section": "message",
            "message": message,
            "error": error,
            "tool_calls_count": message.tool_calls.filter(is_chunk=False).count(),
            "chunks_count": message.chunks.count(),
            "dialog": echoes.dialog(request.user, message),
        },
        status=400 if error else 200,
    )


@login_required
@require_GET
def message_context(request: HttpRequest, message_id: str) -> HttpResponse:
    """From an assistant turn (e.g. in the chat) to what the model was shown for it."""
    message = _get_message_for_user(request.user, message_id)
    snap = ContextSnapshot.objects.owned_by(request.user).filter(message_id=message.logical_id).first()
    if snap is None:
        raise Http404("no context was recorded for this message")
    return redirect("explorer:context", snapshot_id=snap.pk)
