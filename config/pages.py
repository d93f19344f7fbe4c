"""Pages of the whole site rather than of one app: the offline banner's dismissal.

The error pages (404, 403, 500 and a failed CSRF check) are Django's own handlers rendering
templates/404.html, 403.html, 500.html and 403_csrf.html, in the site's layout.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

BANNER_DISMISSED = "offline_banner_dismissed"


@login_required
@require_POST
def dismiss_banner(request: HttpRequest) -> HttpResponse:
    """Hide the "no model configured" banner for the rest of this sign-in."""
    request.session[BANNER_DISMISSED] = True
    if request.headers.get("HX-Request"):
        return HttpResponse("")  # htmx swaps the banner away
    back = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(back, {request.get_host()}, require_https=request.is_secure())
    return HttpResponseRedirect(back if safe else "/")
