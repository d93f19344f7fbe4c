"""What a turn reads beside its search and keeps between turns (memory.context.kept_reads): the
facts, the pinned messages and the overview are read again as soon as anything they come from
changed, whoever wrote it (the ORM, raw SQL, another connection), and a forgotten message or
fact is never shown from what was kept."""

from __future__ import annotations

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from memory.context import index_builder, kept_reads
from memory.context.index_builder import ContextPlan, _read_ahead
from memory.knowledge import facts
from memory.lifecycle.deleting import delete_conversation
from memory.lifecycle.erasing import forget_everything
from memory.lifecycle.forgetting import forget_message
from memory.models import Fact, IndexGeneration, Message, PeriodSummary, Topic
from tests.memory.test_facts import SCRIPT, tell

QUESTION = "where do I live and who is Sam?"


@pytest.fixture(autouse=True)
def _nothing_kept():
    kept_reads._KEPT.clear()
    yield
    kept_reads._KEPT.clear()


def ahead(owner, conversation, query: str = QUESTION):
    plan = ContextPlan(query=query, strategy="hierarchical", reason="")
    return _read_ahead(owner, conversation, plan, set(), None, None, 200)


def shown(a) -> dict:
    """What the plan takes from the kept pieces, as values (not objects)."""
    return {
        "facts": [(f.pk, f.subject, f.statement, f.corrected, f.pinned, f.was) for f in a.facts],
        "pinned": [(m.pk, m.content, m.pinned_at) for m in a.pinned],
        "periods": sorted((p.period, p.message_count, str(p.top_topics)) for p in a.periods.values()),
        "top": [(t.pk, t.label, t.message_count) for t in a.top_topics],
    }


def read_fresh(owner, conversation, query: str = QUESTION) -> dict:
    kept_reads._KEPT.clear()
    return shown(ahead(owner, conversation, query))


def tables_read(owner, conversation, query: str = QUESTION) -> tuple[dict, set[str]]:
    with CaptureQueriesContext(connection) as queries:
        a = ahead(owner, conversation, query)
    read = {t for q in queries for t in ("memory_fact", "pinned", "memory_periodsummary") if t in q["sql"]}
    return shown(a), read


@pytest.fixture
def memory(owner, conversation):
    """Facts about the user and Sam, a pinned message, a period summary and a top-level topic."""
    messages = tell(owner, conversation, SCRIPT[:4])
    facts.extract_messages(owner)
    messages[1].set_pinned(True)
    PeriodSummary.objects.create(owner=owner, period="2026-01", message_count=4, top_topics=[])
    Topic.objects.create(owner=owner, label="Japan trip", message_count=2)
    return messages


@pytest.mark.django_db(transaction=True)
def test_an_unchanged_memory_is_read_once_and_shown_the_same(owner, conversation, memory):
    first, read = tables_read(owner, conversation)
    assert read == {"memory_fact", "pinned", "memory_periodsummary"}
    assert first["facts"] and first["pinned"] and first["periods"] and first["top"]
    again, read = tables_read(owner, conversation)
    assert again == first and read == set()
    # Another question names other people: the subjects are kept, their facts read once each.
    other, read = tables_read(owner, conversation, "what about my job?")
    assert other == read_fresh(owner, conversation, "what about my job?")


@pytest.mark.django_db
def test_an_owner_without_a_generation_is_read_every_turn(owner, conversation):
    tell(owner, conversation, [(0, "hello there")])
    assert set(kept_reads.generations(owner).values()) == {None}
    tables_read(owner, conversation)
    assert tables_read(owner, conversation)[1] == {"memory_fact", "pinned", "memory_periodsummary"}


def _pin_another(owner, memory):
    memory[2].set_pinned(True)


def _unpin(owner, memory):
    memory[1].set_pinned(False)


def _edit_pinned(owner, memory):
    Message.objects.filter(pk=memory[1].pk).update(content="Edited while pinned.")


def _delete_pinned(owner, memory):
    Message.objects.filter(pk=memory[1].pk).update(deleted=True)


def _correct_a_fact(owner, memory):
    Fact.objects.filter(owner=owner, subject_key="the user").update(corrected="I live in Porto now")


def _pin_a_fact(owner, memory):
    Fact.objects.filter(owner=owner).order_by("pk").last().set_pinned(True)


def _new_fact(owner, memory):
    tell(owner, memory[0].conversation, [(40, "My sister is Rita.")])
    facts.extract_messages(owner)


def _facts_message_deleted(owner, memory):
    source = Fact.objects.filter(owner=owner).order_by("pk").first().message_id
    Message.objects.filter(pk=source).update(deleted=True)


def _raw_sql_on_another_connection(owner, memory):
    # Not through this process's ORM: what another server process would do.
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(  # autocommit: committed when it returns
                "UPDATE memory_fact SET statement = 'changed elsewhere' WHERE owner_id = %s", [owner.pk]
            )
    finally:
        other.close()


def _topics_rebuilt(owner, memory):
    Topic.objects.filter(owner=owner).delete()
    Topic.objects.create(owner=owner, label="Rebuilt", message_count=9)


def _period_summary_written(owner, memory):
    PeriodSummary.objects.filter(owner=owner).update(message_count=40)


def _forget_a_facts_message(owner, memory):
    forget_message(owner, Fact.objects.filter(owner=owner).order_by("pk").first().message_id)


def _forget_the_pinned_message(owner, memory):
    forget_message(owner, memory[1].pk)


def _delete_the_conversation(owner, memory):
    delete_conversation(owner, memory[0].conversation_id)


def _forget_everything(owner, memory):
    forget_everything(owner)


WRITES = [
    _pin_another, _unpin, _edit_pinned, _delete_pinned, _correct_a_fact, _pin_a_fact, _new_fact,
    _facts_message_deleted, _topics_rebuilt, _period_summary_written, _forget_a_facts_message,
    _forget_the_pinned_message, _delete_the_conversation, _forget_everything,
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("write", WRITES + [_raw_sql_on_another_connection], ids=lambda w: w.__name__[1:])
def test_a_turn_after_a_write_shows_what_a_fresh_read_shows(owner, conversation, memory, write):
    before = shown(ahead(owner, conversation))
    assert tables_read(owner, conversation)[1] == set()  # kept
    write(owner, memory)
    after = shown(ahead(owner, conversation))
    assert after != before
    assert after == read_fresh(owner, conversation)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "forget",
    [_forget_a_facts_message, _forget_the_pinned_message, _delete_the_conversation, _forget_everything],
    ids=lambda w: w.__name__[1:],
)
def test_a_forgotten_message_or_fact_is_never_shown_from_what_was_kept(owner, conversation, memory, forget):
    ahead(owner, conversation)
    kept_facts = {f.pk: f.message_id for f in ahead(owner, conversation).facts}
    forget(owner, memory)
    gone = set(kept_facts) - set(Fact.objects.filter(owner=owner).values_list("pk", flat=True))
    left = set(Message.objects.filter(owner=owner).values_list("pk", flat=True))
    gone_messages = {m.pk for m in memory} - left
    assert gone or gone_messages
    a = ahead(owner, conversation if Message.objects.filter(conversation=conversation).exists() else None)
    assert not {f.pk for f in a.facts} & gone
    assert not {f.message_id for f in a.facts} & gone_messages
    assert not {m.pk for m in a.pinned} & gone_messages


@pytest.mark.django_db(transaction=True)
def test_a_strangers_writes_leave_the_owners_generation(
    owner, conversation, memory, stranger, stranger_conversation
):
    mine = kept_reads.generations(owner)
    tell(stranger, stranger_conversation, SCRIPT[:2])
    facts.extract_messages(stranger)
    Message.objects.filter(owner=stranger).first().set_pinned(True)
    assert kept_reads.generations(owner) == mine
    theirs = kept_reads.generations(stranger)
    # Their facts and pins were written (a part never written has no generation: read each turn).
    assert theirs["facts"] is not None and theirs["pins"] is not None and theirs["overview"] is None
    assert not {theirs["facts"], theirs["pins"]} & set(mine.values())


@pytest.mark.django_db(transaction=True)
def test_a_transaction_changes_the_generation_once_and_a_rolled_back_one_never_comes_back(
    owner, conversation, memory
):
    def stored() -> int:
        rows = IndexGeneration.objects.filter(owner=owner, part="pins")
        return max(rows.values_list("generation", flat=True))

    start = kept_reads.generations(owner)
    with transaction.atomic():
        memory[2].set_pinned(True)
        once = stored()
        memory[3].set_pinned(True)
        Topic.objects.create(owner=owner, label="More", message_count=1)
        assert stored() == once != start["pins"]
        # Within the transaction that wrote, nothing of the parts it changed is kept nor used.
        assert kept_reads.generations(owner) == {"facts": start["facts"], "pins": None, "overview": None}
    assert kept_reads.generations(owner)["pins"] == once
    rolled_back = None
    with pytest.raises(RuntimeError), transaction.atomic():
        memory[3].set_pinned(False)
        rolled_back = stored()
        ahead(owner, conversation)
        raise RuntimeError
    assert kept_reads.generations(owner)["pins"] == once
    assert shown(ahead(owner, conversation)) == read_fresh(owner, conversation)
    memory[2].set_pinned(False)
    assert kept_reads.generations(owner)["pins"] not in (once, rolled_back, start["pins"])


@pytest.mark.django_db
def test_a_transaction_that_writes_between_two_turns_sees_its_own_writes(owner, conversation, memory):
    # The whole test is one transaction: the generation changed once, at its first write.
    ahead(owner, conversation)
    memory[2].set_pinned(True)
    assert memory[2].pk in {m.pk for m in ahead(owner, conversation).pinned}
    Message.objects.filter(pk=memory[2].pk).update(deleted=True)
    assert memory[2].pk not in {m.pk for m in ahead(owner, conversation).pinned}
    _correct_a_fact(owner, memory)
    assert shown(ahead(owner, conversation)) == read_fresh(owner, conversation)


@pytest.mark.django_db(transaction=True)
def test_topic_upkeep_after_a_message_leaves_the_facts_and_the_pins_kept(owner, conversation, memory):
    first, _ = tables_read(owner, conversation)
    # What topic upkeep writes after every stored message (memory.tasks.run_upkeep).
    Topic.objects.filter(owner=owner).update(message_count=3)
    PeriodSummary.objects.filter(owner=owner).update(message_count=5)
    again, read = tables_read(owner, conversation)
    assert read == {"memory_periodsummary"}
    assert again["facts"] == first["facts"] and again["pinned"] == first["pinned"]
    assert again == read_fresh(owner, conversation)


def test_kept_lists_are_the_callers_own():
    kept = kept_reads.Kept({"facts": {}})
    first = kept("facts", ("k",), lambda: [1, 2])
    first.append(3)
    assert kept.of("facts")(("k",), lambda: []) == [1, 2]
    assert kept("pins", ("k",), lambda: [9]) == [9]  # a part with no generation: read each time
    assert index_builder.kept_reads is kept_reads


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("part_written_first", ["overview", "pins", "facts"])
def test_a_write_never_waits_for_another_transaction_that_changed_a_generation(
    owner, conversation, memory, part_written_first
):
    """A topic rebuild (or a fact being learned, or a pin) holds its transaction open; a pin, a
    fact's correction and a period summary on another connection go through without waiting for
    it: the generations are appended rows, not one row per person both would update. A wait
    would fail at once (lock_timeout counts only time spent waiting for a lock)."""
    kept_reads.generations(owner)
    with transaction.atomic():
        if part_written_first == "overview":
            Topic.objects.create(owner=owner, label="Rebuilding", message_count=3)
        elif part_written_first == "pins":
            memory[2].set_pinned(True)
        else:
            first = Fact.objects.filter(owner=owner).order_by("pk").first()
            Fact.objects.filter(pk=first.pk).update(statement="learned meanwhile")
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                cursor.execute("SET lock_timeout = '50ms'")
                for sql in (
                    "UPDATE memory_message SET pinned = NOT pinned WHERE id = %s",
                    # Another fact than the one the first transaction wrote (a row it holds).
                    "UPDATE memory_fact SET statement = statement WHERE id = (SELECT max(id) FROM "
                    "memory_fact WHERE owner_id = %s)",
                    "UPDATE memory_periodsummary SET message_count = message_count WHERE owner_id = %s",
                ):
                    key = memory[3].pk if "memory_message" in sql else owner.pk
                    cursor.execute(sql, [key])  # autocommit: committed when it returns
        finally:
            other.close()
    # Both transactions' changes count: every part moved past what the first one read.
    after = kept_reads.generations(owner)
    assert None not in after.values()
