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


def _diversified_one_turn_at_a_time(scores, info, limit):
    """The final order as fusion built it before the fifth pass: a heap of every turn, each
    scored again when its chat had gained a place since (the reference for the same order)."""
    import heapq

    chats = {key: entry["conversation"] for key, entry in info.items() if entry.get("conversation")}
    placed: dict = {}
    heap = [(-score, 0, key) for key, score in scores.items()]
    heapq.heapify(heap)
    ranked = []
    while heap and len(ranked) < limit:
        negative, seen, key = heapq.heappop(heap)
        chat = chats.get(key, key)
        if placed.get(chat, 0) != seen:
            seen = placed[chat]
            heapq.heappush(heap, (-(scores[key] - fusion.DIVERSITY_SHIFT * seen), seen, key))
            continue
        ranked.append((key, -negative))
        placed[chat] = seen + 1
    return ranked


@pytest.mark.parametrize("shift", [1.0, 0.3, 2.5])
def test_the_diversified_order_is_the_one_turn_at_a_time_order(monkeypatch, shift):
    """Speed only: the heap over chats places the same turns, in the same order, with the same
    scores, as scoring every turn again (ties, turns without a chat, scores that round alike)."""
    import random

    monkeypatch.setattr(fusion, "DIVERSITY_SHIFT", shift)
    rng = random.Random(37)
    for case in range(300):
        n = rng.randint(0, 250)
        chats = [f"c{i}" for i in range(rng.randint(1, 12))]
        scores, info = {}, {}
        for _ in range(n):
            key = (rng.choice(["message", "tool_call"]), f"{rng.randint(0, 10**6):07d}")
            # whole and half z units tie often; tiny ones round alike once a shift is taken off
            scores[key] = rng.choice([rng.gauss(0, 2), rng.randint(-4, 4) / 2, rng.random() * 1e-17])
            info[key] = {"conversation": rng.choice(chats)} if rng.random() < 0.9 else {}
        for limit in (1, 10, 50, n + 5):
            assert fusion._diversified(scores, info, limit) == _diversified_one_turn_at_a_time(
                scores, info, limit
            ), (case, limit)


def _link_first_hits_word_by_word(query, scores, info):
    """The links as fusion made them before the fifth pass (the reference for the same scores)."""
    import math

    def words(text):
        return set(fusion._WORD.findall((text or "").lower()))

    asked = words(query)
    pool = sorted(scores, key=lambda key: -scores[key])[: fusion.LINK_POOL]
    bags = {key: words(info.get(key, {}).get("text", "")) for key in pool}
    df: dict = {}
    for bag in bags.values():
        for w in bag:
            df[w] = df.get(w, 0) + 1
    rare = max(2, len(bags) // 20)
    seeds = pool[: fusion.LINK_SEEDS]
    weights = {
        w: math.log(len(bags) / df[w]) for key in seeds for w in bags[key] - asked if 1 < df[w] <= rare
    }
    if not weights:
        return
    linked = {key: sum(weights.get(w, 0.0) for w in bags[key]) for key in pool[fusion.LINK_SEEDS :]}
    best = max(linked.values(), default=0.0)
    if best <= 0:
        return
    for key, weight in linked.items():
        scores[key] += fusion.LINK_SHARE * weight / best


def test_the_links_are_the_word_by_word_links(monkeypatch):
    """Speed only: words counted in C and only the weighted ones summed give the same scores,
    to the last bit, as counting and summing word by word."""
    import random

    monkeypatch.setattr(fusion, "LINK_SHARE", 0.5)
    rng = random.Random(37)
    vocabulary = [f"word{i}" for i in range(300)] + ["Sweden", "grandma", "necklace", "Ölwirt", "straße"]
    lifted = 0
    for case in range(200):
        n = rng.randint(0, 160)
        info = {
            ("message", f"m{i}"): {"text": " ".join(rng.choices(vocabulary, k=rng.randint(0, 40)))}
            for i in range(n)
        }
        if n and rng.random() < 0.2:
            info[("message", "m0")] = {}  # a candidate without text
        scores = {key: rng.choice([rng.gauss(0, 1.5), 0.0, 1.0]) for key in info}
        query = " ".join(rng.choices(vocabulary, k=5))
        expected = dict(scores)
        _link_first_hits_word_by_word(query, expected, info)
        lifted += expected != scores
        fusion._link_first_hits(query, scores, info)
        assert [repr(v) for v in scores.values()] == [repr(v) for v in expected.values()], case
    assert lifted > 100  # the links did lift candidates in most cases
