from __future__ import annotations

import pytest

from memory.models import Entity, TopicMembership, UpkeepRun
from memory.tasks import queue_upkeep
from tests.memory.conftest import add_turns

pytestmark = pytest.mark.django_db


def test_queued_upkeep_puts_messages_in_topics_and_records_the_run(
    owner, conversation, immediate_tasks
):
    msgs = add_turns(owner, conversation, ["Ticket INFRA-992: Redis on port 6379", "ok"])
    assert queue_upkeep(owner.pk, [m.pk for m in msgs]) is True
    assert TopicMembership.objects.owned_by(owner).count() == 2
    assert Entity.objects.owned_by(owner).filter(name="INFRA-992").exists()
    run = UpkeepRun.objects.owned_by(owner).get(kind="topic_upkeep")
    assert run.ok and run.finished_at and run.detail["messages"] == 2


def test_an_import_of_more_messages_than_one_run_takes_gets_them_all_into_topics(
    owner, conversation, immediate_tasks, monkeypatch
):
    from memory import tasks

    monkeypatch.setattr(tasks, "UPKEEP_BATCH", 3)  # 500 in production: an import stores thousands
    msgs = add_turns(owner, conversation, [f"note {i} about the garden roses" for i in range(7)])
    assert queue_upkeep(owner.pk, [m.pk for m in msgs]) is True
    assert TopicMembership.objects.owned_by(owner).count() == 7
    assert UpkeepRun.objects.owned_by(owner).filter(kind="topic_upkeep").count() == 3


def test_queue_upkeep_never_fails_its_caller(owner, immediate_tasks):
    assert queue_upkeep(owner.pk, []) is False
    assert queue_upkeep("not a number", ["x"]) is False
    # An unknown user makes the task fail (the immediate backend runs it inside the call); the
    # caller still gets an answer, not an exception: the work was queued, and it records nothing.
    assert queue_upkeep(987654, ["x"]) is True
    assert not UpkeepRun.objects.filter(owner_id=987654).exists()
