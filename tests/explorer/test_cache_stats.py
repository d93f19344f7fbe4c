"""The explorer's Advanced page shows the semantic cache's hits and misses, the owner's own only."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory.finding import semantic_cache

pytestmark = pytest.mark.django_db


def _cache_section(client) -> str:
    page = client.get(reverse("explorer:advanced")).content.decode()
    start = page.index('id="caches"')
    return page[start : page.index("</section>", start)]


def test_advanced_shows_cache_hits_misses_and_hit_rate(client, owner, stranger):
    for hit in (True, True, True, False):
        semantic_cache.count(owner.pk, "search", hit=hit)
    semantic_cache.count(stranger.pk, "response", hit=True)
    client.force_login(owner)
    section = _cache_section(client)
    assert "Memory searches</th><td>3</td><td>1</td><td>75%" in section
    # No reply looked up yet (and the stranger's hit is not the owner's): no rate to show.
    assert "Replies" in section and "(off: RESPONSE_CACHE)" in section
    assert "<td>0</td><td>0</td><td><span class=\"muted\">—</span>" in section
    client.force_login(stranger)
    assert "Replies</th><td>1</td><td>0</td><td>100%" in _cache_section(client).replace(
        ' <span class="muted">(off: RESPONSE_CACHE)</span>', ""
    )
