"""How fusion orders what the lists found: another chat's best turn is not buried under one
chat's many turns on the subject."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memory.finding import fusion
from memory.finding.search import search
from memory.models import Conversation
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

pytestmark = pytest.mark.django_db

PLANNING = [
    "Can you suggest a bike route around Lake Annecy for a weekend ride?",
    "A classic bike route around Lake Annecy is the 42 km loop: the bike path on the west shore "
    "is flat, and the road on the east shore climbs above the lake.",
    "Where can I rent a bike near Lake Annecy for the weekend ride?",
    "Several shops rent a bike near Lake Annecy by the day, road bikes and e-bikes, by the old town.",
    "Is the bike path around Lake Annecy busy on a weekend?",
    "The bike path around Lake Annecy is busiest on summer weekend afternoons; ride early.",
]
IN_PASSING = "Last spring my sister and I cycled around Lake Annecy on a tandem, it was lovely."


def test_another_chats_turn_takes_a_place_among_one_chats_many(owner, conversation, monkeypatch):
    start = timezone.now() - dt.timedelta(days=60)
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=start)
    add_turns(owner, conversation, PLANNING, start=start + dt.timedelta(days=20), linked=True)
    other = Conversation.objects.create(owner=owner, title="Weekend")
    add_turns(owner, other, [IN_PASSING, "That sounds lovely!"], start=start + dt.timedelta(days=30))

    rule = fusion.DIVERSITY_SHIFT

    def place(shift: float) -> int:
        monkeypatch.setattr(fusion, "DIVERSITY_SHIFT", shift)
        texts = [hit.passage_text for hit in search(owner, "a bike route around Lake Annecy", limit=10).hits]
        return [t.endswith(IN_PASSING) for t in texts].index(True)

    # Without the rule the six planning turns come first; with it, the tandem ride passes some.
    assert place(0.0) == 6
    assert place(rule) <= 4


@pytest.mark.parametrize(
    ("second", "order"),
    [(4.5, ["a1", "a2", "b1"]), (3.9, ["a1", "b1", "a2"])],
)
def test_a_clearly_better_turn_of_the_same_chat_still_comes_first(monkeypatch, second, order):
    monkeypatch.setattr(fusion, "DIVERSITY_SHIFT", 1.0)
    scores = {("message", "a1"): 5.0, ("message", "a2"): second, ("message", "b1"): 3.0}
    info = {key: {"conversation": key[1][0]} for key in scores}
    assert [key[1] for key, _ in fusion._diversified(scores, info, 3)] == order


def test_a_turn_one_list_did_not_return_loses_no_more_than_absent_z(monkeypatch):
    monkeypatch.setattr(fusion, "ABSENT_Z", 0.5)
    # One strong match and a long tail of weak ones: the weakest is far below the mean.
    scores = {"strong": 10.0, **{f"weak{i}": 1.0 for i in range(8)}, "weakest": 0.1}
    z, floor = fusion._standardised(scores)
    assert min(z.values()) < -0.5
    assert floor == -0.5
    monkeypatch.setattr(fusion, "ABSENT_Z", 0.0)
    assert fusion._standardised(scores)[1] == min(z.values())


def test_a_turn_sharing_the_first_hits_rarer_words_is_lifted(monkeypatch):
    monkeypatch.setattr(fusion, "LINK_SHARE", 0.5)
    texts = {
        "seed": "I've known these friends since I moved from my home country.",
        "fact": "This necklace is from my grandma in my home country, Sweden.",
        "other": "The pottery class was fun, I made a bowl.",
        **{f"filler{i}": f"We talked about the weather on day {i}." for i in range(40)},
    }
    info = {("message", k): {"text": t} for k, t in texts.items()}
    monkeypatch.setattr(fusion, "LINK_SEEDS", 3)
    # The seed first; the fact and the other turn below every filler.
    scores = dict.fromkeys(info, 0.0)
    scores |= {("message", "seed"): 3.0, ("message", "fact"): -1.0, ("message", "other"): -1.0}
    fusion._link_first_hits("Where did she move from?", scores, info)
    assert scores[("message", "fact")] == pytest.approx(-0.5)
    assert scores[("message", "other")] == -1.0
    # Words most candidates hold link nothing.
    assert all(scores[("message", f"filler{i}")] == 0.0 for i in range(40))
