"""Forgotten stays forgotten (issue 32 §1): a forget leaves a tombstone that holds no text, and
every later import (the web upload, `import_history`, `import_memory`, a resumed job that still
held the file) leaves the forgotten message out and says so in its report."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse
from django_tasks import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from memory import tasks
from memory.lifecycle import echoes
from memory.lifecycle.forgetting import forget_message
from memory.models import Conversation, ImportJob, Message, Tombstone, Topic
from memory.transfer import import_jobs
from memory.transfer.export import export_memory
from tests.chat.test_forgetting import rows_containing
from tests.memory.conftest import add_turns
from tests.memory.test_import_jobs import run_queued_imports
from tests.memory.test_task_lease import make_worker

pytestmark = pytest.mark.django_db

WORD = "quorbelline"
SECRET = f"My bank's memorable word is {WORD}, please keep it somewhere safe for me."
ECHO = f"Noted: your memorable word is {WORD}. I'll keep it in mind."


def chatgpt(*conversations: tuple[str, list[tuple[str, str, str]]]) -> list[dict]:
    """A ChatGPT conversations.json: each conversation a title and its (id, role, text) in order,
    each replying to the one before."""
    out = []
    for c, (title, messages) in enumerate(conversations):
        mapping = {"root": {"id": "root", "message": None, "parent": None, "children": []}}
        parent = "root"
        for n, (mid, role, text) in enumerate(messages):
            mapping[parent]["children"].append(mid)
            mapping[mid] = {"id": mid, "parent": parent, "children": [], "message": {
                "id": mid, "author": {"role": role}, "create_time": 1_736_000_000 + c * 1000 + n,
                "content": {"content_type": "text", "parts": [text]},
            }}
            parent = mid
        out.append({"title": title, "id": f"conv-{c}", "create_time": 1_736_000_000 + c * 1000,
                    "mapping": mapping, "current_node": parent})
    return out


BANK = ("Bank things", [
    ("m1", "user", "Let's sort out my banking this weekend."),
    ("m2", "assistant", "Sure, where would you like to start?"),
    ("m3", "user", SECRET),
    ("m4", "assistant", ECHO),
])
GARDEN = ("Garden", [("g1", "user", "The tulips came up early this year."), ("g2", "assistant", "Lovely!")])


def import_file(tmp_path, data, name: str = "conversations.json", user: str = "sam") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    out, err = io.StringIO(), io.StringIO()
    call_command("import_history", str(path), "--user", user, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def forget_the_secret(user) -> list[str]:
    secret = Message.objects.get(owner=user, external_id="m3")
    ticked = [c.message.pk for c in echoes.copies_of(user, secret) if c.ticked]
    return forget_message(user, secret.pk, copies=ticked)


@pytest.fixture
def sam(tmp_path):
    import_file(tmp_path, chatgpt(BANK, GARDEN))
    user = get_user_model().objects.get(username="sam")
    forgotten = forget_the_secret(user)
    assert len(forgotten) == 2, "the secret and the reply that repeats its word"
    return user


def test_a_tombstone_holds_neither_text_nor_id(sam):
    # Two messages: each its own id, its source's id and its text, as keyed hashes.
    digests = list(Tombstone.objects.filter(owner=sam).values_list("digest", flat=True))
    assert len(digests) == 6 and all(len(d) == 64 for d in digests)
    assert rows_containing(WORD) == {} and rows_containing("memorable word") == {}


def test_importing_the_export_again_leaves_it_out_and_says_why(sam, tmp_path):
    before = Message.objects.filter(owner=sam).count()
    out = import_file(tmp_path, chatgpt(BANK, GARDEN))
    assert "2 messages skipped: you forgot them (the last on " in out
    assert Message.objects.filter(owner=sam).count() == before
    assert rows_containing(WORD) == {}
    job = ImportJob.objects.filter(owner=sam).first()
    assert job.report["forgotten"] == 2 and job.report["skipped"] == 4


def test_a_later_export_hangs_a_reply_to_it_from_what_it_replied_to(sam, tmp_path):
    title, messages = BANK
    later = (title, [*messages, ("m5", "user", "Thanks, that's all for today.")])
    out = import_file(tmp_path, chatgpt(later, GARDEN))
    assert "imported 1 messages" in out and "2 messages skipped: you forgot them" in out
    m2 = Message.objects.get(owner=sam, external_id="m2")
    assert Message.objects.get(owner=sam, external_id="m5").parent_id == m2.pk
    assert rows_containing(WORD) == {}


def test_the_web_upload_shows_why_it_left_it_out(sam, client):
    client.force_login(sam)
    upload = SimpleUploadedFile("conversations.json", json.dumps(chatgpt(BANK, GARDEN)).encode())
    assert client.post(reverse("explorer:import"), {"file": upload}).status_code == 302
    job = ImportJob.objects.filter(owner=sam).first()
    run_queued_imports(job)
    page = client.get(reverse("explorer:import")).content.decode()
    assert "2 messages skipped: you forgot them (the last on" in page
    assert rows_containing(WORD) == {}


def test_json_lines_by_the_same_text_under_another_name_are_left_out_but_short_ones_are_not(sam, tmp_path):
    short = Message.objects.get(owner=sam, external_id="g2")  # "Lovely!"
    forget_message(sam, short.pk)
    lines = [
        {"conversation": "Notes", "role": role, "content": text, "timestamp": f"2025-03-01T10:0{n}:00"}
        for n, (role, text) in enumerate([
            ("user", SECRET), ("assistant", "Lovely!"), ("user", "Plant the basil next."),
        ])
    ]
    out = import_file(tmp_path, "\n".join(json.dumps(line) for line in lines), "notes.jsonl")
    assert "imported 2 messages" in out and "1 message skipped: you forgot it on " in out
    notes = Conversation.objects.get(owner=sam, title="Notes")
    kept = Message.objects.filter(conversation=notes).order_by("position").values_list("content", flat=True)
    assert list(kept) == ["Lovely!", "Plant the basil next."]
    assert rows_containing(WORD) == {}


def test_a_recollect_export_made_before_the_forget_brings_none_of_it_back(tmp_path):
    import_file(tmp_path, chatgpt(BANK, GARDEN))
    sam = get_user_model().objects.get(username="sam")
    bank = Conversation.objects.get(owner=sam, title="Bank things")
    Topic.objects.create(owner=sam, label=f"Memorable word {WORD}", summary=ECHO)
    exported = export_memory(sam)
    forget_the_secret(sam)
    bank.delete()  # the conversation is gone too: the file's copy would be fresh
    Topic.objects.filter(owner=sam).delete()
    path = tmp_path / "export.json"
    path.write_text(json.dumps(exported, default=str))
    out, err = io.StringIO(), io.StringIO()
    call_command("import_memory", str(path), "--user", "sam", stdout=out, stderr=err)
    assert "2 messages skipped: you forgot them" in out.getvalue()
    contents = set(Message.objects.filter(owner=sam).values_list("content", flat=True))
    assert "Sure, where would you like to start?" in contents and SECRET not in contents
    assert rows_containing(WORD) == {}


def test_a_crashed_import_resumed_by_serve_does_not_store_a_message_forgotten_meanwhile(
    tmp_path, monkeypatch
):
    """The issue's third case: a web upload's job stored its first conversation, the message was
    forgotten while the job (and its kept file) still held it, the server died; `serve` resumes
    the job, which stores the rest and not the forgotten message."""
    from daphne.cli import CommandLineInterface

    sam = get_user_model().objects.create_user("sam", password="sam-pass-123")
    text = json.dumps(chatgpt(BANK, GARDEN))
    job = import_jobs.create(sam, source="chatgpt", filename="conversations.json",
                             payload=gzip.compress(text.encode()), messages_total=6, claimed=True)

    class Killed(Exception):
        pass

    told: list[int] = []

    def die_after_the_first_conversation(n: int) -> None:
        told.append(n)  # told before each conversation is stored
        if len(told) == 2:
            raise Killed

    with pytest.raises(Killed):
        import_jobs.store(job, import_jobs.parse(text), progress=die_after_the_first_conversation)
    assert Message.objects.filter(owner=sam, external_id="m3").exists()
    assert not Message.objects.filter(owner=sam, external_id="g1").exists()
    forget_the_secret(sam)
    assert ImportJob.objects.filter(pk=job.pk, payload__isnull=False).exists()  # its file holds it
    # The process "died": its runner names a pid of this host that no longer runs.
    host = import_jobs.PROCESS.split(":")[0]
    ImportJob.objects.filter(pk=job.pk).update(runner=f"dead00@{host}:999999999:1")
    monkeypatch.setattr(CommandLineInterface, "run", lambda self, argv: None)  # serve, then stop
    out = io.StringIO()
    call_command("serve", "--no-worker", stdout=out)
    assert "resumed the imports a stopped server left unfinished" in out.getvalue()
    run_queued_imports(job)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.DONE and job.report["forgotten"] == 2
    assert not Message.objects.filter(owner=sam, external_id__in=["m3", "m4"]).exists()
    assert Message.objects.filter(owner=sam, external_id="g2").exists()
    assert rows_containing(WORD) == {}


def test_tombstones_are_per_user(sam, tmp_path):
    out = import_file(tmp_path, chatgpt(BANK, GARDEN), user="ada")
    assert "imported 6 messages" in out
    ada = get_user_model().objects.get(username="ada")
    assert Message.objects.filter(owner=ada, content=SECRET).exists()


def test_an_old_key_still_finds_a_tombstone_after_the_key_is_rotated(sam, tmp_path, settings):
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-new-key-" + "x" * 40
    out = import_file(tmp_path, chatgpt(BANK, GARDEN))
    assert "2 messages skipped: you forgot them" in out


@pytest.fixture
def database_tasks(settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}


@pytest.mark.django_db(transaction=True)
def test_a_finished_tasks_arguments_lose_the_forgotten_id_at_the_forget(owner, conversation, database_tasks):
    secret, other = add_turns(owner, conversation, [SECRET, "The tulips came up early this year."])
    done = tasks.fact_upkeep.enqueue(owner.pk, [secret.pk, other.pk])
    DBTaskResult.objects.filter(pk=done.id).update(status=TaskResultStatus.SUCCESSFUL)
    forget_message(owner, secret.pk)
    assert DBTaskResult.objects.get(pk=done.id).args_kwargs["args"] == [owner.pk, [other.pk]]
    # The upkeep the forget queued names it until it has run.
    assert rows_containing(secret.pk) == {"django_tasks_database_dbtaskresult": 1}


@pytest.mark.django_db(transaction=True)
def test_a_task_that_waited_through_the_forget_keeps_no_forgotten_id_once_done(
    owner, conversation, database_tasks
):
    secret, other = add_turns(owner, conversation, [SECRET, "The tulips came up early this year."])
    waiting = tasks.fact_upkeep.enqueue(owner.pk, [secret.pk, other.pk])
    forget_message(owner, secret.pk)
    make_worker("forget-test").run()
    results = DBTaskResult.objects.all()
    assert len(results) >= 2, "the waiting task and the upkeep the forget queued"
    assert {r.status for r in results} == {TaskResultStatus.SUCCESSFUL}
    assert rows_containing(secret.pk) == {}
    assert DBTaskResult.objects.get(pk=waiting.id).args_kwargs["args"] == [owner.pk, [other.pk]]
