"""What the explorer's pages share: one page of a list, the page or its htmx partial, and the
message filters. Every list is paginated, so no page reads an unbounded number of rows however
large the memory grows.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from explorer.counting import capped_page
from explorer.filters import Filters
from memory.models import Conversation, Message
from memory.organizing import topic_tree

PAGE_SIZE = 25
# The longest id and the largest integer key a URL may name: past them, no lookup is made.
MAX_PK = 2**63 - 1
MAX_ID = 40


def paginate(request: HttpRequest, items, *, param: str = "page", per_page: int = PAGE_SIZE) -> Page:
    """One page of `items`; a missing, malformed or too large page number gives page 1 / the last.
    A long list is counted only a little past the page asked for (see explorer.counting)."""
    return capped_page(items, request.GET.get(param), per_page)


def render_page(
    request: HttpRequest,
    template: str,
    partial: str | None,
    context: dict[str, Any],
    *,
    status: int = 200,
) -> HttpResponse:
    name = f"{template}#{partial}" if request.htmx and partial else template
    return render(request, name, context, status=status)


def apply_message_filters(user, qs: QuerySet[Message], f: Filters) -> QuerySet[Message]:
    if f.conversation:
        qs = qs.filter(conversation=f.conversation)
    if f.role:
        qs = qs.filter(role=f.role)
    if f.start_dt:
        qs = qs.filter(timestamp__gte=f.start_dt)
    if f.end_dt:
        qs = qs.filter(timestamp__lt=f.end_dt)
    if f.topic:
        qs = qs.filter(topic_tree.in_topic(user, f.topic))
    return qs


def conversation_choices(user) -> list[Conversation]:
    # Not a temporary chat: it is no part of memory, and goes when it is left.
    return list(Conversation.objects.owned_by(user).filter(temporary=False).only("id", "title")[:200])
