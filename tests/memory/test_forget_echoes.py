"""Forget finds echoes by what is distinctive (issue 32 §1): a reply that repeats a rare word,
a later search whose query and result hold it, the titles, topics, names and facts that do;
common phrases never make a copy. After the forget no row of any table holds the word."""

from __future__ import annotations

import json

import pytest

from memory.context.tools import execute_tool
from memory.finding.search import search
from memory.lifecycle import echoes
from memory.lifecycle.forgetting import forget_message
from memory.lifecycle.overlap import Overlap, rare_words, unusual_words
from memory.models import Conversation, Entity, Fact, Message, ToolCall, Topic
from memory.storage.store import store_tool_call
from tests.chat.test_forgetting import rows_containing
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

pytestmark = pytest.mark.django_db

WORD = "quorbelline"
SECRET = f"My bank's memorable word is {WORD}. Can you help me make a note of where I keep it?"
LEEDS = "We're moving from Leeds in the spring. Can you help me make a packing list for the kitchen?"


@pytest.fixture
def bank(owner, conversation):
    """The issue's first case: the secret, a reply that repeats its word, an unrelated message
    that shares only a common phrase, and everyday chat."""
    secret, reply, leeds, answer = add_turns(owner, conversation, [
        SECRET,
        f"Noted. I won't repeat it, but your memorable word {WORD} is kept in your password manager notes.",
        LEEDS,
        "Here is a packing list: plates, pans, the kettle and the toaster.",
    ])
    add_turns(owner, Conversation.objects.create(owner=owner, title="Everyday"), EVERYDAY_TEXTS)
    return secret, reply, leeds, answer


def test_a_words_rarity_is_read_from_english_and_from_the_owners_memory(owner, conversation, bank):
    unusual = unusual_words([SECRET, "Call Priya about the 7731 invoice. Then lunch."])
    assert {WORD, "priya", "7731"} <= set(unusual)
    assert not {"bank", "memorable", "help", "make", "note", "then", "call", "lunch"} & set(unusual)
    # A weekday or a month is capitalised, but no name.
    assert not unusual_words(["Let's meet on Friday, or else in December."])
    # A name said in many messages is no echo of one of them.
    add_turns(owner, conversation, [f"Priya says hi ({n})" for n in range(7)])
    assert rare_words(owner, [SECRET, "Call Priya about the 7731 invoice."]) == {WORD, "7731"}


def test_a_common_phrase_never_makes_a_copy_and_an_uncommon_run_does():
    overlap = Overlap([SECRET])
    assert overlap.spans(LEEDS) == []
    assert overlap.scrub_text(LEEDS) == LEEDS
    # A long quote of common words is a copy where it is most of its line, not inside another.
    plain = Overlap(["I think I should call my mother tonight because she was sad"])
    quote = "> I think I should call my mother tonight because she was sad"
    assert plain.scrub_text(quote) == "> [forgotten]"
    long_line = "Yesterday I wrote that I think I should call my mother tonight because she was sad, " + (
        "and then we talked about the garden, the roof, the car, the school run and the weekend plans."
    )
    assert plain.scrub_text(long_line) == long_line


def test_the_dialog_offers_the_reply_that_repeats_the_rare_word_ticked_and_marked(owner, bank):
    secret, reply, leeds, _ = bank
    dialog = echoes.dialog(owner, secret)
    assert dialog.words == [WORD]
    found = {c.message.pk: c for c in dialog.copies}
    assert set(found) == {reply.pk}, "the Leeds message shares only a common phrase"
    copy = found[reply.pk]
    assert copy.ticked and copy.words == [WORD]
    assert (WORD, True) in copy.pieces and all(WORD not in text for text, marked in copy.pieces if not marked)


def test_forgetting_the_secret_and_its_echo_leaves_the_word_in_no_table(owner, conversation, bank):
    secret, reply, leeds, _ = bank
    ticked = [c.message.pk for c in echoes.copies_of(owner, secret) if c.ticked]
    forget_message(owner, secret.pk, copies=ticked)
    assert rows_containing(WORD) == {}
    assert Message.objects.filter(pk=leeds.pk).exists()
    hits = search(owner, "What is my bank's memorable word?").hits
    assert reply.pk not in {h.message_id for h in hits}


@pytest.fixture
def searched(owner, conversation):
    """The issue's second case: a later turn searched memory for the forgotten word (its tool
    call's arguments and the result's echo of the query hold it, its reply does not), and
    another reply repeats the word."""
    secret = add_turns(owner, conversation, [
        "Our cabin is in Vexmorrant, two hours north; the key is under the third stone.",
    ])[0]
    add_turns(owner, conversation, EVERYDAY_TEXTS)
    _, reply, _, echo = add_turns(owner, conversation, [
        "Which town is the cabin in again?", "Two hours north of here; I found it in your notes.",
        "Thanks, we leave on Friday.", "Enjoy Vexmorrant, and take warm clothes!",
    ])
    found = execute_tool(owner, "search_and_retrieve", {"query": "vexmorrant cabin key"}).result
    call = store_tool_call(owner, reply, "search_and_retrieve", {"query": "vexmorrant cabin key"}, found)
    Conversation.objects.filter(pk=conversation.pk).update(title="Trip to Vexmorrant")
    return secret, echo, call


def test_the_dialog_offers_the_tool_call_and_title_that_hold_the_word(owner, conversation, searched):
    secret, reply, call = searched
    dialog = echoes.dialog(owner, secret)
    assert dialog.words == ["Vexmorrant"]
    assert {c.message.pk for c in dialog.copies if c.ticked} == {reply.pk}
    keys = {e.key: e for e in dialog.echoes}
    assert {f"toolcall:{call.pk}", f"title:{conversation.pk}"} <= set(keys)
    assert ("vexmorrant", True) in keys[f"toolcall:{call.pk}"].pieces


def test_forgetting_it_scrubs_the_query_the_result_and_their_passages(owner, conversation, searched):
    secret, reply, call = searched
    assert rows_containing("vexmorrant")
    forget_message(owner, secret.pk, copies=[reply.pk])
    assert rows_containing("vexmorrant") == {}
    call = ToolCall.objects.get(pk=call.pk)
    assert json.loads(call.arguments) == {"query": "[forgotten] cabin key"}
    assert all("vexmorrant" not in h.passage_text.lower() for h in search(owner, "vexmorrant cabin").hits)


def test_an_echo_a_person_unticks_keeps_the_word_and_loses_the_copied_runs(owner, conversation, searched):
    secret, reply, call = searched
    forget_message(owner, secret.pk, copies=[reply.pk], keep=[f"toolcall:{call.pk}"])
    assert set(rows_containing("vexmorrant")) == {"memory_toolcall", "memory_passage"}
    assert json.loads(ToolCall.objects.get(pk=call.pk).arguments) == {"query": "vexmorrant cabin key"}
    assert Conversation.objects.get(pk=conversation.pk).title != "Trip to Vexmorrant"


def test_facts_and_names_that_hold_the_rare_word_go_whole(owner, conversation, searched):
    secret, reply, call = searched
    other = add_turns(owner, conversation, ["Remind me to book the ferry."])[0]
    fact = Fact.objects.create(
        owner=owner, message=other, subject="the user", subject_key="the user", attribute="cabin",
        value="Vexmorrant", statement="The user's cabin is in Vexmorrant.", said_at=other.timestamp,
        valid_from=other.timestamp,
    )
    name = Entity.objects.create(owner=owner, name="Vexmorrant", normalized="vexmorrant", kind="place")
    dialog = echoes.dialog(owner, secret)
    assert f"fact:{fact.pk}" in {e.key for e in dialog.echoes}
    forget_message(owner, secret.pk, copies=[reply.pk])
    assert not Fact.objects.filter(pk=fact.pk).exists() and not Entity.objects.filter(pk=name.pk).exists()
    assert Message.objects.filter(pk=other.pk).exists()


def test_the_dialog_offers_nothing_of_another_users(owner, stranger, stranger_conversation, searched):
    secret = searched[0]
    stranger_conversation.title = "Vexmorrant"
    stranger_conversation.save()
    mine = add_turns(stranger, stranger_conversation, ["Vexmorrant has a lovely lake."])[0]
    assert mine.pk not in {c.message.pk for c in echoes.copies_of(owner, secret)}
    assert f"title:{stranger_conversation.pk}" not in {e.key for e in echoes.echoes_of(owner, secret)}


def test_a_topic_whose_label_summary_or_keywords_hold_the_word_is_offered_and_loses_it(
    owner, conversation, searched
):
    secret, reply, call = searched
    topic = Topic.objects.create(
        owner=owner, label="Weekend at Vexmorrant", keywords=["vexmorrant", "cabin"],
        summary="Plans for the cabin in Vexmorrant and what to pack.",
    )
    kept = Topic.objects.create(owner=owner, label="Vexmorrant again", summary="Kept by the person.")
    offered = {e.key: e for e in echoes.dialog(owner, secret).echoes}
    assert {f"topic:{topic.pk}", f"topic:{kept.pk}"} <= set(offered)
    assert ("Vexmorrant", True) in offered[f"topic:{topic.pk}"].pieces
    forget_message(owner, secret.pk, copies=[reply.pk], keep=[f"topic:{kept.pk}"])
    left = Topic.objects.filter(pk=topic.pk).first()
    assert left is None or "vexmorrant" not in f"{left.label} {left.summary} {left.keywords}".lower()
    assert Topic.objects.get(pk=kept.pk).label == "Vexmorrant again"
