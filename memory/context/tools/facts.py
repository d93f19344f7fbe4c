"""The tool that reads what memory knows about someone: get_facts."""

from __future__ import annotations

from typing import Any

from memory.context.tools.arguments import LIMIT, OFFSET
from memory.context.tools.registry import ToolError, tool
from memory.context.tools.shapes import page_of
from memory.tokens import snip

_USER_WORDS = {"the user", "user", "me", "i", "myself", "you", "yourself"}


def _fact_dict(f) -> dict[str, Any]:
    row = {
        "id": f.pk, "subject": f.subject, "attribute": f.attribute, "fact": f.text,
        "said_at": f.said_at.isoformat(), "message_id": f.message_id,
        "valid_from": f.valid_from.isoformat(), "current": f.is_current,
    }
    if f.valid_to:
        row["valid_to"] = f.valid_to.isoformat()
    if f.superseded_by_id:
        row["superseded_by"] = f.superseded_by_id
    if f.refers_from:
        row["refers_to_period"] = [f.refers_from.date().isoformat(), f.refers_to.date().isoformat()]
    if f.corrected:
        row["corrected_by_the_user"] = True
    if f.pinned:
        row["pinned"] = True
    return row


@tool(
    "get_facts",
    "What memory knows about someone: the current facts about a subject (a person's name, or "
    "'the user'), each with the message that says it and since when it holds; with "
    "include_superseded, also the facts they replaced and the dates each held.",
    {
        "subject": {"type": "string", "maxLength": 200, "description": "a name, or 'the user'"},
        "include_superseded": {"type": "boolean"},
        "limit": LIMIT,
        "offset": OFFSET,
    },
    required=["subject"],
    keywords=("fact", "know", "live", "work", "job", "partner", "favourite", "favorite", "plan",
              "moved", "move", "changed", "still", "who"),
    label=lambda a: f"looked up facts about {snip(str(a['subject']), 60)}" if a.get("subject") else "",
)
def get_facts(owner, *, subject: str, include_superseded: bool = False, limit: int = 20, offset: int = 0,
              conversation=None):
    from memory.knowledge import facts
    from memory.models import Fact

    name = " ".join(subject.split())
    if not name:
        raise ToolError("subject must name someone: a name, or 'the user'")
    wanted = "the user" if name.lower() in _USER_WORDS else name
    qs = Fact.objects.owned_by(owner).live().about(wanted)
    if qs.exists():
        # The subject's own facts, read from the fact_current_rank index (current ones, in the
        # order the memory index shows them), then what they replaced, newest first.
        total_current = facts.current_count(owner, wanted)
        superseded = (
            Fact.objects.owned_by(owner).superseded().about(wanted).order_by("-pinned", "-valid_from", "-id")
            if include_superseded else Fact.objects.none()
        )
        rows, next_offset = _page_two(facts.ranked(owner, wanted), total_current, superseded, limit, offset)
    else:
        qs = facts.about_entity(owner, wanted)
        if not qs.exists():
            known = facts.subject_names(owner, 12)
            raise ToolError(
                f"no facts about {name[:60]!r}"
                + (f"; subjects with facts: {', '.join(known)}" if known else "; memory holds no facts yet")
            )
        current = qs.filter(superseded_by__isnull=True)
        total_current = current.count()
        rows, next_offset = page_of((qs if include_superseded else current).in_order(), limit, offset)
    result: dict[str, Any] = {
        "subject": wanted, "current_count": total_current, "offset": offset,
        "facts": [_fact_dict(f) for f in rows],
    }
    if next_offset is not None:
        result["next_offset"] = next_offset
    return result, f"{len(rows)} facts about {snip(wanted, 60)}"


def _page_two(first, first_count: int, second, limit: int, offset: int) -> tuple[list, int | None]:
    """page_of over `first` (holding exactly `first_count` rows) followed by `second`."""
    rows = list(first[offset : offset + limit + 1]) if offset < first_count else []
    if len(rows) <= limit:
        start = max(0, offset - first_count)
        rows += list(second[start : start + limit + 1 - len(rows)])
    more = len(rows) > limit
    return rows[:limit], (offset + limit if more else None)
