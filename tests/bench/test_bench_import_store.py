"""bench_import_store: the storing step's messages/s as passages are sized now and as they were."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from bench.management.commands.bench_import_store import decoded_cut_points
from memory.embedders import e5
from memory.embedders.e5 import E5Embedder
from memory.models import Message


@pytest.mark.django_db
def test_it_prints_a_median_rate_for_each_way_and_leaves_no_user_or_message_behind():
    out = io.StringIO()
    call_command("bench_import_store", "--messages", "40", "--runs", "1", "--database", "", stdout=out)
    text = out.getvalue()
    for mode in ("now", "before (whole-text counts, decoded cut points)"):
        match = re.search(rf"{re.escape(mode)}: median ([\d.]+) messages/s over 1 runs", text)
        assert match and float(match.group(1)) > 0, text
    assert not get_user_model().objects.filter(username__startswith="bench-import-store-").exists()
    assert not Message.objects.exists()
    # The embedder's own counting is back after the run.
    assert E5Embedder.token_count is not E5Embedder._engine_count
    assert e5._cut_points is not decoded_cut_points
