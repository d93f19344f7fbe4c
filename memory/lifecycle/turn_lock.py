"""One lock per person between a chat turn's checked writes and everything that removes messages.

A turn reads messages (the plan, the search, tool results) and later writes what it made of them
(its snapshot, the reply's draft, the reply). It must never keep the words of a message that was
forgotten while it ran. So every path that removes messages (forget_message, deleting a
conversation, ending a temporary chat, forgetting everything, an import scrubbing what echoes
its left-out messages) first takes this lock EXCLUSIVE in its transaction (`hold_off_turns`),
and a turn's checked write takes it SHARED (`shared_statement`) as the first statement of the
transaction that checks that what it read is still there and then writes. Both are
transaction-scoped Postgres advisory locks (released at commit or rollback), two-key form:
`CLASS` and the owner's id, so they meet no other advisory lock (a one-key lock lives in another
key space; the project takes no other).

Why that is enough, under READ COMMITTED (the project's isolation), where each statement of a
transaction, and each statement of a multi-statement message (which Postgres runs as one
implicit transaction), reads a snapshot taken when that statement starts:

- the forget took the lock first: the turn's lock statement waits until the forget commits;
  its check is the next statement, so its snapshot is taken after that commit and it sees the
  messages gone (the turn then scrubs what it writes);
- the turn took it first: the forget waits until the turn's transaction commits; every
  statement of the forget runs after it, so its scrub reads (and scrubs) what the turn wrote.

Turns of one person share the lock and never wait for each other; what they lock is one entry
in Postgres' lock table, not rows (no page dirtied, no WAL: the ~75 `FOR KEY SHARE` row locks
this replaced cost a tuple header write and a WAL record each). A forget waits at most for the
turns' short write transactions, never for a model's answer. Paths that do not remove a message
(edits, soft delete and restore) take no lock: a turn may show either version of an edited
message, and a deleted one is kept for undo.
"""

from __future__ import annotations

from typing import Any

from django.db import connection

# The lock class: "RCOL" in ASCII. Any int4 works; this one is recognisable in pg_locks.classid.
CLASS = 0x52434F4C


def key(owner) -> tuple[int, int]:
    """The (class, object) pair of `owner`'s lock: the owner's id folded into int4 (two people
    sharing a lock past 2^32 ids would only wait for each other, never miss a forget)."""
    pk = int(owner.pk if hasattr(owner, "pk") else owner)
    return CLASS, (pk + 2**31) % 2**32 - 2**31


def shared_statement(owner) -> tuple[str, list[Any]]:
    """The turn's side: the first statement of its checked write's transaction (its check must be
    a later statement, so that its snapshot follows the lock)."""
    return "SELECT pg_advisory_xact_lock_shared(%s, %s)", list(key(owner))


def hold_off_turns(owner) -> None:
    """The removing side: call first inside the transaction that removes or scrubs a person's
    messages, before it reads what to remove. Waits for the person's turns that are writing now;
    turns that check later wait for this transaction and then see what it removed."""
    if not connection.in_atomic_block:
        raise RuntimeError("hold_off_turns outside a transaction would release the lock at once")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(key(owner)))
