"""Model-written topic summaries: background work, only with a model configured, never keeping
text that was edited away or deleted."""

from __future__ import annotations

import pytest
from django_tasks import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from memory import tasks
from memory.lifecycle.deleting import delete_message
from memory.models import Topic, UpkeepRun
from memory.organizing import summaries, topics
from tests.chat.conftest import llm_server_instance, scripted_llm  # noqa: F401 - fixtures
from tests.memory.conftest import add_turns

pytestmark = pytest.mark.django_db

PROMPT = "Topic keywords"  # every summary prompt starts so: the scripted answers match it
GARDEN = [
    "tulips and roses in the garden, planted on 3 May",
    "the roses need pruning before June",
    "garden soil and compost from the allotment",
    "watering tulips every morning at 7",
]


def _garden_topic(owner, conversation):
    msgs = add_turns(owner, conversation, GARDEN)
    topics.rebuild(owner)
    return msgs, Topic.objects.owned_by(owner).get(children__isnull=True)


def test_without_a_model_topics_keep_their_extractive_summaries(owner, conversation, settings):
    settings.OPENAI_API_KEY = settings.OPENAI_BASE_URL = ""
    _, leaf = _garden_topic(owner, conversation)
    assert summaries.summarize_topics(owner) == {"summarized": 0, "skipped": "no model configured"}
    assert not tasks.queue_summaries(owner.pk)
    leaf.refresh_from_db()
    assert leaf.summary_source == "extractive" and "tulips" in leaf.summary


def test_the_model_rewrites_extractive_summaries_from_the_topics_messages(
    owner, conversation, scripted_llm, settings  # noqa: F811
):
    settings.SUMMARY_MODEL = "summary-model"
    _, leaf = _garden_topic(owner, conversation)
    scripted_llm.script(
        {"text": "Tulips and roses were planted in May; the roses need pruning."}, match=PROMPT, repeat=True
    )
    result = summaries.summarize_topics(owner)
    assert result["summarized"] == Topic.objects.owned_by(owner).count() and result["remaining"] == 0
    leaf.refresh_from_db()
    assert leaf.summary_source == "llm"
    assert leaf.summary == "Tulips and roses were planted in May; the roses need pruning."
    [request, *_] = scripted_llm.requests
    assert request["model"] == "summary-model" and not request["stream"]
    prompt = request["messages"][-1]["content"]
    assert "planted on 3 May" in prompt and "watering tulips" in prompt
    # Nothing left to do: a second run asks the model nothing.
    before = len(scripted_llm.requests)
    assert summaries.summarize_topics(owner)["summarized"] == 0
    assert len(scripted_llm.requests) == before


def test_a_delete_takes_the_model_summary_back_to_extractive_without_the_deleted_text(
    owner, conversation, scripted_llm  # noqa: F811
):
    msgs, leaf = _garden_topic(owner, conversation)
    scripted_llm.script({"text": "About tulips planted on 3 May and roses."}, match=PROMPT, repeat=True)
    summaries.summarize_topics(owner)
    delete_message(owner, msgs[0].pk)
    tasks.run_upkeep(owner, [msgs[0].pk])
    leaf.refresh_from_db()
    assert leaf.summary_source == "extractive" and "3 May" not in leaf.summary
    scripted_llm.script({"text": "About pruning roses and compost."}, match=PROMPT, repeat=True)
    summaries.summarize_topics(owner)
    leaf.refresh_from_db()
    assert leaf.summary_source == "llm"
    last_prompt = scripted_llm.requests[-1]["messages"][-1]["content"]
    assert "3 May" not in last_prompt


def test_a_failing_provider_leaves_extractive_summaries_and_gives_up_quickly(
    owner, conversation, scripted_llm, settings  # noqa: F811
):
    settings.LLM_MAX_RETRIES = 0
    _garden_topic(owner, conversation)
    # More topics than the run tries before it gives up.
    for i in range(summaries.GIVE_UP_AFTER + 1):
        Topic.objects.create(owner=owner, label=f"extra {i}", summary="x", message_count=1)
    scripted_llm.script({"status": 500}, match=PROMPT, repeat=True)
    result = summaries.summarize_topics(owner)
    assert result["summarized"] == 0 and result["failed"] == summaries.GIVE_UP_AFTER
    assert not Topic.objects.owned_by(owner).filter(summary_source="llm").exists()


def test_topic_upkeep_queues_one_summary_run_per_owner(owner, conversation, scripted_llm):  # noqa: F811
    msgs = add_turns(owner, conversation, GARDEN)
    assert tasks.queue_summaries(owner.pk) is False  # no topic yet
    tasks.topic_upkeep.call(owner.pk, [m.pk for m in msgs])
    queued = DBTaskResult.objects.filter(task_path=tasks.summarize_topics.module_path)
    assert queued.count() == 1 and queued.get().status == TaskResultStatus.READY
    assert tasks.queue_summaries(owner.pk) is False  # one is waiting already
    scripted_llm.script({"text": "A garden topic."}, match=PROMPT, repeat=True)
    detail = tasks.summarize_topics.call(owner.pk)
    assert detail["summarized"] >= 1
    assert UpkeepRun.objects.filter(owner=owner, kind="summarize_topics", ok=True).exists()


def test_build_topics_can_have_every_summary_written_with_progress(
    owner, conversation, scripted_llm, capsys  # noqa: F811
):
    from django.core.management import call_command

    add_turns(owner, conversation, GARDEN)
    scripted_llm.script({"text": "Garden notes."}, match=PROMPT, repeat=True)
    call_command("build_topics", "--user", owner.username, "--summaries")
    out = capsys.readouterr()
    assert "summaries written" in out.out and "summaries" in out.err + out.out
    assert not Topic.objects.owned_by(owner).exclude(summary_source="llm").exists()


def test_the_model_names_the_topic_when_its_name_is_one_a_person_would_write(
    owner, conversation, scripted_llm  # noqa: F811
):
    _, leaf = _garden_topic(owner, conversation)
    scripted_llm.script(
        {"text": "Name: Spring garden planting\nSummary: On 3 May the tulips and roses were planted."},
        match=PROMPT, repeat=True,
    )
    summaries.summarize_topics(owner)
    leaf.refresh_from_db()
    assert leaf.label == "Spring garden planting"
    assert leaf.summary == "On 3 May the tulips and roses were planted." and leaf.summary_source == "llm"
    prompt = scripted_llm.requests[0]["messages"][0]["content"]
    assert "Name:" in prompt and "when it happened" in prompt


@pytest.mark.parametrize(
    "name",
    ["Ticket m88dk6dhp09gb6vfxy0g4kha", "Garden", "A very long name of far too many words", "Offline recall"],
)
def test_a_model_name_with_an_id_a_system_word_or_the_wrong_length_is_not_taken(
    owner, conversation, scripted_llm, name  # noqa: F811
):
    _, leaf = _garden_topic(owner, conversation)
    before = leaf.label
    scripted_llm.script({"text": f"Name: {name}\nSummary: Tulips and roses."}, match=PROMPT, repeat=True)
    summaries.summarize_topics(owner)
    leaf.refresh_from_db()
    assert leaf.label == before and leaf.summary == "Tulips and roses."


def test_an_extractive_summary_is_dated_and_says_who_said_what():
    import datetime as dt

    day = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.UTC)
    said = [
        summaries.Said(day, "Caroline", "Hey Mel! Good to see you!"),
        summaries.Said(day, "Melanie", "Hi! I'm swamped with the kids and work."),
        summaries.Said(day, "Caroline", "I went to an LGBTQ support group yesterday and it was so powerful."),
        summaries.Said(day, "Melanie", "I painted a lake sunrise last year; painting helps me relax."),
    ]
    weights = {"lgbtq": 3.0, "support": 2.0, "group": 2.0, "painted": 2.0, "lake": 2.5, "sunrise": 2.5}
    text = summaries.extractive(said, weights, budget=30)
    assert text.startswith("8 May 2023. ")
    assert "Caroline: I went to an LGBTQ support group" in text
    assert "Melanie: I painted a lake sunrise" in text
    assert "Good to see you" not in text  # says nothing that happened
    assert text.index("LGBTQ") < text.index("sunrise")  # in the order it was said


def test_periods_read_as_a_person_writes_them():
    import datetime as dt

    d = dt.datetime
    assert summaries.period_text(d(2023, 5, 8, 10), d(2023, 5, 8, 12)) == "8 May 2023"
    assert summaries.period_text(d(2023, 5, 8), d(2023, 5, 25)) == "8–25 May 2023"
    assert summaries.period_text(d(2023, 5, 28), d(2023, 6, 2)) == "28 May – 2 June 2023"
    assert summaries.period_text(d(2022, 12, 28), d(2023, 1, 2)) == "28 December 2022 – 2 January 2023"


def test_a_leaf_summary_is_dated_and_a_parents_lists_its_dated_subtopics(owner, conversation, settings):
    import datetime as dt

    from django.utils import timezone

    settings.TOPIC_MAX_CHILDREN = 2
    start = timezone.now() - dt.timedelta(days=20)
    for day in range(3):
        add_turns(owner, conversation, GARDEN, start=start + dt.timedelta(days=day))
    topics.rebuild(owner)
    for leaf in Topic.objects.owned_by(owner).filter(children__isnull=True):
        assert leaf.summary.startswith(summaries.period_text(leaf.period_start, leaf.period_end) + ". ")
        assert "You: " in leaf.summary or "Assistant: " in leaf.summary
    parent = Topic.objects.owned_by(owner).exclude(children__isnull=True).first()
    kids = list(parent.children.order_by("order"))
    assert parent.summary.startswith(summaries.period_text(parent.period_start, parent.period_end))
    assert f"{len(kids)} subtopics: " in parent.summary
    assert all(k.label in parent.summary for k in kids)
