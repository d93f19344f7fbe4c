"""The explorer's search says when nothing matches, shows what is only near in meaning under a
heading that says so, and says when it took too long; a page that reads for too long answers
503 saying so, instead of hanging."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from memory.storage import store
from tests.memory.test_timeouts import locked

pytestmark = pytest.mark.django_db


def search_page(client, q: str) -> str:
    response = client.get(reverse("explorer:search") + "?q=" + q)
    assert response.status_code == 200
    return response.content.decode()


def test_a_word_that_exists_nowhere_says_no_matches_and_lists_nothing_as_a_match(
    owner_client, owner, conversation
):
    for text in ["The boiler needs servicing in March.", "Anna moved to Porto last spring.",
                 "Remind me to water the basil.", "Our wifi password is on the fridge."]:
        store.store_message(owner, conversation, "user", text)
    page = search_page(owner_client, "quorbellinex")
    assert "No matches: no message holds “quorbellinex” or any of its words." in page
    results = page[page.index('id="search-results"'):]
    near = results.index("Near in meaning") if "Near in meaning" in results else len(results)
    assert 'class="result"' not in results[:near]  # nothing unrelated passed off as a match
    assert 'rel="next"' not in results


def test_matches_hold_the_querys_words_and_near_results_come_apart_under_their_heading(
    owner_client, owner, conversation, monkeypatch
):
    from memory.embedders import get_embedder

    basil = store.store_message(owner, conversation, "user", "Remind me to water the basil on Sunday.")
    boiler = store.store_message(owner, conversation, "user", "The boiler needs servicing in March.")
    # Whatever the embedder's cosines, everything it returns counts as near here.
    monkeypatch.setattr(type(get_embedder()), "near_similarity", -1.0)
    page = search_page(owner_client, "basil")
    matches, near = page.split("Near in meaning") if "Near in meaning" in page else (page, "")
    assert reverse("explorer:message", args=[basil.pk]) in matches
    assert reverse("explorer:message", args=[boiler.pk]) not in matches
    assert reverse("explorer:message", args=[boiler.pk]) in near
    assert "None of these holds your words" in near


@pytest.mark.django_db(transaction=True)
def test_a_search_that_takes_too_long_says_so(owner, conversation, settings):
    store.store_message(owner, conversation, "user", "The gardening tea is on Saturday.", embed=False)
    settings.QUERY_TIMEOUT_MS = 400
    settings.VECTOR_SEARCH_TIMEOUT_MS = 400
    client = Client()
    client.force_login(owner)
    with locked("memory_message"):
        page = search_page(client, "gardening+tea")
    assert "The search took too long (more than 0.4 s) and was stopped" in page


@pytest.mark.django_db(transaction=True)
def test_a_page_that_reads_for_too_long_answers_503_saying_so(owner, conversation, settings):
    store.store_message(owner, conversation, "user", "The gardening tea is on Saturday.", embed=False)
    settings.QUERY_TIMEOUT_MS = 400
    client = Client(raise_request_exception=False)
    client.force_login(owner)
    with locked("memory_message"):
        response = client.get(reverse("explorer:timeline"))
    assert response.status_code == 503
    assert "This page took too long" in response.content.decode()
    assert client.get(reverse("explorer:timeline")).status_code == 200  # and nothing is left behind
