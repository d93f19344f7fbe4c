"""The import page: an upload checked in the request, its job's progress polled by htmx, on the
import page and on the Memory overview; other users' imports are 404s."""

from __future__ import annotations

import datetime as dt
import io
import json
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from bench.chatgpt_export import generate
from memory.models import ImportJob, Message
from memory.transfer import import_jobs

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def export_bytes() -> bytes:
    return json.dumps(generate(40, seed=5, end=dt.datetime(2025, 3, 1, tzinfo=dt.UTC))).encode()


def upload(client, name: str, content: bytes, **headers):
    return client.post(reverse("explorer:import"), {"file": SimpleUploadedFile(name, content)}, **headers)


def test_it_takes_a_chatgpt_export_and_shows_the_import_beside_the_form(owner_client, owner, export_bytes):
    response = upload(owner_client, "conversations.json", export_bytes)
    assert response.status_code == 302
    job = ImportJob.objects.get(owner=owner)
    assert (job.source, job.filename, job.messages_total, job.status) == ("chatgpt", "conversations.json", 40,
                                                                          "storing")
    page = owner_client.get(reverse("explorer:import")).content.decode()
    assert "conversations.json" in page and "Storing messages: 0 of 40" in page
    assert 'hx-trigger="every 2s"' in page


def test_it_reads_the_export_zip_chatgpt_sends(owner_client, owner, export_bytes):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("chat.html", "<html></html>")
        z.writestr("conversations.json", export_bytes)
    response = upload(owner_client, "export.zip", archive.getvalue(), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert "Importing export.zip: 40 messages (ChatGPT)" in response.content.decode()
    assert ImportJob.objects.get(owner=owner).messages_total == 40


@pytest.mark.parametrize(("name", "content", "words"), [
    ("notes.txt", b"just some notes", "line 1: not valid JSON"),
    ("export.zip", b"PK\x03\x04broken", "broken zip"),
    ("conversations.json", b"[{\"mapping\": 3}]", "mapping"),
    ("empty.json", b"[]", "holds no messages"),
    ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("deep.jsonl", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
])
def test_a_file_it_cannot_import_is_refused_clearly_and_nothing_is_kept(owner_client, name, content, words):
    response = upload(owner_client, name, content)
    assert response.status_code == 400
    page = response.content.decode()
    assert f"{name} " in page and words in page and 'role="alert"' in page
    assert not ImportJob.objects.exists() and not Message.objects.exists()


def test_a_file_over_the_size_limit_is_refused(owner_client, settings):
    settings.IMPORT_MAX_UPLOAD_MB = 1
    response = upload(owner_client, "big.json", b"[" + b" " * (1024 * 1024 + 10) + b"]")
    assert response.status_code == 413
    assert "larger than 1 MB" in response.content.decode()
    assert not ImportJob.objects.exists()


def test_the_upload_needs_the_csrf_token(owner, export_bytes):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert upload(client, "conversations.json", export_bytes).status_code == 403
    assert not ImportJob.objects.exists()


def test_the_import_pages_need_a_signed_in_user(client):
    for url in (reverse("explorer:import"), reverse("explorer:import_progress")):
        assert client.get(url).status_code == 302


def test_another_users_import_is_a_404(stranger_client, owner, export_bytes):
    job = import_jobs.create(owner, source="chatgpt", filename="mine.json", messages_total=4)
    response = stranger_client.get(reverse("explorer:import_progress") + f"?job={job.pk}")
    assert response.status_code == 404
    assert "mine.json" not in stranger_client.get(reverse("explorer:import")).content.decode()
    assert "mine.json" not in stranger_client.get(reverse("explorer:overview")).content.decode()


def test_the_progress_polls_while_the_import_runs_and_stops_when_it_is_done(owner_client, owner):
    job = import_jobs.create(owner, source="chatgpt", filename="c.json", messages_total=10)
    ImportJob.objects.filter(pk=job.pk).update(
        status=ImportJob.Status.EMBEDDING, messages_stored=10, passages_total=200, passages_embedded=50,
        rate_since=job.created_at - dt.timedelta(seconds=60), rate_base=0, runner="x@elsewhere:1:1",
        heartbeat_at=job.created_at + dt.timedelta(days=1),
    )
    part = owner_client.get(reverse("explorer:import_progress") + f"?job={job.pk}").content.decode()
    assert "Embedding passages: 50 of 200 (25%)" in part and "search finds them by keyword now" in part
    assert 'max="200" value="50"' in part and "left." in part
    assert 'hx-trigger="every 2s"' in part
    ImportJob.objects.filter(pk=job.pk).update(
        status=ImportJob.Status.FACTS, passages_embedded=200, facts_read=4
    )
    part = owner_client.get(reverse("explorer:import_progress") + f"?job={job.pk}").content.decode()
    assert "learning facts" in part and "Topics built; learning facts: 4 of 10 messages read." in part
    assert 'max="10" value="4"' in part
    ImportJob.objects.filter(pk=job.pk).update(
        status=ImportJob.Status.DONE, passages_embedded=200, finished_at=job.created_at,
        report={"added": 10, "conversations": 2}, facts_read=10, facts_learned=3,
    )
    part = owner_client.get(reverse("explorer:import_progress") + f"?job={job.pk}").content.decode()
    assert "Done: 10 messages added" in part and "topics built" in part
    assert f'<a class="facts-learned" href="{reverse("explorer:facts")}">3 facts learned</a>' in part
    assert "hx-trigger" not in part


def test_the_memory_overview_shows_a_running_import(owner_client, owner):
    import_jobs.create(owner, source="claude", filename="claude.json", messages_total=7)
    page = owner_client.get(reverse("explorer:overview")).content.decode()
    assert "claude.json" in page and "(Claude," in page and "Storing messages: 0 of 7" in page


def test_showing_the_progress_resumes_an_import_whose_runner_died(owner_client, owner):
    from django_tasks_db.models import DBTaskResult

    job = import_jobs.create(owner, source="chatgpt", filename="c.json", messages_total=3)
    host = import_jobs.PROCESS.split(":")[0]
    ImportJob.objects.filter(pk=job.pk).update(runner=f"dead@{host}:999999999:1", heartbeat_at=job.created_at)
    owner_client.get(reverse("explorer:import_progress"))
    assert DBTaskResult.objects.filter(args_kwargs__args=[job.pk]).count() == 1


def test_characters_replaced_on_import_are_counted_and_a_nul_in_a_name_costs_only_its_line(
    owner_client, owner
):
    """A lone surrogate, a NUL and bytes that are not UTF-8 in a message's text keep the message
    with the character replaced, and the report counts them; a NUL in a conversation's name is
    that line's fault alone."""
    from tests.memory.test_import_jobs import run_queued_imports

    def line(conversation: str, content: str, minute: int) -> bytes:
        return json.dumps({"conversation": conversation, "role": "user", "content": content,
                           "timestamp": f"2025-01-01T10:0{minute}:00"}).encode()

    raw = b"\n".join([
        line("Trip\u0000notes", "the first line names its thread with a NUL", 0),
        line("Trip", "half a pair \ud800 here", 1),
        line("Trip", "a NUL \u0000 here", 2),
        line("Trip", "not UTF-8: XX", 3).replace(b"XX", b"\xff\xfe"),
        line("Trip", "nothing odd here", 4),
    ])
    assert upload(owner_client, "history.jsonl", raw).status_code == 302
    job = ImportJob.objects.get(owner=owner)
    run_queued_imports(job)
    job.refresh_from_db()
    assert (job.report["added"], job.report["bad"], job.report["replaced"]) == (4, 1, 3)
    assert job.report["errors"] == ['line 1: "conversation" holds a NUL character (\\u0000)']
    page = owner_client.get(reverse("explorer:import")).content.decode()
    assert "3 messages had characters replaced (shown as \ufffd or \u2400)." in page
    contents = set(Message.objects.filter(owner=owner).values_list("content", flat=True))
    assert {"half a pair \ufffd here", "a NUL \u2400 here", "not UTF-8: \ufffd\ufffd"} <= contents
