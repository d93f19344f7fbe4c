"""Security: a stranger's ids get 404 everywhere and leak nothing; CSRF on every form; stored XSS
rendered inert; foreign websocket origins refused; no secret or message text in logs."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from config.asgi import application
from memory.context.tools import TOOLS, execute_tool
from memory.models import ContextSnapshot, ToolCall, Topic
from memory.storage import store
from tests.chat.conftest import connect, receive_until, refusal_code

pytestmark = pytest.mark.django_db(transaction=True)

SECRET_TEXT = "my bank pin is 4729-zebra"
XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def theirs(stranger, stranger_conversation):
    """The stranger's memory: a message, a reply with a tool call, a topic, a snapshot."""
    m = store.store_message(stranger, stranger_conversation, "user", SECRET_TEXT, embed=False)
    reply = store.store_message(
        stranger, stranger_conversation, "assistant", "ok", parent_id=m.pk, embed=False
    )
    call = store.store_tool_call(stranger, reply, "vector_search", '{"query": "pin"}', {"found": SECRET_TEXT})
    topic = Topic.objects.create(owner=stranger, label="secret topic", keywords=["pin"], level=0, order=1)
    snapshot = ContextSnapshot.objects.filter(owner=stranger).first()
    return {
        "message": m,
        "reply": reply,
        "call": call,
        "topic": topic,
        "snapshot": snapshot,
        "conversation": stranger_conversation,
    }


def test_every_url_answers_404_for_a_strangers_ids(owner, theirs):
    client = Client()
    client.force_login(owner)
    c, m, call, topic = theirs["conversation"].pk, theirs["message"].pk, theirs["call"].pk, theirs["topic"].pk
    gets = [
        f"/c/{c}/",
        f"/m/{m}/",
        f"/m/{m}/history/",
        f"/explorer/topics/{topic}/",
        f"/explorer/messages/{m}/",
        f"/explorer/messages/{m}/diff/1/",
        f"/explorer/messages/{m}/context/",
        f"/explorer/tools/{call}/",
        f"/c/{c}/?at={m}",
    ]
    posts = [
        f"/c/{c}/rename/",
        f"/c/{c}/delete/",
        f"/c/{c}/branch/{m}/",
        f"/explorer/messages/{m}/delete/",
        f"/explorer/messages/{m}/restore/",
        f"/explorer/messages/{m}/forget/",
    ]
    for url in gets:
        response = client.get(url)
        assert response.status_code == 404, url
        assert SECRET_TEXT.encode() not in response.content
    for url in posts:
        assert client.post(url, {"title": "mine now"}).status_code == 404, url
    for url in [
        "/explorer/",
        "/explorer/timeline/",
        "/explorer/tools/",
        "/explorer/topics/",
        "/explorer/search/?q=bank+pin",
        "/",
    ]:
        response = client.get(url)
        assert response.status_code == 200 and SECRET_TEXT.encode() not in response.content, url
    theirs["message"].refresh_from_db()
    assert theirs["message"].content == SECRET_TEXT and not theirs["message"].deleted


async def test_every_websocket_frame_type_with_a_strangers_ids_says_not_found(owner, conversation, theirs):
    ws = await connect(owner, conversation.pk)
    m = theirs["message"].pk
    for frame in [
        {"type": "edit", "message_id": m, "content": "x"},
        {"type": "delete", "message_id": m},
        {"type": "restore", "message_id": m},
        {"type": "forget", "message_id": m},
        {"type": "regenerate", "message_id": m},
        {"type": "send", "content": "hi", "parent_id": m},
    ]:
        await ws.send_json_to(frame)
        events = await receive_until(ws, "error")
        assert events[-1]["code"] == "not_found", frame
        assert SECRET_TEXT not in str(events)
    await ws.disconnect()
    # A stranger's conversation cannot even be joined.
    join = WebsocketCommunicator(
        application, f"/ws/chat/{theirs['conversation'].pk}/", headers=[(b"origin", b"http://127.0.0.1")]
    )
    join.scope["user"] = owner
    assert await refusal_code(join) == 4404


def test_every_tool_with_a_strangers_ids_finds_nothing(owner, theirs):
    ids = {
        "id": theirs["message"].pk,
        "ids": [theirs["message"].pk],
        "message_id": theirs["message"].pk,
        "cluster_id": theirs["topic"].pk,
        "topic_id": theirs["topic"].pk,
        "topic": theirs["topic"].pk,
        "conversation_id": theirs["conversation"].pk,
        "query": "bank pin zebra",
        "entity": "zebra",
    }
    # Tools that take no id search the whole memory: valid arguments that find the secret.
    searches = {"find": {"pattern": "zebra"}, "get_period_messages": {"period": "today"}}
    for name, t in TOOLS.items():
        args = {k: v for k, v in ids.items() if k in t.parameters}
        if name == "get_tool_call":
            args["id"] = theirs["call"].pk
        if name in searches:
            args = searches[name]
            assert SECRET_TEXT in str(execute_tool(theirs["message"].owner, name, args).result), name
            mine = execute_tool(owner, name, args)
            assert mine.ok and not mine.error, name
        result = execute_tool(owner, name, args)
        assert SECRET_TEXT not in str(result.result) + str(result.error), name


def test_csrf_is_enforced_on_every_form(owner, conversation):
    m = store.store_message(owner, conversation, "user", "hello", embed=False)
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    c = conversation.pk
    for url in [
        "/c/new/",
        f"/c/{c}/rename/",
        f"/c/{c}/delete/",
        f"/c/{c}/branch/{m.pk}/",
        f"/explorer/messages/{m.pk}/delete/",
        f"/explorer/messages/{m.pk}/restore/",
        f"/explorer/messages/{m.pk}/forget/",
        "/logout/",
    ]:
        assert client.post(url, {"title": "x"}).status_code == 403, url
    anonymous = Client(enforce_csrf_checks=True)
    assert anonymous.post("/login/", {"username": "owner", "password": "owner-pass-123"}).status_code == 403


def test_stored_xss_in_messages_tool_results_and_topic_labels_is_inert(owner, conversation):
    m = store.store_message(owner, conversation, "user", XSS, embed=False)
    reply = store.store_message(owner, conversation, "assistant", XSS, parent_id=m.pk, embed=False)
    call = store.store_tool_call(owner, reply, "vector_search", json.dumps({"query": XSS}), {"result": XSS})
    topic = Topic.objects.create(owner=owner, label=XSS, summary=XSS, keywords=[XSS], level=0, order=1)
    client = Client()
    client.force_login(owner)
    for url in [
        f"/c/{conversation.pk}/",
        f"/explorer/messages/{m.pk}/",
        f"/explorer/tools/{call.pk}/",
        "/explorer/tools/",
        f"/explorer/topics/{topic.pk}/",
        "/explorer/topics/",
        "/explorer/",
    ]:
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert "<script>alert" not in html and "<img src=x onerror" not in html, url
    assert ToolCall.objects.filter(pk=call.pk).exists()


async def test_a_foreign_websocket_origin_is_refused(owner, conversation):
    for origin in [b"http://evil.example", b"null", None]:
        headers = [(b"origin", origin)] if origin else []
        ws = WebsocketCommunicator(application, f"/ws/chat/{conversation.pk}/", headers=headers)
        ws.scope["user"] = owner
        connected, _ = await ws.connect()
        assert not connected, origin
    ws = WebsocketCommunicator(
        application, f"/ws/chat/{conversation.pk}/", headers=[(b"origin", b"http://127.0.0.1:8000")]
    )
    ws.scope["user"] = owner
    connected, _ = await ws.connect()
    assert connected
    await ws.disconnect()


async def test_no_message_text_or_api_key_in_logs_at_the_default_level(
    owner, conversation, scripted_llm, caplog, settings
):
    settings.OPENAI_API_KEY = "sk-very-secret-key-123"
    scripted_llm.script(
        {"tool_calls": [{"name": "vector_search", "arguments": {"query": SECRET_TEXT}}]},
        {"text": f"You told me {SECRET_TEXT}"},
        match="4729",
    )
    scripted_llm.script({"text": "cut", "drop_after": 0}, match="second")
    caplog.set_level(logging.INFO)
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": SECRET_TEXT})
    await receive_until(ws, "reply_done")
    await ws.send_json_to({"type": "send", "content": f"second {SECRET_TEXT}"})
    await receive_until(ws, "reply_done")
    await ws.disconnect()
    await asyncio.sleep(0.2)
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert "4729" not in logged and "sk-very-secret-key-123" not in logged


def test_a_nul_in_any_id_of_a_url_answers_404(owner, conversation):
    m = store.store_message(owner, conversation, "user", "a message of mine", embed=False)
    client = Client(raise_request_exception=False)
    client.force_login(owner)
    c, nul = conversation.pk, "%00"
    gets = [
        f"/c/{c}{nul}/", f"/c/{nul}/", f"/m/{m.pk}{nul}/", f"/m/{m.pk}{nul}/history/",
        f"/c/{c}/?at={m.pk}{nul}", f"/explorer/messages/{m.pk}{nul}/", f"/explorer/messages/{nul}/diff/1/",
        f"/explorer/messages/{m.pk}{nul}/context/", f"/explorer/topics/{nul}/", f"/explorer/tools/{nul}/",
        f"/explorer/context/{nul}/",
    ]
    posts = [
        f"/c/{c}{nul}/rename/", f"/c/{c}{nul}/delete/", f"/c/{c}/branch/{m.pk}{nul}/",
        f"/m/{m.pk}{nul}/pin/", f"/explorer/messages/{m.pk}{nul}/edit/",
        f"/explorer/messages/{m.pk}{nul}/delete/", f"/explorer/messages/{m.pk}{nul}/pin/",
        f"/explorer/messages/{m.pk}{nul}/forget/",
    ]
    assert [(url, client.get(url).status_code) for url in gets] == [(url, 404) for url in gets]
    assert [(url, client.post(url, {"content": "x"}).status_code) for url in posts] == [
        (url, 404) for url in posts
    ]
    # An id parameter holding NUL names nothing; an unknown id without one is reported on the page.
    assert client.get(f"/explorer/tools/?message={m.pk}{nul}").status_code == 404
    response = client.get("/explorer/tools/?message=01UNKNOWN")
    assert response.status_code == 200 and "No message" in response.content.decode()
    m.refresh_from_db()
    assert m.content == "a message of mine" and not m.deleted and not m.pinned


def test_a_nul_in_a_facts_subject_an_import_job_or_a_correction_is_a_clear_refusal(owner, conversation):
    from memory.models import Fact

    m = store.store_message(owner, conversation, "user", "I live in Porto.", embed=False)
    fact = Fact.objects.create(owner=owner, message=m, subject="user", subject_key="user", attribute="home",
                               value="Porto", statement="the user lives in Porto", said_at=m.timestamp,
                               valid_from=m.timestamp)
    client = Client(raise_request_exception=False)
    client.force_login(owner)
    subject = client.get("/explorer/facts/?subject=%00")
    assert subject.status_code == 400 and "cannot contain a NUL character" in subject.content.decode()
    assert client.get("/explorer/import/progress/?job=%00").status_code == 404
    url = f"/explorer/facts/{fact.pk}/correct/"
    corrected = client.post(url, {"text": "I live in \x00Porto"}, HTTP_HX_REQUEST="true")
    assert corrected.status_code == 400 and "cannot contain a NUL character" in corrected.content.decode()
    assert client.post(url, {"text": "I live in \x00Porto"}).status_code == 302  # back, with the reason
    fact.refresh_from_db()
    assert fact.corrected == "" and fact.statement == "the user lives in Porto"


async def test_a_nul_in_the_websocket_path_is_refused_as_not_found(owner, conversation):
    join = WebsocketCommunicator(
        application, f"/ws/chat/{conversation.pk}\x00/", headers=[(b"origin", b"http://127.0.0.1")]
    )
    join.scope["user"] = owner
    assert await refusal_code(join) == 4404
