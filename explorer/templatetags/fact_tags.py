"""Facts for the templates that show them (the Memory overview, an entity's page, the Facts
page), so each page includes its Facts section with one line and its view stays as it was."""

from __future__ import annotations

from django import template

from memory.knowledge import facts as memory_facts
from memory.models import Fact

register = template.Library()

OVERVIEW_LIMIT = 12


@register.simple_tag
def facts_section(user, entity=None, subject: str = "", limit: int | None = None) -> dict:
    """{"current": [...], "superseded": [...], "more": n}: current facts first (pinned on top),
    then the superseded ones, newest first."""
    if entity is not None:
        qs = memory_facts.about_entity(user, entity.name, entity.aliases or [])
    else:
        qs = Fact.objects.owned_by(user).live()
        if subject:
            qs = qs.about(subject)
    qs = qs.select_related("message", "superseded_by", "superseded_by__message")
    current = qs.filter(superseded_by__isnull=True).order_by("-pinned", "subject_key", "-valid_from", "-id")
    superseded = qs.filter(superseded_by__isnull=False).order_by("-valid_to", "-id")
    total = current.count()
    if limit:
        current, superseded = current[:limit], superseded[: max(1, limit // 2)]
    more = max(0, total - limit) if limit else 0
    return {"current": list(current), "superseded": list(superseded), "more": more}


@register.filter
def shown(fact: Fact) -> str:
    """The fact as its owner reads it ("You lead a team of five engineers")."""
    return memory_facts.shown(fact)


@register.filter
def subject_label(fact: Fact) -> str:
    return "You" if fact.subject_key == memory_facts.USER else fact.subject


@register.filter
def drawn(fact: Fact) -> str:
    """What was drawn before the person corrected it, as they read it."""
    return memory_facts.shown(fact, corrected=False)
