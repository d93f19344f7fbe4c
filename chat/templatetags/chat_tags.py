from __future__ import annotations

import datetime as dt

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.timesince import timesince

from chat import rendering
from chat.preferences import SWITCHES
from memory.context.tools import readable_json
from memory.knowledge import facts

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
def saved_facts(message):
    """What the person asked to be remembered in the message this reply answers (shown under
    the reply as "Saved to memory: …")."""
    if message.role != "assistant" or not message.parent_id:
        return []
    if hasattr(message, "saved_facts"):  # read for the whole page at once (chat.views._thread)
        return message.saved_facts
    return facts.explicitly_saved(message.owner_id, message.parent_id)


@register.filter
def fact_shown(fact):
    return facts.shown(fact)


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


@register.filter
def last_active(when, now=None) -> str:
    """When a conversation was last active: "5 minutes ago" within a day, else its date, with
    the year when it is not this year (an imported conversation from 2023 is not "just now")."""
    if not when:
        return ""
    now = now or timezone.now()
    if now - when < dt.timedelta(days=1):
        return f"{timesince(when, now)} ago"
    local = timezone.localtime(when)
    return date_format(local, "j M" if local.year == timezone.localtime(now).year else "j M Y")


@register.filter
def last_label(groups) -> str:
    """The label of the last date group shown (the next page does not repeat its heading)."""
    return groups[-1].label if groups else ""


@register.filter
def message_time(when, now=None) -> str:
    """A message's time: "May 20, 18:28" this year, "May 20, 2024, 18:28" another year."""
    if not when:
        return ""
    local = timezone.localtime(when)
    this_year = local.year == timezone.localtime(now or timezone.now()).year
    return date_format(local, "M j, H:i" if this_year else "M j, Y, H:i")


@register.filter
def memory_switches(prefs) -> list[tuple[str, str, bool]]:
    """(name, label, on) of each memory switch (chat.preferences.SWITCHES)."""
    return [(name, label, bool(getattr(prefs, name))) for name, label in SWITCHES.items()]
