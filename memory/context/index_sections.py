"""The memory index's text, written by strategy: what memory.context.index_builder's
prepare_context puts in the memory zone after the pinned messages and facts, before the levels.

- full: every message of a small memory, the ones the search matched first;
- snippets: the search's matches as snippets, the best with their session neighbours;
- clusters: the best matches, then the topic clusters nearest the question, with summaries;
- hierarchical: the temporal and topic overview, the best matches, the nearest clusters, and
  the tools to navigate the rest;
- simple: recent ids and match snippets, for a build that passed INDEX_BUILD_TIMEOUT_MS.

Each writer gets the plan (index_builder's ContextPlan), the line Writer of the memory zone, the
search's hits, the recent messages that did not fit the history zone, the ids written so far,
the build's deadline, the query vector, and what the plan read while the search ran
(index_builder's _Ahead). A writer that passes the deadline raises DeadlinePassed.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.utils import timezone
from pgvector.django import CosineDistance

from memory.finding.search import SearchHit
from memory.knowledge import entities
from memory.models import Message, Topic
from memory.organizing.labels import count_of
from memory.storage import sessions
from memory.tokens import count_joined, count_tokens


class Writer:
    """Appends lines while they fit a token allowance (counts are real cl100k tokens)."""

    def __init__(self, allowance: int) -> None:
        self.allowance = max(0, allowance)
        self.lines: list[str] = []
        self.used = 0
        self.full = False
        self.tokens = 0  # of text(), once called

    def add(self, line: str) -> bool:
        cost = count_tokens(line + "\n")
        if self.used + cost > self.allowance:
            self.full = True
            return False
        self.lines.append(line)
        self.used += cost
        return True

    def text(self) -> str:
        # Joined text can tokenise differently from its lines; drop lines until it fits.
        self.tokens = count_joined(self.lines)
        while self.lines and self.tokens > self.allowance:
            self.lines.pop()
            self.tokens = count_joined(self.lines)
        return "\n".join(self.lines)


class DeadlinePassed(Exception):
    """The index build passed INDEX_BUILD_TIMEOUT_MS while a strategy was writing."""


def _check(deadline: float) -> None:
    if time.perf_counter() > deadline:
        raise DeadlinePassed


def _day(ts) -> str:
    return timezone.localtime(ts).strftime("%Y-%m-%d")


def _quote(text: str, length: int | None = None) -> str:
    length = length or settings.INDEX_SNIPPET_LENGTH
    flat = " ".join((text or "").split())
    if len(flat) > length:
        flat = flat[: length - 1].rstrip() + "…"
    return '"' + flat.replace('"', "'") + '"'


def _recent_header(plan, writer: Writer, left_out: list[Message], included: list[str]) -> None:
    if plan.recent:
        last = "the last message follows" if len(plan.recent) == 1 else (
            f"the last {len(plan.recent)} messages follow"
        )
        writer.add(f"Recent Conversation: {last} as chat history.")
    for m in left_out:
        if writer.add(
            f"- {m.pk} [{_day(m.timestamp)}] {m.role} (earlier in this conversation): "
            f"{_quote(m.snippet or m.content)}"
        ):
            included.append(m.pk)


def _hit_line(h: SearchHit) -> str:
    kind = "tool call" if h.type == "tool_call" else (f"{h.role}, chunk" if h.is_chunk else h.role)
    ref = h.message_id if h.type == "message" else h.id
    quote = _quote(h.passage_text or h.snippet, settings.INDEX_SNIPPET_LENGTH * 2)
    return f"- {ref} [{_day(h.timestamp)}] {kind}: {quote}"


def _key_entities(writer: Writer, hits: list[SearchHit]) -> None:
    names = entities.key_entities([h.passage_text or h.snippet for h in hits[:15]], limit=15)
    if names:
        line = "KEY ENTITIES: " + ", ".join(names)
        writer.add(line[:400])


MATCH_NEIGHBOURS = 3  # the best hits shown with their session neighbours


def _matches(
    owner, plan, writer, hits, included, deadline, *, header: str, neighbours: int = MATCH_NEIGHBOURS
) -> None:
    if not hits:
        return
    writer.add("")
    writer.add(header)
    shown_sessions: set[str] = set()
    # The best few hits bring their session neighbours, once per session, fetched in one query
    # on the turn's own thread: read on a worker while the sections before were written, it
    # waited for the interpreter's lock those sections held, then for the query (the format
    # step 0.90x with it here, 8 alternated pairs; docs/benchmarks.md, thirteenth pass).
    _check(deadline)
    top_ids = [h.message_id for h in hits[:neighbours] if h.type == "message"]
    around = sessions.neighbours_many(owner, top_ids)
    recent_ids = {m.pk for m in plan.recent}
    for i, h in enumerate(hits):
        if not writer.add(_hit_line(h)):
            break
        included.append(h.message_id)
        if i >= neighbours or h.message_id not in around or h.message_id in shown_sessions:
            continue
        for n in around.get(h.message_id, []):
            if n.pk in included or n.pk in recent_ids:
                continue
            shown_sessions.add(n.pk)
            if writer.add(f"    ↳ same session: {n.pk} {n.role}: {_quote(n.snippet or n.content)}"):
                included.append(n.pk)


def _full(
    owner, plan, writer, hits, left_out, included, deadline, query_vector, ahead
) -> None:
    _recent_header(plan, writer, left_out, included)
    recent_ids = {m.pk for m in plan.recent} | {m.pk for m in left_out} | plan.skip_ids
    hit_ids = [h.message_id for h in hits if h.type == "message"]
    # Small memory: every historical message in full, the relevant ones first.
    if plan.whole is not None:
        others = [m for m in plan.whole if m.pk not in recent_ids]
    else:
        others = list(
            Message.objects.visible_to(owner)
            .logical()
            .exclude(pk__in=recent_ids)
            .order_by("-timestamp")[: settings.INDEX_FULL_MAX + 1]
        )
    rank = {mid: i for i, mid in enumerate(hit_ids)}
    others.sort(key=lambda m: (rank.get(m.pk, len(rank)), -m.timestamp.timestamp()))
    if others:
        writer.add("")
        writer.add("Historical Context:")
    for m in others:
        if m.pk in plan.pinned_ids:
            continue  # already in the pinned section
        line = f"[{m.pk}] [{_day(m.timestamp)}] {m.role}: {m.content.strip()}"
        if count_tokens(line) > max(200, writer.allowance // 4):
            line = (
                f"[{m.pk}] [{_day(m.timestamp)}] {m.role}: {_quote(m.content, 400)} "
                f"(long message, {m.token_count} tokens: get_message_with_chunks)"
            )
        if writer.add(line):
            included.append(m.pk)
        else:
            short = f"[{m.pk}] [{_day(m.timestamp)}] {m.role}: {_quote(m.snippet or m.content)}"
            if writer.add(short):
                included.append(m.pk)
    _key_entities(writer, hits)


def _snippets(
    owner, plan, writer, hits, left_out, included, deadline, query_vector, ahead
) -> None:
    _recent_header(plan, writer, left_out, included)
    _key_entities(writer, hits)
    _matches(
        owner,
        plan,
        writer,
        hits,
        included,
        deadline,
        header="Historical Matches (retrieve with get_message_by_id):",
    )


def _relevant_topics(owner, query_vector, hits: list[SearchHit], limit: int) -> list[Topic]:
    """Leaf topics nearest the query, plus the topics holding the best hits (of at least
    INDEX_MIN_CLUSTER_SIZE messages: smaller ones are not shown as clusters)."""
    leaves = Topic.objects.owned_by(owner).filter(
        children__isnull=True, message_count__gte=settings.INDEX_MIN_CLUSTER_SIZE
    )
    found: list[Topic] = []
    hit_ids = [h.message_id for h in hits[:10]]
    if hit_ids:
        found.extend(leaves.filter(memberships__message_id__in=hit_ids).distinct()[:limit])
    if query_vector is not None and len(found) < limit:
        found.extend(
            leaves.exclude(centroid=None)
            .exclude(pk__in=[t.pk for t in found])
            .annotate(distance=CosineDistance("centroid", [float(x) for x in query_vector]))
            .order_by("distance")[: limit - len(found)]
        )
    return found


def _cluster_block(
    writer: Writer, topic: Topic, included: list[str], samples: dict[str, Message]
) -> bool:
    start = _day(topic.period_start) if topic.period_start else "?"
    end = _day(topic.period_end) if topic.period_end else "?"
    if not writer.add(f'Cluster: "{topic.label}" ({count_of(topic.message_count, "message")})'):
        return False
    writer.add(f"Period: {start} to {end}")
    if topic.summary:
        writer.add(f"Summary: {_quote(topic.summary, 300)[1:-1]}")
    shown = [samples[i] for i in topic.sample_message_ids if i in samples]
    if shown:
        writer.add("Sample messages:")
        for m in shown[:3]:
            if writer.add(f"  - {m.pk}: {_quote(m.snippet or m.content)}"):
                included.append(m.pk)
    writer.add(f'Retrieve with: get_cluster("{topic.pk}")')
    writer.add("")
    return True


def _samples(owner, topics: list[Topic]) -> dict[str, Message]:
    ids = [i for t in topics for i in t.sample_message_ids[:3]]
    return {m.pk: m for m in Message.objects.visible_to(owner).filter(pk__in=ids)}


def _entities_and_best_matches(owner, plan, writer, hits, included, deadline) -> None:
    """The key entities of the hits, then the ten best matches (clusters and hierarchy share it)."""
    _key_entities(writer, hits)
    _matches(
        owner,
        plan,
        writer,
        hits[:10],
        included,
        deadline,
        header="Best Matches (retrieve with get_message_by_id):",
    )
    _check(deadline)


def _clusters(
    owner, plan, writer, hits, left_out, included, deadline, query_vector, ahead
) -> None:
    _recent_header(plan, writer, left_out, included)
    _entities_and_best_matches(owner, plan, writer, hits, included, deadline)
    topics = _relevant_topics(owner, query_vector, hits, limit=8)
    if not topics:
        plan.fallbacks.append(
            {
                "kind": "no_topics",
                "detail": (
                    "no topic tree yet (built in the background); matches shown as snippets"
                ),
            }
        )
        _matches(
            owner, plan, writer, hits[10:], included, deadline, header="More Matches:", neighbours=0
        )
        return
    writer.add("")
    writer.add("Message Clusters:")
    samples = _samples(owner, topics)
    for topic in topics:
        _check(deadline)
        if not _cluster_block(writer, topic, included, samples):
            break
    _matches(
        owner, plan, writer, hits[10:], included, deadline, header="More Matches:", neighbours=0
    )


def _hierarchical(
    owner, plan, writer, hits, left_out, included, deadline, query_vector, ahead
) -> None:
    _recent_header(plan, writer, left_out, included)
    writer.add("")
    writer.add("Temporal Overview:")
    periods = ahead.periods
    labels = {
        "today": "Today",
        "this_week": "This Week",
        "this_month": "This Month",
        "older": "Older",
    }
    if not periods:
        plan.fallbacks.append(
            {
                "kind": "no_period_summaries",
                "detail": ("period summaries not built yet (background upkeep); counts omitted"),
            }
        )
    for key, label in labels.items():
        p = periods.get(key)
        if p is not None:
            line = f"  {label}: {count_of(p.message_count, 'message')}"
            if p.top_topics:
                line += " — " + "; ".join(f"{t['label']} ({t['count']})" for t in p.top_topics[:3])
            writer.add(line)
    _check(deadline)
    top = ahead.top_topics
    if top:
        writer.add("")
        writer.add("Topic Overview (top level, oldest first; walk with view_topic):")
        for t in top:
            period = (
                f"{_day(t.period_start)}..{_day(t.period_end)}"
                if t.period_start and t.period_end
                else ""
            )
            writer.add(f'  "{t.label}": {count_of(t.message_count, "message")} {period} [topic {t.pk}]')
    _entities_and_best_matches(owner, plan, writer, hits, included, deadline)
    # No top-level topic means no topic tree at all: nothing to rank.
    topics = _relevant_topics(owner, query_vector, hits, limit=4) if top else []
    if topics:
        writer.add("")
        writer.add("Relevant Clusters:")
        samples = _samples(owner, topics)
        for topic in topics:
            if not _cluster_block(writer, topic, included, samples):
                break
    # Navigation names only the tools this turn is offered.
    offered = set(plan.tool_names)
    lines = [
        (
            "get_period_messages",
            "  - get_period_messages('today') / ('this_week') / ('2024-05-01..2024-05-31')",
        ),
        ("view_topic", "  - view_topic() to walk the topic tree; get_cluster(topic_id) for its messages"),
        ("search_and_retrieve", "  - search_and_retrieve(query) / vector_search(query, limit)"),
        ("find", "  - find(pattern) for an exact word or regular expression"),
    ]
    shown = [line for name, line in lines if name in offered]
    if shown:
        writer.add("Navigation:")
        for line in shown:
            writer.add(line)


def simple_after_timeout(plan, writer, hits, left_out, included, *, before_formatting: bool) -> None:
    """The simple format, noted as a fallback: the build passed INDEX_BUILD_TIMEOUT_MS before a
    strategy began formatting, or while it did."""
    _simple(plan, writer, hits, left_out, included)
    when = " before formatting" if before_formatting else ""
    plan.fallbacks.append(
        {
            "kind": "index_timeout",
            "detail": (
                f"index build passed INDEX_BUILD_TIMEOUT_MS={settings.INDEX_BUILD_TIMEOUT_MS}{when}; "
                "simple format used"
            ),
        }
    )


def _simple(plan, writer, hits, left_out, included) -> None:
    """The simple format, for when building took too long: recent ids and match snippets."""
    _recent_header(plan, writer, left_out, included)
    if hits:
        writer.add("Historical Matches (retrieve with get_message_by_id):")
    for h in hits:
        if not writer.add(_hit_line(h)):
            break
        included.append(h.message_id)


# The writer of each strategy (index_builder.STRATEGIES).
STRATEGY_WRITERS = {
    "full": _full,
    "snippets": _snippets,
    "clusters": _clusters,
    "hierarchical": _hierarchical,
}
