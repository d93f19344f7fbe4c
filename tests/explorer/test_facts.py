"""Facts in the explorer: a section of the Memory overview, of an entity's page and a page of
their own, current first and superseded with their dates and the message that replaced them;
correct, pin and forget one."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory.knowledge import entities, facts
from memory.models import Entity, Fact
from tests.memory.test_facts import SCRIPT, tell

pytestmark = pytest.mark.django_db


def html(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_the_overview_shows_current_facts_then_superseded_ones_with_dates(owner_client, life):
    page = html(owner_client.get(reverse("explorer:overview")))
    section = page[page.index('id="facts"'):]
    current, superseded = section.index('id="facts-current"'), section.index('id="facts-superseded"')
    # Read by the person: about themselves, in the second person.
    assert current < section.index("You live in Hamburg") < superseded
    assert superseded < section.index("You live in Berlin")
    assert "the user" not in section
    assert "held 2024-03-01 – 2024-05-09" in section  # Berlin, until Munich
    munich = Fact.objects.get(value="Munich")
    assert reverse("explorer:message", args=[munich.message_id]) in section


def test_the_facts_page_lists_every_fact_of_a_subject(owner_client, life):
    page = html(owner_client.get(reverse("explorer:facts") + "?subject=the+user"))
    values = ("London", "Berlin", "Munich", "Hamburg", "Acme Bank", "Globex", "3 May", "10 June", "July 2")
    for value in values:
        assert value in page, value


def test_a_facts_line_names_its_kind_only_where_it_has_one(owner, conversation, owner_client, life):
    """"the user · lives in · said 2024-03-01", but a statement reads "the user · said
    2024-05-02", not "the user · about · said"."""
    tell(owner, conversation, [(130, "Last week I finally adopted a rescue greyhound called Pepper from the "
                                     "shelter near my work, and she already sleeps on my bed.")])
    facts.extract_messages(owner)
    assert Fact.objects.filter(attribute=facts.ABOUT).exists()
    page = html(owner_client.get(reverse("explorer:overview")))  # the Memory page's facts: a line each
    assert "adopted a rescue greyhound" in page
    assert "· about\n" not in page and "· about ·" not in page
    home = Fact.objects.exclude(attribute=facts.ABOUT).first()
    assert f"· {home.attribute}\n" in page


def test_an_entitys_page_shows_the_facts_that_name_it(owner, owner_client, life):
    entities.rebuild(owner)
    sam = Entity.objects.owned_by(owner).get(normalized="sam")
    page = html(owner_client.get(reverse("explorer:entity", args=[sam.pk])))
    section = page[page.index('id="facts"'):]
    assert "Facts about Sam" in section and "You broke up with Sam" in section
    assert "Your partner is Sam" in section[section.index('id="facts-superseded"'):]


def test_correct_pin_and_forget_a_fact_with_htmx(owner_client, life):
    berlin = Fact.objects.get(value="Berlin")
    row = html(owner_client.post(reverse("explorer:fact_correct", args=[berlin.pk]),
                                 {"text": "I lived in Berlin-Mitte"}, HTTP_HX_REQUEST="true"))
    assert row.startswith(f'<li class="fact superseded" id="fact-{berlin.pk}"') and "Berlin-Mitte" in row
    assert Fact.objects.get(pk=berlin.pk).text == "I lived in Berlin-Mitte"
    row = html(owner_client.post(reverse("explorer:fact_pin", args=[berlin.pk]), {"pinned": "true"},
                                 HTTP_HX_REQUEST="true"))
    assert "Unpin" in row and Fact.objects.get(pk=berlin.pk).pinned
    hamburg = Fact.objects.get(value="Hamburg")
    assert html(owner_client.post(reverse("explorer:fact_forget", args=[hamburg.pk]),
                                  HTTP_HX_REQUEST="true")) == ""
    assert Fact.objects.get(value="Munich").is_current  # what the forgotten fact replaced holds again
    # Its words are gone; the row stays only so its message is not read for it again.
    assert not Fact.objects.live().filter(pk=hamburg.pk).exists()
    assert not Fact.objects.filter(statement__contains="Hamburg").exists()


def test_a_correction_too_long_changes_nothing_and_says_why(owner_client, life):
    berlin = Fact.objects.get(value="Berlin")
    response = owner_client.post(reverse("explorer:fact_correct", args=[berlin.pk]), {"text": "x" * 2001},
                                 HTTP_HX_REQUEST="true")
    assert response.status_code == 400 and "at most 2000 characters" in response.content.decode()
    assert Fact.objects.get(pk=berlin.pk).corrected == ""


def test_without_htmx_an_action_goes_back_to_the_page(owner_client, life):
    london = Fact.objects.get(value="London")
    response = owner_client.post(reverse("explorer:fact_pin", args=[london.pk]),
                                 {"pinned": "true", "next": reverse("explorer:overview")})
    assert response.status_code == 302 and response["Location"] == reverse("explorer:overview")


def test_another_users_fact_answers_404(stranger_client, owner, conversation):
    tell(owner, conversation, SCRIPT[:1])
    facts.extract_messages(owner)
    fact = Fact.objects.get()
    for name in ("fact_pin", "fact_correct", "fact_forget"):
        response = stranger_client.post(reverse(f"explorer:{name}", args=[fact.pk]), {"text": "x"})
        assert response.status_code == 404
    assert stranger_client.post(reverse("explorer:fact_pin", args=[2**70])).status_code == 404
    assert Fact.objects.filter(pk=fact.pk, corrected="").exists()
    assert "London" not in html(stranger_client.get(reverse("explorer:facts")))


def test_a_row_swapped_in_by_htmx_still_goes_back_to_its_page_without_javascript(owner_client, life):
    london = Fact.objects.get(value="London")
    row = html(owner_client.post(reverse("explorer:fact_pin", args=[london.pk]), {"pinned": "true"},
                                 HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="http://testserver/explorer/facts/"))
    assert 'name="next" value="/explorer/facts/"' in row


def test_the_overview_lists_people_first_and_an_entity_page_says_1_mention(owner, owner_client, conversation):
    tell(owner, conversation, [(0, "We moved the scripts to Python and Python is fine."),
                               (1, "I rewrote the parser in Python."), (2, "My sister Ana lives in Porto.")])
    facts.extract_messages(owner)
    entities.rebuild(owner)
    page = html(owner_client.get(reverse("explorer:overview")))
    assert page.index(">Ana</a>") < page.index(">Python</a>")
    ana = Entity.objects.owned_by(owner).get(normalized="ana")
    assert " 1 mention · " in html(owner_client.get(reverse("explorer:entity", args=[ana.pk])))
