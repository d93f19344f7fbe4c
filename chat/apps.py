from __future__ import annotations

from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat"

    def ready(self) -> None:
        from chat.consumers import tell_tabs_of_title
        from memory import signals
        from memory.lifecycle.forgetting import holds_copies

        # A reply being written holds what it streamed so far: a forget scrubs it there too.
        holds_copies("chat.ReplyDraft", ["text"])
        # The model titled a conversation in the background: its open tabs are told.
        signals.conversation_titled.connect(tell_tabs_of_title, dispatch_uid="chat.tell_tabs_of_title")
