"""What a turn reads beside its search and seldom changes, kept in this process between turns.

The facts about the people a message names, the pinned messages and the hierarchical overview
(period summaries, top-level topics) are read on every turn (index_builder._read_ahead) and
change far less often than turns come. They are kept per owner with the owner's index
generation (memory.models.IndexGeneration), which triggers change in every transaction that
writes those rows, a message's deleted flag or a pinned message (migration 0020), whatever code
writes them. Each turn reads the generation, one row by primary key, and uses what it kept only
when the generation is the one it kept it at: several server processes may serve one person, so
a process learns of another's writes from Postgres, never from a signal. A forgotten message or
fact changes the generation in the forgetting transaction, so no turn that starts after it
commits shows it from here. A transaction changes the generation once, at its first such write:
a turn read inside a transaction that wrote keeps nothing and uses nothing (generation()).

The generation is read before what is kept, so anything kept is at least as new as the
generation it is filed under: a write committed in between changed the generation, and the next
turn reads again. A generation is never given twice (one sequence), so what was read inside a
transaction that then rolled back is never matched.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from django.db import connection

T = TypeVar("T")

# (database, owner id) -> (generation, {key: what was read}). Bounded: the oldest owner goes first.
_KEPT: dict[tuple[str, int], tuple[int, dict[Hashable, Any]]] = {}
_KEEP_OWNERS = 1_000
_KEEP_KEYS = 256  # an owner's reads: a few pieces and the facts of the subjects their messages name


def generation(owner) -> int | None:
    """The owner's index generation; None for an owner with no row, and while the calling
    transaction has itself changed it (it changes once a transaction, so later writes of the same
    transaction would leave it as it is): nothing is then kept nor used."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT generation FROM memory_indexgeneration WHERE owner_id = %s), "
            "current_setting(%s, true) IS NOT DISTINCT FROM '1'",
            [owner.pk, f"recollect.index_generation_{int(owner.pk)}"],
        )
        value, written_here = cursor.fetchone()
    return None if value is None or written_here else int(value)


class Kept:
    """One turn's access to an owner's kept reads: `kept(key, read)` gives what `read()` gave at
    this generation, reading it only the first time. `key` names the read and every argument it
    depends on besides the owner (a limit, a setting, a subject)."""

    def __init__(self, values: dict[Hashable, Any] | None) -> None:
        self._values = values

    def __call__(self, key: Hashable, read: Callable[[], T]) -> T:
        if self._values is None:
            return read()
        if key in self._values:
            value = self._values[key]
        else:
            value = read()
            if len(self._values) < _KEEP_KEYS:
                self._values[key] = value
        # A list is shared by every turn that gets it: each gets its own list of the same rows.
        return list(value) if isinstance(value, list) else value  # type: ignore[return-value]


def for_turn(owner) -> Kept:
    """The owner's kept reads at the generation read now (on the caller's connection)."""
    current = generation(owner)
    if current is None:
        return Kept(None)
    key = (connection.settings_dict["NAME"], owner.pk)
    entry = _KEPT.get(key)
    if entry is None or entry[0] != current:
        if entry is None and len(_KEPT) >= _KEEP_OWNERS:
            _KEPT.pop(next(iter(_KEPT)), None)
        entry = (current, {})
        _KEPT[key] = entry
    return Kept(entry[1])
