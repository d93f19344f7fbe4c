"""Sessions: runs of turns of one conversation without an idle gap.

A hit inside a session is usually one line of a longer exchange; showing its neighbours lets
the model (and the reader) see the question it answered or the detail that followed. Sessions
are computed on demand from (conversation, position), which is indexed, so finding the session
of one message reads a bounded window of rows, never the whole history.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings

from memory.models import Message

# How far either side of a message to look for its session; a session longer than this is
# cut to the window around the message (the tools page further with get_conversation_thread).
SESSION_WINDOW = 40


def idle_gap() -> dt.timedelta:
    return dt.timedelta(minutes=settings.SESSION_IDLE_MINUTES)


def session_of(owner, message: Message, *, window: int = SESSION_WINDOW) -> list[Message]:
    """The visible logical messages of `message`'s session, oldest first (at most 2*window+1)."""
    base = (
        Message.objects.visible_to(owner).logical().filter(conversation_id=message.conversation_id)
    )
    before = list(base.filter(position__lt=message.position).order_by("-position")[:window])
    after = list(base.filter(position__gt=message.position).order_by("position")[:window])
    return _run(message, before, after, idle_gap())


def _run(message: Message, before, after, gap: dt.timedelta) -> list[Message]:
    """`message` and the messages `before` it (newest first) and `after` it (oldest first) up to
    the first idle gap on each side, oldest first."""
    run = [message]
    for m in before:  # newest first: walk backwards until an idle gap
        if run[0].timestamp - m.timestamp > gap:
            break
        run.insert(0, m)
    for m in after:
        if m.timestamp - run[-1].timestamp > gap:
            break
        run.append(m)
    return run


def neighbours(owner, message: Message, *, before: int = 1, after: int = 1) -> list[Message]:
    """The closest messages of `message`'s session on each side (not the message itself)."""
    return _around(session_of(owner, message, window=max(before, after)), message, before, after)


def _around(run: list[Message], message: Message, before: int, after: int) -> list[Message]:
    """The `before` messages of `run` (a session, oldest first) just before `message` and the
    `after` just after it."""
    i = next(i for i, m in enumerate(run) if m.pk == message.pk)
    return run[max(0, i - before) : i] + run[i + 1 : i + 1 + after]


def neighbours_of(owner, messages: list[Message], *, before: int = 1, after: int = 1) -> list[list[Message]]:
    """[neighbours(owner, m, before=.., after=..) for m in messages], the same messages, in one
    query: each message's nearest visible whole messages on either side (two index ranges of
    (conversation, position) per message), then the same walk to the first idle gap."""
    if not messages:
        return []
    window = max(before, after)
    rows = list(
        Message.objects.raw(
            "SELECT n.*, a.i AS anchor_index FROM unnest(%s::varchar[], %s::bigint[]) "
            "WITH ORDINALITY AS a(conversation_id, position, i) CROSS JOIN LATERAL ("
            " (SELECT * FROM memory_message n WHERE n.owner_id = %s AND NOT n.deleted AND NOT n.is_chunk"
            "  AND n.conversation_id = a.conversation_id AND n.position < a.position"
            "  ORDER BY n.position DESC LIMIT %s)"
            " UNION ALL"
            " (SELECT * FROM memory_message n WHERE n.owner_id = %s AND NOT n.deleted AND NOT n.is_chunk"
            "  AND n.conversation_id = a.conversation_id AND n.position > a.position"
            "  ORDER BY n.position LIMIT %s)) n",
            [[m.conversation_id for m in messages], [m.position for m in messages],
             owner.pk, window, owner.pk, window],
        )
    )
    around: list[list[Message]] = [[] for _ in messages]
    for r in rows:
        around[r.anchor_index - 1].append(r)
    gap = idle_gap()
    found = []
    for message, near in zip(messages, around, strict=True):
        earlier = sorted((r for r in near if r.position < message.position), key=lambda r: -r.position)
        later = sorted((r for r in near if r.position > message.position), key=lambda r: r.position)
        found.append(_around(_run(message, earlier, later, gap), message, before, after))
    return found


# What a turn's index reads of a best hit's neighbours (memory.context.index_sections._matches)
# and what finding them needs; the other columns are deferred (read if asked for). Every column
# of ~21 rows, decoded into models (metadata and edit history parsed as JSON), took 1.15-1.18x
# the time (`python -m bench.turn_steps_alone neighbours`: 1.61 against 1.37 ms, 1.42 against
# 1.24, medians of 300 and 500 calls on the 100k bench history).
_NEIGHBOUR_COLUMNS = ", ".join(
    f"n.{c}"
    for c in ("id", "owner_id", "conversation_id", "role", "content", "snippet", "timestamp", "position")
)


def neighbours_many(
    owner, message_ids: list[str], *, before: int = 1, after: int = 1
) -> dict[str, list[Message]]:
    """neighbours() for several messages (by id) in one query: {message id: its session
    neighbours}, with the columns an index line needs (id, role, content, snippet, timestamp,
    position; the others deferred). Unknown, foreign, deleted or chunk ids get no entry."""
    if not message_ids:
        return {}
    reach = max(before, after) + 2  # a little slack for chunks and hidden rows between positions
    rows = list(
        Message.objects.raw(
            # LATERAL with a LIMIT: one index range per anchor (a plain join may hash the
            # whole conversation).
            f"SELECT {_NEIGHBOUR_COLUMNS}, a.id AS anchor_id FROM memory_message a CROSS JOIN LATERAL ("
            f"  SELECT {_NEIGHBOUR_COLUMNS} FROM memory_message n WHERE n.conversation_id = a.conversation_id"
            "  AND n.position BETWEEN a.position - %s AND a.position + %s"
            "  AND n.owner_id = a.owner_id AND NOT n.deleted AND NOT n.is_chunk"
            "  ORDER BY n.position LIMIT 2 * %s + 1) n "
            "WHERE a.owner_id = %s AND a.id = ANY(%s) AND NOT a.deleted AND NOT a.is_chunk "
            "ORDER BY a.id, n.position",
            [reach, reach, reach, owner.pk, list(message_ids)],
        )
    )
    gap = idle_gap()
    found: dict[str, list[Message]] = {}
    for anchor_id in dict.fromkeys(r.anchor_id for r in rows):
        window = [r for r in rows if r.anchor_id == anchor_id]
        m = next(r for r in window if r.pk == anchor_id)
        earlier = [r for r in window if r.position < m.position][::-1]
        later = [r for r in window if r.position > m.position]
        found[anchor_id] = _around(_run(m, earlier[:before], later[:after], gap), m, before, after)
    return found


def split_sessions(messages: list[Message]) -> list[list[Message]]:
    """Cut a time-ordered list of messages into sessions at idle gaps and conversation changes."""
    gap = idle_gap()
    sessions: list[list[Message]] = []
    for m in messages:
        if (
            sessions
            and sessions[-1][-1].conversation_id == m.conversation_id
            and m.timestamp - sessions[-1][-1].timestamp <= gap
        ):
            sessions[-1].append(m)
        else:
            sessions.append([m])
    return sessions
