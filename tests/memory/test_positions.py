"""Seed 001 §3.4's race: two turns written at the same moment keep unique, ordered positions."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from memory.models import Message
from memory.storage import store


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_keep_unique_ordered_positions(owner, conversation):
    store.store_message(owner, conversation, "user", "warm up the embedder")
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def writer(n: int) -> None:
        try:
            barrier.wait()
            for i in range(10):
                store.store_message(owner, conversation, "user", f"writer {n} message {i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    positions = list(
        Message.objects.filter(conversation=conversation, is_chunk=False)
        .order_by("position")
        .values_list("position", flat=True)
    )
    assert positions == list(range(41))
    # Each writer's own messages keep their order.
    for n in range(4):
        mine = list(
            Message.objects.filter(conversation=conversation, content__startswith=f"writer {n} ")
            .order_by("position")
            .values_list("content", flat=True)
        )
        assert mine == [f"writer {n} message {i}" for i in range(10)]
