"""The import progress partial's helpers (templates/explorer/_import_progress.html), so any
page can include it with one line, whatever its view put in the context."""

from __future__ import annotations

from django import template

from explorer.views.imports import shown_jobs
from memory.transfer.import_jobs import KINDS

register = template.Library()


@register.simple_tag(takes_context=True)
def recent_imports(context) -> list:
    """The signed-in user's running imports and those finished lately."""
    request = context.get("request")
    user = getattr(request, "user", None)
    return shown_jobs(user) if user is not None and user.is_authenticated else []


@register.filter
def any_active(jobs) -> bool:
    return any(job.is_active for job in jobs or ())


@register.filter
def import_kind(source: str) -> str:
    return KINDS.get(source, source or "file")


@register.filter
def time_left(seconds) -> str:
    """An estimate of time left, as a person says it."""
    if seconds is None:
        return ""
    seconds = float(seconds)
    if seconds < 60:
        return "Under a minute"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"About {minutes} min"
    return f"About {minutes / 60:.1f} h"
