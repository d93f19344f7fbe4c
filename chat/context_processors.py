from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def llm_status(request: HttpRequest) -> dict[str, object]:
    """Whether a model is configured, for the banner that says how to configure one."""
    return {
        "llm_configured": bool(settings.OPENAI_API_KEY or settings.OPENAI_BASE_URL),
        "chat_model": settings.CHAT_MODEL,
        "chat_models": settings.CHAT_MODELS,
        "allow_signup": settings.ALLOW_SIGNUP,
    }
