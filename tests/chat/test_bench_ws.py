"""bench_ws: the LLM-client-only mode (the CPU floor of reading the model's streams) and the
baseline (a bare relay and Recollect in one run)."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command


def test_llm_only_streams_every_reply_and_prints_the_cpu_per_token():
    out = io.StringIO()
    call_command("bench_ws", "--llm-only", "--clients", "3", "--tokens", "5", "--rate", "200", stdout=out)
    text = out.getvalue()
    found = re.search(r"3 streams at once, (\d+) tokens .* CPU [\d.]+ s = (\d+) us per token", text)
    assert found, text
    assert int(found.group(1)) == 15  # every token of every reply arrived
    assert int(found.group(2)) > 0
    assert "CPU seconds per second" in text


@pytest.mark.django_db(transaction=True)
def test_baseline_prints_a_row_for_the_bare_relay_and_one_for_recollect():
    out = io.StringIO()
    call_command(
        "bench_ws", "--baseline", "--rates", "1", "--step-seconds", "2", "--cpu-clients", "2",
        "--cpu-hold", "2", "--tokens", "5", "--rate", "100", "--remote-embeddings", "--database", "",
        stdout=out,
    )
    text = out.getvalue()
    # Progress while stepping, then the table: both servers, from this one run.
    assert re.search(r"bare relay +1 turns/s: 2 turns, first token", text), text
    assert re.search(r"Recollect +1 turns/s: 2 turns, first token", text), text
    # The rows say the highest rate that met the goal (0 if none did, on a busy machine).
    rows = re.findall(r"^(bare relay|Recollect) +(?:>=)?[\d.]+ +(?:\d+ ms|-) +\d+ ", text, re.M)
    assert rows == ["bare relay", "Recollect"], text
    # The ratios of the two rows, always printed (n/a where a figure is under the clock's tick).
    assert re.search(r"Recollect / bare relay: turn rate ([\d.]+x|n/a)", text), text
    assert re.search(r"CPU per token (-?[\d.]+x|n/a)", text), text
    assert re.search(r"us per streamed token", text), text


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_deletes_only_the_users_it_made(stranger):
    # A person whose name happens to start like the bench's users.
    from django_tasks_db.models import DBTaskResult

    from memory import tasks

    lookalike = get_user_model().objects.create_user("bench_ws_0000")
    tasks.queue_upkeep(stranger.pk, ["01STRANGERSMESSAGE00000000"])
    out = io.StringIO()
    call_command(
        "bench_ws", "--clients", "2", "--tokens", "3", "--rate", "100", "--remote-embeddings",
        "--database", "", stdout=out,
    )
    assert "messages lost: 0 " in out.getvalue(), out.getvalue()
    assert set(get_user_model().objects.values_list("pk", flat=True)) == {stranger.pk, lookalike.pk}
    # The upkeep its turns queued goes with its users; a person's stays.
    owners = [r["args"][0] for r in DBTaskResult.objects.values_list("args_kwargs", flat=True)]
    assert owners == [stranger.pk]
