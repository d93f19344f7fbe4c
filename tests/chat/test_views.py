"""Chat pages: accounts, conversation list, the chat page, branches, history; strangers get 404."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from chat import branches
from memory.models import Conversation, Message, new_ulid
from memory.storage import store


@pytest.fixture
def thread(owner, conversation):
    """user → assistant, then an edited user message branch with its own reply."""
    q1 = store.store_message(owner, conversation, "user", "What is the capital of France?", embed=False)
    a1 = store.store_message(owner, conversation, "assistant", "Paris.", parent_id=q1.pk, embed=False)
    q2 = store.store_message(owner, conversation, "user", "What is the capital of Italy?", embed=False)
    a2 = store.store_message(owner, conversation, "assistant", "Rome.", parent_id=q2.pk, embed=False)
    branches.set_leaf(conversation, a2)
    return q1, a1, q2, a2


def test_it_requires_sign_in(client, conversation):
    response = client.get(reverse("chat:conversation", args=[conversation.pk]))
    assert response.status_code == 302 and reverse("login") in response.url


def test_it_hides_other_users_conversations(client, owner, stranger_conversation):
    client.force_login(owner)
    for name in ("chat:conversation",):
        assert client.get(reverse(name, args=[stranger_conversation.pk])).status_code == 404
    for name in ("chat:rename_conversation", "chat:delete_conversation"):
        assert client.post(reverse(name, args=[stranger_conversation.pk]), {"title": "x"}).status_code == 404
    assert Conversation.objects.filter(pk=stranger_conversation.pk, title="Stranger's conversation").exists()


def test_it_hides_other_users_messages(client, stranger, owner, thread, stranger_conversation):
    q1, *_ = thread
    client.force_login(stranger)
    assert client.get(reverse("chat:message", args=[q1.pk])).status_code == 404
    assert client.get(reverse("chat:message_history", args=[q1.pk])).status_code == 404
    url = reverse("chat:switch_branch", args=[stranger_conversation.pk, q1.pk])
    assert client.post(url).status_code == 404


def test_the_page_shows_the_active_branch_with_version_navigation(client, owner, conversation, thread):
    q1, a1, q2, a2 = thread
    client.force_login(owner)
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert "Rome." in page and "capital of Italy" in page
    assert "Paris." not in page
    assert "2/2" in page


def test_switching_branches_shows_the_other_version(client, owner, conversation, thread):
    q1, a1, q2, a2 = thread
    client.force_login(owner)
    response = client.post(
        reverse("chat:switch_branch", args=[conversation.pk, q1.pk]), HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith('<ol class="messages" id="thread"')
    assert "Paris." in html and "Rome." not in html and "1/2" in html
    assert branches.active_leaf(conversation).pk == a1.pk


def test_edit_history_is_one_click_away(client, owner, thread):
    q1, *_ = thread
    store.update_message(owner, q1.pk, "What is the capital of Spain?")
    client.force_login(owner)
    html = client.get(reverse("chat:message_history", args=[q1.pk])).content.decode()
    assert "capital of France" in html and "capital of Spain" in html


def test_a_cited_message_opens_on_its_branch(client, owner, conversation, thread):
    q1, a1, *_ = thread
    client.force_login(owner)
    response = client.get(reverse("chat:message", args=[a1.pk]))
    assert response.status_code == 302
    page = client.get(response.url).content.decode()
    assert "Paris." in page and "Rome." not in page


def test_message_content_is_escaped_and_markdown_sanitized(client, owner, conversation):
    store.store_message(
        owner,
        conversation,
        "assistant",
        "<script>alert(1)</script> **bold** <img src=x onerror=alert(2)> "
        "[x](javascript:alert(3))\n\n```\ncode <b>\n```",
        embed=False,
    )
    client.force_login(owner)
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    thread_html = page.split('id="thread"', 1)[1]
    assert "<script>alert" not in thread_html and "onerror" not in thread_html.replace(
        "onerror=alert(2)&gt;", ""
    )
    assert "javascript:" not in thread_html.split('class="raw"')[0]
    assert "<strong>bold</strong>" in thread_html and "code &lt;b&gt;" in thread_html


def test_signup_can_be_switched_off(client, settings, db):
    assert client.get(reverse("chat:signup")).status_code == 200
    settings.ALLOW_SIGNUP = False
    assert client.get(reverse("chat:signup")).status_code == 404


def test_signup_creates_an_account_and_signs_in(client, db):
    response = client.post(
        reverse("chat:signup"),
        {"username": "newbie", "password1": "a-long-pass-123", "password2": "a-long-pass-123"},
    )
    assert response.status_code == 302
    assert client.get(reverse("chat:home")).status_code == 200


def test_conversations_can_be_created_renamed_and_deleted(client, owner):
    client.force_login(owner)
    response = client.post(reverse("chat:new_conversation"))
    conv = Conversation.objects.get(owner=owner)
    assert response.url == reverse("chat:conversation", args=[conv.pk])
    client.post(reverse("chat:rename_conversation", args=[conv.pk]), {"title": "Trip plans"})
    conv.refresh_from_db()
    assert conv.title == "Trip plans"
    client.post(reverse("chat:delete_conversation", args=[conv.pk]))
    assert not Conversation.objects.filter(pk=conv.pk).exists()


def _long_branch(owner, conversation, n: int) -> list[Message]:
    """A thread of `n` messages, each replying to the one before (bulk-inserted: fast)."""
    start = timezone.now() - dt.timedelta(hours=1)
    rows, parent = [], None
    for i in range(n):
        m = Message(
            id=new_ulid(), owner=owner, conversation=conversation, role="user" if i % 2 == 0 else "assistant",
            content=f"message number {i}", timestamp=start + dt.timedelta(seconds=i), position=i,
            parent_id=parent,
        )
        rows.append(m)
        parent = m.pk
    Message.objects.bulk_create(rows)
    branches.set_leaf(conversation, rows[-1])
    return rows


def test_a_long_branch_shows_its_last_messages_and_reads_only_those(client, owner, conversation):
    _long_branch(owner, conversation, 260)
    client.force_login(owner)
    rows_read: list[int] = []

    def count_rows(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        rows_read.append(context["cursor"].rowcount)
        return result

    with connection.execute_wrapper(count_rows):
        page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert "Showing the last 200 messages of this branch" in page
    assert "message number 259<" in page and "message number 60<" in page
    assert "message number 59<" not in page
    # Only what is shown is read: no query returns the whole branch.
    assert max(rows_read) <= 201


def test_a_reconnecting_tab_reads_the_thread_alone(client, owner, conversation, thread):
    client.force_login(owner)
    response = client.get(reverse("chat:conversation", args=[conversation.pk]), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<ol class="messages" id="thread"') and "Rome." in html
    assert "HX-Request" in response["Vary"]


def test_a_message_cited_early_in_a_long_branch_opens_in_a_few_queries(client, owner, conversation):
    rows = _long_branch(owner, conversation, 260)
    client.force_login(owner)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(reverse("chat:conversation", args=[conversation.pk]) + f"?at={rows[3].pk}")
    assert "message number 259<" in page.content.decode()  # its branch, down to the newest reply
    assert len(queries) < 20  # not one per message between it and the leaf


def test_deleting_a_conversation_takes_its_words_out_of_topics(
    client, owner, monkeypatch, django_capture_on_commit_callbacks
):
    from memory.models import Topic
    from memory.organizing import topics
    from tests.memory.conftest import add_turns

    queued = []
    monkeypatch.setattr("memory.tasks.queue_upkeep", lambda owner_id, ids: queued.extend(ids))
    kept = Conversation.objects.create(owner=owner, title="kept")
    gone = Conversation.objects.create(owner=owner, title="gone")
    add_turns(owner, kept, ["the tulips in the garden bloom", "tulips need sun in the garden"] * 3)
    doomed = add_turns(owner, gone, ["the xylophone recital is friday", "xylophone practice daily"] * 3)
    topics.rebuild(owner)
    assert "xylophone" in " ".join(f"{t.label} {t.keywords} {t.summary}" for t in Topic.objects.all())
    client.force_login(owner)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("chat:delete_conversation", args=[gone.pk]))
    assert response.status_code == 302
    left = " ".join(f"{t.label} {t.keywords} {t.summary}" for t in Topic.objects.owned_by(owner))
    assert "xylophone" not in left and "tulips" in left
    assert set(queued) == {m.pk for m in doomed}


def test_making_deleting_conversations_and_pinning_count_against_the_rate_limit(
    client, owner, conversation, settings
):
    settings.CHAT_RATE_LIMIT_PER_MINUTE = 3
    message = store.store_message(owner, conversation, "user", "keep this in mind", embed=False)
    client.force_login(owner)
    htmx = {"HX-Request": "true"}
    assert client.post(reverse("chat:new_conversation")).status_code == 302
    made = Conversation.objects.owned_by(owner).exclude(pk=conversation.pk).get()
    assert client.post(reverse("chat:delete_conversation", args=[made.pk]), headers=htmx).status_code == 200
    assert client.post(reverse("chat:pin_message", args=[message.pk]), headers=htmx).status_code == 200
    refused = [
        client.post(reverse("chat:new_conversation")),
        client.post(reverse("chat:delete_conversation", args=[conversation.pk]), headers=htmx),
        client.post(reverse("chat:pin_message", args=[message.pk]), {"pinned": "false"}, headers=htmx),
    ]
    assert [r.status_code for r in refused] == [429, 429, 429]
    assert "a minute" in refused[0].content.decode()
    # Refused changes change nothing.
    assert list(Conversation.objects.owned_by(owner).values_list("pk", flat=True)) == [conversation.pk]
    message.refresh_from_db()
    assert message.pinned


def test_a_title_holding_nul_is_kept_with_it_shown_as_a_symbol(client, owner, conversation):
    client.force_login(owner)
    assert client.post(reverse("chat:new_conversation"), {"title": "plans\x00 2025"}).status_code == 302
    assert Conversation.objects.owned_by(owner).filter(title="plans\u2400 2025").exists()
    rename = reverse("chat:rename_conversation", args=[conversation.pk])
    assert client.post(rename, {"title": "a\x00b"}).status_code == 302
    conversation.refresh_from_db()
    assert conversation.title == "a\u2400b"


def test_favicon_ico_answers_with_an_icon(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert response.content[:4] == b"\x00\x00\x01\x00"  # an ICO file's header
    client.force_login(get_user_model().objects.create_user("icon-person", password="x-pass-12345"))
    assert 'rel="icon" href="/favicon.ico"' in client.get(reverse("chat:home")).content.decode()


def test_a_reply_being_written_is_on_the_page_as_far_as_its_draft_goes(
    client, owner, conversation, monkeypatch
):
    from chat.models import ReplyDraft
    from chat.processes import PROCESS

    [question] = store.store_messages(owner, conversation, [store.NewMessage(role="user", content="Tell me")])
    ReplyDraft.objects.create(
        id=new_ulid(), owner=owner, conversation=conversation, parent=question,
        text="Half of an <answer>", process=PROCESS,
    )
    from chat import drafts

    # Being written by this process: not an orphan to recover.
    monkeypatch.setattr(drafts, "_live", set(ReplyDraft.objects.values_list("pk", flat=True)))
    client.force_login(owner)
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert 'class="message assistant streaming"' in page
    assert "Half of an &lt;answer&gt;</div>" in page


def test_a_long_message_folds_behind_show_more(client, owner, conversation):
    store.store_messages(
        owner, conversation,
        [
            store.NewMessage(role="user", content="short one"),
            store.NewMessage(role="user", content="word " * 600),
        ],
    )
    client.force_login(owner)
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert page.count("Show more") == 1
    assert page.count("content markdown folded") == 1


@pytest.mark.django_db
def test_the_conversation_list_shows_imported_conversations_by_their_own_dates(client, owner):
    old = Conversation.objects.create(owner=owner, title="From the 2023 export")
    Conversation.objects.filter(pk=old.pk).update(updated_at=dt.datetime(2023, 3, 12, 15, tzinfo=dt.UTC))
    Conversation.objects.create(owner=owner, title="Today's chat")
    client.force_login(owner)
    page = client.get(reverse("chat:home")).content.decode()
    assert page.index("Today&#x27;s chat") < page.index("From the 2023 export")
    assert "12 Mar 2023" in page
    assert page.count(" ago</span>") == 1  # only today's chat counts minutes
