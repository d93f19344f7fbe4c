"""bench_uploads: the issue's uploads, shrunk, sent to a real `manage.py serve` (daphne's own
refusal, the application's, the zip's caps, the streaming import, deep nesting): each is answered
as it should be, with the reason a person reads. The memory figures at this size are noise; the
full-size run's are in docs/benchmarks.md."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from memory.models import ImportJob


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_each_upload_of_the_issue_is_answered_with_its_reason_by_a_real_server():
    out = io.StringIO()
    call_command("bench_uploads", "--scale", "0.01", "--only", "zip-bomb,big-login,huge-field,deep-arrays",
                 "--no-warm-up", "--database", "", stdout=out, stderr=io.StringIO())
    rows = {row["input"]: row for row in json.loads(out.getvalue().strip().splitlines()[-1])}
    answers = {name: (row["status"], row["reason"]) for name, row in rows.items()}
    assert answers["zip-bomb"][0] == 400 and "zip bomb" in answers["zip-bomb"][1]
    said = "Request body too large: 10 MB sent, this page takes at most 2.5 MB."
    assert answers["big-login"] == (413, said)
    assert answers["huge-field"][0] == 200 and "40 messages stored" in answers["huge-field"][1]
    assert answers["deep-arrays"][0] == 400 and "nested too deeply" in answers["deep-arrays"][1]
    assert all(row["before_mb"] > 0 and row["peak_mb"] >= row["before_mb"] for row in rows.values())
    assert not ImportJob.objects.exists()  # it deletes what it made
