"""Words a person reads about themselves (issue 34): the second person on their own pages, a
grammatical third person for anyone else ("the user panics", "doesn't want", "works at the Porto
city council"), and the person's own words as a quote where a rewrite would not be correct."""

from __future__ import annotations

import pytest

from memory.knowledge import wording


@pytest.mark.parametrize(
    ("said", "third", "second"),
    [
        ("I panic before exams.", "the user panics before exams.", "You panic before exams."),
        ("I don't want a big party.", "the user doesn't want a big party.", "You don't want a big party."),
        ("I now work at the Porto city council.", "the user now works at the Porto city council.",
         "You now work at the Porto city council."),
        ("I'm allergic to peanuts.", "the user is allergic to peanuts.", "You're allergic to peanuts."),
        ("I have three kids.", "the user has three kids.", "You have three kids."),
        ("I was born in Leeds.", "the user was born in Leeds.", "You were born in Leeds."),
        ("My sister Ana lives in Porto.", "the user's sister Ana lives in Porto.",
         "Your sister Ana lives in Porto."),
        ("I usually go to the gym at 6 pm.", "the user usually goes to the gym at 6 pm.",
         "You usually go to the gym at 6 pm."),
        ("I think I spent 10 hours on it.", "the user thinks they spent 10 hours on it.",
         "You think you spent 10 hours on it."),
    ],
)
def test_a_clause_reads_right_in_the_third_and_second_person(said, third, second):
    assert wording.third_person(said, "the user") == third
    assert wording.second_person(said) == second


def test_a_clause_that_cannot_be_rewritten_is_quoted():
    assert wording.third_person("We've got 20 dozen eggs in the fridge.", "the user") == (
        'the user said: "We\'ve got 20 dozen eggs in the fridge."')
    assert wording.shown_to_owner("We've got 20 dozen eggs in the fridge.") == (
        "You said: “We've got 20 dozen eggs in the fridge.”")
    assert wording.shown_to_owner("From now on, answer in Spanish.", "instruction") == (
        "You asked: “From now on, answer in Spanish.”")


def test_a_named_speaker_is_the_subject():
    moved = wording.third_person("I moved to Lisbon with my kids.", "Melanie")
    assert moved == "Melanie moved to Lisbon with their kids."
    assert wording.stated("Tom doesn't eat mushrooms.", "Tom") == "Tom doesn't eat mushrooms."
