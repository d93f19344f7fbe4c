"""bench_ws's LLM-client-only mode: the CPU floor of reading the model's streams."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command


def test_llm_only_streams_every_reply_and_prints_the_cpu_per_chunk():
    out = io.StringIO()
    call_command("bench_ws", "--llm-only", "--clients", "3", "--tokens", "5", "--rate", "200", stdout=out)
    text = out.getvalue()
    found = re.search(r"3 streams at once, (\d+) chunks .* CPU [\d.]+ s = (\d+) us per chunk", text)
    assert found, text
    assert int(found.group(1)) == 15  # every token of every reply arrived
    assert int(found.group(2)) > 0
    assert "CPU seconds per second" in text


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_deletes_only_the_users_it_made(stranger):
    # A person whose name happens to start like the bench's users.
    lookalike = get_user_model().objects.create_user("bench_ws_0000")
    out = io.StringIO()
    call_command(
        "bench_ws", "--clients", "2", "--tokens", "3", "--rate", "100", "--remote-embeddings",
        "--database", "", stdout=out,
    )
    assert "messages lost: 0 " in out.getvalue(), out.getvalue()
    assert set(get_user_model().objects.values_list("pk", flat=True)) == {stranger.pk, lookalike.pk}
