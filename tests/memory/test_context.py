"""A passage is searched with its context: the speaker and the end of the turn it replies to.
Memory follows the turn it quotes: edited, deleted, restored or forgotten."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from memory.context.tools import execute_tool
from memory.finding.candidates import _keyword_candidates
from memory.finding.search import SearchFilters, SearchResults, search
from memory.lifecycle.deleting import delete_message, restore_message
from memory.lifecycle.forgetting import forget_message
from memory.models import Passage
from memory.storage.store import NewMessage, store_messages, update_message

pytestmark = pytest.mark.django_db


def thread(owner, conversation, turns, *, speakers=None, start=None):
    """Store `turns` as one thread, each replying to the one before (as an import does)."""
    start = start or timezone.now() - dt.timedelta(days=2)
    items, parent = [], None
    for i, text in enumerate(turns):
        metadata = {"speaker": speakers[i % len(speakers)]} if speakers else {}
        item = NewMessage(
            role="user" if i % 2 == 0 else "assistant",
            content=text,
            timestamp=start + dt.timedelta(seconds=30 * i),
            parent_id=parent,
            metadata=metadata,
        )
        parent = item.id
        items.append(item)
    return store_messages(owner, conversation, items, embed=True)


NOISE = [
    "we should water the plants on the balcony",
    "the meeting moved to Thursday afternoon",
    "my phone battery dies so fast lately",
    "the bakery on the corner closed for good",
    "I finally fixed the squeaky door hinge",
    "the weather has been grey all week",
]


def test_a_short_reply_is_found_by_the_subject_of_the_turn_before(owner, conversation):
    msgs = thread(
        owner,
        conversation,
        [*NOISE[:3], "Did you ever paint that lake at sunrise you told me about?", "Yes, last year!",
         *NOISE[3:]],
    )
    reply = msgs[4]
    hits = search(owner, "when was the lake sunrise painted", limit=3).hits
    assert reply.pk in [h.message_id for h in hits]
    # The reply's snippet and passage text stay its own words.
    hit = next(h for h in hits if h.message_id == reply.pk)
    assert hit.passage_text == "Yes, last year!"


def test_speaker_names_are_searchable_with_their_turns(owner, conversation):
    msgs = thread(
        owner, conversation, ["I started pottery classes", "I started pottery classes too"],
        speakers=["Caroline", "Melanie"],
    )
    hits = search(owner, "Melanie pottery", limit=1).hits
    assert hits[0].message_id == msgs[1].pk
    assert Passage.objects.get(message_id=msgs[1].pk).context.endswith("Melanie:")


def test_a_deleted_turn_leaves_its_replys_context_and_comes_back_on_restore(owner, conversation):
    msgs = thread(owner, conversation, [*NOISE[:2], "my locker code is zebracorn", "noted!", *NOISE[2:]])
    secret, reply = msgs[2], msgs[3]
    assert reply.pk in [h.message_id for h in search(owner, "zebracorn").hits]
    delete_message(owner, secret.pk)
    assert _keyword_candidates(owner, "zebracorn", SearchFilters(), 10, SearchResults("")) == []
    assert secret.pk not in {h.message_id for h in search(owner, "zebracorn").hits}
    assert "zebracorn" not in Passage.objects.get(message_id=reply.pk).context
    restore_message(owner, secret.pk)
    assert {secret.pk, reply.pk} <= {h.message_id for h in search(owner, "zebracorn").hits}


def test_an_edit_reaches_the_replys_context(owner, conversation):
    msgs = thread(owner, conversation, ["we adopted a cat named Pumpkin", "lovely name!"])
    update_message(owner, msgs[0].pk, "we adopted a cat named Biscuit")
    reply = Passage.objects.get(message_id=msgs[1].pk)
    assert "Biscuit" in reply.context and "Pumpkin" not in reply.context
    assert reply.embedding is not None, "the changed passage is embedded again"
    assert _keyword_candidates(owner, "Pumpkin", SearchFilters(), 10, SearchResults("")) == []


def test_forgetting_a_turn_rewrites_its_replys_context_from_its_new_parent(owner, conversation):
    msgs = thread(owner, conversation, ["the boat is called Heron", "my pin is quokka4411", "ok!"])
    forget_message(owner, msgs[1].pk)
    reply = Passage.objects.get(message_id=msgs[2].pk)
    assert "quokka" not in reply.context and "Heron" in reply.context
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM memory_passage WHERE owner_id = %s AND "
            "(text ILIKE '%%quokka%%' OR context ILIKE '%%quokka%%')",
            [owner.pk],
        )
        assert cursor.fetchone()[0] == 0


def test_a_turn_never_finds_its_own_message(owner, conversation):
    msgs = thread(owner, conversation, [*NOISE, "where did I put the spare bike key?"])
    own = msgs[-1]
    assert own.pk in [h.message_id for h in search(owner, own.content).hits]
    assert own.pk not in [h.message_id for h in search(owner, own.content, exclude_message_ids=[own.pk]).hits]
    outcome = execute_tool(
        owner, "vector_search", {"query": own.content}, conversation=conversation,
        exclude_message_ids=[own.pk],
    )
    assert outcome.ok
    assert own.pk not in [r["message_id"] for r in outcome.result["results"]]


def test_a_participants_greetings_do_not_outrank_what_they_said(owner, conversation):
    """A name in a third of the history is no signal: the answer outranks the greetings."""
    turns = []
    for i in range(6):
        turns += [f"Hey Melanie! How was your week? {NOISE[i]}", f"Hi Caroline! {NOISE[(i + 1) % 6]}"]
    turns += ["Did you ever finish a painting?", "Yeah, I painted that lake sunrise last year!"]
    msgs = thread(owner, conversation, turns, speakers=["Caroline", "Melanie"])
    hits = search(owner, "When did Melanie paint a sunrise?", limit=3).hits
    assert hits[0].message_id == msgs[-1].pk
