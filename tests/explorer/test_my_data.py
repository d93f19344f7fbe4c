"""The Facts page as the person's "manage memory" (issue 36 §1): their facts with Edit, Forget
and source, searched; Download my data; Forget everything behind a typed confirmation."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from memory.models import Conversation, Fact, Message, Preferences
from tests.chat.test_forgetting import rows_containing

pytestmark = pytest.mark.django_db


def test_the_page_lists_what_it_remembers_with_edit_forget_and_source(owner_client, life):
    page = owner_client.get(reverse("explorer:facts")).content.decode()
    assert "What Recollect remembers about you" in page
    hamburg = Fact.objects.get(value="Hamburg")
    row = page[page.index(f'id="fact-{hamburg.pk}"'):]
    row = row[: row.index("</li>")]
    assert "Edit" in row and "Forget" in row
    assert reverse("chat:message", args=[hamburg.message_id]) in row and "Test conversation" in row
    # What newer facts replaced is below, apart.
    assert page.index('id="facts-current"') < page.index("Hamburg") < page.index('id="facts-superseded"')
    assert page.index('id="facts-superseded"') < page.index("You live in Berlin")  # as the person reads it


def test_search_narrows_the_list_to_the_facts_with_its_words(owner_client, life):
    found = owner_client.get(reverse("explorer:facts"), {"q": "globex"}, HTTP_HX_REQUEST="true")
    text = found.content.decode()
    assert text.lstrip().startswith('<div id="fact-results">')
    assert "Globex" in text and "Hamburg" not in text
    none = owner_client.get(reverse("explorer:facts"), {"q": "zeppelin"}).content.decode()
    assert "Nothing it remembers has “zeppelin” in it." in none


def test_edit_and_forget_from_the_page_swap_its_own_row(owner_client, life):
    globex = Fact.objects.get(value="Globex")
    row = owner_client.post(reverse("explorer:fact_correct", args=[globex.pk]),
                            {"text": "I work at Globex as head of design", "row": "memory"},
                            HTTP_HX_REQUEST="true").content.decode()
    assert row.lstrip().startswith(f'<li class="memory-item" id="fact-{globex.pk}"')
    assert "head of design" in row
    gone = owner_client.post(reverse("explorer:fact_forget", args=[globex.pk]), {"row": "memory"},
                             HTTP_HX_REQUEST="true")
    assert gone.content == b"" and not Fact.objects.live().filter(pk=globex.pk).exists()
    assert Fact.objects.get(pk=globex.pk).statement == ""  # the wordless row that keeps it undrawn


def test_download_my_data_gives_the_export_as_json_and_markdown(owner_client, owner, life):
    response = owner_client.get(reverse("explorer:download", args=["json"]))
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="recollect-owner-')
    data = json.loads(response.content)
    said = [m["content"] for c in data["conversations"] for m in c["messages"]]
    assert "I live in London." in said and len(said) == len(life)
    markdown = owner_client.get(reverse("explorer:download", args=["markdown"]))
    assert markdown["Content-Type"].startswith("text/markdown")
    assert "I live in London." in markdown.content.decode()
    assert owner_client.get(reverse("explorer:download", args=["pdf"])).status_code == 404


def test_a_stranger_downloads_only_their_own(stranger_client, life):
    data = json.loads(stranger_client.get(reverse("explorer:download", args=["json"])).content)
    assert data["conversations"] == []


def test_forget_everything_wants_the_words_typed_then_leaves_nothing(owner_client, owner, stranger, life):
    Preferences.objects.create(owner=owner, custom_instructions="Answer briefly.")
    theirs = Conversation.objects.create(owner=stranger, title="Mine")
    url = reverse("explorer:forget_everything")
    refused = owner_client.post(url, {"confirm": "yes"})
    assert refused.status_code == 400 and "Nothing was forgotten" in refused.content.decode()
    assert Message.objects.owned_by(owner).count() == len(life)
    done = owner_client.post(url, {"confirm": "  Forget   everything "}, follow=True)
    page = done.content.decode()
    assert f"Everything is forgotten: {len(life)} messages in 1 conversation," in page
    assert rows_containing("Hamburg") == {} and rows_containing("Acme Bank") == {}
    assert not Fact.objects.owned_by(owner).exists()
    assert Conversation.objects.filter(pk=theirs.pk).exists()
    assert Preferences.of(owner).custom_instructions == "Answer briefly."
    facts_page = owner_client.get(reverse("explorer:facts")).content.decode()
    assert "Nothing yet." in facts_page
