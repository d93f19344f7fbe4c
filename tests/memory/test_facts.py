"""Facts drawn from messages by rules: what counts, whom it is about, and how a newer fact on the
same subject and attribute supersedes an older one without deleting it."""

from __future__ import annotations

import datetime as dt

import pytest

from memory.knowledge import fact_refresh, facts, wording
from memory.lifecycle import deleting, forgetting
from memory.models import Fact
from memory.storage import store
from memory.storage.store import NewMessage, store_messages

pytestmark = pytest.mark.django_db

START = dt.datetime(2024, 1, 10, 9, 0, tzinfo=dt.UTC)

# A person's life over five months, one user message every few days: two moves and a
# correction, a job change, a relationship, a trip rescheduled twice, a preference reversed.
SCRIPT = [
    (0, "I live in London."),
    (2, "I work at Acme Bank as an analyst."),
    (22, "My girlfriend is Sam, we met at university."),
    (26, "My trip to Japan is on 3 May."),
    (30, "I love sushi."),
    (51, "I moved to Berlin last month."),
    (60, "I started a new job at Globex."),
    (65, "My trip to Japan was moved to 10 June."),
    (82, "We rescheduled the trip to July 2."),
    (91, "I broke up with Sam."),
    (101, "I'm dating Alex now."),
    (112, "I don't like sushi anymore."),
    (113, "Hey, how are you today?"),
    (120, "I live in Munich."),
    (121, "Actually it's Hamburg, not Munich."),
]


def day(n: int) -> dt.datetime:
    return START + dt.timedelta(days=n)


def tell(owner, conversation, script=SCRIPT, role="user", speaker=None):
    items = [NewMessage(role=role, content=text, timestamp=day(n),
                        metadata={"speaker": speaker} if speaker else {}) for n, text in script]
    return store_messages(owner, conversation, items, embed=False)


def chain(owner, subject: str, attribute: str) -> list[tuple[str, dt.datetime, dt.datetime | None]]:
    """(value, valid_from, valid_to) of a subject's attribute, oldest first."""
    rows = Fact.objects.owned_by(owner).about(subject).filter(attribute=attribute).order_by("valid_from")
    return [(f.value, f.valid_from, f.valid_to) for f in rows]


def test_it_reads_exclusive_attributes_out_of_first_person_sentences():
    found = {(f.attribute, f.value) for text in (
        "I moved to Berlin last month.", "I work at Acme Bank as an analyst.", "My girlfriend is Sam.",
        "My favourite colour is green.", "We rescheduled the trip to July 2.", "I don't like sushi anymore.",
    ) for f in facts.extract(text)}
    assert found == {
        ("lives in", "Berlin"), ("works at", "Acme Bank"), ("partner", "Sam"),
        ("favourite colour", "green"), ("plan: trip", "July 2"), ("likes sushi", "dislikes"),
    }


def test_it_keeps_no_greeting_question_or_praise_as_a_fact():
    for text in ("Hey Mel! Good to see you! How have you been?", "What did you paint last week?",
                 "Wow, that's so cool! You got this, I'm so proud of you!", "Thanks!"):
        assert facts.extract(text) == [], text


def test_it_keeps_a_long_first_person_account_of_a_life_event_as_its_best_clause():
    text = ("Hey! Thanks for asking. Last week I finally adopted a rescue greyhound called Pepper from the "
            "shelter near my work, and she already sleeps on my bed. How is your garden?")
    [fact] = facts.extract(text)
    assert fact.attribute == facts.ABOUT
    assert fact.clause.startswith("Last week I finally adopted a rescue greyhound called Pepper")
    assert wording.third_person(fact.clause, "Ana").startswith("Last week Ana finally adopted a rescue")


def test_it_writes_a_first_person_clause_in_the_third_person():
    third = wording.third_person("I'm a nurse and I love my job.", "Ana")
    assert third == "Ana is a nurse and they love their job."
    assert wording.third_person("I have two kids.", "Ben") == "Ben has two kids."


def test_it_supersedes_without_deleting_and_keeps_the_dates(owner, conversation):
    tell(owner, conversation)
    facts.extract_messages(owner)
    assert chain(owner, "the user", "lives in") == [
        ("London", day(0), day(51)), ("Berlin", day(51), day(120)),
        ("Munich", day(120), day(121)), ("Hamburg", day(121), None),
    ]
    assert chain(owner, "the user", "works at") == [("Acme Bank", day(2), day(60)), ("Globex", day(60), None)]
    assert chain(owner, "the user", "partner") == [
        ("Sam", day(22), day(91)), ("broke up with Sam", day(91), day(101)), ("Alex", day(101), None),
    ]
    assert chain(owner, "the user", "plan: trip") == [
        ("3 May", day(26), day(65)), ("10 June", day(65), day(82)), ("July 2", day(82), None),
    ]
    assert chain(owner, "the user", "likes sushi") == [
        ("likes", day(30), day(112)), ("dislikes", day(112), None),
    ]
    current = Fact.objects.owned_by(owner).current()
    assert {f.value for f in current} == {"Hamburg", "Globex", "Alex", "July 2", "dislikes"}
    for old in Fact.objects.owned_by(owner).superseded():
        assert old.superseded_by.attribute == old.attribute and old.superseded_by.valid_from == old.valid_to


def test_a_correction_names_the_fact_it_corrects_and_its_message(owner, conversation):
    messages = tell(owner, conversation)
    facts.extract_messages(owner)
    hamburg = Fact.objects.owned_by(owner).get(value="Hamburg")
    assert hamburg.message_id == messages[-1].pk and hamburg.statement == "the user lives in Hamburg"
    assert hamburg.supersedes.get().value == "Munich"


def test_it_reads_the_period_a_fact_refers_to(owner, conversation):
    tell(owner, conversation)
    facts.extract_messages(owner)
    berlin = Fact.objects.owned_by(owner).get(value="Berlin")
    assert (berlin.refers_from.date(), berlin.refers_to.date()) == (dt.date(2024, 2, 1), dt.date(2024, 3, 1))


def test_an_imported_speaker_is_the_subject_and_a_reply_in_a_chat_states_nothing(owner, conversation):
    tell(owner, conversation, [(0, "I moved to Lisbon with my kids.")], role="assistant", speaker="Melanie")
    tell(owner, conversation, [(1, "I moved to Porto.")], role="assistant")
    facts.extract_messages(owner)
    assert [(f.subject, f.value) for f in Fact.objects.owned_by(owner)] == [("Melanie", "Lisbon")]


def test_text_that_repeats_memory_is_never_a_fact(owner, conversation):
    items = [NewMessage(role="user", content="I moved to Lisbon.", timestamp=day(0),
                        metadata={"mode": "offline_recall"})]
    store_messages(owner, conversation, items, embed=False)
    assert facts.extract_messages(owner) == 0


def test_forgetting_a_source_message_forgets_its_fact_and_what_it_replaced_holds_again(owner, conversation):
    messages = tell(owner, conversation, SCRIPT[:6])
    facts.extract_messages(owner)
    forgetting.forget_message(owner, messages[5].pk)  # "I moved to Berlin last month."
    assert chain(owner, "the user", "lives in") == [("London", day(0), None)]


def test_a_deleted_message_hides_its_facts_until_restored(owner, conversation):
    messages = tell(owner, conversation, SCRIPT[:1])
    facts.extract_messages(owner)
    deleting.delete_message(owner, messages[0].pk)
    assert not Fact.objects.owned_by(owner).current().exists()
    deleting.restore_message(owner, messages[0].pk)
    assert Fact.objects.owned_by(owner).current().get().value == "London"


def test_an_edited_message_has_its_facts_drawn_again(owner, conversation):
    messages = tell(owner, conversation, SCRIPT[:1])
    facts.extract_messages(owner)
    store.update_message(owner, messages[0].pk, "I live in Leeds.")
    fact_refresh.refresh_messages(owner, [messages[0].pk])
    assert [f.value for f in Fact.objects.owned_by(owner)] == ["Leeds"]


def test_upkeep_after_a_turn_draws_the_facts_in_background_work(owner, conversation, immediate_tasks):
    from memory import tasks

    messages = tell(owner, conversation, SCRIPT[:1])
    tasks.topic_upkeep.enqueue(owner.pk, [m.pk for m in messages])
    assert Fact.objects.owned_by(owner).get().value == "London"


def test_a_stranger_sees_none_of_the_facts(owner, stranger, conversation):
    tell(owner, conversation, SCRIPT[:1])
    facts.extract_messages(owner)
    assert not Fact.objects.owned_by(stranger).exists()


def test_a_rebuild_draws_the_facts_of_messages_that_never_went_through_upkeep(owner, conversation):
    from memory import tasks

    tell(owner, conversation, SCRIPT[:2])  # as an import stores them: no upkeep queued
    tasks.rebuild_topics.call(owner.pk)
    assert sorted(Fact.objects.owned_by(owner).values_list("value", flat=True)) == ["Acme Bank", "London"]


def test_build_topics_draws_the_facts_an_import_left_undrawn(owner, conversation):
    import io

    from django.core.management import call_command

    tell(owner, conversation, SCRIPT[:2])
    out = io.StringIO()
    call_command("build_topics", user=owner.username, stdout=out)
    assert "2 new facts" in out.getvalue() and Fact.objects.owned_by(owner).count() == 2
