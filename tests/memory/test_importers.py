"""memory.transfer.importers: the readers of other apps' exports and of JSON Lines (import_history's)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from memory.transfer.importers import LineError, clean_imported, detect_text_kind, import_key, parse_line
from memory.transfer.portability import InvalidExport

LINE = {
    "conversation": " Trip ",
    "role": "user",
    "content": "book the train",
    "timestamp": "2024-05-01T09:00:00",
}


def test_a_json_lines_message_is_checked_and_normalised():
    item = parse_line(json.dumps({**LINE, "external_id": 7, "speaker": "Ann"}))
    assert item == {
        "conversation": "Trip",
        "role": "user",
        "content": "book the train",
        "timestamp": dt.datetime(2024, 5, 1, 9, tzinfo=dt.UTC),
        "external_id": "7",
        "speaker": "Ann",
    }


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({**LINE, "conversation": " "}), '"conversation" must be a non-empty string'),
        (json.dumps({**LINE, "role": "robot"}), '"role" must be one of'),
        (json.dumps({**LINE, "timestamp": "yesterday"}), "is not ISO-8601"),
        (json.dumps({**LINE, "timestamp": 5}), "must be an ISO-8601 string"),
        (json.dumps({**LINE, "external_id": [1]}), '"external_id" must be a string'),
        (json.dumps({**LINE, "speaker": "A\x00nn"}), '"speaker" holds a NUL'),
    ],
)
def test_a_bad_line_says_what_is_wrong(line, says):
    with pytest.raises(LineError, match=says):
        parse_line(line)


def test_a_lone_surrogate_in_a_lines_text_is_kept_replaced_as_in_a_chat():
    parse_line(json.dumps({**LINE, "content": "a\ud800"}))  # no LineError: the line is imported
    assert clean_imported("a\ud800 b\x00") == "a\ufffd b\u2400"


def test_the_import_key_is_the_external_id_or_a_stable_content_hash():
    item = parse_line(json.dumps(LINE))
    assert import_key(item) == import_key(parse_line(json.dumps(LINE)))
    assert import_key(item).startswith("auto:")
    assert import_key(parse_line(json.dumps({**LINE, "external_id": "m1"}))) == "m1"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (json.dumps(LINE) + "\n" + json.dumps(LINE), "jsonl"),
        ("", "jsonl"),
        ('{"conversation": "a"', "jsonl"),  # a bad line, reported by line
        (json.dumps([{"mapping": {}}], indent=1), "chatgpt"),
        (json.dumps([{"chat_messages": []}], indent=1), "claude"),
        (json.dumps({"format": "recollect-memory", "version": 1}, indent=1), "recollect"),
    ],
)
def test_the_kind_of_a_file_is_told_by_its_content(text, kind):
    assert detect_text_kind(text)[0] == kind


@pytest.mark.parametrize("text", ["[1, 2", json.dumps([{"other": 1}], indent=1)])
def test_text_of_no_known_kind_is_an_invalid_export(text):
    with pytest.raises(InvalidExport):
        detect_text_kind(text)


def lines(*items) -> list[str]:
    return [json.dumps({**LINE, **item}) + "\n" for item in items]


def test_json_lines_are_stored_as_one_thread_a_title_and_a_second_import_adds_nothing(owner):
    from memory.models import Message
    from memory.transfer.importers import import_json_lines

    history = lines({"content": "first"}, {"content": "second", "role": "assistant"}) + ["\n", "{bad\n"]
    errors: list[str] = []
    report = import_json_lines(owner, history, embed=False, on_error=errors.append)
    assert (report.added, report.skipped, report.bad, report.conversations) == (2, 0, 1, 1)
    assert errors and errors[0].startswith("line 4: not valid JSON")
    first, second = Message.objects.owned_by(owner).order_by("position")
    assert (first.content, second.content, second.parent_id) == ("first", "second", first.pk)
    again = import_json_lines(owner, history, embed=False)
    assert (again.added, again.skipped, again.bad) == (0, 2, 1) and len(again.errors) == 1


def test_json_lines_never_join_a_strangers_conversation_of_the_same_title(owner, stranger):
    from memory.models import Conversation, Message
    from memory.transfer.importers import import_json_lines

    import_json_lines(stranger, lines({"content": "theirs"}), embed=False)
    report = import_json_lines(owner, lines({"content": "mine"}), embed=False)
    assert report.conversations == 1
    mine = Message.objects.owned_by(owner).get()
    assert mine.parent_id is None and Conversation.objects.get(pk=mine.conversation_id).owner == owner
