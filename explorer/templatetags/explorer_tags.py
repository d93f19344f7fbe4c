"""Small display filters for the explorer; all return plain text for autoescaping."""

from __future__ import annotations

from django import template

from explorer.counting import Tally
from memory.context.tools import readable_json
from memory.text import plain_text

register = template.Library()


@register.filter
def thousands(value) -> str:
    if isinstance(value, Tally):
        return str(value)
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def score(value, digits: int = 4) -> str:
    try:
        return f"{float(value):.{int(digits)}f}"
    except (TypeError, ValueError):
        return "–"


@register.filter
def short(value, length: int = 160) -> str:
    """One line of at most `length` characters."""
    flat = " ".join(str(value or "").split())
    length = int(length)
    return flat if len(flat) <= length else flat[: length - 1] + "…"


@register.filter
def plain(value) -> str:
    """Markdown as the words a reader sees (for snippets: no "**" or "#" left over)."""
    return plain_text(str(value or ""))


@register.simple_tag(takes_context=True)
def page_url(context, param: str, number) -> str:
    """The current URL's query string with `param` set to `number` (other filters kept)."""
    params = context["request"].GET.copy()
    params[param] = str(number)
    params.pop("partial", None)
    return "?" + params.urlencode()


@register.filter
def readable(text: str) -> str:
    """Tool arguments and results with their \\u escapes shown as the characters they are."""
    return readable_json(text)
