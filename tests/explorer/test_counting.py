"""Counts and pages that stay bounded on a big memory and exact on a small one."""

from __future__ import annotations

import pytest
from django.urls import reverse

from explorer.counting import CappedPaginator, Tally, bounded_count, capped_page
from memory.models import Message

pytestmark = pytest.mark.django_db


def test_a_small_count_is_exact(owner, mem):
    live = Message.objects.visible_to(owner).logical()
    tally = bounded_count(live)
    assert tally == Tally(live.count()) and tally.exact
    assert str(tally) == f"{live.count():,}"


def test_a_count_past_the_cap_is_an_estimate_never_below_the_cap(owner, mem):
    live = Message.objects.owned_by(owner)
    tally = bounded_count(live, cap=2)
    assert not tally.exact and tally.value >= 3
    assert str(tally).startswith("about ")


def test_a_distinct_count_counts_distinct_values(owner, mem):
    ids = Message.objects.owned_by(owner).values("conversation_id").distinct()
    assert bounded_count(ids) == Tally(1)


def test_the_paginator_counts_only_past_the_page_asked_for(owner, mem):
    qs = Message.objects.owned_by(owner).order_by("timestamp", "id")
    total = qs.count()
    paginator = CappedPaginator(qs, 1, cap=2)
    assert paginator.count == 3 and not paginator.count_exact
    assert capped_page(qs, "2", 1).paginator.count == total
    assert capped_page(qs, "junk", 1).number == 1
    assert capped_page(qs, "99999999", 1).number == total


def test_a_long_list_says_more_than_and_offers_no_last_page(owner_client, mem, monkeypatch):
    monkeypatch.setattr(
        "explorer.views.common.capped_page",
        lambda items, number, per_page: CappedPaginator(items, 1, cap=1).get_page(1),
    )
    page = owner_client.get(reverse("explorer:timeline") + "?granularity=month&period=" + _month(mem)).content
    text = page.decode()
    assert "more than" in text and "last »" not in text


def _month(mem) -> str:
    return mem.question.timestamp.date().replace(day=1).isoformat()
