"""Imports nobody waits for (memory.transfer.import_jobs, memory.tasks.run_import): messages stored and
searchable first, then embedded in background work, then topics; a stopped run resumes and
nothing is embedded twice."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django_tasks import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from bench.chatgpt_export import PROBE, generate
from memory import tasks
from memory.finding.search import search
from memory.models import Conversation, ImportJob, Message, Passage, Topic, UpkeepRun
from memory.transfer import import_jobs


@pytest.fixture(scope="module")
def export_text() -> str:
    return json.dumps(generate(60, seed=3, end=dt.datetime(2025, 6, 1, tzinfo=dt.UTC)))


def import_file(path, user: str, *extra: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("import_history", str(path), "--user", user, *extra, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def job_of(username: str) -> ImportJob:
    return ImportJob.objects.get(owner__username=username)


def run_queued_imports(job: ImportJob) -> int:
    """Run the job's queued background slices as a worker would, oldest first, until none is
    left; returns how many ran."""
    ran = 0
    while ran < 200:
        queued = DBTaskResult.objects.filter(
            task_path=tasks.run_import.module_path, status=TaskResultStatus.READY, args_kwargs__args=[job.pk]
        ).order_by("enqueued_at").first()
        if queued is None:
            return ran
        queued.status = TaskResultStatus.SUCCESSFUL
        queued.save(update_fields=["status"])
        tasks.run_import.call(job.pk)
        ran += 1
    raise AssertionError("the import never ended")


@pytest.mark.django_db
def test_it_stores_messages_first_so_keyword_search_finds_them_before_a_vector(tmp_path, export_text):
    path = tmp_path / "conversations.json"
    path.write_text(export_text)
    import_file(path, "ada")
    job = job_of("ada")
    assert job.status == ImportJob.Status.EMBEDDING and job.messages_stored == 60
    passages = Passage.objects.filter(owner=job.owner)
    assert passages.exists() and not passages.filter(embedding__isnull=False).exists()
    assert job.passages_total == passages.count()
    hits = search(job.owner, PROBE).hits
    assert hits and PROBE in Message.objects.get(pk=hits[0].message_id).content
    # The embedding waits in the queue, as background work.
    run = tasks.run_import.module_path
    queued = DBTaskResult.objects.filter(task_path=run, status=TaskResultStatus.READY)
    assert list(queued.values_list("args_kwargs__args", flat=True)) == [[job.pk]]


@pytest.mark.django_db
def test_it_embeds_then_builds_topics_when_the_background_work_runs(tmp_path, export_text):
    path = tmp_path / "conversations.json"
    path.write_text(export_text)
    import_file(path, "ada")
    job = job_of("ada")
    assert not Topic.objects.filter(owner=job.owner).exists()
    run_queued_imports(job)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.DONE and job.finished_at is not None
    assert job.passages_embedded == job.passages_total > 0
    assert not Passage.objects.filter(owner=job.owner, embedding__isnull=True).exists()
    assert Topic.objects.filter(owner=job.owner).exists()
    assert UpkeepRun.objects.filter(owner=job.owner, kind="import_topics", ok=True).exists()
    assert UpkeepRun.objects.filter(owner=job.owner, kind="import_facts", ok=True).exists()


@pytest.mark.django_db
def test_an_import_learns_the_facts_of_a_persons_history(tmp_path):
    from bench.chatgpt_export import life
    from memory.models import Fact

    conversations, truth = life(120, seed=5, end=dt.datetime(2025, 6, 1, tzinfo=dt.UTC))
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(conversations))
    output = import_file(path, "ada", "--wait")
    job = job_of("ada")
    learned = Fact.objects.owned_by(job.owner).live()
    assert job.status == ImportJob.Status.DONE and job.facts_learned == learned.count() > 0
    assert f"{job.facts_learned} facts learned" in output
    # Facts of what the person said, never of what they pasted or asked for.
    said = {m.pk: m.content for m in Message.objects.filter(owner=job.owner)}
    labels = {truth.get(said[f.message_id], {}).get("label") for f in learned}
    assert labels <= {"statement", "remember", "update"}


@pytest.mark.django_db
def test_the_command_waits_with_its_own_progress_bar_when_told_to(tmp_path, export_text):
    path = tmp_path / "conversations.json"
    path.write_text(export_text)
    output = import_file(path, "ada", "--wait")
    assert "embed [" in output and "topics built" in output and "facts learned" in output
    assert job_of("ada").status == ImportJob.Status.DONE
    assert Topic.objects.filter(owner=job_of("ada").owner).exists()


def stop_halfway(path, monkeypatch) -> tuple[ImportJob, list[int]]:
    """Import `path` for ada, then let a worker embed two batches of 5 and die; returns the job
    and the passages written so far (and from then on)."""
    import_file(path, "ada")
    # A worker takes the queued run, then its process dies halfway.
    queued = DBTaskResult.objects.filter(task_path=tasks.run_import.module_path)
    queued.update(status=TaskResultStatus.RUNNING)
    job = import_jobs.claim(job_of("ada").pk)
    written: list[int] = []
    real_write = import_jobs.write_vectors

    def write(rows, vectors, model) -> None:
        written.extend(r.pk for r in rows)
        real_write(rows, vectors, model)

    monkeypatch.setattr(import_jobs, "write_vectors", write)
    monkeypatch.setattr(import_jobs, "EMBED_BATCH", 5)

    class Killed(Exception):
        pass

    def die_after_two_batches(n: int) -> None:
        if len(written) >= 10:
            raise Killed

    with pytest.raises(Killed):
        import_jobs.embed(job, progress=die_after_two_batches)
    # The process "died": its runner names a pid of this host that no longer runs.
    host = import_jobs.PROCESS.split(":")[0]
    ImportJob.objects.filter(pk=job.pk).update(runner=f"dead00@{host}:999999999:1")
    assert job_of("ada").passages_embedded == 10
    return job, written


def assert_embedded_once_and_done(job: ImportJob, written: list[int]) -> None:
    run_queued_imports(job)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.DONE
    assert len(written) == len(set(written)) == job.passages_total == job.passages_embedded
    assert Topic.objects.filter(owner=job.owner).exists()


@pytest.mark.django_db
def test_a_stopped_run_resumes_where_it_stopped_and_embeds_nothing_twice(tmp_path, export_text,
                                                                          monkeypatch):
    path = tmp_path / "conversations.json"
    path.write_text(export_text)
    job, written = stop_halfway(path, monkeypatch)
    assert tasks.resume_imports() == 1
    assert_embedded_once_and_done(job, written)


@pytest.mark.django_db
def test_a_server_started_after_one_stopped_mid_embedding_resumes_the_import(tmp_path, export_text,
                                                                              monkeypatch):
    from daphne.cli import CommandLineInterface

    path = tmp_path / "conversations.json"
    path.write_text(export_text)
    job, written = stop_halfway(path, monkeypatch)
    monkeypatch.setattr(CommandLineInterface, "run", lambda self, argv: None)  # serve, then stop at once
    out = io.StringIO()
    call_command("serve", "--no-worker", stdout=out)
    assert "resumed the imports a stopped server left unfinished" in out.getvalue()
    assert_embedded_once_and_done(job, written)


@pytest.mark.django_db
def test_a_live_run_keeps_its_job_and_a_silent_one_loses_it(owner):
    job = import_jobs.create(owner, source="jsonl", messages_total=1, claimed=True)
    assert import_jobs.claim(job.pk) is None  # its runner (this process) is alive and heard from
    ImportJob.objects.filter(pk=job.pk).update(
        runner="abc@another-host:12:34",
        heartbeat_at=job.created_at - dt.timedelta(seconds=import_jobs.STALL_SECONDS),
    )
    taken = import_jobs.claim(job.pk)
    assert taken is not None and taken.runner.endswith(import_jobs.PROCESS)


@pytest.mark.django_db
def test_imported_conversations_keep_their_own_dates(tmp_path, export_text):
    path = tmp_path / "conversations.json"
    path.write_text(export_text)
    import_file(path, "ada")
    for conv in Conversation.objects.filter(owner__username="ada"):
        stamps = list(Message.objects.filter(conversation=conv).values_list("timestamp", flat=True))
        # Created when the export says (ChatGPT's create_time), never after its first message.
        assert conv.created_at <= min(stamps) and conv.updated_at == max(stamps)
        assert conv.updated_at < dt.datetime(2025, 6, 2, tzinfo=dt.UTC)


@pytest.mark.django_db
def test_an_upload_that_cannot_be_read_fails_its_job_with_the_reason(owner):
    job = import_jobs.create(owner, source="chatgpt", filename="x.json", payload=b"not gzip",
                             messages_total=3)
    with pytest.raises(OSError):
        tasks.run_import.call(job.pk)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.FAILED and "gzip" in job.error.lower()


@pytest.mark.django_db
def test_a_command_stopped_while_storing_leaves_a_job_that_embeds_what_it_stored(owner, conversation):
    from memory.storage import store

    store.store_message(owner, conversation, "user", "Stored before the command was stopped.", embed=False)
    job = import_jobs.create(owner, source="jsonl", filename="h.jsonl", messages_total=10)
    tasks.run_import.call(job.pk)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.DONE and job.passages_embedded == 1
    assert "storing was interrupted" in job.report["errors"][0]


class _Stop(Exception):
    pass


@pytest.mark.django_db
def test_an_import_embeds_the_persons_own_messages_first_newest_first_and_says_what_is_ready(owner,
                                                                                          monkeypatch):
    from django.template.loader import render_to_string

    old, new = dt.datetime(2024, 1, 5, 9, tzinfo=dt.UTC), dt.datetime(2025, 6, 1, 9, tzinfo=dt.UTC)
    lines = [
        json.dumps({"conversation": title, "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"{title}, turn {i}",
                    "timestamp": (day + dt.timedelta(minutes=i)).isoformat(),
                    "external_id": f"{title}-{i}"})
        for title, day in (("the old trip", old), ("the new job", new)) for i in range(4)
    ]
    parsed = import_jobs.parse("\n".join(lines) + "\n")
    job = import_jobs.create(owner, source="jsonl", messages_total=parsed.messages, claimed=True)
    import_jobs.store(job, parsed)
    monkeypatch.setattr(import_jobs, "EMBED_BATCH", 2)

    def stop(n: int) -> None:
        raise _Stop

    batches, states, pages = [], [], []
    while True:
        embedded = Passage.objects.filter(owner=owner, embedding__isnull=False)
        before = set(embedded.values_list("pk", flat=True))
        try:
            finished = import_jobs.embed(job, progress=stop)
        except _Stop:
            finished = False
        if finished:
            break
        batch = Passage.objects.filter(owner=owner, embedding__isnull=False).exclude(pk__in=before)
        batches.append(sorted((p.role, p.timestamp) for p in batch))
        job.refresh_from_db()
        states.append((job.own_ready, job.ready_back_to))
        page = render_to_string("explorer/_import_progress.html", {"import_jobs": [job]})
        pages.append(" ".join(page.split()))
    minute = dt.timedelta(minutes=1)
    assert batches == [
        [("user", new), ("user", new + 2 * minute)],  # the person's own words, the newest first
        [("user", old), ("user", old + 2 * minute)],
        [("assistant", new + minute), ("assistant", new + 3 * minute)],  # then the replies
        [("assistant", old + minute), ("assistant", old + 3 * minute)],
    ]
    assert states == [(False, new), (False, old), (True, new + minute), (True, old + minute)]
    assert "Search finds by meaning your messages back to 1 Jun 2025." in pages[0]
    assert "Search finds by meaning all your messages, and replies back to 5 Jan 2024." in pages[3]
    job.refresh_from_db()
    assert job.status == ImportJob.Status.TOPICS and job.passages_embedded == 8
@pytest.mark.django_db
def test_time_left_waits_for_a_steady_rate_then_counts_down_between_batches(owner):
    start = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC)
    job = ImportJob(owner=owner, status=ImportJob.Status.EMBEDDING, passages_total=1000,
                    passages_embedded=100,
                    rate_since=start, rate_base=0, heartbeat_at=start + dt.timedelta(seconds=10))
    assert job.eta_seconds(now=start + dt.timedelta(seconds=11)) is None  # 10 s of rate: not yet told
    job.passages_embedded, job.heartbeat_at = 300, start + dt.timedelta(seconds=30)  # 10 passages a second
    told = [job.eta_seconds(now=start + dt.timedelta(seconds=s)) for s in (30, 35, 40, 45)]
    assert told == [70.0, 65.0, 60.0, 55.0]  # down as time passes, though no batch landed meanwhile
    job.passages_embedded, job.heartbeat_at = 450, start + dt.timedelta(seconds=45)  # the next batch
    assert job.eta_seconds(now=start + dt.timedelta(seconds=45)) == 55.0  # no jump when it lands
