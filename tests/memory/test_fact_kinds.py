"""What a fact is (issue 34): one thing about a person, of each kind a person would keep, said in
passing among requests; and what never is one (pasted text and code, requests, questions,
greetings and thanks, reactions to an answer, restatements of memory). Pure rules: no database."""

from __future__ import annotations

import pytest

from memory.knowledge import facts, statements


def kept(text: str, people: set[str] | frozenset[str] = frozenset()) -> list[str]:
    return [f.wording for f in facts.extract(text, people)]


@pytest.mark.parametrize(
    ("kind", "message", "holds"),
    [
        ("identity", "I'm a paediatric nurse, so can you suggest comfortable shoes for long shifts?",
         "nurse"),
        ("family", "My sister Ana lives in Porto with her two kids.", "Ana"),
        ("family", "Help me plan a birthday. My daughter Mia turns six in May.", "Mia"),
        ("pet", "My cat Luna sheds a lot in spring. What vacuum would you recommend?", "Luna"),
        ("home", "I live in Leeds, in a flat near the station.", "Leeds"),
        ("work", "I work at the Porto city council as a planner.", "Porto city council"),
        ("education", "I graduated with a degree in Business Administration last year.",
         "Business Administration"),
        ("health", "I'm lactose intolerant, so no milk-based recipes please.", "lactose intolerant"),
        ("health", "I see Dr. Smith every week for my anxiety.", "Dr. Smith"),
        ("diet", "I'm vegetarian. What should I cook tonight?", "vegetarian"),
        ("diet", "I don't want to eat meat anymore.", "meat"),
        ("possession", "I just bought a second-hand Brompton folding bike.", "Brompton"),
        ("routine", "I have choir practice every Tuesday at 7 pm.", "Tuesday"),
        ("count", "By the way, I lead a team of 5 engineers now.", "5 engineers"),
        ("count", "We have 3 kids and a dog, so we need a big car.", "3 kids"),
        ("preference", "I prefer tea to coffee, especially green tea.", "tea"),
        ("plan", "I'm going to Valencia in April for a long weekend.", "Valencia"),
        ("plan", "We're moving to Berlin at the end of June.", "Berlin"),
        ("event", "Can you recommend a cobbler? I caught 7 largemouth bass at Lake Michigan on 7/10.",
         "7 largemouth bass"),
    ],
)
def test_a_fact_of_each_kind_is_drawn(kind, message, holds):
    drawn = kept(message)
    assert any(holds in text for text in drawn), (kind, drawn)


def test_a_named_person_of_the_speakers_own_is_a_subject_of_facts():
    [found] = facts.extract("Tom doesn't eat mushrooms.", people={"Tom"})
    assert (found.subject, found.wording) == ("Tom", "Tom doesn't eat mushrooms.")
    assert kept("Tom doesn't eat mushrooms.") == []  # a Tom nobody introduced: no fact
    assert statements.people_named("My partner Tom and I cook on Sundays.") == {"Tom"}


def test_a_statement_inside_a_question_is_drawn():
    drawn = kept("Do you think my road bike is ready for a century ride, considering I've already done "
                 "2,000 miles on it?")
    assert drawn == ["I've already done 2,000 miles on it."]
    assert kept("Can you help me track my screen time on Netflix - I think I spent 10 hours last month "
                "watching documentaries. Can you help me with that?") == [
        "I spent 10 hours last month watching documentaries."]


@pytest.mark.parametrize(
    "message",
    [
        "Remember that my passport expires in March 2027.",
        "I'm allergic to peanuts, please remember that.",
        "I'm allergic to peanuts. Please remember that.",
        "Please note that I take my coffee black.",
        "Don't forget that my mother's birthday is on 3 June.",
        "For future reference, my landlord is called Mr. Costa.",
        "From now on, answer in Spanish.",
    ],
)
def test_every_explicit_request_to_remember_is_kept(message):
    [clause] = statements.explicit_requests(message)
    assert clause.explicit
    found = [f for f in facts.extract(message) if f.kind in ("remember", "instruction")]
    assert len(found) == 1 and found[0].wording == clause.text
    assert "remember" not in clause.text.lower() and "please" not in clause.text.lower()


def test_from_now_on_an_instruction_is_kept_in_the_persons_words():
    [found] = facts.extract("From now on, answer in Spanish.")
    assert found.kind == "instruction" and found.wording == "From now on, answer in Spanish."


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("pasted documentation", "Here is the full text, what stands out?\n\nI am writing to inform you that "
         "the committee met on 3 May. I have reviewed the budget and I recommend approval. " * 3),
        ("pasted letter", "Can you proofread this cover letter?\n\nDear hiring team,\n\n"
         "I am writing to apply "
         "for the analyst position. I have five years of experience and I led a team of four."),
        ("code", "Why does this fail?\n\n```python\nmy_list = [1, 2, 3]\nI = my_list[5]\n```"),
        ("a long paste without a lead-in", ("The logging module lets users configure handlers. "
                                            "Users will not "
                                            "care about errors in the logging system. ") * 12),
        ("a request", "Help me write a short Spanish note to my landlord about the heater."),
        ("a request", "Give me a 5-year-old answer: why is the sky blue?"),
        ("a request", "I'd like you to explain how HTTP caching works."),
        ("a request", "I need some tips on organizing my garage."),
        ("a question", "What are some good music venues in Denver?"),
        ("a question", "Do you know if the museum is open on Mondays?"),
        ("a greeting", "Hi there! Hope you're doing well."),
        ("thanks", "Thanks, that's really helpful!"),
        ("a reaction to an answer", "I think I'll try the soy ginger marinade first."),
        ("a reaction to an answer", "I like the idea of using a binder with labeled sections."),
        ("a reaction to an answer", "I'll definitely check out those podcasts."),
        ("an opinion", "I agree, modern theater is such a fascinating art form."),
        ("a clarification", "(Sorry, to be clear: I mean for this week.)"),
        ("words about the conversation", "I am going to ask you 86 multiple-choice questions."),
        ("a restatement of memory",
         "Here's what you have saved about me: I live in Leeds and I work at Acme."),
        ("a restatement of memory", "You told me I live in Leeds, right?"),
        ("a story about others", "Lizzie was utterly tuckered out, and Alyssa hadn't been tickled too much."),
    ],
)
def test_what_is_never_a_fact(what, message):
    assert kept(message) == [], what


def test_the_assistants_advice_is_never_a_fact(owner, conversation):
    from memory.storage.store import NewMessage, store_messages

    advice = NewMessage(role="assistant", content="I recommend you live in Porto.")
    store_messages(owner, conversation, [advice], embed=False)
    assert facts.extract_messages(owner) == 0


def test_a_fact_is_short():
    text = ("I've been working on an abstract ocean sculpture at home for weeks with clay from the shop "
            "down the street, and I've spent around 5-6 hours on it so far, mostly on the waves and the "
            "driftwood texture, "
            "which is harder than I thought it would be.")
    [found] = facts.extract(text)
    assert len(found.wording.split()) <= statements.MAX_WORDS
