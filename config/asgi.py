"""ASGI entry point: daphne serves HTTP and websockets from here."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

# Django must be set up before the consumers (and the models they import) are loaded.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from chat.routing import websocket_urlpatterns  # noqa: E402
from config.bodies import RefuseLargeBodies  # noqa: E402
from config.proxies import TrustedProxyHeaders  # noqa: E402

# The client's address (what the sign-in limit counts by) comes from proxy headers only when a
# TRUSTED_PROXIES peer sent them; daphne itself is never told to believe them.
application = TrustedProxyHeaders(
    ProtocolTypeRouter(
        {
            # Static files come from the app itself unless a proxy serves them (SERVE_STATIC=false).
            # A body over its page's limit is refused before Django reads it (config/bodies.py).
            "http": RefuseLargeBodies(
                ASGIStaticFilesHandler(django_asgi_app) if settings.SERVE_STATIC else django_asgi_app
            ),
            "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)

from config.startup import freeze_long_lived_objects  # noqa: E402

# Everything imported so far lives as long as the process: no full collection walks it again.
freeze_long_lived_objects()
