"""import_history reads ChatGPT's and Claude's exports (and Recollect's own), told apart by content."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from memory.models import Conversation, Message
from memory.transfer.export import export_memory

T = 1_740_000_000.0  # 2025-02-19T21:20:00Z


def node(nid, parent, children, role=None, text=None, t=None, **extra):
    message = None
    if role is not None:
        message = {"id": nid, "author": {"role": role}, "create_time": t,
                   "content": {"content_type": "text", "parts": [text]}, **extra}
    return {"id": nid, "message": message, "parent": parent, "children": children}


def chatgpt_conversation(current="a2b"):
    """A thread whose second user message was edited in ChatGPT: two branches under a1."""
    mapping = {
        "root": node("root", None, ["sys"]),
        "sys": node("sys", "root", ["u1"], "system", "", T),
        "u1": node("u1", "sys", ["a1"], "user", "What port does Redis use?", T + 1),
        "a1": node("a1", "u1", ["u2a", "u2b"], "assistant", "Redis listens on 6379.", T + 2,
                   metadata={"model_slug": "gpt-4o"}),
        "u2a": node("u2a", "a1", ["a2a"], "user", "And Postgres?", T + 3),
        "a2a": node("a2a", "u2a", [], "assistant", "Postgres uses 5432.", T + 4),
        "u2b": node("u2b", "a1", ["tool1"], "user", "And Memcached?", T + 5),
        "tool1": node("tool1", "u2b", ["a2b"], "tool", "search results", T + 6),
        "a2b": node("a2b", "tool1", [], "assistant", "Memcached uses 11211.", T + 7),
    }
    return {"title": "Ports", "create_time": T, "update_time": T + 7, "mapping": mapping,
            "current_node": current, "conversation_id": "conv-ports"}


def claude_export():
    return [
        {"uuid": "c-1", "name": "Retreat planning", "created_at": "2025-03-02T09:00:00.000000Z",
         "chat_messages": [
             {"uuid": "m-1", "sender": "human", "text": "The retreat is at Whispering Pines.",
              "created_at": "2025-03-02T09:00:00Z"},
             {"uuid": "m-2", "sender": "assistant", "text": "",
              "content": [{"type": "text", "text": "Whispering Pines is in Estes Park."}],
              "created_at": "2025-03-02T09:00:05Z"},
             {"uuid": "m-3", "sender": "human", "text": "Book it.", "created_at": "2025-03-02T09:01:00Z",
              "attachments": [{"file_name": "budget.xlsx"}]},
         ]},
        {"uuid": "c-2", "name": "", "created_at": "2025-03-03T09:00:00Z",
         "chat_messages": [{"uuid": "m-4", "sender": "human", "text": "Untitled chat",
                            "created_at": "2025-03-03T09:00:00Z"}]},
    ]


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def write(path, data) -> str:
    path.write_text(json.dumps(data, indent=2))
    return str(path)


def by_external(user) -> dict[str, Message]:
    return {m.external_id: m for m in Message.objects.owned_by(user).logical()}


@pytest.mark.django_db
def test_it_imports_chatgpt_keeping_branches_as_branches(tmp_path):
    out, _ = run("import_history", write(tmp_path / "conversations.json", [chatgpt_conversation()]),
                 "--user", "sam")
    assert "imported 6 messages" in out and "from chatgpt" in out
    sam = get_user_model().objects.get(username="sam")
    [conv] = Conversation.objects.owned_by(sam)
    assert conv.title == "Ports"
    assert conv.created_at.timestamp() == T
    m = by_external(sam)
    assert set(m) == {"u1", "a1", "u2a", "a2a", "u2b", "a2b"}  # no empty system prompt, no tool output
    assert m["u1"].parent_id is None
    assert m["a1"].parent_id == m["u1"].pk
    assert m["u2a"].parent_id == m["u2b"].parent_id == m["a1"].pk  # the edit is a branch
    assert m["a2b"].parent_id == m["u2b"].pk  # the tool output left out, the thread kept
    assert m["a1"].role == "assistant" and m["a1"].metadata["model"] == "gpt-4o"
    assert m["a2a"].content == "Postgres uses 5432."
    assert m["u1"].timestamp.timestamp() == T + 1
    # ChatGPT's current branch is the active one here: it holds the newest position.
    newest = Message.objects.owned_by(sam).logical().order_by("-position").first()
    assert newest.external_id == "a2b"
    positions = {k: v.position for k, v in m.items()}
    assert positions["u1"] < positions["a1"] < positions["u2a"] < positions["a2a"]


@pytest.mark.django_db
def test_it_follows_chatgpts_current_node_for_the_active_branch(tmp_path):
    run("import_history", write(tmp_path / "c.json", [chatgpt_conversation(current="a2a")]), "--user", "sam")
    sam = get_user_model().objects.get(username="sam")
    assert Message.objects.owned_by(sam).logical().order_by("-position").first().external_id == "a2a"


@pytest.mark.django_db
def test_reimporting_chatgpt_adds_only_what_is_new(tmp_path):
    path = write(tmp_path / "conversations.json", [chatgpt_conversation()])
    run("import_history", path, "--user", "sam")
    out, _ = run("import_history", path, "--user", "sam")
    assert "imported 0 messages, skipped 6 already present" in out
    later = chatgpt_conversation()
    later["mapping"]["a2b"]["children"] = ["u3"]
    later["mapping"]["u3"] = node("u3", "a2b", [], "user", "Thanks!", T + 8)
    later["current_node"] = "u3"
    out, _ = run("import_history", write(tmp_path / "later.json", [later]), "--user", "sam")
    assert "imported 1 messages, skipped 6" in out
    sam = get_user_model().objects.get(username="sam")
    assert Conversation.objects.owned_by(sam).count() == 1
    m = by_external(sam)
    assert m["u3"].parent_id == m["a2b"].pk and m["u3"].conversation_id == m["a2b"].conversation_id


@pytest.mark.django_db
def test_it_reads_chatgpts_zip_as_downloaded(tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("chat.html", "<html></html>")
        z.writestr("conversations.json", json.dumps([chatgpt_conversation()]))
    out, _ = run("import_history", str(archive), "--user", "sam")
    assert "imported 6 messages" in out


@pytest.mark.django_db
def test_it_imports_claude_conversations(tmp_path):
    out, _ = run("import_history", write(tmp_path / "conversations.json", claude_export()), "--user", "kim")
    assert "imported 4 messages" in out and "from claude" in out
    kim = get_user_model().objects.get(username="kim")
    assert sorted(Conversation.objects.owned_by(kim).values_list("title", flat=True)) == [
        "Retreat planning", "Untitled"]
    m = by_external(kim)
    assert [m[k].role for k in ("m-1", "m-2", "m-3")] == ["user", "assistant", "user"]
    assert m["m-2"].content == "Whispering Pines is in Estes Park."  # from the content blocks
    assert m["m-2"].parent_id == m["m-1"].pk and m["m-3"].parent_id == m["m-2"].pk
    assert m["m-3"].metadata["attachments"] == ["budget.xlsx"]
    assert m["m-1"].metadata["source"] == "claude"
    assert m["m-1"].timestamp.isoformat() == "2025-03-02T09:00:00+00:00"
    out, _ = run("import_history", write(tmp_path / "again.json", claude_export()), "--user", "kim")
    assert "imported 0 messages, skipped 4" in out


@pytest.mark.django_db
def test_imports_stay_within_the_importing_user(tmp_path, owner, stranger):
    path = write(tmp_path / "conversations.json", claude_export())
    run("import_history", path, "--user", "stranger")
    out, _ = run("import_history", path, "--user", "owner")
    assert "imported 4 messages" in out  # the stranger's copy does not count as present
    assert Message.objects.owned_by(owner).count() == Message.objects.owned_by(stranger).count() == 4
    assert not Message.objects.filter(owner=owner, conversation__owner=stranger).exists()


@pytest.mark.django_db
def test_it_imports_a_recollect_export_too(tmp_path, owner):
    run("import_history", write(tmp_path / "c.json", claude_export()), "--user", "owner")
    out, _ = run("import_history", write(tmp_path / "mine.json", export_memory(owner)), "--user", "twin",
                 "--no-embed")
    assert "imported 2 conversations, 4 messages" in out


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("[1, 2, 3]", "neither ChatGPT's conversations.json"),
        ('[{"title": "x", "mapping": ', "not valid JSON"),
        (json.dumps([{"title": "x", "mapping": []}]), "conversations[0].mapping: expected an object"),
        (json.dumps([{"name": "x", "chat_messages": [{"sender": "robot", "text": "hi"}]}]),
         "conversations[0].chat_messages[0].sender"),
        (json.dumps([{"chat_messages": {}}]), "conversations[0].chat_messages: expected a list"),
        ('{\n  "format": "recollect-memory",\n  "version": 9\n}', "version: 9 is not supported"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        # One line of JSON Lines, or one object: either way, only that it is too deep.
        ('{"a":' * 100_000 + "1" + "}" * 100_000, ": the JSON is nested too deeply to read"),
    ],
)
def test_malformed_exports_are_clear_errors(tmp_path, content, words):
    path = tmp_path / "conversations.json"
    path.write_text(content)
    with pytest.raises(CommandError) as err:
        run("import_history", str(path), "--user", "sam")
    assert words in str(err.value) and str(path) in str(err.value)
    assert not Message.objects.exists()


@pytest.mark.django_db
def test_a_message_too_long_is_reported_and_its_replies_kept(tmp_path, settings):
    settings.MAX_MESSAGE_CHARS = 40
    data = [chatgpt_conversation()]
    data[0]["mapping"]["a1"]["message"]["content"]["parts"] = ["x" * 100]
    out, err = run("import_history", write(tmp_path / "c.json", data), "--user", "sam")
    assert "imported 5 messages" in out and "1 bad messages" in out
    assert "a1" in err and "MAX_MESSAGE_CHARS" in err
    sam = get_user_model().objects.get(username="sam")
    m = by_external(sam)
    assert m["u2a"].parent_id == m["u1"].pk


@pytest.mark.django_db
def test_json_lines_are_still_read_as_before(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({"conversation": "c", "role": "user", "content": "hello",
                                "timestamp": "2025-03-01T10:00:00Z"}) + "\n")
    out, _ = run("import_history", str(path), "--user", "sam")
    assert "imported 1 messages" in out


@pytest.mark.django_db
def test_a_json_lines_line_too_long_to_read_is_reported_not_passed_over(tmp_path, settings):
    settings.MAX_MESSAGE_CHARS = 100
    line = {"conversation": "c", "role": "user", "timestamp": "2025-03-01T10:00:00Z"}
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(json.dumps({**line, "content": text}) for text in
                              ("hello", "x" * 100_000, "still here")) + "\n")
    out, err = run("import_history", str(path), "--user", "sam")
    assert "imported 2 messages" in out and "1 bad lines" in out
    assert "line 2: longer than 65,636 characters" in err
    path.write_text(json.dumps({**line, "content": "x" * 100_000}))
    with pytest.raises(CommandError) as refused:  # its only line: no history at all, and why
        run("import_history", str(path), "--user", "sam")
    assert "(line 1: longer than 65,636 characters" in str(refused.value)


@pytest.mark.django_db
def test_a_nul_or_lone_surrogate_in_an_export_costs_at_most_its_message(tmp_path):
    data = [chatgpt_conversation()]
    data[0]["title"] = "Po\x00rts\ud800"
    mapping = data[0]["mapping"]
    mapping["a1"]["message"]["content"]["parts"] = ["Redis \ud800 listens"]
    mapping["a2a"]["message"]["id"] = "a2\x00a\udfff"
    mapping["a2b"]["message"]["metadata"] = {"model_slug": "gpt\x00"}
    out, _ = run("import_history", write(tmp_path / "c.json", data), "--user", "sam")
    assert "imported 6 messages" in out and "0 bad messages" in out
    assert "1 message had characters replaced (shown as \ufffd or \u2400)" in out  # counted, as the chat does
    sam = get_user_model().objects.get(username="sam")
    assert by_external(sam)["a1"].content == "Redis \ufffd listens"  # kept, the character replaced
    assert Conversation.objects.owned_by(sam).get().title == "Po\u2400rts\ufffd"
    m = by_external(sam)
    assert m["u2a"].parent_id == m["a1"].pk and m["a2\u2400a\ufffd"].parent_id == m["u2a"].pk
    assert m["a2b"].metadata["model"] == "gpt\u2400"


@pytest.mark.django_db
def test_import_memory_refuses_nesting_too_deep_with_one_line(tmp_path):
    path = tmp_path / "memory.json"
    path.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(CommandError) as err:
        run("import_memory", str(path), "--user", "sam")
    assert "nested too deeply" in str(err.value) and "\n" not in str(err.value)


def test_the_import_commands_exit_1_with_one_line_on_nesting_too_deep(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "conversations.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "manage.py", "import_history", str(path), "--user", "sam"],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    said = done.stderr.strip().splitlines()
    assert said == [f"CommandError: {path}: the JSON is nested too deeply to read (thousands of levels of "
                    "[ or {): no chat export looks like this"]
