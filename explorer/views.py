from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from memory.models import Conversation, Message, Passage, ToolCall


@login_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    user = request.user
    stats = {
        "conversations": Conversation.objects.owned_by(user).count(),
        "messages": Message.objects.visible_to(user).logical().count(),
        "chunks": Message.objects.visible_to(user).filter(is_chunk=True).count(),
        "tool_calls": ToolCall.objects.owned_by(user).logical().count(),
        "passages": Passage.objects.owned_by(user).count(),
        "unembedded": Passage.objects.owned_by(user).filter(embedding__isnull=True).count(),
    }
    return render(request, "explorer/overview.html", {"stats": stats})
