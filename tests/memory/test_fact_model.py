"""Facts proposed by a model in background work: each tied to its source message, superseding and
merging as the rules' facts do, with what the model cannot tie to its source, and what the rules
never keep (greetings, requests, questions, pasted text), dropped."""

from __future__ import annotations

import pytest

from memory.knowledge import fact_refresh, facts
from memory.models import Fact
from tests.chat.conftest import llm_server_instance, scripted_llm  # noqa: F401 - fixtures
from tests.memory.test_facts import tell

pytestmark = pytest.mark.django_db

PROMPT = "Messages to read"

HISTORY = [
    (0, "Hey! How are you?"),
    (1, "Big news: after eight years in accounting I handed in my notice, and from March I'm a "
        "carpenter's apprentice in Ghent. My brother Tom found me the place."),
    (40, "We finally settled in Antwerp, the flat has a tiny balcony for my herbs."),
]


def test_the_model_proposes_facts_tied_to_their_messages(owner, conversation, scripted_llm, settings):  # noqa: F811
    settings.FACTS_MODEL = "facts-model"
    messages = tell(owner, conversation, HISTORY[:2])
    scripted_llm.script({"text": (
        "[2] the user | works at | carpenter's apprenticeship in Ghent | I left accounting to "
        "become a carpenter's apprentice in Ghent from March.\n"
        "[2] Tom | about | | Tom found the apprenticeship in Ghent.\n"
        "[1] the user | about | | Hey! How are you?\n"  # a greeting: the model may err
        "[2] the user | about | | Help me write a resignation letter.\n"  # a request
        "[2] the user | about | | I have twelve years of experience in tax law.\n"  # not in the message
        "[7] the user | lives in | Mars | A message the batch does not have.\n"
        "[2] Zed | about | | Nobody of that name is in the message.\n"
        "[2] the user | mood | happy | Not an attribute facts keep.\n"
        "Some chatter the model added."
    )}, match=PROMPT)
    result = fact_refresh.refresh_messages(owner, [m.pk for m in messages])
    [request] = [r for r in scripted_llm.requests if PROMPT in r["last_user"]]
    assert request["model"] == "facts-model" and not request["stream"]
    assert "[2] the user (2024-01-11): Big news: after eight years in accounting" in request["last_user"]
    by_model = Fact.objects.owned_by(owner).filter(origin="model").order_by("id")
    assert [(f.subject, f.attribute, f.message_id) for f in by_model] == [
        ("the user", "works at", messages[1].pk), ("Tom", "about", messages[1].pk),
    ]
    assert by_model[0].statement.startswith("the user left accounting to become a carpenter's apprentice")
    assert facts.shown(by_model[0]).startswith("You left accounting to become a carpenter's apprentice")
    # The model's sentences replaced the rules' statement of the message it read.
    rules = Fact.objects.owned_by(owner).filter(message=messages[1], origin="rules", attribute="about")
    assert not rules.exists()
    assert result["proposed"] == 2
    # Upkeep running again on the same messages asks the model nothing more.
    fact_refresh.refresh_messages(owner, [m.pk for m in messages])
    assert len([r for r in scripted_llm.requests if PROMPT in r["last_user"]]) == 1
    assert Fact.objects.owned_by(owner).filter(origin="model").count() == 2


def test_a_proposed_fact_supersedes_the_current_one(owner, conversation, scripted_llm):  # noqa: F811
    first = tell(owner, conversation, [(0, "Ghent is home now, I love the canals.")])
    scripted_llm.script({"text": "[1] the user | lives in | Ghent | I live in Ghent."}, match=PROMPT)
    fact_refresh.refresh_messages(owner, [m.pk for m in first])
    later = tell(owner, conversation, [HISTORY[2]])
    answer = "[1] the user | lives in | Antwerp | I settled in Antwerp."
    scripted_llm.script({"text": answer}, match=PROMPT)
    fact_refresh.refresh_messages(owner, [m.pk for m in later])
    ghent, antwerp = Fact.objects.owned_by(owner).filter(attribute="lives in").order_by("valid_from")
    assert (ghent.value, ghent.superseded_by_id, ghent.valid_to) == ("Ghent", antwerp.pk, antwerp.valid_from)
    assert antwerp.is_current and antwerp.message_id == later[0].pk


def test_a_provider_failure_keeps_the_rules_facts(owner, conversation, scripted_llm):  # noqa: F811
    messages = tell(owner, conversation, [(0, "I moved to Lisbon.")])
    scripted_llm.script({"status": 500}, {"status": 500}, {"status": 500}, match=PROMPT, repeat=True)
    result = fact_refresh.refresh_messages(owner, [m.pk for m in messages])
    assert result["failed_batches"] == 1
    assert [(f.value, f.origin) for f in Fact.objects.owned_by(owner)] == [("Lisbon", "rules")]


def test_without_a_model_nothing_is_asked(owner, conversation, settings):
    settings.OPENAI_API_KEY = settings.OPENAI_BASE_URL = ""
    messages = tell(owner, conversation, [(0, "I moved to Lisbon.")])
    assert fact_refresh.refresh_messages(owner, [m.pk for m in messages])["proposed"] == 0


def test_the_models_duplicates_merge_the_same_way(owner, conversation, scripted_llm):  # noqa: F811
    first = tell(owner, conversation, [(0, "Note for later: I'm lactose intolerant.")])
    scripted_llm.script({"text": "[1] the user | about | | I'm lactose intolerant."}, match=PROMPT)
    fact_refresh.refresh_messages(owner, [m.pk for m in first])
    again = tell(owner, conversation, [(9, "As I said before, I'm lactose intolerant, so no cheese.")])
    answer = "[1] the user | about | | I'm lactose intolerant, so no cheese."
    scripted_llm.script({"text": answer}, match=PROMPT)
    fact_refresh.refresh_messages(owner, [m.pk for m in again])
    [fact] = Fact.objects.owned_by(owner).live().filter(wording__icontains="lactose")
    assert fact.message_id == first[0].pk and list(fact.also_in.all()) == [again[0]]
