"""The conversation list: grouped by when each was last active (Today, Yesterday, Previous 7
days, Previous 30 days, then by month), a page at a time, and searched by title and content.

A conversation's time is `updated_at`: the last message stored (an import sets it to its last
message's time, so a 2023 conversation files under March 2023, not Today). Temporary chats
are never listed; archived ones have their own view. Which conversations hold some words is
memory's to say (memory.finding.conversations).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from functools import cache

from django.db.models import QuerySet
from django.urls import get_script_prefix, reverse
from django.utils import timezone
from django.utils.dateformat import format as date_format

from memory.finding import conversations
from memory.models import Conversation

PAGE = 100
SEARCH_LIMIT = 50
SNIPPET_CHARS = 140


@dataclass
class Group:
    label: str
    rows: list[Row] = field(default_factory=list)
    continued: bool = False  # goes on from the page before, under the heading shown there


@dataclass
class Row:
    conversation: Conversation
    snippet: str = ""  # where a search found its words, when not in its title

    @property
    def links(self) -> dict[str, str]:
        """The row's link and its menu's actions (open, rename, archive, delete)."""
        pk = str(self.conversation.pk)
        return {name: url.replace(_ANY_ID, pk) for name, url in _link_patterns(get_script_prefix()).items()}


_ANY_ID = "--conversation--"


@cache
def _link_patterns(script_prefix: str) -> dict[str, str]:
    # Reversed once and filled in per row: {% url %} four times a row was half of the time a
    # list of 100 took to render.
    names = {"open": "conversation", "rename": "rename_conversation",
             "archive": "archive_conversation", "delete": "delete_conversation"}
    return {key: reverse(f"chat:{name}", args=[_ANY_ID]) for key, name in names.items()}


def group_label(when: dt.datetime, now: dt.datetime) -> str:
    """Today, Yesterday, Previous 7 days, Previous 30 days, then "May" (this year) or
    "May 2024"."""
    day = timezone.localtime(when).date()
    today = timezone.localtime(now).date()
    age = (today - day).days
    if age <= 0:
        return "Today"
    if age == 1:
        return "Yesterday"
    if age <= 7:
        return "Previous 7 days"
    if age <= 30:
        return "Previous 30 days"
    return date_format(timezone.localtime(when), "F" if day.year == today.year else "F Y")


def grouped(rows: list[Row], now: dt.datetime | None = None) -> list[Group]:
    """Rows (newest first) under their group labels, in order."""
    now = now or timezone.now()
    groups: list[Group] = []
    for row in rows:
        label = group_label(row.conversation.updated_at, now)
        if not groups or groups[-1].label != label:
            groups.append(Group(label))
        groups[-1].rows.append(row)
    return groups


def _listing(qs: QuerySet[Conversation]) -> QuerySet[Conversation]:
    return qs.only("id", "title", "updated_at", "archived_at", "remembered", "temporary").order_by(
        "-updated_at", "-id"
    )


def page_of(user, *, archived: bool = False, page: int = 1) -> tuple[list[Row], bool]:
    """One page of the person's conversations (newest first), and whether more follow."""
    mine = Conversation.objects.owned_by(user)
    qs = _listing(mine.archived() if archived else mine.listed())
    start = (max(1, page) - 1) * PAGE
    found = list(qs[start : start + PAGE + 1])
    return [Row(c) for c in found[:PAGE]], len(found) > PAGE


def search(user, query: str, *, archived: bool = False) -> list[Row]:
    """The person's conversations (archived ones too, or only those) whose title has the query's
    words, or whose messages do (by Postgres full-text search, the last word as a prefix: "lasag"
    finds "lasagne"), newest first; a content match shows where its words are."""
    words = conversations.query_words(query)
    if not words:
        return []
    mine = Conversation.objects.owned_by(user).filter(temporary=False)
    if archived:
        mine = mine.filter(archived_at__isnull=False)
    titled = mine
    for word in words:
        titled = titled.filter(title__icontains=word)
    found = {c.pk: Row(c) for c in _listing(titled)[:SEARCH_LIMIT]}
    said = conversations.holding(user, words, archived_only=archived, limit=SEARCH_LIMIT)
    matches = [(pk, text) for pk, text in said if pk not in found]
    listed = _listing(mine).in_bulk([pk for pk, _ in matches])
    for pk, text in matches:
        if pk in listed:
            found[pk] = Row(listed[pk], _snippet(text, words))
    rows = sorted(found.values(), key=lambda r: (r.conversation.updated_at, r.conversation.pk), reverse=True)
    return rows[:SEARCH_LIMIT]


def _snippet(text: str, words: list[str]) -> str:
    """A line of `text` around the first of `words` it holds."""
    flat = " ".join(text.split())
    lower = flat.lower()
    at = min((i for i in (lower.find(w) for w in words) if i >= 0), default=0)
    start = max(0, at - SNIPPET_CHARS // 3)
    if start:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < at else start
    piece = flat[start : start + SNIPPET_CHARS]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_CHARS < len(flat) else "")
