"""What a server process does once it has loaded what it keeps: its long-lived objects leave the
garbage collector's full passes (config.startup)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading

from config.startup import freeze_long_lived_objects


def test_freezing_moves_what_exists_out_of_the_collectors_reach_and_frees_garbage_first():
    class Node:
        pass

    # A server started by an earlier test (`manage.py serve`) loads the embedder on a thread
    # that freezes once done: waited for, so the count compared below is this freeze's alone.
    for thread in threading.enumerate():
        if thread.name == "embedder-load":
            thread.join(timeout=600)
    kept = Node()
    cycle = Node()
    cycle.me = cycle  # garbage only a collection finds
    collected = []
    gc.callbacks.append(lambda phase, info: phase == "stop" and collected.append(info["collected"]))
    del cycle
    try:
        frozen = freeze_long_lived_objects()
        # Frozen objects are still freed when their last reference goes: a thread left running
        # by an earlier test (a server's, a pool's) may drop a few between the two counts.
        assert 0 < gc.get_freeze_count() <= frozen
        assert frozen > len(gc.get_objects())
        assert sum(collected) >= 1, "the start-up's garbage was collected, not frozen"
        tracked = {id(o) for o in gc.get_objects()}
        assert id(kept) not in tracked and id(kept.__dict__) not in tracked
    finally:
        gc.callbacks.pop()
        gc.unfreeze()
    assert id(kept) in {id(o) for o in gc.get_objects()}


def test_the_asgi_application_freezes_what_django_and_the_app_loaded():
    run = subprocess.run(
        [sys.executable, "-c", "import gc, config.asgi; print(gc.get_freeze_count(), len(gc.get_objects()))"],
        capture_output=True, text=True, timeout=300, cwd=os.getcwd(),
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
    )
    assert run.returncode == 0, run.stderr
    frozen, tracked = (int(x) for x in run.stdout.split())
    # Django, the consumers, the URLs: tens of thousands of objects, left for the collector none.
    assert frozen > 50_000 and tracked < frozen // 100


def test_the_servers_embedder_load_freezes_the_model_it_loaded(monkeypatch):
    from config.management.commands import serve
    from memory.embedders import get_embedder

    calls = []

    def freeze() -> int:
        calls.append(get_embedder()._model is not None)
        return 0

    monkeypatch.setattr(serve, "freeze_long_lived_objects", freeze)
    serve.start_embedder_load().join(timeout=600)
    assert calls == [True], "frozen once, after the model was loaded"
