"""What the chat keeps besides memory: which branch of a conversation is on screen."""

from __future__ import annotations

from django.db import models

from memory.models import Conversation, Message


class BranchSelection(models.Model):
    """The leaf of the active branch of a conversation.

    Messages form a tree (edits and regenerations branch); the active branch is the path from
    this leaf up to the root. Only it counts as recent conversation for the model; the other
    branches stay in memory and in the explorer.
    """

    conversation = models.OneToOneField(
        Conversation, primary_key=True, on_delete=models.CASCADE, related_name="branch_selection"
    )
    leaf = models.ForeignKey(Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.conversation_id} → {self.leaf_id}"
