"""The levels of memory by age: FULL, SUMMARY, META and ARCHIVE, and pinned messages.

A message's level follows its age, counted in messages back from the newest one across the
owner's memory (the HIERARCHY_* settings): the newest are FULL, then come
one-sentence SUMMARY lines, then META (the topic groups of the topic tree, by their newest
message) and finally ARCHIVE (the coarsest topics wholly older than the archive threshold).
Nothing is rewritten when a message ages: a level is read off three boundary messages, found
in one indexed walk of the newest keys, so the cost stays flat as memory grows.

Here too: the levels section and the pinned section of the memory index (`write_levels`,
`write_pinned`, called by memory.context.index_builder), and the tokens-saved measurement of
get_conversation_stats. The tools that read the levels, expand_node and browse_hierarchy, are
in memory.context.tools.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from memory.models import NOT_REMEMBERED, Message, Topic
from memory.organizing.labels import count_of
from memory.organizing.topics import first_sentence
from memory.tokens import count_tokens, snip


class Level(IntEnum):
    FULL = 0
    SUMMARY = 1
    META = 2
    ARCHIVE = 3


LEVEL_NAMES = [level.name for level in Level]
SNAPSHOTS_MEASURED = 500  # the latest turns get_conversation_stats measures


@dataclass(frozen=True)
class Boundaries:
    """Where the levels start: the (timestamp, id) of the message `k` back, for each threshold
    (None: memory does not reach that far back). `active` is False while memory holds at most
    HIERARCHY_SUMMARY_THRESHOLD messages: then everything is FULL."""

    active: bool
    summary: tuple[dt.datetime, str] | None  # the newest SUMMARY message
    meta: tuple[dt.datetime, str] | None  # the newest META message
    archive: tuple[dt.datetime, str] | None  # the newest ARCHIVE message
    # With boundaries(owner, lines=True): the SUMMARY-aged messages, newest first, as
    # (timestamp, id, role, start of content, written summary or None).
    summary_lines: tuple[tuple, ...] = ()

    def start(self, level: Level) -> tuple[dt.datetime, str] | None:
        return {Level.SUMMARY: self.summary, Level.META: self.meta, Level.ARCHIVE: self.archive}.get(
            level
        )

    def level_of(self, timestamp: dt.datetime, ident: str) -> Level:
        key = (timestamp, ident)
        for level in (Level.ARCHIVE, Level.META, Level.SUMMARY):
            start = self.start(level)
            if start is not None and key <= start:
                return level
        return Level.FULL

    def topic_level(self, topic: Topic) -> Level:
        """A group is as coarse as its newest message: it is compressed once all of it is old."""
        if topic.period_end is None:
            return Level.FULL
        for level in (Level.ARCHIVE, Level.META, Level.SUMMARY):
            start = self.start(level)
            if start is not None and topic.period_end <= start[0]:
                return level
        return Level.FULL


def _live(owner):
    # Not what memory does not keep (a temporary chat, one started while "Remember new chats"
    # was off): the levels and pins of every conversation are drawn from memory.
    return Message.objects.visible_to(owner).logical().remembered_or_in(None)


# _live(owner)'s condition written out (owner, then _LIVE_PARAM): the turn's hot reads below,
# where building the queryset cost more CPU than running it. Tests compare them with _live's.
_LIVE_SQL = "owner_id = %s AND NOT deleted AND NOT is_chunk AND NOT (metadata @> %s::jsonb)"
_LIVE_PARAM = json.dumps({NOT_REMEMBERED: True})


def boundaries(owner, *, lines: bool = False) -> Boundaries:
    """Where each level starts: the keys of the messages HIERARCHY_RECENT_NODES, _META_THRESHOLD
    and _ARCHIVE_THRESHOLD back, read in one indexed walk of the newest keys. lines: that walk
    also reads what the plan's SUMMARY lines show of the messages it passes at that level."""
    fields = ["timestamp", "id"]
    # A line is one sentence: the start of a message is enough to find its first one.
    extra = ', role, left(content, 1000) AS head, metadata ->> \'summary\' AS written' if lines else ""
    if lines:
        fields += ["role", "head", "written"]
    recent, meta, archive = (
        settings.HIERARCHY_RECENT_NODES,
        settings.HIERARCHY_META_THRESHOLD,
        settings.HIERARCHY_ARCHIVE_THRESHOLD,
    )
    # _live(owner).order_by("-timestamp", "-id").values_list(*fields)[: archive + 1], written out.
    inner = (
        f"SELECT timestamp, id{extra} FROM memory_message WHERE {_LIVE_SQL} "
        "ORDER BY timestamp DESC, id DESC LIMIT %s"
    )
    params = [owner.pk, _LIVE_PARAM, archive + 1]
    # Of the walk's rows only those boundaries_of reads come back (the first, for their number;
    # the three boundaries; with lines, the SUMMARY-aged ones): a turn otherwise parsed every
    # row's time and read every row's start, two hundred of them, for a few dozen.
    columns = ", ".join(f'w."{c}"' for c in fields)
    summary_upto = meta - 1 if lines else -1
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns}, w.rn, w.n FROM (SELECT s.*, row_number() OVER "
            '(ORDER BY s."timestamp" DESC, s."id" DESC) - 1 AS rn, count(*) OVER () AS n '
            f"FROM ({inner}) s) w WHERE w.rn IN (0, %s, %s, %s) OR w.rn BETWEEN %s AND %s ORDER BY w.rn",
            [*params, recent, meta, archive, recent, summary_upto],
        )
        rows = cursor.fetchall()
    count = rows[0][-1] if rows else 0
    if count <= settings.HIERARCHY_SUMMARY_THRESHOLD:
        return Boundaries(False, None, None, None)
    by_back = {row[-2]: row[:-2] for row in rows}

    def key_at(back: int) -> tuple[dt.datetime, str] | None:
        return (by_back[back][0], by_back[back][1]) if back in by_back else None

    return Boundaries(
        True,
        key_at(recent),
        key_at(meta),
        key_at(archive),
        tuple(by_back[i] for i in range(recent, meta) if i in by_back) if lines else (),
    )


def boundaries_of(keys: list[tuple], *, lines: bool = False) -> Boundaries:
    """Boundaries from the newest keys already read, newest first: (timestamp, id) each, or
    with lines (timestamp, id, role, start of content, written summary or None); at least
    HIERARCHY_ARCHIVE_THRESHOLD + 1 of them, or all there are."""
    if len(keys) <= settings.HIERARCHY_SUMMARY_THRESHOLD:
        return Boundaries(False, None, None, None)

    def key_at(back: int) -> tuple[dt.datetime, str] | None:
        return (keys[back][0], keys[back][1]) if back < len(keys) else None

    return Boundaries(
        True,
        key_at(settings.HIERARCHY_RECENT_NODES),
        key_at(settings.HIERARCHY_META_THRESHOLD),
        key_at(settings.HIERARCHY_ARCHIVE_THRESHOLD),
        tuple(keys[settings.HIERARCHY_RECENT_NODES : settings.HIERARCHY_META_THRESHOLD]) if lines else (),
    )


def _at_or_before(key: tuple[dt.datetime, str]) -> Q:
    return Q(timestamp__lt=key[0]) | Q(timestamp=key[0], id__lte=key[1])


def messages_at(owner, b: Boundaries, level: Level):
    """The owner's visible messages at `level` (None when no message is at that level)."""
    qs = _live(owner)
    if not b.active:
        return qs if level == Level.FULL else qs.none()
    start, coarser = b.start(level), b.start(Level(level + 1)) if level < Level.ARCHIVE else None
    if level != Level.FULL:
        if start is None:
            return qs.none()
        qs = qs.filter(_at_or_before(start))
    elif b.summary is not None:
        qs = qs.exclude(_at_or_before(b.summary))
    if coarser is not None:
        qs = qs.exclude(_at_or_before(coarser))
    return qs


def topics_at(owner, b: Boundaries, level: Level):
    """META: leaf topics whose newest message is META-aged. ARCHIVE: the largest subtrees whose
    newest message is ARCHIVE-aged (their parent, if any, reaches into younger memory)."""
    qs = Topic.objects.owned_by(owner).exclude(period_end=None)
    if level == Level.META and b.meta is not None:
        qs = qs.filter(children__isnull=True, period_end__lte=b.meta[0])
        return qs.filter(period_end__gt=b.archive[0]) if b.archive is not None else qs
    if level == Level.ARCHIVE and b.archive is not None:
        return qs.filter(period_end__lte=b.archive[0]).filter(
            Q(parent=None) | Q(parent__period_end__gt=b.archive[0])
        )
    return qs.none()


def message_summary(m: Message, limit: int = 160) -> str:
    """A message in one sentence: a written summary when some upkeep stored it, else the
    message's first sentence."""
    return _one_sentence(m.content, (m.metadata or {}).get("summary"), limit)


def _one_sentence(content: str | None, written: Any, limit: int = 160) -> str:
    if isinstance(written, str) and written.strip():
        return snip(written, limit)
    return first_sentence(content or "", limit)


def level_ages(level: Level) -> str:
    recent, meta, archive = (
        settings.HIERARCHY_RECENT_NODES,
        settings.HIERARCHY_META_THRESHOLD,
        settings.HIERARCHY_ARCHIVE_THRESHOLD,
    )
    return {
        Level.FULL: f"the newest {recent} messages",
        Level.SUMMARY: f"messages {recent + 1}-{meta} back",
        Level.META: f"messages {meta + 1}-{archive} back",
        Level.ARCHIVE: f"messages more than {archive} back",
    }[level]


def _day(ts) -> str:
    return timezone.localtime(ts).strftime("%Y-%m-%d")


TOPIC_LINE_FIELDS = ("label", "message_count", "period_start", "period_end", "summary")


def _period(t: Topic) -> str:
    return f"{_day(t.period_start)}..{_day(t.period_end)}" if t.period_start and t.period_end else ""


# --- the memory index --------------------------------------------------------------------------


def pinned_rows(owner) -> list[Message]:
    """The owner's pinned messages that are not deleted, newest pin first (at most
    INDEX_PINNED_MAX): _live(owner).pinned().order_by("-pinned_at", "-timestamp"), written out:
    read on every turn, and building the queryset cost more than running it."""
    return list(
        Message.objects.raw(
            f"SELECT * FROM memory_message WHERE {_LIVE_SQL} AND pinned "
            "ORDER BY pinned_at DESC, timestamp DESC LIMIT %s",
            [owner.pk, _LIVE_PARAM, settings.INDEX_PINNED_MAX],
        )
    )


def write_pinned(
    owner, plan, writer, included: list[str], recent_ids: set[str], pinned: list[Message] | None = None
) -> None:
    """The pinned section, first in the memory index: every pinned message that is not deleted,
    newest pin first, in full while the section stays within half the memory zone (a long one
    as a quote), past that as a short quote with its id, so each one gets in while any room is
    left and the rest of the index keeps room too."""
    pinned = pinned_rows(owner) if pinned is None else pinned
    plan.pinned_ids = []
    if not pinned:
        return
    writer.add("Pinned (marked important by the user; always shown):")
    in_full_until = writer.allowance // 2
    for m in pinned:
        if m.pk in plan.skip_ids:
            continue
        head = f"[{m.pk}] [{_day(m.timestamp)}] {m.role}:"
        if m.pk in recent_ids:
            line = f"- {m.pk} (pinned; {m.role} message in the recent conversation)"
        else:
            line = f"{head} {m.content.strip()}"
            if count_tokens(line) > max(200, writer.allowance // 4):
                quote = snip(m.content, 400).replace('"', "'")
                line = f'{head} "{quote}" (long message, {m.token_count} tokens: get_message_by_id)'
            if writer.used + count_tokens(line) > in_full_until:
                short = snip(m.content, settings.INDEX_SNIPPET_LENGTH).replace('"', "'")
                line = f'{head} "{short}" (pinned; read with get_message_by_id)'
        if writer.add(line):
            included.append(m.pk)
            plan.pinned_ids.append(m.pk)
    writer.add("")


def levels_room(plan, writer) -> int:
    """Tokens kept for the levels section while the strategy writes (none for the full strategy,
    which shows every message anyway, nor before the levels start)."""
    if plan.strategy == "full" or plan.history_size <= settings.HIERARCHY_SUMMARY_THRESHOLD:
        return 0
    return int(max(0, writer.allowance - writer.used) * settings.HIERARCHY_INDEX_SHARE)


def _fit_newest(writer_type, lines: list[str], allowance: int) -> list[str]:
    """The newest lines (last in `lines`) that fit `allowance`, in their original order."""
    sub = writer_type(allowance)
    kept = [line for line in reversed(lines) if sub.add(line)]
    return list(reversed(kept))


@dataclass(frozen=True)
class LevelRows:
    """What the plan's levels section shows, read before it is written (prepare_context reads
    it on a worker thread while its search runs): the boundaries with the SUMMARY lines, and
    the ARCHIVE and META topics, oldest first."""

    boundaries: Boundaries
    topics: dict[Level, list[Topic]]


def level_rows(owner, messages: list[Message] | None = None) -> LevelRows:
    """messages: every visible message of the owner, when they were read already (a small
    memory): the boundaries then come from them."""
    if messages is None:
        b = boundaries(owner, lines=True)
    else:
        newest = sorted(messages, key=lambda m: (m.timestamp, m.pk), reverse=True)
        b = boundaries_of([_line_key(m) for m in newest], lines=True)
    topics: dict[Level, list[Topic]] = {}
    if b.active and b.summary is not None:
        rows = Topic.objects.raw(
            _LEVEL_TOPICS,
            {
                "owner": owner.pk,
                "meta": b.meta[0] if b.meta is not None else None,
                "archive": b.archive[0] if b.archive is not None else None,
                "n": settings.TOPIC_MAX_CHILDREN * 2,
            },
        )
        for level in (Level.ARCHIVE, Level.META):
            topics[level] = []
        for t in rows:
            topics[Level[t.which]].insert(0, t)  # oldest first
    return LevelRows(b, topics)


# topics_at's ARCHIVE and META topics, the newest of each, with only what a line shows (a topic's
# centroid is a vector: costly to read each turn), in one query written out: the ORM's building
# of the two took more CPU than Postgres' running them. No boundary: none at that level.
_COLUMNS = "t.id, t.label, t.summary, t.period_start, t.period_end, t.message_count"
_LEVEL_TOPICS = f"""
    (SELECT {_COLUMNS}, 'ARCHIVE' AS which FROM memory_topic t
     LEFT JOIN memory_topic up ON up.id = t.parent_id
     WHERE t.owner_id = %(owner)s AND t.period_end <= %(archive)s
       AND (t.parent_id IS NULL OR up.period_end > %(archive)s)
     ORDER BY t.period_end DESC LIMIT %(n)s)
    UNION ALL
    (SELECT {_COLUMNS}, 'META' AS which FROM memory_topic t
     WHERE t.owner_id = %(owner)s AND t.period_end <= %(meta)s
       AND (%(archive)s IS NULL OR t.period_end > %(archive)s)
       AND NOT EXISTS (SELECT 1 FROM memory_topic c WHERE c.parent_id = t.id)
     ORDER BY t.period_end DESC LIMIT %(n)s)
"""


def _line_key(m: Message) -> tuple:
    """What boundaries(lines=True) reads of a message, from the message itself."""
    written = (m.metadata or {}).get("summary")
    if written is not None and not isinstance(written, str):
        written = json.dumps(written)
    return (m.timestamp, m.pk, m.role, m.content[:1000], written)


def pinned_of(messages: list[Message]) -> list[Message]:
    """pinned_rows, from every visible message of a small memory read already."""
    pinned = [m for m in messages if m.pinned]
    pinned.sort(key=lambda m: (m.pinned_at or m.timestamp, m.timestamp), reverse=True)
    return pinned[: settings.INDEX_PINNED_MAX]


def write_levels(
    owner, plan, writer, included: list[str], recent_ids: set[str], rows: LevelRows | None = None
) -> None:
    """Older memory at coarser levels, oldest first: ARCHIVE topics, META topic groups, then
    one-sentence SUMMARY lines of the messages the index does not show already. `rows`:
    level_rows(owner), when read already."""
    rows = rows or level_rows(owner)
    b = rows.boundaries
    plan.levels = {"active": b.active}
    if not b.active or b.summary is None:
        return
    # Messages already in the chat history or pinned are not repeated; the full strategy has
    # shown every message it had room for, so those neither. Search matches are: the levels
    # are a map of memory in time order, the matches a pick by relevance.
    shown = recent_ids | plan.skip_ids | set(plan.pinned_ids)
    if plan.strategy == "full":
        shown |= set(included)
    room = writer.allowance - writer.used
    sections: list[tuple[Level, list[str], list[str]]] = []
    for level in (Level.ARCHIVE, Level.META):
        topics = rows.topics.get(level, [])
        lines = [
            f'  - topic {t.pk} "{t.label}" ({count_of(t.message_count, "message")} {_period(t)}): '
            f"{snip(t.summary, 200)}"
            for t in topics
        ]
        sections.append((level, lines, [t.pk for t in topics]))
    summary_rows = [row for row in reversed(b.summary_lines) if row[1] not in shown]
    sections.append(
        (
            Level.SUMMARY,
            [
                f"  - {ident} [{_day(ts)}] {role}: {_one_sentence(head, written)}"
                for ts, ident, role, head, written in summary_rows
            ],
            [row[1] for row in summary_rows],
        )
    )
    sections = [s for s in sections if s[1]]
    plan.levels["shown"] = {}
    if not sections:
        return
    header = (
        "Memory Levels (older memory at coarser levels, oldest first; expand_node(id) opens any "
        "message or topic, browse_hierarchy(level) lists a level):"
    )
    if not writer.add("") or not writer.add(header):
        return
    for i, (level, lines, ids) in enumerate(sections):
        # Each level gets an even share of what is left, so the coarse ones always show.
        left = writer.allowance - writer.used
        share = left // (len(sections) - i)
        title = f"{level.name} ({level_ages(level)}):"
        kept = _fit_newest(type(writer), lines, share - count_tokens(title + "\n"))
        if not kept or not writer.add(title):
            continue
        count = 0
        for line in kept:
            if writer.add(line):
                count += 1
        kept_ids = ids[len(ids) - count :] if count else []
        plan.levels["shown"][level.name] = len(kept_ids)
        if level == Level.SUMMARY:
            included.extend(kept_ids)
    plan.levels["room"] = room


# --- get_conversation_stats ----------------------------------------------------------------------


def level_counts(owner, conversation=None) -> dict[str, int]:
    """Messages per level (of one conversation, when given)."""
    b = boundaries(owner)
    out = {}
    for level in Level:
        qs = messages_at(owner, b, level)
        if conversation is not None:
            qs = qs.filter(conversation=conversation)
        out[level.name] = qs.count()
    return out


def measured_savings(owner, conversation=None) -> dict[str, Any]:
    """Tokens saved, measured on the latest turns' context snapshots: the past the plan actually
    sent (every zone but system, tools and the unsent reserve: the memory index and the recent
    history) against all the memory that existed at that turn, in full."""
    conv_filter = " AND conversation_id = %s" if conversation is not None else ""
    # One pass in time order: messages and snapshots on one timeline, a running sum of message
    # tokens read off at each snapshot (a snapshot sorts before a message of the same instant, so
    # only earlier messages count), less the turn's own user message. O(messages), like the
    # token total beside it, instead of a scan of memory per turn.
    sql = f"""
        WITH s AS (
            SELECT created_at, tokens_by_zone, user_message_id FROM memory_contextsnapshot
            WHERE owner_id = %s{conv_filter} ORDER BY created_at DESC LIMIT %s
        ), timeline AS (
            SELECT created_at AS ts, 0 AS kind, 0 AS tokens, tokens_by_zone, user_message_id
            FROM s
            UNION ALL
            SELECT timestamp, 1, token_count, NULL, NULL FROM memory_message
            WHERE owner_id = %s AND NOT deleted AND NOT is_chunk
              AND timestamp < (SELECT max(created_at) FROM s)
        ), running AS (
            SELECT kind, ts, tokens_by_zone, user_message_id,
                   sum(tokens) OVER (ORDER BY ts, kind ROWS UNBOUNDED PRECEDING) AS history
            FROM timeline
        )
        SELECT r.tokens_by_zone,
               r.history - coalesce(CASE WHEN u.timestamp < r.ts THEN u.token_count END, 0)
        FROM running r
        LEFT JOIN memory_message u
          ON u.id = r.user_message_id AND NOT u.deleted AND NOT u.is_chunk
        WHERE r.kind = 0
        ORDER BY r.ts DESC
    """
    params: list[Any] = [owner.pk]
    if conversation is not None:
        params.append(conversation.pk)
    params += [SNAPSHOTS_MEASURED, owner.pk]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    sent_total = history_total = 0
    last = None
    for zones, history in rows:
        zones = json.loads(zones) if isinstance(zones, str) else zones
        zones = zones if isinstance(zones, dict) else {}
        sent = sum(
            int(v) for k, v in zones.items() if k not in {"system", "tools", "reserve"} and isinstance(v, int)
        )
        sent_total += sent
        history_total += int(history)
        if last is None:
            last = {"history_tokens": int(history), "sent_tokens": sent, "saved": int(history) - sent}
    return {
        "turns_measured": len(rows),
        "history_tokens_at_turns": history_total,
        "context_tokens_sent": sent_total,
        "total_tokens_saved": history_total - sent_total,
        "compression_ratio": round(history_total / sent_total, 2) if sent_total else None,
        "last_turn": last,
    }

