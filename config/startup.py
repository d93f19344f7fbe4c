"""What a server process does once it has loaded what it keeps for its whole life."""

from __future__ import annotations

import gc


def freeze_long_lived_objects() -> int:
    """Collect the start-up's garbage, then move every object still tracked (Django's apps and
    URLs, the consumers, the embedder and what a turn's code loads: ~185,000 objects) out of
    the collector's reach for good (`gc.freeze`). A full collection otherwise walks all of
    them, ~120 ms on a 2-core machine (docs/benchmarks.md, "Sixth pass"), on whichever turn
    happens to allocate at that moment; what was frozen is never walked by a collection again
    (reference counting still frees what is dropped; only cycles among frozen objects stay),
    which for objects kept for the process's life costs nothing. Returns the number of objects frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
