"""Search of memory: the one ranking the assistant's memory tools use too, with the explorer's filters."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.utils import OperationalError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from explorer.filters import parse_filters
from explorer.views.common import conversation_choices, paginate, render_page
from memory.models import Role
from memory.timeouts import cancelled, seconds


@login_required
@require_GET
@vary_on_headers("HX-Request")
def search(request: HttpRequest) -> HttpResponse:
    from memory.finding.search import SearchFilters, split_matches
    from memory.finding.search import search as hybrid_search

    user = request.user
    f = parse_filters(request.GET, user, {"conversation", "role", "start", "end", "q"})
    results = None
    page = None
    near: list = []
    too_slow = ""
    if f.q:
        # Five pages of twenty, from 200 candidates per ranked list rather than search()'s
        # default of five times the limit: far down both lists a weak match still collects two
        # reciprocal ranks and climbs over a strong match found by one list (eval_recall's
        # facts: MRR 0.89 at 200, 0.86 at 500), and the longer graph walk is slower.
        try:
            results = hybrid_search(
                user,
                f.q,
                limit=100,
                candidates=200,
                filters=SearchFilters(
                    conversation_id=f.conversation.pk if f.conversation else None,
                    start=f.start_dt,
                    end=f.end_dt,
                    role=f.role,
                ),
            )
        except OperationalError as exc:  # a statement past QUERY_TIMEOUT_MS (config.middleware)
            if not cancelled(exc):
                raise
            too_slow = seconds()
        if results is not None:
            # What holds a word of the query is a match; what is only near it in meaning is shown
            # apart, under a heading that says so, and only when it is close.
            matches, near = split_matches(results.hits)
            page = paginate(request, matches, per_page=20)
    context = {
        "section": "search",
        "errors": f.errors,
        "filters": f,
        "results": results,
        "page": page,
        "near": near,
        "too_slow": too_slow,
        "roles": Role.values,
        "conversations": conversation_choices(user),
    }
    return render_page(request, "explorer/search.html", "search-results", context)
