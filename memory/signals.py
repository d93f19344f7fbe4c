"""What the storage layer (memory.storage.store) announces. Storage sits below everything that
derives from it (background work in memory.tasks, the rolling summary of memory.context), so it
names none of them: they listen."""

from __future__ import annotations

from django.dispatch import Signal

# Messages were edited, deleted, restored or forgotten: what quoted them is derived again.
# Arguments: owner_id, message_ids.
messages_changed = Signal()

# Passages were stored without vectors: background work embeds them. Argument: owner_id.
passages_unembedded = Signal()

# A message was edited, deleted, restored or forgotten: sent inside that transaction, so what
# listens changes with it or not at all (the conversation's rolling summary drops the blocks
# from the one covering `position` onwards). Arguments: owner_id, conversation_id, position.
memory_changed = Signal()

# The model named a conversation after its first exchange (memory.organizing.titles): the tabs
# showing it are told. Arguments: owner_id, conversation_id, title.
conversation_titled = Signal()
