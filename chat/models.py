"""What the chat keeps besides memory: which branch of a conversation is on screen, and the
replies being written."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from memory.models import ContextSnapshot, Conversation, Message


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


class ReplyDraft(models.Model):
    """A reply while it is being written, saved every REPLY_DRAFT_SAVE_SECONDS as it streams.

    The finished reply replaces it in the same transaction. A draft left behind belongs to a
    server that died mid-stream: `chat.drafts.recover` stores what it holds as an incomplete
    reply, so a crash loses at most the last moments of a reply, never the whole of it.
    """

    # The id the stored reply will have.
    id = models.CharField(primary_key=True, max_length=26)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="reply_drafts")
    # The user message being answered.
    parent = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    snapshot = models.ForeignKey(
        ContextSnapshot, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    text = models.TextField(blank=True, default="")
    mode = models.CharField(max_length=20, default="llm")
    # Which server process writes it: "host:pid:process start time".
    process = models.CharField(max_length=300)
    started_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"draft {self.id} ({len(self.text)} characters)"
