"""import_history and recall, driven as a person would from the command line."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from memory.models import Conversation, Message


def write_jsonl(path, rows) -> str:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


ROWS = [
    {
        "conversation": "infra",
        "role": "user",
        "content": "Our Redis cluster ticket is INFRA-992.",
        "timestamp": "2025-03-01T10:00:00Z",
        "external_id": "e1",
        "speaker": "Sam",
    },
    {
        "conversation": "infra",
        "role": "assistant",
        "content": "Noted: INFRA-992 uses port 6379.",
        "timestamp": "2025-03-01T10:00:05Z",
        "external_id": "e2",
    },
    {
        "conversation": "retreat",
        "role": "user",
        "content": "The retreat is at Whispering Pines in Estes Park.",
        "timestamp": "2025-03-02T09:00:00+00:00",
        "external_id": "e3",
    },
]


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_import_creates_user_and_conversations_in_file_order(tmp_path):
    out, _ = run("import_history", write_jsonl(tmp_path / "h.jsonl", ROWS), "--user", "sam")
    assert "imported 3 messages" in out
    user = get_user_model().objects.get(username="sam")
    assert set(Conversation.objects.owned_by(user).values_list("title", flat=True)) == {
        "infra",
        "retreat",
    }
    infra = list(
        Message.objects.owned_by(user).filter(conversation__title="infra").order_by("position")
    )
    assert [m.external_id for m in infra] == ["e1", "e2"]
    assert infra[1].parent_id == infra[0].pk
    assert infra[0].metadata["speaker"] == "Sam"
    assert infra[0].metadata["external_id"] == "e1"
    assert infra[0].timestamp.isoformat() == "2025-03-01T10:00:00+00:00"


@pytest.mark.django_db
def test_importing_the_same_file_twice_adds_nothing(tmp_path):
    no_ids = [{k: v for k, v in r.items() if k != "external_id"} for r in ROWS]
    path = write_jsonl(tmp_path / "h.jsonl", ROWS + no_ids)
    run("import_history", path, "--user", "sam")
    first = Message.objects.count()
    out, _ = run("import_history", path, "--user", "sam")
    assert "imported 0 messages, skipped 6" in out
    assert Message.objects.count() == first


@pytest.mark.django_db
def test_bad_lines_are_reported_with_their_number_and_good_ones_kept(tmp_path):
    rows = [
        ROWS[0],
        "{not json",
        {
            "conversation": "infra",
            "role": "robot",
            "content": "x",
            "timestamp": "2025-03-01T10:00:00Z",
        },
        {
            "conversation": "infra",
            "role": "user",
            "content": "  ",
            "timestamp": "2025-03-01T10:00:00Z",
        },
        {"conversation": "infra", "role": "user", "content": "ok", "timestamp": "yesterday"},
        [1, 2],
        ROWS[1],
    ]
    out, err = run("import_history", write_jsonl(tmp_path / "h.jsonl", rows), "--user", "sam")
    assert "imported 2 messages" in out and "5 bad lines" in out
    for lineno, words in [
        (2, "not valid JSON"),
        (3, "role"),
        (4, "empty"),
        (5, "ISO-8601"),
        (6, "object"),
    ]:
        assert f"line {lineno}: " in err and words in err
    assert Message.objects.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["conversation", "external_id", "speaker"])
@pytest.mark.parametrize("odd", ["\ud800", "\x00"])
def test_a_surrogate_or_nul_in_a_lines_names_costs_only_that_line(tmp_path, field, odd):
    bad = {**ROWS[1], "external_id": "e9", field: f"in{odd}fra"}
    path = write_jsonl(tmp_path / "h.jsonl", [ROWS[0], bad, ROWS[1], ROWS[2]])
    out, err = run("import_history", path, "--user", "sam")
    assert "imported 3 messages" in out and "1 bad lines" in out
    assert f"line 2: \"{field}\"" in err
    assert sorted(Message.objects.values_list("external_id", flat=True)) == ["e1", "e2", "e3"]


@pytest.mark.django_db
def test_import_of_a_missing_file_is_a_clear_error():
    with pytest.raises(CommandError, match="no such file"):
        run("import_history", "/nonexistent.jsonl", "--user", "sam")


@pytest.mark.django_db
def test_recall_prints_search_results_as_json(tmp_path, capsys):
    run("import_history", write_jsonl(tmp_path / "h.jsonl", ROWS), "--user", "sam")
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        json.dumps({"query": "Which port does Redis use?"})
        + "\n"
        + json.dumps({"query": "Where is the company retreat?"})
        + "\n"
    )
    call_command("recall", "--user", "sam", "--json", "--limit", "2", "--queries", str(queries))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["query"] for line in lines] == [
        "Which port does Redis use?",
        "Where is the company retreat?",
    ]
    first = lines[0]["results"][0]
    assert set(first) >= {
        "id",
        "external_id",
        "conversation",
        "role",
        "timestamp",
        "score",
        "snippet",
        "type",
        "is_chunk",
    }
    assert first["type"] == "message" and first["is_chunk"] is False
    assert "e2" in [r["external_id"] for r in lines[0]["results"]]
    assert lines[1]["results"][0]["external_id"] == "e3"
    assert len(lines[0]["results"]) <= 2


@pytest.mark.django_db
def test_recall_asks_at_a_given_moment_and_shows_the_days_a_message_names(tmp_path, capsys):
    def said(text: str, when: str, external_id: str) -> dict:
        return {"conversation": "home", "role": "user", "content": text, "timestamp": when,
                "external_id": external_id}

    rows = [
        said("The plumber fixed the boiler", "2023-03-15T09:00:00Z", "b1"),
        said("The plumber fixed the boiler", "2023-05-17T09:00:00Z", "b2"),
        said("The plumber came back to the boiler last Friday", "2023-05-23T09:00:00Z", "b3"),
    ]
    run("import_history", write_jsonl(tmp_path / "h.jsonl", rows), "--user", "sam")
    call_command("recall", "When did the plumber fix the boiler last week?", "--user", "sam", "--json",
                 "--as-of", "2023-05-24T10:00")
    [line] = [json.loads(out) for out in capsys.readouterr().out.splitlines()]
    ranked = [r["external_id"] for r in line["results"]]
    assert ranked.index("b2") < ranked.index("b1")  # the week of 15 May, read from the 24th
    [named] = [r for r in line["results"] if r["external_id"] == "b3"]
    assert named["dates"] == [{"text": "last Friday", "date": "2023-05-19"}]
    with pytest.raises(CommandError, match="not an ISO 8601 date"):
        run("recall", "boiler", "--user", "sam", "--as-of", "last Tuesday")


@pytest.mark.django_db
def test_recall_for_an_unknown_user_is_a_clear_error():
    with pytest.raises(CommandError, match="no user named"):
        run("recall", "anything", "--user", "nobody")


@pytest.mark.django_db
def test_bench_haystack_probes_a_kept_haystack_again_without_building_it():
    import re

    def run(**opts) -> str:
        out = io.StringIO()
        call_command("bench_haystack", scale=0.01, user="haystack-test", database="", stdout=out, **opts)
        return out.getvalue()

    built = run(keep=True)
    messages = Message.objects.filter(owner__username="haystack-test").count()
    again = run(keep=True, reuse=True)
    assert "kept haystack of haystack-test" in again and "ingestion" not in again
    assert Message.objects.filter(owner__username="haystack-test").count() == messages, "nothing re-stored"
    figures = [re.search(r"recall top 10: +(\d+)/(\d+)", text).groups() for text in (built, again)]
    assert figures[0] == figures[1] and figures[0][1] == "18"
    run(reuse=True)  # without --keep the user goes
    assert not get_user_model().objects.filter(username="haystack-test").exists()
    with pytest.raises(CommandError, match="no kept haystack"):
        get_user_model().objects.create_user("haystack-test")
        run(reuse=True)
