from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        # Connects the receivers that queue upkeep and embedding and hold task leases, in every
        # process: a worker whose first task is not one of memory.tasks' has them too.
        from django.db.backends.signals import connection_created

        from memory import pgvalues, signals, tasks  # noqa: F401
        from memory.context import rolling_summary

        # Storage announces edits, deletes and forgets; the rolling summary follows them.
        signals.memory_changed.connect(rolling_summary.invalidate_on_change, dispatch_uid="rolling_summary")
        # Every connection reads timestamps in C (the same datetimes as Django's loader gives).
        connection_created.connect(pgvalues.on_connection_created, dispatch_uid="fast_timestamps")
