"""The turn lock (memory.lifecycle.turn_lock): a turn writing what it read and a path removing
messages never overlap, so a turn never keeps what a forget removed while it ran. Two
connections: the turn's (this test's) and the removing path's (a thread's); waits are on the
path's thread finishing or on Postgres' lock table, never on a clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from memory.lifecycle import erasing, turn_lock
from memory.lifecycle.deleting import delete_conversation
from memory.lifecycle.forgetting import forget_left_out, forget_message, gone_since_read, written_if_none_gone
from memory.models import ContextSnapshot, Conversation, Message
from memory.storage.inserts import insert_statement
from memory.storage.store import store_message

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "QXMARK-5519"
SECRET = f"The vault code for Quokka Station is {MARKER}, and the key hangs behind the blue door."


class Path(threading.Thread):
    """`run_it` on a connection of its own; `pid` is its Postgres backend once it has one."""

    def __init__(self, run_it: Callable[[], Any]):
        super().__init__(daemon=True)
        self.run_it, self.pid, self.result, self.error = run_it, None, None, None
        self.connected, self.done = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            self.connected.set()
            self.result = self.run_it()
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc
        finally:
            connection.close()
            self.connected.set()
            self.done.set()

    def finished(self) -> Any:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result


def waits_on_the_turn_lock(path: Path) -> bool:
    """True once `path` waits on a turn lock in Postgres' lock table, False if it finished
    first (it never asked for the lock, or got it)."""
    path.connected.wait()
    deadline = time.monotonic() + 120  # a guard against a hang, not a timing
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory' AND NOT granted "
                "AND classid::bigint = %s AND objsubid = 2",
                [path.pid, turn_lock.CLASS],
            )
            if cursor.fetchone()[0]:
                return True
        if path.done.wait(0.02):
            return False
    raise AssertionError("the path neither finished nor waited on the turn lock")


@pytest.fixture
def secret(owner, conversation):
    return store_message(owner, conversation, "user", SECRET)


def _snapshot(owner, conversation, text: str) -> ContextSnapshot:
    return ContextSnapshot(owner=owner, conversation=conversation, strategy="full", text=text)


REMOVING_PATHS = {
    "forget_message": lambda owner, conv, msg: forget_message(owner, msg.pk),
    "delete_conversation": lambda owner, conv, msg: delete_conversation(owner, conv.pk),
    "end_temporary_chat": lambda owner, conv, msg: erasing.end_temporary_chat(owner, conv.pk),
    "forget_everything": lambda owner, conv, msg: erasing.forget_everything(owner),
    "forget_left_out": lambda owner, conv, msg: forget_left_out(owner, [SECRET], [conv.pk]),
}


@pytest.mark.parametrize("name", sorted(REMOVING_PATHS))
def test_every_path_that_removes_messages_waits_for_a_turn_writing_what_it_read(owner, name):
    conversation = Conversation.objects.create(owner=owner, temporary=name == "end_temporary_chat")
    secret = store_message(owner, conversation, "user", SECRET)
    remove = REMOVING_PATHS[name]
    with transaction.atomic():
        # The turn's checked write, as _store_reply runs it: the lock is held until it commits.
        assert not gone_since_read(owner, {secret.pk: [SECRET]})
        path = Path(lambda: remove(owner, conversation, secret))
        path.start()
        assert waits_on_the_turn_lock(path), f"{name} ran while a turn was writing what it read"
    path.finished()
    if name != "forget_left_out":  # that one scrubs copies and removes no message
        assert not Message.objects.filter(pk=secret.pk).exists()


def test_a_forget_waiting_for_a_turn_scrubs_what_the_turn_wrote(owner, conversation, secret):
    snapshot = _snapshot(owner, conversation, f"Shown to the model: {SECRET}")
    with transaction.atomic():
        assert not gone_since_read(owner, {secret.pk: [SECRET]}, then=[insert_statement(snapshot)])
        path = Path(lambda: forget_message(owner, secret.pk))
        path.start()
        assert waits_on_the_turn_lock(path)
    path.finished()
    text = ContextSnapshot.objects.get(pk=snapshot.pk).text
    assert MARKER not in text and text.startswith("Shown to the model:")


def test_a_turn_checking_while_a_forget_runs_sees_the_message_gone_once_it_commits(
    owner, conversation, secret
):
    question = store_message(owner, conversation, "user", "where is the key?")
    seen = {secret.pk: [SECRET], question.pk: [question.content]}
    snapshot = _snapshot(owner, conversation, SECRET)
    with transaction.atomic():
        forget_message(owner, secret.pk)  # not committed until this block ends
        path = Path(lambda: written_if_none_gone(owner, seen, [insert_statement(snapshot)]))
        path.start()
        assert waits_on_the_turn_lock(path)
    # The check is a statement after the lock: its snapshot follows the forget's commit.
    assert path.finished() is False
    assert not ContextSnapshot.objects.filter(pk=snapshot.pk).exists()


def test_a_turn_of_one_person_never_holds_up_another_persons_forget(owner, stranger, secret):
    elsewhere = Conversation.objects.create(owner=stranger)
    theirs = store_message(stranger, elsewhere, "user", "my locker code is 5521")
    with transaction.atomic():
        assert not gone_since_read(owner, {secret.pk: [SECRET]})
        path = Path(lambda: forget_message(stranger, theirs.pk))
        path.start()
        assert not waits_on_the_turn_lock(path)
        assert path.finished() == [theirs.pk]


def test_a_turns_check_locks_no_message_row(owner, conversation, secret):
    def lock_the_rows():
        with transaction.atomic():
            return [m.pk for m in Message.objects.filter(pk=secret.pk).select_for_update(nowait=True)]

    with transaction.atomic():
        assert not gone_since_read(owner, {secret.pk: [SECRET]})
        path = Path(lock_the_rows)
        path.start()
        try:
            assert path.finished() == [secret.pk]
        except DatabaseError as exc:  # "could not obtain lock on row": the check locked it
            pytest.fail(f"the turn's check locked the message's row: {exc}")


def test_the_ids_a_turn_read_reach_postgres_as_they_are(owner, conversation, secret):
    from memory.lifecycle.forgetting import read_by, text_array

    odd = ["a,b", 'say "hi"', "back\\slash", "{brace}", "NULL", " spaced ", "", "ünï"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::text[]", [text_array(odd)])
        assert cursor.fetchone()[0] == odd
    assert read_by(owner, {"plan": [secret.pk, "01ARZ3NDEKTSV4RRFFQ69G5FAV"]}) == {secret.pk: [SECRET]}
