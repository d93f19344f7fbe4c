from __future__ import annotations

from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat"

    def ready(self) -> None:
        from memory.lifecycle.forgetting import holds_copies

        # A reply being written holds what it streamed so far: a forget scrubs it there too.
        holds_copies("chat.ReplyDraft", ["text"])
