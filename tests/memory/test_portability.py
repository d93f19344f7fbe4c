"""export_memory / import_memory: a whole memory out and back in, losslessly."""

from __future__ import annotations

import copy
import datetime as dt
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from memory import models
from memory.embedders import get_embedder
from memory.lifecycle.deleting import delete_message
from memory.storage.store import NewMessage, embed_pending, store_messages, store_tool_call, update_message
from memory.transfer.export import export_markdown, export_memory
from memory.transfer.portability import InvalidExport, import_memory

T0 = dt.datetime(2025, 3, 1, 10, 0, tzinfo=dt.UTC)
LONG = " ".join(f"Line {i} of the deployment log says node-{i} restarted cleanly." for i in range(40))
LONG_RESULT = "\n".join(f"result row {i}: latency {i * 3} ms on shard {i % 7}" for i in range(50))


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


@pytest.fixture
def small_chunks(settings):
    settings.INDEX_CHUNK_THRESHOLD = 100
    settings.INDEX_CHUNK_OVERLAP = 10


@pytest.fixture
def memory(owner, conversation, small_chunks):
    """A memory with edits, a branch, a deleted message, chunks, tool calls and a topic tree."""
    u1 = NewMessage("user", "Our Redis ticket is INFRA-992.", at(0), external_id="ext-1",
                    metadata={"speaker": "Sam"})
    a1 = NewMessage("assistant", "Noted: INFRA-992 uses port 6379.", at(1), parent_id=u1.id)
    u2 = NewMessage("user", "Which port?", at(2), parent_id=a1.id)
    a2 = NewMessage("assistant", "Port 6379.", at(3), parent_id=u2.id)
    a2b = NewMessage("assistant", "It is 6379, the Redis default.", at(4), parent_id=u2.id)
    long = NewMessage("user", LONG, at(5), parent_id=a2b.id)
    gone = NewMessage("assistant", "A reply the user deleted.", at(6), parent_id=long.id)
    after = NewMessage("user", "Thanks!", at(7), parent_id=gone.id)
    store_messages(owner, conversation, [u1, a1, u2, a2, a2b, long, gone, after], embed=False)
    update_message(owner, u2.id, "Which port does Redis use again?")
    delete_message(owner, gone.id)
    models.Message.objects.get(pk=u1.id).set_pinned(True)
    first = models.Message.objects.get(pk=a1.id)
    store_tool_call(owner, first, "search_memory", {"query": "redis"}, "one hit", timestamp=at(1.1),
                    duration_ms=12, embed=False)
    store_tool_call(owner, first, "fetch_message", {"id": "x"}, LONG_RESULT, timestamp=at(1.2), embed=False)
    store_tool_call(owner, first, "broken", "{not json", "boom", timestamp=at(1.3), is_error=True,
                    embed=False)

    retreat = models.Conversation.objects.create(owner=owner, title="Retreat")
    [r1] = store_messages(owner, retreat, [NewMessage("user", "The retreat is in Estes Park.", at(60))],
                          embed=False)

    root = models.Topic.objects.create(owner=owner, label="Everything", level=0, order=0, period_start=at(0),
                                       summary="Work and the retreat", keywords=["redis", "retreat"])
    redis = models.Topic.objects.create(owner=owner, parent=root, label="Redis", level=1, order=0,
                                        sample_message_ids=[u1.id])
    trip = models.Topic.objects.create(owner=owner, parent=root, label="Retreat", level=1, order=1)
    for message_id, score in [(u1.id, 0.9), (a1.id, 0.8), (gone.id, 0.5)]:
        models.TopicMembership.objects.create(owner=owner, topic=redis, message_id=message_id, score=score)
    models.TopicMembership.objects.create(owner=owner, topic=trip, message=r1, score=0.7)
    models.PeriodSummary.objects.create(owner=owner, period="this_month", message_count=9,
                                        summary="9 messages",
                                        top_topics=[{"id": redis.pk, "label": "Redis", "count": 3}])
    ticket = models.Entity.objects.create(owner=owner, name="INFRA-992", normalized="infra-992", kind="id",
                                          mention_count=2)
    port = models.Entity.objects.create(owner=owner, name="6379", normalized="6379", kind="number",
                                        mention_count=1)
    models.EntityMention.objects.create(owner=owner, entity=ticket, message_id=u1.id)
    models.EntityMention.objects.create(owner=owner, entity=ticket, message_id=a1.id)
    models.EntityMention.objects.create(owner=owner, entity=port, message_id=a1.id)
    models.EntityEdge.objects.create(owner=owner, source=ticket, target=port, weight=1)
    return owner


def comparable(data: dict) -> dict:
    data = copy.deepcopy(data)
    data.pop("exported_at")
    data.pop("owner")
    return data


def id_pairs(before: dict, after: dict) -> dict[str, str]:
    pairs = {}
    for c1, c2 in zip(before["conversations"], after["conversations"], strict=True):
        pairs[c1["id"]] = c2["id"]
        for m1, m2 in zip(c1["messages"], c2["messages"], strict=True):
            pairs[m1["id"]] = m2["id"]
            for t1, t2 in zip(m1["tool_calls"], m2["tool_calls"], strict=True):
                pairs[t1["id"]] = t2["id"]
    for t1, t2 in zip(before["topics"], after["topics"], strict=True):
        pairs[t1["id"]] = t2["id"]
    return pairs


def renamed(value, pairs: dict[str, str]):
    if isinstance(value, dict):
        return {k: renamed(v, pairs) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, pairs) for v in value]
    if isinstance(value, str):
        return pairs.get(value, value)
    return value


def new_user(name: str):
    return get_user_model().objects.create_user(name, password="pass-12345")


@pytest.mark.django_db
def test_it_exports_every_part_of_the_memory(memory):
    data = export_memory(memory)
    assert data["format"] == "recollect-memory" and data["version"] == 1
    assert data["embedding_model"] == get_embedder().name
    [work, retreat] = data["conversations"]
    assert [c["title"] for c in data["conversations"]] == ["Test conversation", "Retreat"]
    assert len(work["messages"]) == 8
    by_content = {m["content"]: m for m in work["messages"]}
    edited = by_content["Which port does Redis use again?"]
    assert edited["edited"] and edited["edit_history"][0]["previous_content"] == "Which port?"
    assert by_content["A reply the user deleted."]["deleted"] is True
    assert len(by_content[LONG]["chunks"]) > 1
    a1 = by_content["Noted: INFRA-992 uses port 6379."]
    assert [t["tool_name"] for t in a1["tool_calls"]] == ["search_memory", "fetch_message", "broken"]
    assert a1["tool_calls"][1]["chunks"] > 1 and a1["tool_calls"][2]["is_error"] is True
    branch = [m for m in work["messages"] if m["parent_id"] == edited["id"]]
    assert len(branch) == 2
    assert [t["label"] for t in data["topics"]] == ["Everything", "Redis", "Retreat"]
    assert data["topics"][1]["parent_id"] == data["topics"][0]["id"]
    assert len(data["topics"][1]["members"]) == 3
    assert {e["name"] for e in data["entities"]} == {"INFRA-992", "6379"}
    json.dumps(data)  # JSON-ready as it is


@pytest.mark.django_db
def test_a_round_trip_into_a_fresh_database_keeps_everything_including_ids(memory):
    before = export_memory(memory)
    chunks_before = models.Message.objects.filter(owner=memory, is_chunk=True).count()
    call_chunks_before = models.ToolCall.objects.filter(owner=memory, is_chunk=True).count()
    passages_before = models.Passage.objects.filter(owner=memory).count()
    memory.delete()  # as if the export were taken to another instance
    restored = new_user("restored")

    report = import_memory(restored, before)

    assert report.new_ids == 0 and report.rechunked == 0 and not report.warnings
    assert comparable(export_memory(restored)) == comparable(before)
    assert models.Message.objects.filter(owner=restored, is_chunk=True).count() == chunks_before
    assert models.ToolCall.objects.filter(owner=restored, is_chunk=True).count() == call_chunks_before
    passages = models.Passage.objects.filter(owner=restored)
    assert passages.count() == passages_before == report.passages == report.embedded
    assert not passages.filter(embedding__isnull=True).exists()
    assert set(passages.values_list("embedding_model", flat=True)) == {get_embedder().name}
    assert passages.filter(deleted=True).exists()  # the deleted message stays out of search
    pinned = models.Message.objects.filter(owner=restored, pinned=True)
    assert list(pinned.values_list("content", flat=True)) == ["Our Redis ticket is INFRA-992."]
    assert not models.Topic.objects.filter(owner=restored, centroid__isnull=True).exists()


@pytest.mark.django_db
def test_a_round_trip_as_another_user_gives_new_ids_consistently(memory):
    before = export_memory(memory)
    copy_user = new_user("copy")

    report = import_memory(copy_user, before, embed=False)

    after = export_memory(copy_user)
    pairs = id_pairs(before, after)
    assert all(old != new for old, new in pairs.items())
    assert report.new_ids == len(pairs)
    assert renamed(comparable(before), pairs) == comparable(after)
    # The original is untouched.
    assert comparable(export_memory(memory)) == comparable(before)


@pytest.mark.django_db
def test_importing_the_same_export_twice_adds_nothing(memory):
    data = export_memory(memory)
    target = new_user("target")
    import_memory(target, data, embed=False)
    counts = (
        models.Message.objects.filter(owner=target).count(),
        models.Topic.objects.filter(owner=target).count(),
    )

    report = import_memory(target, data, embed=False)

    assert report.messages == 0 and report.topics == 0
    assert report.skipped_conversations == 2 and report.skipped_topics == 3
    assert models.Message.objects.filter(owner=target).count() == counts[0]
    assert models.Topic.objects.filter(owner=target).count() == counts[1]


@pytest.mark.django_db
def test_importing_never_touches_other_users_rows(memory, stranger, stranger_conversation):
    store_messages(stranger, stranger_conversation, [NewMessage("user", "stranger's secret plan", at(0))],
                   embed=False)
    theirs = comparable(export_memory(stranger))
    mine = comparable(export_memory(memory))
    assert "INFRA-992" not in json.dumps(theirs)

    import_memory(memory, export_memory(stranger), embed=False)
    assert comparable(export_memory(stranger)) == theirs
    import_memory(stranger, export_memory(memory), embed=False)

    now_mine = comparable(export_memory(memory))
    assert now_mine["conversations"][:2] == mine["conversations"]  # the owner's own rows are as they were
    assert "stranger's secret plan" in json.dumps(now_mine)  # imported into the owner, as asked
    theirs_now = comparable(export_memory(stranger))
    own = next(c for c in theirs_now["conversations"] if c["id"] == stranger_conversation.pk)
    assert own == theirs["conversations"][0]
    assert not models.Message.objects.filter(owner=memory, conversation__owner=stranger).exists()
    assert not models.Message.objects.filter(owner=stranger, conversation__owner=memory).exists()
    assert not models.TopicMembership.objects.filter(owner=stranger, message__owner=memory).exists()


@pytest.mark.django_db
def test_export_shows_only_the_owners_memory(memory, stranger, stranger_conversation):
    store_messages(stranger, stranger_conversation, [NewMessage("user", "stranger's secret plan", at(0))],
                   embed=False)
    models.Topic.objects.create(owner=stranger, label="Stranger topic")
    text = json.dumps(export_memory(memory)) + export_markdown(memory)
    assert "secret plan" not in text and "Stranger" not in text


@pytest.mark.django_db
def test_exclude_deleted_leaves_them_out_and_relinks_their_replies(memory):
    data = export_memory(memory, exclude_deleted=True)
    messages = data["conversations"][0]["messages"]
    assert "A reply the user deleted." not in [m["content"] for m in messages]
    thanks = next(m for m in messages if m["content"] == "Thanks!")
    assert next(m for m in messages if m["id"] == thanks["parent_id"])["content"] == LONG
    assert len(data["topics"][1]["members"]) == 2
    import_memory(new_user("clean"), data, embed=False)


@pytest.mark.django_db
def test_another_embedding_model_in_the_export_is_reembedded_with_ours(memory):
    data = export_memory(memory)
    data["embedding_model"] = "text-embedding-3-large"
    target = new_user("target")

    report = import_memory(target, data, embed=False)

    assert report.model_changed and "text-embedding-3-large" in report.summary()
    assert not models.Passage.objects.filter(owner=target, embedding__isnull=False).exists()
    assert embed_pending(target) == report.passages
    assert set(models.Passage.objects.filter(owner=target).values_list("embedding_model", flat=True)) == {
        get_embedder().name
    }


@pytest.mark.django_db
def test_a_larger_chunk_threshold_on_the_target_is_reported(memory, settings):
    data = export_memory(memory)
    settings.INDEX_CHUNK_THRESHOLD = 4000
    report = import_memory(new_user("target"), data, embed=False)
    assert report.rechunked == 2  # the long message and the long tool result
    assert "chunked differently" in report.summary()


def broken(data: dict, path: list, value) -> dict:
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        (["format"], "something-else", "export.format"),
        (["version"], 7, "export.version: 7 is not supported"),
        (["conversations"], {"a": 1}, "export.conversations: must be list"),
        (["conversations", 0, "messages", 1, "role"], "robot", "conversations[0].messages[1].role"),
        (["conversations", 0, "messages", 1, "content"], KeyError, "messages[1].content: is missing"),
        (["conversations", 0, "messages", 2, "timestamp"], "yesterday", "messages[2].timestamp: 'yesterday'"),
        (["conversations", 0, "messages", 2, "position"], 0, "position: 0 is used twice"),
        (["conversations", 0, "messages", 1, "tool_calls", 0, "tool_name"], 5, "tool_calls[0].tool_name"),
        (["topics", 0, "parent_id"], "nope", "topics[0].parent_id: 'nope' is not a topic"),
        (["topics", 1, "label"], KeyError, "topics[1].label: is missing"),
        (["conversations", 1], "text", "conversations[1]: expected an object"),
    ],
)
def test_a_malformed_export_is_refused_with_the_bad_field_named(memory, path, value, words):
    data = broken(export_memory(memory), path, value)
    target = new_user("target")
    with pytest.raises(InvalidExport, match=None) as err:
        import_memory(target, data, embed=False)
    assert words in str(err.value)
    assert not models.Message.objects.filter(owner=target).exists()


@pytest.mark.django_db
def test_a_topic_cycle_is_refused(memory):
    data = export_memory(memory)
    data["topics"][0]["parent_id"] = data["topics"][1]["id"]
    with pytest.raises(InvalidExport, match="cycle"):
        import_memory(new_user("target"), data)


@pytest.mark.django_db
def test_markdown_reads_as_a_transcript_with_edits_and_branches(memory):
    text = export_markdown(memory)
    assert text.index("## Test conversation") < text.index("## Retreat")
    work = text[text.index("## Test conversation"):text.index("## Retreat")]
    main, _, others = work.partition("#### Other branches")
    # The active thread runs in order through the newest regeneration.
    order = ["Our Redis ticket", "Noted: INFRA-992", "Which port does Redis use again?",
             "It is 6379, the Redis default.", "Line 39 of the deployment log", "Thanks!"]
    assert [main.index(s) for s in order] == sorted(main.index(s) for s in order)
    assert "edited 1 time" in main and "> Which port?" in main
    assert "Tool call `fetch_message`" in main and "(error)" in main
    assert "Port 6379." in others and "*In reply to: Which port does Redis use again?*" in others
    assert "(deleted)" in main


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_the_commands_export_and_import_through_a_file(memory, tmp_path):
    path = tmp_path / "memory.json"
    run("export_memory", "--user", "owner", "--output", str(path))
    out, err = run("import_memory", str(path), "--user", "newcomer", "--no-embed")
    assert "imported 2 conversations, 9 messages, 3 tool calls, 3 topics" in out
    assert "created user 'newcomer'" in err
    newcomer = get_user_model().objects.get(username="newcomer")
    assert renamed(comparable(json.loads(path.read_text())), id_pairs(
        json.loads(path.read_text()), export_memory(newcomer))) == comparable(export_memory(newcomer))
    markdown, _ = run("export_memory", "--user", "owner", "--format", "markdown")
    assert markdown.startswith("# Memory of owner")


@pytest.mark.django_db
def test_the_commands_give_clear_errors(memory, tmp_path):
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        run("export_memory", "--user", "nobody")
    with pytest.raises(CommandError, match="no such file"):
        run("import_memory", str(tmp_path / "missing.json"), "--user", "x")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "recollect-memory", "version": 1, "conversations": [{"messages": [{}]}]}')
    with pytest.raises(CommandError, match=r"conversations\[0\]\.messages\[0\]\.role: is missing"):
        run("import_memory", str(bad), "--user", "x")
    assert not get_user_model().objects.filter(username="x").exists()
    chatgpt = tmp_path / "conversations.json"
    chatgpt.write_text(json.dumps([{"title": "t", "mapping": {}}]))
    with pytest.raises(CommandError, match="chatgpt export; import it with `manage.py import_history"):
        run("import_memory", str(chatgpt), "--user", "x")
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"format": "recollect-memory", "conv')
    with pytest.raises(CommandError, match="not valid JSON"):
        run("import_memory", str(truncated), "--user", "x")
