"""What the storage layer (memory.storage.store) announces once a transaction commits. Background work
(memory.tasks) listens: storage sits below the tasks that re-derive from it, so it names no task."""

from __future__ import annotations

from django.dispatch import Signal

# Messages were edited, deleted, restored or forgotten: what quoted them is derived again.
# Arguments: owner_id, message_ids.
messages_changed = Signal()

# Passages were stored without vectors: background work embeds them. Argument: owner_id.
passages_unembedded = Signal()
