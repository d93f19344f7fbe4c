"""The names memory knows, and one name with its mentions and neighbours."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from explorer.filters import parse_filters
from explorer.views.common import MAX_PK, paginate, render_page
from memory.models import Entity, EntityEdge, EntityMention


def _get_entity_for_user(user, entity_id: int) -> Entity:
    entity = Entity.objects.owned_by(user).filter(pk=entity_id).first() if entity_id <= MAX_PK else None
    if entity is None:
        raise Http404("no such entity")
    return entity


@login_required
@require_GET
@vary_on_headers("HX-Request")
def entities(request: HttpRequest) -> HttpResponse:
    user = request.user
    f = parse_filters(request.GET, user, {"q", "kind"})
    kinds = list(
        Entity.objects.owned_by(user).values_list("kind", flat=True).order_by("kind").distinct()[:50]
    )
    qs = Entity.objects.owned_by(user)
    if f.q:
        qs = qs.filter(name__icontains=f.q)
    if f.kind:
        if f.kind in kinds:
            qs = qs.filter(kind=f.kind)
        else:
            f.errors.append(f"No entities of kind “{f.kind}”; showing every kind.")
            f.kind = None
    page = paginate(request, qs.order_by("-mention_count", "name", "id"))
    context = {
        "section": "entities",
        "errors": f.errors,
        "filters": f,
        "page": page,
        "kinds": kinds,
    }
    return render_page(request, "explorer/entities.html", "entity-rows", context)


@login_required
@require_GET
@vary_on_headers("HX-Request")
def entity_detail(request: HttpRequest, entity_id: int) -> HttpResponse:
    user = request.user
    entity = _get_entity_for_user(user, entity_id)
    mentions = paginate(
        request,
        EntityMention.objects.owned_by(user)
        .filter(entity=entity, message__deleted=False)
        .select_related("message", "message__conversation")
        .order_by("-message__timestamp", "-id"),
    )
    edges = list(
        EntityEdge.objects.owned_by(user)
        .filter(Q(source=entity) | Q(target=entity))
        .select_related("source", "target")
        .order_by("-weight", "id")[:30]
    )
    neighbours = [
        {"entity": e.target if e.source_id == entity.pk else e.source, "weight": e.weight} for e in edges
    ]
    context = {
        "section": "entities",
        "entity": entity,
        "mentions": mentions,
        "neighbours": neighbours,
    }
    return render_page(request, "explorer/entity.html", "mention-rows", context)
