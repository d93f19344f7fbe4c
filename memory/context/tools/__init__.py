"""The memory tools the LLM calls (reading and searching messages, walking the topic tree and
the levels, find, summaries, stats, the entity graph, facts), in the OpenAI tools format.

`execute_tool` never raises and never reads another user's rows: arguments are parsed and
validated against the tool's own JSON schema first (missing, extra or mistyped arguments are
reported by name), every read goes through `owned_by(owner)` and visible-only querysets, and
results are bounded (limits capped, long texts cut with a hint how to page on).

The registry and execute_tool are in `registry`, the shared argument readers in `arguments`,
how rows read in a result in `shapes`; the tools by family in `messages`, `search`, `topics`,
`levels` (the hierarchy and the stats), `graph` and `facts`. Importing this package registers
them all.
"""

from __future__ import annotations

# Imported for their @tool registrations.
from memory.context.tools import facts, graph, levels, messages, search, topics  # noqa: F401
from memory.context.tools.registry import (
    MAX_RESULT_CHARS,
    TOOLS,
    Tool,
    ToolError,
    ToolResult,
    execute_tool,
    order_tools,
    parse_arguments,
    readable_json,
    select_tools,
    tool_schemas,
)

__all__ = [
    "MAX_RESULT_CHARS",
    "TOOLS",
    "Tool",
    "ToolError",
    "ToolResult",
    "execute_tool",
    "parse_arguments",
    "readable_json",
    "select_tools",
    "tool_schemas",
]

# The order the tools are offered in, and the one select_tools breaks ties by when the budget is
# tight: kept as it was before the tools were split by family, so what a turn is offered does not
# change with the order the modules are imported in.
order_tools(
    [
        "get_message_by_id",
        "get_messages_by_ids",
        "get_message_with_chunks",
        "vector_search",
        "search_and_retrieve",
        "get_cluster",
        "get_period_messages",
        "get_conversation_thread",
        "get_tool_call",
        "get_tool_calls_by_message",
        "view_topic",
        "get_topic_messages",
        "get_session",
        "find",
        "show_summaries",
        "get_conversation_stats",
        "memory_graph_query",
        "expand_node",
        "browse_hierarchy",
        "get_facts",
    ]
)
