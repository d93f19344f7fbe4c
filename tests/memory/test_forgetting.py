"""Deleted content is absent from every path: search, index, tools, topics, entities."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from memory.context.index_builder import prepare_context
from memory.context.tools import execute_tool
from memory.finding.search import search
from memory.lifecycle.deleting import delete_message
from memory.lifecycle.forgetting import forget_message
from memory.models import Topic
from memory.organizing import topics
from memory.tasks import run_upkeep
from tests.memory.conftest import add_turns

pytestmark = pytest.mark.django_db

SECRET = "The vault code is ZEBRA-4242 at Quokka Station"


@pytest.fixture
def history(owner, conversation, settings):
    settings.INDEX_FULL_MAX = 3
    settings.INDEX_RECENT_WINDOW = 2
    texts = [
        "gardening notes: tulips and roses",
        "roses need pruning in March",
        SECRET,
        "noted the vault code",
        "more about the tulips",
        "tulips done",
    ]
    msgs = add_turns(owner, conversation, texts)
    run_upkeep(owner, [m.pk for m in msgs])
    topics.rebuild(owner)
    return msgs


def every_path(owner, conversation) -> str:
    seen = [json.dumps(search(owner, "vault code ZEBRA-4242 Quokka").as_dict()["results"])]
    for strategy_max in [(100, 200, 300), (1, 200, 300), (1, 2, 300), (1, 2, 3)]:
        from django.test import override_settings

        with override_settings(
            INDEX_FULL_MAX=strategy_max[0],
            INDEX_SNIPPET_MAX=strategy_max[1],
            INDEX_CLUSTER_MAX=strategy_max[2],
        ):
            seen.append(prepare_context(owner, conversation, "what is the vault code?").text)
    calls = [
        ("vector_search", {"query": "vault code ZEBRA-4242"}),
        ("search_and_retrieve", {"query": "vault code ZEBRA-4242"}),
        ("find", {"pattern": "ZEBRA"}),
        ("get_period_messages", {"period": "this_month", "limit": 50}),
        ("memory_graph_query", {"entity": "ZEBRA-4242"}),
        ("memory_graph_query", {"entity": "tulips", "depth": 3}),
        ("view_topic", {}),
        ("show_summaries", {}),
        ("get_conversation_stats", {}),
    ]
    for t in Topic.objects.owned_by(owner):
        calls.append(("get_cluster", {"cluster_id": t.pk, "limit": 50}))
        calls.append(("view_topic", {"topic_id": t.pk}))
    for name, args in calls:
        result = execute_tool(owner, name, args)
        found = {k: v for k, v in (result.result or {}).items() if k not in ("query", "pattern")}
        seen.append(json.dumps(found))
    for t in Topic.objects.owned_by(owner):
        seen.append(f"{t.label} {t.keywords} {t.summary}")
    return "\n".join(seen)


def test_the_secret_is_found_before_it_is_deleted(owner, conversation, history):
    assert "ZEBRA-4242" in every_path(owner, conversation)


@pytest.mark.parametrize("how", ["delete", "forget"])
def test_deleted_content_is_absent_from_every_path(owner, conversation, history, how):
    secret = history[2]
    (delete_message if how == "delete" else forget_message)(owner, secret.pk)
    run_upkeep(owner, [secret.pk])
    text = every_path(owner, conversation)
    assert "ZEBRA" not in text
    assert "Quokka" not in text
    assert secret.pk not in text
    result = execute_tool(owner, "get_message_by_id", {"id": secret.pk})
    assert not result.ok


def test_deleted_content_stays_out_after_a_full_rebuild(owner, conversation, history):
    delete_message(owner, history[2].pk)
    topics.rebuild(owner)
    assert "ZEBRA" not in every_path(owner, conversation)


def test_forgetting_reaches_the_tool_results_snapshots_and_topics_that_quoted_it(
    owner, conversation, history
):
    from memory.context.index_builder import save_snapshot
    from memory.models import ContextSnapshot, Passage, ToolCall
    from memory.storage.store import store_tool_call
    from memory.transfer.export import export_markdown, export_memory

    secret = history[2]
    question, reply = add_turns(owner, conversation, ["what was that code again?", "Here it is."])
    # A later turn quoted it: a search's result stored as a tool call, and a plan that showed it.
    found = execute_tool(owner, "search_and_retrieve", {"query": "the vault code"}).result
    store_tool_call(owner, reply, "search_and_retrieve", {"query": "the vault code"}, found)
    with override_settings(INDEX_FULL_MAX=100):
        plan = prepare_context(owner, conversation, "what was that code again?", user_message=question)
    save_snapshot(plan, owner, conversation, question)

    def traces() -> str:
        rows = [
            *ToolCall.objects.owned_by(owner).values_list("result", "arguments"),
            *Passage.objects.owned_by(owner).values_list("text", "context"),
            *ContextSnapshot.objects.owned_by(owner).values_list("query", "text", "plan", "hits"),
            *Topic.objects.owned_by(owner).values_list("label", "keywords", "summary"),
        ]
        return json.dumps([list(map(str, r)) for r in rows]) + json.dumps(
            export_memory(owner), default=str
        ) + export_markdown(owner)

    assert "ZEBRA-4242" in traces() and "Quokka" in traces()
    forget_message(owner, secret.pk)
    left = traces() + every_path(owner, conversation)
    at = left.find("ZEBRA") if "ZEBRA" in left else left.find("Quokka")
    assert at < 0, left[max(0, at - 300) : at + 100]


# --- every copy (issue 24 §1) -------------------------------------------------------------------

LONG_SECRET = (
    "Note for later: the vault code for Quokka Station is QXMARK-7731, and the spare key hangs "
    "behind the blue door in the boathouse."
)


def test_it_scrubs_a_copy_cut_mid_sentence_and_keeps_the_rest():
    from memory.lifecycle.forgetting import FORGOTTEN, Overlap

    overlap = Overlap([LONG_SECRET], {"01JSECRETID0000000000000000"})
    copy = "He said …vault code for Quokka Station is QXMARK-7731, and the spare… then left."
    scrubbed = overlap.scrub_text(copy)
    assert "QXMARK" not in scrubbed and "Quokka" not in scrubbed
    assert scrubbed.startswith("He said …") and scrubbed.endswith("… then left.") and FORGOTTEN in scrubbed
    # Its id goes, and text that shares fewer than five words in a row stays.
    assert overlap.scrub_text("see 01JSECRETID0000000000000000") == f"see {FORGOTTEN}"
    unrelated = "The blue door of the garden shed is where the spare rake hangs."
    assert overlap.scrub_text(unrelated) == unrelated


def test_it_scrubs_a_json_result_value_by_value_and_keeps_it_json():
    from memory.lifecycle.forgetting import Overlap

    overlap = Overlap([LONG_SECRET])
    result = json.dumps(
        [{"snippet": "the vault code for Quokka\nStation is QXMARK-7731", "role": "user"},
         {"snippet": "tulips done", "role": "user"}], ensure_ascii=False,
    )
    scrubbed = json.loads(overlap.scrub_json_text(result))
    assert "QXMARK" not in json.dumps(scrubbed) and scrubbed[1] == {"snippet": "tulips done", "role": "user"}
    # A piece of a chunked result (not JSON on its own) loses the words, not its quotes.
    piece = result[5:60]
    assert "QXMARK" not in overlap.scrub_json_text(piece) and piece.count('"') == overlap.scrub_json_text(
        piece
    ).count('"')


def test_it_scrubs_a_short_end_of_a_quote_that_is_a_whole_field():
    from memory.lifecycle.forgetting import FORGOTTEN, Overlap

    overlap = Overlap([LONG_SECRET])
    assert overlap.scrub_value({"snippet": "QXMARK-7731, and", "role": "user"}) == {
        "snippet": FORGOTTEN, "role": "user"
    }


def test_forgetting_scrubs_a_tool_result_that_quoted_part_of_a_sentence(owner, conversation, history):
    from memory.models import ToolCall
    from memory.storage.store import store_tool_call

    secret = add_turns(owner, conversation, [LONG_SECRET])[0]
    question, reply = add_turns(owner, conversation, ["the code?", "Found it."])
    cut = LONG_SECRET[20:95]  # "vault code … spare key": no whole sentence
    call = store_tool_call(owner, reply, "find", {"pattern": "vault"}, [{"id": secret.pk, "snippet": cut}])
    forget_message(owner, secret.pk)
    call = ToolCall.objects.get(pk=call.pk)
    assert "QXMARK" not in call.result and "Quokka" not in call.result and secret.pk not in call.result
    assert execute_tool(owner, "find", {"pattern": "QXMARK"}).result["matches"] == []


def test_forgetting_scrubs_what_an_earlier_version_left_behind(owner, conversation, history):
    from memory.models import ToolCall
    from memory.storage.store import store_tool_call, update_message

    secret = add_turns(owner, conversation, [LONG_SECRET])[0]
    _, reply = add_turns(owner, conversation, ["the code?", "Found it."])
    call = store_tool_call(owner, reply, "find", {"pattern": "vault"}, [{"snippet": LONG_SECRET[:100]}])
    update_message(owner, secret.pk, "Nothing to note.")
    forget_message(owner, secret.pk)
    assert "QXMARK" not in ToolCall.objects.get(pk=call.pk).result


def test_forgetting_the_first_message_retitles_its_conversation(owner):
    from memory.models import Conversation
    from memory.storage.store import store_message

    conv = Conversation.objects.create(owner=owner, title=LONG_SECRET[:60])
    first = store_message(owner, conv, "user", LONG_SECRET)
    store_message(owner, conv, "user", "Plan the garden for spring")
    kept = Conversation.objects.create(owner=owner, title="Garden")
    store_message(owner, kept, "user", LONG_SECRET)
    forget_message(owner, first.pk)
    conv.refresh_from_db()
    assert conv.title == "Plan the garden for spring"
    assert Conversation.objects.get(pk=kept.pk).title == "Garden"


def test_forgetting_with_copies_forgets_the_replies_that_quote_it(owner, conversation, history):
    from memory.lifecycle.echoes import copies_of
    from memory.models import Message

    secret, recall, restated, other = add_turns(
        owner, conversation,
        [
            LONG_SECRET,
            f"**Offline recall** · 2026-01-01 · user · X: “{LONG_SECRET[:90]}”",
            "You said the spare key hangs behind the blue door in the boathouse, I recall.",
            "Nothing to do with any of it.",
        ],
    )
    Message.objects.filter(pk=recall.pk).update(metadata={"mode": "offline_recall", "system_text": True})
    found = {c.message.pk: c for c in copies_of(owner, Message.objects.get(pk=secret.pk))}
    # The user's other message that names Quokka Station (a rare word here) is offered, unticked.
    assert set(found) == {recall.pk, restated.pk, history[2].pk}
    assert found[history[2].pk].words == ["Quokka"] and not found[history[2].pk].ticked
    assert found[recall.pk].only_a_copy and not found[restated.pk].only_a_copy
    assert forget_message(owner, secret.pk, copies=[recall.pk]) == sorted([secret.pk, recall.pk])
    assert set(Message.objects.filter(pk__in=[secret.pk, recall.pk, restated.pk, other.pk])
               .values_list("pk", flat=True)) == {restated.pk, other.pk}
