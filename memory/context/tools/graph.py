"""The tool that explores the entity graph: memory_graph_query."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Exists, OuterRef

from memory.context.tools.arguments import LIMIT
from memory.context.tools.registry import ToolError, tool
from memory.models import Entity, EntityMention
from memory.tokens import snip


@tool(
    "memory_graph_query",
    "Explore the entity graph: an entity (name, number, identifier, date, "
    "URL...) and what it co-occurs with, up to depth hops, with the messages that mention it.",
    {
        "entity": {"type": "string", "maxLength": 300},
        "depth": {"type": "integer", "minimum": 1, "maximum": 3},
        "limit": LIMIT,
    },
    required=["entity"],
    keywords=("entity", "graph", "related", "who", "connected", "relationship"),
)
def memory_graph_query(owner, *, entity: str, depth: int = 1, limit: int = 10, conversation=None):
    from memory.knowledge.entities import normalize, singular_forms

    if depth < 1 or depth > 3:
        raise ToolError("depth must be between 1 and 3")
    norm = normalize(entity)
    # Only entities some visible message still mentions (counts may lag behind a delete).
    live = Entity.objects.owned_by(owner).filter(
        Exists(EntityMention.objects.filter(entity=OuterRef("pk"), message__deleted=False))
    )
    root = (
        live.filter(normalized=norm).order_by("-mention_count").first()
        or live.filter(normalized__in=singular_forms(norm)).order_by("-mention_count").first()
        or live.filter(normalized__icontains=norm).order_by("-mention_count").first()
    )
    if root is None:
        raise ToolError(f"no entity like {entity[:60]!r} in memory")
    nodes = {root.pk: root}
    edges: list[dict[str, Any]] = []
    frontier = [root.pk]
    per_node = max(3, limit)
    for _ in range(depth):
        next_frontier = []
        for eid in frontier:
            # Co-occurrence counted over visible messages only, so deleted text never links.
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT b.entity_id, count(*) FROM memory_entitymention a "
                    "JOIN memory_entitymention b ON a.message_id = b.message_id "
                    "AND b.entity_id <> a.entity_id "
                    "JOIN memory_message m ON m.id = a.message_id "
                    "WHERE a.owner_id = %s AND a.entity_id = %s AND NOT m.deleted "
                    "GROUP BY b.entity_id ORDER BY count(*) DESC LIMIT %s",
                    [owner.pk, eid, per_node],
                )
                rows = cursor.fetchall()
            for other, weight in rows:
                edges.append({"source": eid, "target": other, "weight": weight})
                if other not in nodes:
                    next_frontier.append(other)
            if len(nodes) + len(next_frontier) > 60:
                break
        for e in Entity.objects.owned_by(owner).filter(pk__in=next_frontier):
            nodes[e.pk] = e
        frontier = next_frontier
        if not frontier:
            break
    mentions = (
        EntityMention.objects.owned_by(owner)
        .filter(entity=root, message__deleted=False)
        .select_related("message")
        .order_by("-message__timestamp")[:limit]
    )
    result = {
        "entity": {
            "id": root.pk,
            "name": root.name,
            "kind": root.kind,
            "mentions": root.mention_count,
            "aliases": root.aliases,  # other spellings graph upkeep merged into it
        },
        "nodes": [
            {"id": e.pk, "name": e.name, "kind": e.kind, "mentions": e.mention_count}
            for e in nodes.values()
        ],
        "edges": [e for e in edges if e["target"] in nodes],
        "related_messages": [
            {
                "id": mm.message_id,
                "role": mm.message.role,
                "timestamp": mm.message.timestamp.isoformat(),
                "snippet": snip(mm.message.content),
            }
            for mm in mentions
        ],
    }
    return result, f'explored "{snip(root.name, 40)}" — {len(nodes) - 1} related entities'
