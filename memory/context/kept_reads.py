"""What a turn reads beside its search and seldom changes, kept in this process between turns.

The facts about the people a message names, the pinned messages and the hierarchical overview
(period summaries, top-level topics) are read on every turn (index_builder._read_ahead) and
change far less often than turns come. Each part is kept per owner with the owner's generation
of that part (memory.models.IndexGeneration: `facts`, `pins`, `overview`), which triggers
change (rows appended to a log, so no two writers wait for each other) in every
transaction that writes those rows, a message's deleted flag or a pinned message
(migration 0020), whatever code writes them. The parts are apart because topic upkeep rewrites
topics and period summaries after every stored message: the facts and the pins stay kept.

Each turn reads the generations (one statement, an index descent a part), and uses what it kept only at the
generation it kept it at: several server processes may serve one person, so a process learns of
another's writes from Postgres, never from a signal. A forgotten message or fact changes the
generation in the forgetting transaction, so no turn that starts after it commits shows it from
here. A transaction changes a part's generation once, at its first such write: a turn read
inside a transaction that changed it keeps and uses nothing of that part (generations()).

The generations are read before what is kept, so anything kept is at least as new as the
generation it is filed under: a write committed in between changed it, and the next turn reads
again. A generation is never given twice (one sequence), so what was read inside a transaction
that then rolled back is never matched.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from django.db import connection

T = TypeVar("T")

PARTS = ("facts", "pins", "overview")
# (database, owner id, part) -> (generation, {key: what was read}). Bounded: the oldest goes first.
_KEPT: dict[tuple[str, int, str], tuple[int, dict[Hashable, Any]]] = {}
_KEEP_ENTRIES = 3_000  # a thousand owners' three parts
_KEEP_KEYS = 256  # a part's reads: the facts of every subject the owner's messages name


def generations(owner) -> dict[str, int | None]:
    """The owner's generation of each part; None for an owner with no row, and for a part the
    calling transaction has itself changed (it changes once a transaction, so later writes of the
    same transaction would leave it as it is): nothing of it is then kept nor used."""
    # Each part's generation is the largest of its rows (an index descent each).
    latest = ", ".join(
        "(SELECT max(generation) FROM memory_indexgeneration WHERE owner_id = %s AND part = %s)"
        for _ in PARTS
    )
    written = ", ".join("current_setting(%s, true) IS NOT DISTINCT FROM '1'" for _ in PARTS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {latest}, {written}",
            [
                *(value for part in PARTS for value in (owner.pk, part)),
                *(f"recollect.index_generation_{part}_{int(owner.pk)}" for part in PARTS),
            ],
        )
        row = cursor.fetchone()
    values, written_here = row[: len(PARTS)], row[len(PARTS):]
    return {
        part: None if value is None or mine else int(value)
        for part, value, mine in zip(PARTS, values, written_here, strict=True)
    }


class Kept:
    """One turn's access to an owner's kept reads: `kept(part, key, read)` gives what `read()`
    gave at this generation of `part`, reading it only the first time. `key` names the read and
    every argument it depends on besides the owner (a limit, a setting, a subject)."""

    def __init__(self, values: dict[str, dict[Hashable, Any] | None]) -> None:
        self._values = values

    def __call__(self, part: str, key: Hashable, read: Callable[[], T]) -> T:
        values = self._values.get(part)
        if values is None:
            return read()
        if key in values:
            value = values[key]
        else:
            value = read()
            if len(values) < _KEEP_KEYS:
                values[key] = value
        # A list is shared by every turn that gets it: each gets its own list of the same rows.
        return list(value) if isinstance(value, list) else value  # type: ignore[return-value]

    def of(self, part: str) -> Callable[[Hashable, Callable[[], T]], T]:
        """kept(part, ...) for one part: what a reader of that part takes (facts.current_for_index)."""
        return lambda key, read: self(part, key, read)


def for_turn(owner) -> Kept:
    """The owner's kept reads at the generations read now (on the caller's connection)."""
    database = connection.settings_dict["NAME"]
    values: dict[str, dict[Hashable, Any] | None] = {}
    for part, current in generations(owner).items():
        if current is None:
            values[part] = None
            continue
        key = (database, owner.pk, part)
        entry = _KEPT.get(key)
        if entry is None or entry[0] != current:
            if entry is None and len(_KEPT) >= _KEEP_ENTRIES:
                _KEPT.pop(next(iter(_KEPT)), None)
            entry = (current, {})
            _KEPT[key] = entry
        values[part] = entry[1]
    return Kept(values)
