"""The conversation list at scale (issue 36 §2): date groups, pages, search by title and content,
the row menu's Rename / Archive / Delete, the Archived view, and a message's year."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from chat import conversation_list
from chat.templatetags.chat_tags import message_time
from memory.models import Conversation
from memory.storage import store

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2025, 6, 15, 12, 0, tzinfo=dt.UTC)


def test_groups_read_today_yesterday_the_last_week_and_month_then_months():
    with timezone.override("UTC"):
        labels = [
            conversation_list.group_label(NOW - dt.timedelta(days=days), NOW)
            for days in (0, 1, 2, 7, 8, 30, 31, 140, 400)
        ]
    assert labels == [
        "Today", "Yesterday", "Previous 7 days", "Previous 7 days", "Previous 30 days", "Previous 30 days",
        "May", "January", "May 2024",
    ]


def test_a_message_shows_its_year_when_it_is_not_this_years():
    with timezone.override("UTC"):
        assert message_time(dt.datetime(2024, 5, 20, 18, 28, tzinfo=dt.UTC), NOW) == "May 20, 2024, 18:28"
        assert message_time(dt.datetime(2025, 5, 20, 18, 28, tzinfo=dt.UTC), NOW) == "May 20, 18:28"


def many(owner, n: int = 200) -> list[Conversation]:
    """`n` conversations: now, a day ago, then one every day and a half back."""
    now = timezone.now()
    made = Conversation.objects.bulk_create(
        [Conversation(owner=owner, title=f"Chat number {i:03d}") for i in range(n)]
    )
    for i, c in enumerate(made):  # today, yesterday, then every day and a half
        c.updated_at = now - dt.timedelta(hours=24 * i if i < 2 else 36 * i)
    Conversation.objects.bulk_update(made, ["updated_at"])
    return made


def test_two_hundred_conversations_come_in_date_groups_a_page_at_a_time(client, owner):
    many(owner)
    client.force_login(owner)
    page = client.get(reverse("chat:home")).content.decode()
    assert page.count('class="conversation-row') == conversation_list.PAGE
    headings = [h.split("</h2>")[0] for h in page.split('<h2 class="group-label">')[1:]]
    assert headings[:4] == ["Today", "Yesterday", "Previous 7 days", "Previous 30 days"]
    assert "Chat number 000" in page and "Chat number 100" not in page and "Show more" in page
    # The next page goes on under the heading the first one ended with.
    more = client.get(reverse("chat:home"), {"page": 2, "last": headings[-1]}, HTTP_HX_REQUEST="true")
    rest = more.content.decode()
    assert rest.count('class="conversation-row') == 100 and "Chat number 100" in rest
    assert f'<h2 class="group-label">{headings[-1]}</h2>' not in rest and "Show more" not in rest


def test_search_finds_titles_and_message_words_and_shows_where(client, owner, stranger):
    many(owner, 30)
    trip = Conversation.objects.create(owner=owner, title="Weekend plans")
    store.store_message(owner, trip, "user", "We could drive to the lasagne place near Sintra on Saturday.",
                        embed=False)
    theirs = Conversation.objects.create(owner=stranger, title="Lasagne for a stranger")
    store.store_message(stranger, theirs, "user", "lasagne lasagne", embed=False)
    temporary = Conversation.objects.create(owner=owner, title="Lasagne, temporary", temporary=True)
    client.force_login(owner)
    found = client.get(reverse("chat:home"), {"q": "lasag"}, HTTP_HX_REQUEST="true").content.decode()
    assert "Weekend plans" in found and "lasagne place near Sintra" in found  # a prefix, in a message
    assert "stranger" not in found and temporary.title not in found
    titled = client.get(reverse("chat:home"), {"q": "number 017"}).content.decode()
    assert "Chat number 017" in titled and titled.count('class="conversation-row') == 1
    none = client.get(reverse("chat:home"), {"q": "zeppelin"}).content.decode()
    assert "No chat has “zeppelin” in its title or messages." in none


def test_archive_from_the_menu_moves_a_chat_to_the_archived_view_and_back(client, owner):
    chat = Conversation.objects.create(owner=owner, title="Old tax questions")
    before = Conversation.objects.get(pk=chat.pk).updated_at
    client.force_login(owner)
    url = reverse("chat:archive_conversation", args=[chat.pk])
    assert client.post(url, {"from": "list", "archived": "true"}, HTTP_HX_REQUEST="true").content == b""
    assert "Old tax questions" not in client.get(reverse("chat:home")).content.decode()
    archived = client.get(reverse("chat:archived")).content.decode()
    assert "Old tax questions" in archived and "Unarchive" in archived
    client.post(url, {"archived": "false"})
    assert "Old tax questions" in client.get(reverse("chat:home")).content.decode()
    assert Conversation.objects.get(pk=chat.pk).updated_at == before  # it keeps its place
    # A rename from the list keeps its place too, and comes back as its row.
    row = client.post(reverse("chat:rename_conversation", args=[chat.pk]),
                      {"title": "Taxes 2024", "from": "list"}, HTTP_HX_REQUEST="true").content.decode()
    assert row.lstrip().startswith('<li class="conversation-row"') and "Taxes 2024" in row
    assert Conversation.objects.get(pk=chat.pk).updated_at == before


def test_a_search_of_archived_stays_in_archived_and_a_search_of_all_says_archived(client, owner):
    old = Conversation.objects.create(owner=owner, title="Pasta sauces", archived_at=timezone.now())
    Conversation.objects.create(owner=owner, title="Pasta for the party")
    client.force_login(owner)
    everywhere = client.get(reverse("chat:home"), {"q": "pasta"}).content.decode()
    assert "Pasta for the party" in everywhere and "Pasta sauces" in everywhere
    assert everywhere.count('<span class="badge">Archived</span>') == 1
    archived = client.get(reverse("chat:archived"), {"q": "pasta"}).content.decode()
    assert "Pasta sauces" in archived and "Pasta for the party" not in archived
    assert old.pk in archived


def test_deleting_the_open_chat_from_its_menu_goes_back_to_the_list(client, owner):
    chat = Conversation.objects.create(owner=owner, title="Gone soon")
    client.force_login(owner)
    response = client.post(reverse("chat:delete_conversation", args=[chat.pk]), HTTP_HX_REQUEST="true")
    assert response["HX-Redirect"] == reverse("chat:home")
    other = Conversation.objects.create(owner=owner, title="Deleted from the list")
    response = client.post(reverse("chat:delete_conversation", args=[other.pk]),
                           {"from": "list", "current": "elsewhere"}, HTTP_HX_REQUEST="true")
    assert response.content == b"" and "HX-Redirect" not in response


def test_a_strangers_conversation_answers_404_to_every_action(client, owner, stranger_conversation):
    client.force_login(owner)
    pk = stranger_conversation.pk
    for name, data in [
        ("archive_conversation", {"archived": "true"}),
        ("rename_conversation", {"title": "mine now"}),
        ("delete_conversation", {}),
        ("leave_temporary_chat", {}),
        ("set_model", {"model": "test-llm"}),
    ]:
        assert client.post(reverse(f"chat:{name}", args=[pk]), data).status_code == 404, name
    stranger_conversation.refresh_from_db()
    assert stranger_conversation.title == "Stranger's conversation" and not stranger_conversation.archived_at


def test_leaving_ends_only_a_temporary_chat_and_archiving_refuses_one(client, owner, conversation):
    client.force_login(owner)
    response = client.post(reverse("chat:leave_temporary_chat", args=[conversation.pk]))
    assert response.status_code == 400 and Conversation.objects.filter(pk=conversation.pk).exists()
    temporary = Conversation.objects.create(owner=owner, temporary=True, remembered=False)
    response = client.post(reverse("chat:archive_conversation", args=[temporary.pk]))
    assert response.status_code == 400 and b"temporary" in response.content
    assert "Temporary chat" in client.get(reverse("chat:conversation", args=[temporary.pk])).content.decode()
    assert temporary.pk not in client.get(reverse("chat:home")).content.decode()


def test_the_settings_page_saves_the_switches_and_refuses_instructions_too_long(client, owner, settings):
    from memory.models import Preferences

    settings.CUSTOM_INSTRUCTIONS_MAX_CHARS = 100
    client.force_login(owner)
    page = client.get(reverse("chat:settings")).content.decode()
    assert "Use memory in replies" in page and "Remember new chats" in page
    response = client.post(reverse("chat:settings"), {"use_memory": "on", "custom_instructions": "x" * 101})
    assert response.status_code == 400 and "at most 100 characters" in response.content.decode()
    assert "x" * 101 in response.content.decode()  # what was typed is kept
    assert not Preferences.objects.filter(owner=owner).exists()
    client.post(reverse("chat:settings"), {"remember_chats": "on", "custom_instructions": " Answer briefly."})
    prefs = Preferences.of(owner)
    assert not prefs.use_memory and prefs.remember_chats and prefs.custom_instructions == "Answer briefly."
    # The chat's menu flips one switch.
    on = {"name": "use_memory", "value": "on", "notice": "1"}
    switched = client.post(reverse("chat:switch"), on, HTTP_HX_REQUEST="true")
    assert 'aria-checked="true"' in switched.content.decode() and Preferences.of(owner).use_memory
    assert 'id="memory-notice"' in switched.content.decode()
    assert client.post(reverse("chat:switch"), {"name": "is_staff", "value": "on"}).status_code == 400
