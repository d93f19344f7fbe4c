from __future__ import annotations

from django import template

from chat import rendering
from memory.tools import readable_json

register = template.Library()


@register.filter
def markdown(text: str, user=None):
    """Sanitized Markdown; ids of the user's own messages become links."""
    return rendering.render_markdown(text, owner=user)


@register.filter
def logical_tool_calls(message):
    if message.role != "assistant":  # only replies make tool calls: no query for the others
        return []
    return [c for c in message.tool_calls.all() if not c.is_chunk]


@register.filter
def tool_label(call):
    return rendering.tool_label(call.tool_name, call.arguments)


@register.filter
def tool_summary(call):
    return rendering.tool_result_summary(call)


@register.filter
def truncate_chars(text: str, n: int = 4000) -> str:
    text = text or ""
    return text if len(text) <= n else text[:n] + f"… ({len(text) - n:,} more characters)"


FOLD_CHARS = 2000


@register.filter
def folds(text: str) -> bool:
    """A message this long shows its start, with "Show more": the thread stays skimmable."""
    return len(text or "") > FOLD_CHARS


@register.filter
def readable(text: str) -> str:
    return readable_json(text)
