"""manage.py eval_recall: recall@10 of vector-only, keyword-only and hybrid search, offline.

A synthetic multi-session history: realistic English prose from memory/corpus.py (docstrings
of the installed libraries) as the noise turns, sessions a day or more apart, and personal
facts injected at fixed places. Each fact has a paraphrased question (different wording from
the fact, as a person would ask it weeks later), some with a date expression. A fact counts as
recalled when its turn is among the first 10 results. Nothing here is tuned to a public
benchmark; the facts and questions are written for this command.
"""

from __future__ import annotations

import datetime as dt
import itertools

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

# (fact said by the user, question asked weeks later in other words)
FACTS = [
    ("I finally adopted a beagle puppy last weekend and we named him Biscuit.",
     "What is my dog called?"),
    ("The wifi password at the lake cabin is tangerine42, write it down somewhere.",
     "What's the internet password up at the cabin?"),
    ("My sister Priya is getting married in Lisbon on 2024-09-14.",
     "Where is Priya's wedding happening?"),
    ("Dr. Okafor moved my dentist appointment to Thursday at 8:30.",
     "When is the dental checkup now?"),
    ("Ticket INFRA-992 is the flaky login test that keeps failing on staging.",
     "Which ticket tracks the unreliable sign-in test?"),
    ("I'm allergic to cashews, so skip anything with cashew cream.",
     "Which nut should I avoid?"),
    ("We budgeted 4,500 euros for the kitchen renovation.",
     "How much money did we set aside for redoing the kitchen?"),
    ("My running goal this year is a half marathon under 1:55.",
     "What time am I aiming for in the half marathon?"),
    ("The landlord, Mr. Haddad, said the rent goes up to 1,380 in January.",
     "What will the new rent be?"),
    ("Our team offsite is in Tromsø and we fly out of Oslo on the 3rd.",
     "Which city is the team retreat in?"),
    ("I parked the car on level P4, spot 117, at the airport.",
     "Where did I leave the car at the airport?"),
    ("My grandmother's lemon cake recipe uses buttermilk and three lemons.",
     "What goes into grandma's lemon cake?"),
    ("The book club picked The Remains of the Day for next month.",
     "Which novel is the book club reading?"),
    ("I switched my mobile plan to Fonix for 12 a month.",
     "Which phone carrier am I with now?"),
    ("Maya starts violin lessons with Mrs. Lindqvist on Wednesdays.",
     "Who teaches Maya violin?"),
    ("My passport expires on 2025-02-11, I need to renew it before the trip.",
     "When does my passport run out?"),
    ("The plumber quoted 340 for replacing the bathroom boiler valve.",
     "How much did the plumber want for the boiler repair?"),
    ("I keep the spare house key with our neighbour Tomasz.",
     "Who has a copy of our house key?"),
    ("The server migration to the Frankfurt region is scheduled for the night of March 9.",
     "When are we moving the servers to Germany?"),
    ("I started taking vitamin D, 2000 IU every morning.",
     "What supplement dose am I on?"),
]

# Near misses on the same topics, said in other sessions: what makes recall hard in real
# histories is not unrelated noise but the many other times a subject came up.
DISTRACTORS = [
    "My neighbour's cat keeps sneaking into our garden and chasing the birds.",
    "The office wifi was down again this morning, IT says it is the router firmware.",
    "I still need to buy a gift for the wedding we're invited to in the summer.",
    "I should book a checkup with the doctor about my knee at some point.",
    "The staging deploy failed again because of a timeout in the build step.",
    "Can you suggest a dessert without nuts for the school bake sale?",
    "We spent way too much on the bathroom tiles last year.",
    "I ran 10 km this morning, my legs are sore.",
    "The heating bill this winter was brutal, almost double last year.",
    "I have a conference in Berlin next spring, need to sort out the hotel.",
    "The train to the airport was delayed by forty minutes.",
    "I tried baking sourdough bread but it came out flat.",
    "I just finished a thriller on the plane, couldn't put it down.",
    "My internet provider raised the price of the fibre plan again.",
    "The kids have football practice on Saturdays now.",
    "Renewing my driving licence took three visits to the office.",
    "The electrician is coming on Monday to look at the fuse box.",
    "I lent my ladder to someone on our street and forgot who.",
    "We need to update the database replicas before the end of the quarter.",
    "I've been drinking more water and sleeping better lately.",
]


class Command(BaseCommand):
    help = "recall@10 on a synthetic multi-session history: vector-only, keyword-only, hybrid."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--noise-turns", type=int, default=600)
        parser.add_argument("--user", default="eval_recall")
        parser.add_argument("--keep", action="store_true", help="keep (and reuse) the history")
        parser.add_argument("--rebuild", action="store_true", help="rebuild a kept history")
        parser.add_argument("--verbose-misses", action="store_true")

    def handle(self, *args, **opts) -> None:
        from memory.search import (
            SearchFilters,
            SearchResults,
            _keyword_candidates,
            _vector_candidates,
            search,
        )

        User = get_user_model()
        user, created = User.objects.get_or_create(username=opts["user"])
        fresh = created or opts["rebuild"] or not opts["keep"]
        fact_ids = self._history(user, opts["noise_turns"]) if fresh else None
        if fact_ids is None:
            fact_ids = self._stored_facts(user)
        def unit_ids(rows):
            return list(dict.fromkeys(r[2] for r in rows))[:10]

        ranks: dict[str, list[int | None]] = {"vector": [], "keyword": [], "hybrid": []}
        for (_, question), mid in zip(FACTS, fact_ids, strict=True):
            res = SearchResults(question)
            got = {
                "vector": unit_ids(_vector_candidates(user, question, SearchFilters(), 50, res)),
                "keyword": unit_ids(_keyword_candidates(user, question, SearchFilters(), 50, res)),
                "hybrid": [h.message_id for h in search(user, question, limit=10).hits],
            }
            for k, ids in got.items():
                ranks[k].append(ids.index(mid) + 1 if mid in ids else None)
                if opts["verbose_misses"] and mid not in ids:
                    self.stdout.write(f"  miss {k:8} {question}")
        n = len(FACTS)
        self.stdout.write(f"{n} facts, {opts['noise_turns']} noise turns, {n} near misses:")
        for k, rs in ranks.items():
            at = {c: sum(1 for r in rs if r is not None and r <= c) / n for c in (1, 3, 10)}
            mrr = sum(1 / r for r in rs if r) / n
            self.stdout.write(
                f"  {k:8} recall@1 {at[1]:4.0%}  recall@3 {at[3]:4.0%}  "
                f"recall@10 {at[10]:4.0%}  MRR {mrr:.3f}"
            )
        if not opts["keep"]:
            user.delete()

    def _stored_facts(self, user) -> list[str]:
        from memory.models import Message

        by_index = {
            m.metadata.get("fact"): m.pk
            for m in Message.objects.owned_by(user).filter(metadata__has_key="fact")
        }
        return [by_index[i] for i in range(len(FACTS))]

    def _history(self, user, noise_turns: int) -> list[str]:
        from memory.corpus import prose
        from memory.models import Conversation
        from memory.progress import Progress
        from memory.store import NewMessage, store_messages

        Conversation.objects.filter(owner=user).delete()
        blocks = [b[:600] for b in itertools.islice(prose(noise_turns * 700), noise_turns)]
        per_session = max(4, len(blocks) // (len(FACTS) + 5))
        start = dt.datetime(2024, 1, 8, 9, 0, tzinfo=dt.UTC)
        fact_ids: list[str] = []
        with Progress(len(blocks), "eval history") as bar:
            for s, i in enumerate(range(0, len(blocks), per_session)):
                conv = Conversation.objects.create(owner=user, title=f"session {s}")
                at = start + dt.timedelta(days=3 * s)
                items = []
                for j, block in enumerate(blocks[i : i + per_session]):
                    role = "user" if j % 2 == 0 else "assistant"
                    items.append(NewMessage(role, block, timestamp=at + dt.timedelta(minutes=j)))
                if s < len(FACTS):  # the fact lands mid-session, as a user turn
                    fact = NewMessage(
                        "user", FACTS[s][0], timestamp=at + dt.timedelta(minutes=len(items) // 2, seconds=30),
                        metadata={"fact": s},
                    )
                    items.insert(len(items) // 2 + 1, fact)
                    fact_ids.append(fact.id)
                d = (s + 7) % len(FACTS)  # each near miss lands in another session than its fact
                if s < len(FACTS):
                    when = at + dt.timedelta(minutes=len(items) // 3, seconds=20)
                    items.insert(len(items) // 3, NewMessage("user", DISTRACTORS[d], timestamp=when))
                items.sort(key=lambda m: m.timestamp)
                store_messages(user, conv, items, embed=True)
                bar.update(per_session)
        return fact_ids
