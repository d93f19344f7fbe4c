"""Pinning a message (chat and explorer): owner-scoped, and a pinned message reaches the model."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from django.urls import reverse

from memory.models import ContextSnapshot, Conversation, Message
from memory.storage import store
from tests.chat.conftest import connect, receive_until

HTMX = {"HX-Request": "true"}


@pytest.fixture
def note(owner, conversation):
    return store.store_message(owner, conversation, "user", "My locker code is 7781.", embed=False)


@pytest.mark.django_db
def test_a_person_pins_and_unpins_a_message_in_chat(client, owner, conversation, note):
    client.force_login(owner)
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert f'id="pin-{note.pk}"' in page and ">Pin</button>" in page
    url = reverse("chat:pin_message", args=[note.pk])
    pinned = client.post(url, {"pinned": "true"}, headers=HTMX)
    assert pinned.status_code == 200
    assert ">Pinned</span>" in pinned.content.decode() and ">Unpin</button>" in pinned.content.decode()
    assert Message.objects.get(pk=note.pk).pinned
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert ">Pinned</span>" in page
    unpinned = client.post(url, {"pinned": "false"}, headers=HTMX)
    assert ">Pin</button>" in unpinned.content.decode()
    m = Message.objects.get(pk=note.pk)
    assert not m.pinned and m.pinned_at is None
    # Without htmx: back to the message in its conversation.
    response = client.post(url, {"pinned": "true"})
    assert response.status_code == 302 and f"#msg-{note.pk}" in response.url


@pytest.mark.django_db
def test_the_explorer_pins_and_unpins_a_message(client, owner, note):
    client.force_login(owner)
    page = client.get(reverse("explorer:message", args=[note.pk])).content.decode()
    assert "Pin (always show to the assistant)" in page
    url = reverse("explorer:pin", args=[note.pk])
    fragment = client.post(url, {"pinned": "true"}, headers=HTMX).content.decode()
    assert 'id="pin-state"' in fragment and "Unpin" in fragment and "<html" not in fragment
    assert Message.objects.get(pk=note.pk).pinned
    response = client.post(url, {"pinned": "false"})
    assert response.status_code == 302 and not Message.objects.get(pk=note.pk).pinned


@pytest.mark.django_db
def test_pinning_another_users_message_is_a_404(client, owner, stranger, stranger_conversation):
    theirs = store.store_message(stranger, stranger_conversation, "user", "stranger note", embed=False)
    client.force_login(owner)
    for name in ("chat:pin_message", "explorer:pin"):
        response = client.post(reverse(name, args=[theirs.pk]), {"pinned": "true"}, headers=HTMX)
        assert response.status_code == 404
    assert client.get(reverse("chat:pin_message", args=[theirs.pk])).status_code == 405
    assert not Message.objects.get(pk=theirs.pk).pinned


@pytest.mark.django_db(transaction=True)
async def test_a_pinned_message_from_another_conversation_reaches_the_model(owner, scripted_llm):
    @database_sync_to_async
    def setup():
        old = Conversation.objects.create(owner=owner, title="old")
        note = store.store_message(owner, old, "user", "The boat is moored at pier HERON-9.", embed=False)
        note.set_pinned(True)
        return note, Conversation.objects.create(owner=owner, title="new")

    note, conversation = await setup()
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "hello there"})
    done = (await receive_until(ws, "reply_done"))[-1]
    system = scripted_llm.requests[-1]["messages"][0]["content"]
    assert "Pinned (marked important by the user" in system and "HERON-9" in system
    snapshot = await database_sync_to_async(ContextSnapshot.objects.get)(message_id=done["message_id"])
    assert snapshot.plan["pinned_ids"] == [note.pk]
    await ws.disconnect()
