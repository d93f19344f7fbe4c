"""Importing chat history as a person does, in Debian's Chromium: upload a ChatGPT export on the
import page, watch the bar move (stored, embedding with counts and time left, done) while the
background work runs, and find the import on the Memory page. Screenshots in
test-artifacts/explorer/."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.urls import reverse

from bench.chatgpt_export import generate
from memory import tasks
from memory.models import ImportJob, Topic
from tests.explorer.test_browser import page, shot  # noqa: F401 - the signed-in page fixture
from tests.memory.test_import_jobs import run_queued_imports

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_uploaded_export_shows_its_progress_until_its_topics_are_built(page, owner, tmp_path,  # noqa: F811
                                                                          monkeypatch):
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps(generate(40, seed=11, end=dt.datetime(2025, 5, 1, tzinfo=dt.UTC))))
    page.goto(page.base + reverse("explorer:import"))
    page.set_input_files("#import-file", str(export))
    page.get_by_role("button", name="Import").click()
    page.get_by_text("Importing conversations.json: 40 messages (ChatGPT)").wait_for()
    page.get_by_text("Storing messages: 0 of 40").wait_for()
    shot(page, "import-queued")
    job = ImportJob.objects.get(owner=owner)

    # The background work, in short slices: the messages are stored, a few passages embedded.
    monkeypatch.setattr(tasks, "IMPORT_SLICE_SECONDS", 0.5)
    monkeypatch.setattr("memory.transfer.import_jobs.EMBED_BATCH", 4)
    for _ in range(20):  # storing takes the first slice or two
        tasks.run_import.call(job.pk)
        job.refresh_from_db()
        if job.passages_embedded:
            break
    assert job.status == ImportJob.Status.EMBEDDING and 0 < job.passages_embedded < job.passages_total
    page.get_by_text("search finds them by keyword now").wait_for(timeout=15_000)
    embedding = f"Embedding passages: {job.passages_embedded} of {job.passages_total}"
    page.get_by_text(embedding).wait_for(timeout=15_000)
    assert int(page.locator(f"#import-{job.pk} progress").get_attribute("value")) > 0
    shot(page, "import-embedding")

    # The Memory page shows the same import.
    page.goto(page.base + reverse("explorer:overview"))
    page.locator(f"#import-{job.pk}").get_by_text("conversations.json").wait_for()

    monkeypatch.setattr(tasks, "IMPORT_SLICE_SECONDS", 600)
    run_queued_imports(job)
    page.get_by_text("topics built").wait_for(timeout=15_000)
    assert page.locator(f"#import-{job.pk}").get_attribute("data-status") == "done"
    assert Topic.objects.filter(owner=owner).exists()
    shot(page, "import-done")
    # A finished import links to what it brought: its conversations and what memory learned.
    done = page.locator(f"#import-{job.pk}")
    assert done.get_by_role("link", name="What it learned about you").is_visible()
    job.refresh_from_db()
    started = job.new_conversations()
    assert started and len(started) == min(job.report["conversations"], 20)
    first = started[0]
    done.get_by_role("link", name=first.title).click()
    page.wait_for_url(f"**{reverse('chat:conversation', args=[first.pk])}")
    assert page.js_errors == []


@pytest.mark.parametrize(("name", "content", "reason"), [
    ("notes.txt", b"just some notes\n", "notes.txt cannot be imported: not a chat history"),
    ("deep.json", b"[" * 100_000 + b"]" * 100_000, "deep.json cannot be imported: the JSON is nested too"),
    ("big.json", b"[" + b" " * (1024 * 1024 + 10) + b"]", "big.json is larger than 1 MB, the most an import"),
    # Past the limit and its form's slack: refused from its Content-Length, never read.
    ("huge.json", b"[" + b" " * (3 * 1024 * 1024) + b"]", "The file is larger than 1 MB, the most an import"),
])
def test_a_refused_upload_says_why_where_the_upload_was(page, owner, tmp_path, settings,  # noqa: F811
                                                         name, content, reason):
    settings.IMPORT_MAX_UPLOAD_MB = 1
    upload = tmp_path / name
    upload.write_bytes(content)
    page.goto(page.base + reverse("explorer:import"))
    page.set_input_files("#import-file", str(upload))
    page.get_by_role("button", name="Import").click()
    alert = page.locator("#upload [role=alert]")
    alert.wait_for()
    assert reason in alert.inner_text()
    assert page.locator("#import-file").is_visible()  # the form is still there, to try another file
    shot(page, f"import-refused-{name.split('.')[0]}")
    assert not ImportJob.objects.filter(owner=owner).exists()
    assert page.js_errors == []
