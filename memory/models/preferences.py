"""What a person decides about their memory: whether replies use it, whether new chats are
remembered, and the custom instructions every turn's prompt carries."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Preferences(models.Model):
    """One row per person, made on their first change; until then every default holds."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    # Off: a turn gets no memory index, no memory tools and no facts; only its conversation.
    use_memory = models.BooleanField(default=True)
    # Off: conversations started meanwhile are chat history only (Conversation.remembered).
    remember_chats = models.BooleanField(default=True)
    # "I'm vegetarian, answer briefly": in every turn's system prompt, counted in its budget.
    custom_instructions = models.TextField(blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "preferences"

    def __str__(self) -> str:
        return f"preferences of {self.owner_id}"

    @classmethod
    def of(cls, user) -> Preferences:
        """The person's preferences (unsaved defaults when they changed none): one indexed read."""
        found = cls.objects.filter(owner_id=user.pk).first() if getattr(user, "pk", None) else None
        return found or cls(owner_id=getattr(user, "pk", None))
