"""Bad input, fuzzed with hypothesis: websocket frames, form posts, tool arguments and import
files. No 500, no crash, a clear error, and nothing already stored is lost. Each test reports how
many inputs it tried and how many crashed (test-artifacts/fuzz-report.txt)."""

from __future__ import annotations

import asyncio
import io
import json
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from memory.context.tools import TOOLS, execute_tool
from memory.models import Message
from memory.storage import store
from tests.chat.conftest import connect

pytestmark = pytest.mark.django_db(transaction=True)

REPORT = Path(__file__).resolve().parents[2] / "test-artifacts" / "fuzz-report.txt"
FUZZ = hsettings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
tried: Counter = Counter()
crashes: Counter = Counter()

json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@pytest.fixture(scope="module", autouse=True)
def fuzz_report(request):
    yield
    lines = [f"{name}: {tried[name]} inputs tried, {crashes[name]} crashes" for name in sorted(tried)]
    lines.append(f"total: {sum(tried.values())} inputs tried, {sum(crashes.values())} crashes")
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.write_line("\nfuzz: " + "; ".join(lines))


@pytest.fixture
def stored(owner, conversation):
    """A few messages already in memory, which no bad input may lose."""
    first = store.store_message(owner, conversation, "user", "the alpaca is called Pablo", embed=False)
    store.store_message(
        owner, conversation, "assistant", "Noted: Pablo the alpaca.", parent_id=first.pk, embed=False
    )
    return set(Message.objects.filter(conversation=conversation).values_list("pk", "content"))


def still_stored(conversation, before: set) -> bool:
    return before <= set(Message.objects.filter(conversation=conversation).values_list("pk", "content"))


# --- websocket frames --------------------------------------------------------------------------

frame_types = st.sampled_from(
    [
        "send",
        "edit",
        "delete",
        "restore",
        "forget",
        "regenerate",
        "stop",
        "ping",
        "",
        "SEND",
        "chat.token",
        "__init__",
        "receive",
    ]
) | st.text(max_size=20)
bad_content = st.none() | st.integers() | st.just("") | st.just("   \n") | json_value | st.just("x" * 5000)
frame_dicts = st.fixed_dictionaries(
    {"type": frame_types},
    optional={
        "content": bad_content,
        "message_id": json_value | st.text(max_size=30),
        "parent_id": json_value,
        "client_id": json_value,
    },
)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


raw_frames = (
    frame_dicts.map(json.dumps)
    | json_value.map(json.dumps)
    | st.text(max_size=200)
    | st.integers(min_value=1, max_value=100_000).map(nested)
    | st.integers(min_value=10_000, max_value=3_000_000).map(
        lambda n: json.dumps({"type": "ping", "pad": "x" * n})
    )
    | st.binary(max_size=100)
)


@FUZZ
@given(frames=st.lists(raw_frames, min_size=1, max_size=4))
def test_bad_websocket_frames_get_clear_errors_and_the_socket_stays_open(
    owner, conversation, stored, no_llm, settings, frames
):
    settings.MAX_MESSAGE_CHARS = 2000

    async def exchange() -> list[dict]:
        ws = await connect(owner, conversation.pk)
        for frame in frames:
            key = "bytes" if isinstance(frame, bytes) else "text"
            await ws.input_queue.put({"type": "websocket.receive", key: frame})
        await ws.send_json_to({"type": "ping"})
        events = []
        while True:  # everything up to the pong; turns started by the frames are not waited for
            event = await ws.receive_json_from(timeout=30)
            events.append(event)
            if event["type"] == "pong":
                break
        await ws.disconnect()
        return events

    tried["websocket frames"] += len(frames)
    events = asyncio.run(exchange())
    errors = [e for e in events if e["type"] == "error"]
    crashed = [e for e in errors if e["code"] == "server_error"]
    crashes["websocket frames"] += len(crashed)
    assert not crashed, crashed
    assert all(isinstance(e["message"], str) and e["message"] for e in errors)
    assert still_stored(conversation, stored)


# --- form posts --------------------------------------------------------------------------------

form_data = st.dictionaries(
    st.sampled_from(
        [
            "title",
            "content",
            "from",
            "csrfmiddlewaretoken",
            "next",
            "q",
            "confirm",
            "username",
            "password1",
            "password2",
        ]
    )
    | st.text(max_size=10),
    st.text(max_size=300) | st.just("x" * 20_000),
    max_size=5,
)
ids = st.text(alphabet="0123456789ABCDEFGHJKMNPQRSTVWXYZ%./-_", min_size=1, max_size=40)


@FUZZ
@given(data=form_data, some_id=ids, which=st.integers(min_value=0, max_value=8))
def test_bad_form_posts_never_answer_500(owner, conversation, stored, data, some_id, which):
    message_id = next(iter(stored))[0]
    urls = [
        "/c/new/",
        f"/c/{conversation.pk}/rename/",
        f"/c/{some_id}/rename/",
        f"/c/{some_id}/delete/",
        f"/c/{conversation.pk}/branch/{some_id}/",
        f"/explorer/messages/{some_id}/delete/",
        f"/explorer/messages/{message_id}/restore/",
        f"/explorer/messages/{some_id}/forget/",
        "/signup/",
    ]
    client = Client(raise_request_exception=False)
    client.force_login(owner)
    tried["form posts"] += 1
    response = client.post(urls[which], data)
    crashes["form posts"] += response.status_code >= 500
    assert response.status_code < 500, (urls[which], response.status_code)
    assert still_stored(conversation, stored)


# --- tool arguments ----------------------------------------------------------------------------


def tool_arguments():
    def for_tool(name: str):
        params = list(TOOLS[name].parameters) if name in TOOLS else []
        keys = st.sampled_from(params) | st.text(max_size=10) if params else st.text(max_size=10)
        as_dict = st.dictionaries(keys, json_value, max_size=4)
        return as_dict | as_dict.map(json.dumps) | st.text(max_size=60) | json_value

    names = st.sampled_from(sorted(TOOLS)) | st.text(max_size=20) | st.none()
    return names.flatmap(
        lambda name: st.tuples(st.just(name), for_tool(name) if isinstance(name, str) else json_value)
    )


@FUZZ
@given(call=tool_arguments())
def test_tools_answer_any_arguments_with_a_result_or_a_clear_error(owner, conversation, stored, call):
    name, arguments = call
    tried["tool arguments"] += 1
    result = execute_tool(owner, name, arguments, conversation=conversation)
    internal = not result.ok and "internal error" in (result.error or "")
    crashes["tool arguments"] += internal
    assert not internal, (name, arguments, result.error)
    assert result.ok or (isinstance(result.error, str) and result.error)
    json.dumps(result.result, default=str)  # what goes back to the model serialises
    assert still_stored(conversation, stored)


# --- import files ------------------------------------------------------------------------------

jsonl_line = st.fixed_dictionaries(
    {},
    optional={
        "conversation": json_value,
        "role": st.sampled_from(["user", "assistant", "robot"]) | json_value,
        "content": json_value,
        "timestamp": st.text(max_size=30) | st.just("2024-05-01T10:00:00"),
        "external_id": json_value,
    },
).map(json.dumps)
import_files = (
    st.lists(jsonl_line | st.text(max_size=80), max_size=6).map("\n".join).map(str.encode)
    | json_value.map(lambda v: json.dumps(v).encode())
    | st.lists(st.fixed_dictionaries({"mapping": json_value, "title": json_value}), max_size=3).map(
        lambda v: json.dumps(v).encode()
    )
    | st.lists(st.fixed_dictionaries({"chat_messages": json_value, "uuid": json_value}), max_size=3).map(
        lambda v: json.dumps(v).encode()
    )
    | st.binary(max_size=300)
    | st.just(b"PK\x03\x04not really a zip")
)


@FUZZ
@given(content=import_files)
def test_import_history_rejects_bad_files_clearly(owner, conversation, stored, tmp_path_factory, content):
    path = tmp_path_factory.mktemp("imports") / "history.json"
    path.write_bytes(content)
    tried["import files"] += 1
    try:
        call_command(
            "import_history",
            str(path),
            user=owner.username,
            no_embed=True,
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    except CommandError as exc:
        assert str(exc)
    except Exception:
        crashes["import files"] += 1
        raise
    assert still_stored(conversation, stored)
