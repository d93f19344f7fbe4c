"""The adaptive index builder: what the LLM is shown of its memory on each turn.

`prepare_context` reads top to bottom:

1. split the token budget (max_index_tokens) into zones: system, tools, memory,
   history, reserve;
2. count the relevant history (bounded: counting stops past INDEX_CLUSTER_MAX) and choose the
   strategy: full, snippets, clusters or hierarchical;
3. take the recent window of the active branch in full, newest first, while it fits the
   history zone;
4. run hybrid search (vector + keyword) with session neighbours; a small memory (the full
   strategy) whose every message fits the memory zone is read whole instead, and neither
   searched nor embedded: the window, pins and levels then come from those rows too;
5. write the memory index line by line while it fits the memory zone (unused tool and history
   tokens flow to memory; the reserve is never touched), in the sections of the strategy
   (memory.context.index_sections);
6. past INDEX_BUILD_TIMEOUT_MS, fall back to the simple format, and record it.

Pinned messages open the memory index and the levels section (older memory as
SUMMARY lines, META topic groups and ARCHIVE topics) closes it; both are written by
memory.organizing.hierarchy.

Nothing here calls an LLM or walks the whole history in Python: every read is an indexed SQL
query bounded by a LIMIT, so the cost of a turn stays flat as memory grows.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection

from memory.context import kept_reads, rolling_summary
from memory.context.index_sections import (
    STRATEGY_WRITERS,
    DeadlinePassed,
    Writer,
    simple_after_timeout,
)
from memory.context.tools import select_tools
from memory.embedders import query_text
from memory.finding.candidates import in_worker
from memory.finding.search import SearchFilters, SearchHit, search
from memory.knowledge import facts
from memory.models import ContextSnapshot, Fact, Message, PeriodSummary, Topic
from memory.organizing import hierarchy
from memory.tokens import count_tokens

# The zones, as shares of the budget. Memory gets whatever tools and history leave.
ZONE_SHARES = {"system": 0.08, "tools": 0.20, "memory": 0.35, "history": 0.25, "reserve": 0.12}

INSTRUCTIONS = (
    "You have a long-term memory of every earlier conversation with this user. The memory "
    "index below lists what may be relevant, with message ids. Use the memory tools to read "
    "a message in full, search, or browse topics and periods before answering from memory; "
    "cite what you recall, and say so when memory holds nothing on the question."
)
SHORT_INSTRUCTIONS = "Memory index (ids can be read with the memory tools):"

STRATEGIES = ("full", "snippets", "clusters", "hierarchical")
# The tools each strategy's index points the model to; they are offered with it.
STRATEGY_TOOLS = {
    "full": [],
    "snippets": ["get_session", "expand_node"],
    "clusters": ["get_cluster", "expand_node"],
    "hierarchical": ["get_period_messages", "view_topic", "get_cluster", "expand_node"],
}


@dataclass
class ContextPlan:
    query: str
    strategy: str
    reason: str
    text: str = ""
    instructions: str = ""
    custom_instructions: str = ""  # the person's, with their heading (empty: none)
    summary: str = ""  # the rolling summary of the conversation before `recent`
    summary_covers: dict[str, Any] = field(default_factory=dict)
    recent: list[Message] = field(default_factory=list)
    tokens_by_zone: dict[str, int] = field(default_factory=dict)
    zone_budgets: dict[str, int] = field(default_factory=dict)
    budget: int = 0
    history_size: int = 0
    included_ids: list[str] = field(default_factory=list)
    hits: list[dict[str, Any]] = field(default_factory=list)
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    build_ms: float = 0.0
    skip_ids: set[str] = field(default_factory=set, repr=False)  # the new user message
    pinned_ids: list[str] = field(default_factory=list)
    levels: dict[str, Any] = field(default_factory=dict)  # the levels section, as shown
    # Every visible message, newest first, when a small memory is listed whole (no search).
    whole: list[Message] | None = field(default=None, repr=False)

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens_by_zone.values())

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    def system_prompt(self) -> str:
        """The plan's part of the system prompt: the person's custom instructions, the memory
        instructions, the conversation's summary, then the index. (ContextSnapshot.whole_plan
        splits a stored prompt by this rule: the models layer cannot import this one.)"""
        return "\n\n".join(
            p for p in (self.custom_instructions, self.instructions, self.summary, self.text) if p
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "strategy": self.strategy,
            "reason": self.reason,
            "budget": self.budget,
            "tokens_by_zone": self.tokens_by_zone,
            "zone_budgets": self.zone_budgets,
            "total_tokens": self.total_tokens,
            "history_size": self.history_size,
            "instructions": self.instructions,
            "custom_instructions": self.custom_instructions,
            "summary": self.summary,
            "summary_covers": self.summary_covers,
            "text": self.text,
            "recent_ids": [m.pk for m in self.recent],
            "included_ids": self.included_ids,
            "pinned_ids": self.pinned_ids,
            "levels": self.levels,
            "hits": self.hits,
            "fallbacks": self.fallbacks,
            "tools": self.tool_names,
            "timings_ms": self.timings_ms,
            "build_ms": self.build_ms,
        }


def zone_budgets(budget: int) -> dict[str, int]:
    zones = {z: int(budget * share) for z, share in ZONE_SHARES.items()}
    zones["memory"] += budget - sum(zones.values())  # rounding goes to memory
    return zones


def history_size(owner, *, cap: int | None = None) -> int:
    """Visible logical messages of the owner, counted up to `cap` (a bounded index scan)."""
    cap = cap if cap is not None else settings.INDEX_CLUSTER_MAX + 1
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM memory_message WHERE owner_id = %s "
            "AND NOT deleted AND NOT is_chunk LIMIT %s) s",
            [owner.pk, cap],
        )
        return int(cursor.fetchone()[0])


# Tokens a whole message's index line adds to its text: id, day, role and separators.
WHOLE_LINE_TOKENS = 24
# Owners whose memory was last listed whole (or not shown: memory off), per process (most
# recent last): the chat skips embedding their next message as a query. A guess only: a memory
# that has grown since (or memory switched back on) is embedded when the plan searches it.
_WHOLE: dict[int, bool] = {}
_WHOLE_KEEP = 10_000


def _small_memory_rows(owner, conversation_id: str | None = None) -> list[Message] | None:
    """Every visible message of a memory of at most INDEX_FULL_MAX messages, newest first (None
    for a larger one): what history_size counts, read whole; of the conversations memory does
    not keep, only the reading one's (`conversation_id`)."""
    rows = list(
        Message.objects.visible_to(owner)
        .logical()
        .remembered_or_in(conversation_id)
        .defer("edit_history")
        .order_by("-timestamp", "-id")[: settings.INDEX_FULL_MAX + 1]
    )
    return rows if len(rows) <= settings.INDEX_FULL_MAX else None


def _whole_memory(
    owner, allowance: int, rows: list[Message] | None = None, conversation_id: str | None = None
) -> list[Message] | None:
    """Every visible message of a small memory (at most INDEX_FULL_MAX), newest first, when
    their index lines fit `allowance` tokens; None when they do not. `rows`: those messages,
    already read."""
    if rows is None:
        rows = _small_memory_rows(owner, conversation_id)
    if rows is None:
        return None
    if sum(m.token_count + WHOLE_LINE_TOKENS for m in rows) > allowance:
        return None
    return rows


def _remember_whole(owner, whole: bool) -> None:
    _WHOLE.pop(owner.pk, None)
    _WHOLE[owner.pk] = whole
    if len(_WHOLE) > _WHOLE_KEEP:
        # The least recently planned goes (two threads may both try: one of them removes it).
        with contextlib.suppress(KeyError, RuntimeError, StopIteration):
            del _WHOLE[next(iter(_WHOLE))]


def memory_listed_whole(owner) -> bool | None:
    """Whether this owner's last plan (in this process) listed the memory whole, or showed none
    of it (memory off), without a search (None: no plan of theirs yet): the chat embeds the next
    message as a query in advance only when the plan will search."""
    return _WHOLE.get(owner.pk)


def too_big_to_list_whole(owner) -> bool:
    """More messages than the full strategy lists (a bounded count): the plan will search."""
    return history_size(owner, cap=settings.INDEX_FULL_MAX + 1) > settings.INDEX_FULL_MAX


def choose_strategy(size: int) -> tuple[str, str]:
    if settings.INDEX_STRATEGY != "auto":
        return settings.INDEX_STRATEGY, (
            f"INDEX_STRATEGY={settings.INDEX_STRATEGY} ({size:,} messages in memory)"
            if size <= settings.INDEX_CLUSTER_MAX
            else f"INDEX_STRATEGY={settings.INDEX_STRATEGY}"
        )
    full, snippets, clusters = (
        settings.INDEX_FULL_MAX,
        settings.INDEX_SNIPPET_MAX,
        settings.INDEX_CLUSTER_MAX,
    )
    shown = f"{size:,}" if size <= clusters else f"more than {clusters:,}"
    if size <= full:
        return "full", f"{shown} messages in memory (at most INDEX_FULL_MAX={full}): shown in full"
    if size <= snippets:
        return "snippets", (
            f"{shown} messages in memory ({full + 1}-{snippets}): recent in full, "
            "historical matches as snippets"
        )
    if size <= clusters:
        return "clusters", (
            f"{shown} messages in memory ({snippets + 1}-{clusters}): matches and topic clusters "
            "with summaries"
        )
    return "hierarchical", (
        f"{shown} messages in memory (INDEX_CLUSTER_MAX={clusters}): temporal and topic overview "
        "with navigation hints"
    )


def recent_messages(
    owner,
    conversation,
    *,
    limit: int,
    exclude: set[str],
    active_message_ids: list[str] | None = None,
) -> list[Message]:
    """The last `limit` visible messages of the conversation, newest first."""
    if conversation is None or limit <= 0:
        return []
    # Message.objects.visible_to(owner).logical() of the conversation, written out: read on
    # every turn, and building the queryset cost twice the CPU of reading it.
    active = "" if active_message_ids is None else " AND id = ANY(%s)"
    params: list[Any] = [owner.pk, conversation.pk]
    if active_message_ids is not None:
        params.append([str(i) for i in active_message_ids])
    return list(
        Message.objects.raw(
            "SELECT * FROM memory_message WHERE owner_id = %s AND NOT deleted AND NOT is_chunk "
            f"AND conversation_id = %s{active} AND NOT (id = ANY(%s)) ORDER BY position DESC LIMIT %s",
            [*params, [str(i) for i in exclude], limit],
        )
    )


def prepare_context(
    owner,
    conversation,
    query: str,
    *,
    user_message: Message | None = None,
    max_index_tokens: int | None = None,
    active_message_ids: list[str] | None = None,
    recently_used_tools: list[str] | None = None,
    zones: dict[str, int] | None = None,
    custom_instructions: str = "",
) -> ContextPlan:
    """Build the context plan for one turn (see the module docstring).

    zones: the budget of each zone, given by the chat from the model's window
    (memory.context.budget.Allocation.index_zones); without it, max_index_tokens is split by ZONE_SHARES.
    custom_instructions: what the person asked of every reply (memory.models.Preferences),
    carried before the memory index and taken from its zone."""
    started = time.perf_counter()
    deadline = started + settings.INDEX_BUILD_TIMEOUT_MS / 1000
    query = (query or (user_message.content if user_message else "") or "").strip()
    budget = max(
        0, int(max_index_tokens if max_index_tokens is not None else settings.INDEX_MAX_TOKENS)
    )
    if zones is not None:
        zones = dict.fromkeys(ZONE_SHARES, 0) | {z: max(0, int(v)) for z, v in zones.items()}
        budget = sum(zones.values())
    else:
        zones = zone_budgets(budget)
    marks: dict[str, float] = {}

    def mark(name: str, since: float) -> float:
        now = time.perf_counter()
        marks[name] = round((now - since) * 1000, 2)
        return now

    # A memory listed whole last time is most likely small still: its rows are read first, and
    # their number is its size (one query instead of a count and a read).
    conversation_id = getattr(conversation, "pk", None)
    rows = _small_memory_rows(owner, conversation_id) if query and _WHOLE.get(owner.pk) else None
    size = len(rows) if rows is not None else history_size(owner)
    strategy, reason = choose_strategy(size)
    plan = ContextPlan(
        query=query,
        strategy=strategy,
        reason=reason,
        budget=budget,
        zone_budgets=zones,
        history_size=size,
    )
    t = mark("count", started)

    # A small memory whose every message fits the memory zone is listed whole: a search would
    # only order it, so none is run (and the query is never embedded).
    whole = (
        _whole_memory(owner, zones["memory"], rows, conversation_id) if strategy == "full" and query else None
    )
    searching = bool(query) and whole is None
    plan.whole = whole
    _remember_whole(owner, whole is not None)
    if whole is not None:
        plan.reason += "; all of it fits the memory zone, so it is listed without a search"

    # What the plan shows besides the search's matches (the recent window, the rolling summary,
    # pinned messages, the levels, the overview) does not depend on the search: read on a worker
    # thread while the search runs, or here when the caller's transaction hides rows from
    # another connection.
    exclude = {user_message.pk} if user_message is not None else set()
    plan.skip_ids = exclude
    ahead_args = (
        owner,
        conversation,
        plan,
        exclude,
        active_message_ids,
        recently_used_tools,
        zones["history"] // 3,
    )
    ahead_job = in_worker(_read_ahead, *ahead_args) if searching else None

    # One query vector for the search and the topic ranking (a model call each when the
    # embedding cache is off). None when the embedder fails: search then reports why.
    # The search reads its keyword candidates first and asks for the vector after, so the query's
    # embedding (started when the message arrived) overlaps that work instead of being waited for.
    vector_box: list = []

    def query_vector_when_needed():
        if not vector_box:
            vector_box.append(_query_vector(query))
        return vector_box[0]

    results = (
        search(
            owner,
            query,
            limit=_hit_limit(strategy),
            candidates=None,
            filters=SearchFilters(reader=getattr(conversation, "pk", None)),
            query_vector=query_vector_when_needed,
            # The turn's own message is what is searched for, never a result of it; the
            # question is asked at its time.
            exclude_message_ids=[user_message.pk] if user_message else (),
            as_of=user_message.timestamp if user_message else None,
        )
        if searching
        else None
    )
    query_vector = query_vector_when_needed() if searching else None
    t = mark("search", t)
    ahead = ahead_job.result() if ahead_job is not None else _read_ahead(*ahead_args)
    plan.timings_ms["read_ahead"] = ahead.ms
    t = mark("read_ahead_wait", t)

    # System zone: the memory instructions, shortened when the budget is tiny.
    for text in (INSTRUCTIONS, SHORT_INSTRUCTIONS, ""):
        if count_tokens(text) <= zones["system"]:
            plan.instructions = text
            break
    system_tokens = count_tokens(plan.instructions)

    # Tools zone: the most relevant tools that fit, recently used ones kept.
    plan.tools, tools_tokens = select_tools(
        query, zones["tools"], recently_used=ahead.tool_names, wanted=STRATEGY_TOOLS[strategy]
    )

    # History zone: the recent window of the active branch, newest first, in full. Before the
    # window, the conversation's rolling summary (kept by background upkeep): at most a third
    # of the history zone, taken first so the window cannot crowd it out.
    history_tokens, left_out = _fit_history(plan, ahead.window, ahead.summary, zones["history"])

    # Memory zone: everything the other zones left, minus the reserve (and the person's
    # custom instructions, which the system prompt carries before it).
    memory_allowance = budget - zones["reserve"] - system_tokens - tools_tokens - history_tokens
    memory_allowance -= _add_custom_instructions(plan, custom_instructions)
    recent_ids = {m.pk for m in plan.recent} | {m.pk for m in left_out} | exclude

    hits: list[SearchHit] = []
    if results is not None:
        plan.fallbacks.extend(results.fallbacks)
        hits = [h for h in results.hits if h.message_id not in recent_ids]
        plan.timings_ms.update({f"search_{k}": v for k, v in results.timings_ms.items()})
        if any(f["kind"] == "vector_timeout" for f in results.fallbacks):
            plan.reason += "; vector search timed out, so keyword matches and recent messages only"
    plan.hits = [h.as_result() for h in hits]

    writer = Writer(memory_allowance)
    included: list[str] = []
    # Pinned messages come first: the person marked them important (memory.organizing.hierarchy).
    hierarchy.write_pinned(owner, plan, writer, included, recent_ids, ahead.pinned)
    # Then what holds now about the people the message names (memory.knowledge.facts).
    included += facts.write_index(writer, ahead.facts)
    # The levels section gets a share of what the strategy would otherwise fill.
    levels_room = hierarchy.levels_room(plan, writer)
    writer.allowance -= levels_room
    if time.perf_counter() > deadline:
        simple_after_timeout(plan, writer, hits, left_out, included, before_formatting=True)
    else:
        try:
            write = STRATEGY_WRITERS[strategy]
            write(owner, plan, writer, hits, left_out, included, deadline, query_vector, ahead)
        except DeadlinePassed:
            writer = Writer(memory_allowance - levels_room)
            included = []
            hierarchy.write_pinned(owner, plan, writer, included, recent_ids, ahead.pinned)
            simple_after_timeout(plan, writer, hits, left_out, included, before_formatting=False)
    writer.allowance += levels_room
    writer.full = False
    if time.perf_counter() <= deadline:
        hierarchy.write_levels(owner, plan, writer, included, recent_ids, ahead.levels)
    plan.text = writer.text()
    mark("format", t)
    # Only ids whose line survived the final fit count as included.
    plan.included_ids = [m.pk for m in plan.recent] + [
        i for i in dict.fromkeys(included) if i in plan.text
    ]
    plan.tokens_by_zone = {
        "system": system_tokens,
        **_custom_zone(plan),
        "tools": tools_tokens,
        "memory": writer.tokens,
        "history": history_tokens,
        "reserve": zones["reserve"],
    }
    plan.timings_ms.update(marks)
    plan.build_ms = round((time.perf_counter() - started) * 1000, 2)
    return plan


def _fit_history(
    plan: ContextPlan, window: list[Message], summary: tuple[str, dict[str, Any]], allowance: int
) -> tuple[int, list[Message]]:
    """The rolling summary, then the newest messages of `window` (newest first) while they fit
    `allowance` tokens, into the plan; the tokens they take and the messages left out."""
    plan.summary, plan.summary_covers = summary
    history_tokens = count_tokens(plan.summary) if plan.summary else 0
    left_out: list[Message] = []
    for m in window:
        cost = m.token_count + 4  # role and separators of a chat message
        if not left_out and history_tokens + cost <= allowance:
            plan.recent.insert(0, m)
            history_tokens += cost
        else:
            left_out.insert(0, m)
    if left_out:
        plan.fallbacks.append(
            {
                "kind": "recent_trimmed",
                "detail": (
                    f"{len(left_out)} of the last {len(window)} messages did not fit the "
                    f"history zone ({allowance} tokens); they are listed by id in the index"
                ),
            }
        )
    return history_tokens, left_out


CUSTOM_INSTRUCTIONS = "The user's custom instructions, for every reply (written by them, in their words):"


def _add_custom_instructions(plan: ContextPlan, text: str) -> int:
    """The person's custom instructions (memory.models.Preferences) into the plan's system text;
    the tokens they take from the memory zone."""
    text = (text or "").strip()
    plan.custom_instructions = f"{CUSTOM_INSTRUCTIONS}\n{text}" if text else ""
    return count_tokens(plan.custom_instructions) if text else 0


def _custom_zone(plan: ContextPlan) -> dict[str, int]:
    if not plan.custom_instructions:
        return {}
    return {"custom_instructions": count_tokens(plan.custom_instructions)}


# What the model is told when it is shown no memory (index_builder.conversation_only).
MEMORY_OFF = (
    "Memory is off for this conversation: you see only its messages below, nothing of the "
    "user's other conversations, and you have no memory tools. If asked what you remember "
    "about the user, say that memory is off here."
)
TEMPORARY = (
    "This is a temporary chat: it does not use the user's memory and nothing of it is kept. "
    "You see only its messages below and have no memory tools."
)


# The most messages of its conversation a turn shown no memory reads (as many as fit).
CONVERSATION_ONLY_WINDOW = 100


def conversation_only(
    owner,
    conversation,
    user_message: Message,
    *,
    zones: dict[str, int],
    active_message_ids: list[str] | None = None,
    custom_instructions: str = "",
    temporary: bool = False,
) -> ContextPlan:
    """The plan of a turn shown no memory (the person switched "Use memory in replies" off, or
    a temporary chat): its conversation's recent messages and rolling summary, no memory index,
    no memory tools, no facts, no search (its message is never embedded)."""
    started = time.perf_counter()
    zones = dict.fromkeys(ZONE_SHARES, 0) | {z: max(0, int(v)) for z, v in zones.items()}
    plan = ContextPlan(
        query=(user_message.content or "").strip(),
        strategy="off",
        reason=(
            "a temporary chat: memory is neither read nor added to"
            if temporary
            else "memory is off (Settings: Use memory in replies): only this conversation is shown"
        ),
        budget=sum(zones.values()),
        zone_budgets=zones,
    )
    plan.skip_ids = {user_message.pk}
    plan.instructions = TEMPORARY if temporary else MEMORY_OFF
    if not temporary:  # memory off: the next turn's message would be embedded ahead for nothing
        _remember_whole(owner, True)
    # No index: its zone goes to the conversation, as many of its latest messages as fit.
    allowance = zones["history"] + zones["memory"]
    window = recent_messages(
        owner, conversation, limit=max(settings.INDEX_RECENT_WINDOW, CONVERSATION_ONLY_WINDOW),
        exclude=plan.skip_ids, active_message_ids=active_message_ids,
    )
    summary = (
        rolling_summary.for_plan(
            owner, conversation, window_start=window[-1].position if window else None,
            active_message_ids=active_message_ids, allowance=zones["history"] // 3,
        )
        if window
        else ("", {})
    )
    history_tokens, _ = _fit_history(plan, window, summary, allowance)
    _add_custom_instructions(plan, custom_instructions)
    plan.included_ids = [m.pk for m in plan.recent]
    plan.tokens_by_zone = {
        "system": count_tokens(plan.instructions),
        **_custom_zone(plan),
        "tools": 0,
        "memory": 0,
        "history": history_tokens,
        "reserve": zones["reserve"],
    }
    plan.build_ms = round((time.perf_counter() - started) * 1000, 2)
    return plan


@dataclass
class _Ahead:
    """What prepare_context reads while its search runs (_read_ahead)."""

    tool_names: list[str]
    window: list[Message]
    summary: tuple[str, dict[str, Any]]
    pinned: list[Message]
    levels: hierarchy.LevelRows
    periods: dict[str, PeriodSummary]
    top_topics: list[Topic]
    facts: list[Fact]
    ms: float


def _read_ahead(
    owner,
    conversation,
    plan: ContextPlan,
    exclude: set[str],
    active_message_ids: list[str] | None,
    recently_used_tools: list[str] | None,
    summary_allowance: int,
) -> _Ahead:
    """Everything the plan shows that the search does not decide: the tools used lately, the
    recent window and the rolling summary before it, the pinned messages, the facts about the
    people the message names, the levels' rows and (hierarchical) the period summaries and
    top-level topics."""
    started = time.perf_counter()
    whole = plan.whole
    # The facts, the pins and the overview as an earlier turn read them, while unchanged.
    kept = kept_reads.for_turn(owner)
    # A small memory read whole already: the window, the pins and the levels come from it, and
    # a conversation's first turn has no tools used lately nor a summary to read.
    ongoing = conversation is not None and (
        whole is None
        or any(m.conversation_id == conversation.pk and m.pk not in exclude for m in whole)
    )
    if recently_used_tools is None and ongoing:
        recently_used_tools = _recent_tool_names(owner, conversation)
    if whole is None:
        window = recent_messages(
            owner,
            conversation,
            limit=settings.INDEX_RECENT_WINDOW,
            exclude=exclude,
            active_message_ids=active_message_ids,
        )
    else:
        window = _recent_of(whole, conversation, exclude, active_message_ids)
    summary = (
        rolling_summary.for_plan(
            owner,
            conversation,
            window_start=window[-1].position if window else None,
            active_message_ids=active_message_ids,
            allowance=summary_allowance,
        )
        if ongoing
        else ("", {})
    )
    pinned = (
        kept("pins", ("pinned", settings.INDEX_PINNED_MAX), lambda: hierarchy.pinned_rows(owner))
        if whole is None
        else hierarchy.pinned_of(whole)
    )
    # Every strategy writes the levels section (it is empty while the memory is small).
    levels = hierarchy.level_rows(owner, whole)
    periods: dict[str, PeriodSummary] = {}
    top: list[Topic] = []
    if plan.strategy == "hierarchical":
        periods, top = kept("overview", ("overview", settings.TOPIC_MAX_CHILDREN), lambda: _overview(owner))
    return _Ahead(
        tool_names=recently_used_tools or [],
        window=window,
        summary=summary,
        pinned=pinned,
        levels=levels,
        periods=periods,
        top_topics=top,
        facts=facts.current_for_index(owner, plan.query, kept=kept.of("facts")),
        ms=round((time.perf_counter() - started) * 1000, 2),
    )


# The columns the hierarchical overview shows of the period summaries and of the top-level topics.
_PERIOD_FIELDS = ("id", "period", "message_count", "top_topics")
_TOPIC_FIELDS = ("id", "order", "label", "period_start", "period_end", "message_count")


def _overview(owner) -> tuple[dict[str, PeriodSummary], list[Topic]]:
    """The owner's period summaries by period, and the first TOPIC_MAX_CHILDREN top-level topics
    in their order, those columns only (as .only() reads them), in one round trip: written out,
    as the ORM's building of the two queries cost more than running them on every turn."""
    # In the model's field order, as Model.from_db takes them.
    period_columns = [f.attname for f in PeriodSummary._meta.concrete_fields if f.attname in _PERIOD_FIELDS]
    topic_columns = [f.attname for f in Topic._meta.concrete_fields if f.attname in _TOPIC_FIELDS]
    periods_list = ", ".join(f'"{c}"' for c in period_columns)
    topics_list = ", ".join(f'"{c}"' for c in topic_columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {periods_list} FROM memory_periodsummary WHERE owner_id = %s; "
            f"SELECT {topics_list} FROM memory_topic "
            'WHERE owner_id = %s AND parent_id IS NULL ORDER BY "order" LIMIT %s',
            [owner.pk, owner.pk, settings.TOPIC_MAX_CHILDREN],
        )
        period_rows = cursor.fetchall()
        cursor.nextset()
        topic_rows = cursor.fetchall()
    alias = connection.alias
    json_at = period_columns.index("top_topics")
    periods: dict[str, PeriodSummary] = {}
    for row in period_rows:
        values = list(row)
        # jsonb reaches a cursor as text (Django's adapters); JSONField would decode it.
        values[json_at] = json.loads(values[json_at]) if values[json_at] is not None else None
        summary = PeriodSummary.from_db(alias, period_columns, values)
        periods[summary.period] = summary
    top = [Topic.from_db(alias, topic_columns, row) for row in topic_rows]
    return periods, top


def _hit_limit(strategy: str) -> int:
    return {"full": 50, "snippets": 30, "clusters": 20, "hierarchical": 15}[strategy]


def _recent_of(
    whole: list[Message], conversation, exclude: set[str], active_message_ids: list[str] | None
) -> list[Message]:
    """recent_messages, from every visible message of a small memory read already."""
    if conversation is None or settings.INDEX_RECENT_WINDOW <= 0:
        return []
    active = set(active_message_ids) if active_message_ids is not None else None
    mine = [
        m
        for m in whole
        if m.conversation_id == conversation.pk
        and m.pk not in exclude
        and (active is None or m.pk in active)
    ]
    mine.sort(key=lambda m: m.position, reverse=True)
    return mine[: settings.INDEX_RECENT_WINDOW]


def _recent_tool_names(owner, conversation) -> list[str]:
    """The tools the model used in this conversation's latest replies (bounded: the ids of the
    last 25 replies first, so an owner with many tool calls elsewhere is not walked)."""
    # Written out: read on every turn, and the ORM's building of it cost more than running it.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.tool_name FROM memory_toolcall t WHERE t.owner_id = %s AND t.message_id IN ("
            "SELECT m.id FROM memory_message m WHERE m.owner_id = %s AND m.conversation_id = %s "
            "AND m.role = 'assistant' AND NOT m.is_chunk ORDER BY m.position DESC LIMIT 25) "
            "ORDER BY t.timestamp DESC LIMIT 6",
            [owner.pk, owner.pk, conversation.pk],
        )
        return list(dict.fromkeys(row[0] for row in cursor.fetchall()))


def _query_vector(query: str):
    from memory.embedders import get_embedder

    try:
        return get_embedder().embed_query(query_text(query)) if query else None
    except Exception:  # the embedder being down only costs the topic ranking
        return None


# --- snapshots ---------------------------------------------------------------------------------


def save_snapshot(
    plan: ContextPlan, owner, conversation, user_message: Message | None = None
) -> ContextSnapshot:
    """Store the plan with its turn; the chat sets `.message` once the assistant reply exists."""
    snapshot = snapshot_row(plan, owner, conversation, user_message)
    snapshot.save(force_insert=True)
    return snapshot


def snapshot_row(
    plan: ContextPlan, owner, conversation, user_message: Message | None = None
) -> ContextSnapshot:
    """The plan as its turn's snapshot, not yet saved: a turn writes it in the round trip that
    checks what it read is still there (forgetting.gone_since_read's `then`)."""
    # One JSON round trip makes the plan storable (datetimes to text); its hits are reused.
    data = json.loads(json.dumps(plan.as_json(), default=str))
    return ContextSnapshot(
        owner_id=owner.pk,
        conversation=conversation,
        user_message=user_message,
        query=plan.query,
        strategy=plan.strategy,
        reason=plan.reason,
        text=plan.system_prompt(),
        tokens_by_zone=plan.tokens_by_zone,
        budget=plan.budget,
        included_ids=plan.included_ids,
        hits=data["hits"],
        fallbacks=plan.fallbacks,
        tools_offered=plan.tool_names,
        plan=ContextSnapshot.plan_to_store(data),  # the rest is in the columns (whole_plan)
        build_ms=plan.build_ms,
    )
