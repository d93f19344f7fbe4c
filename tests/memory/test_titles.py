"""A conversation's title from the model's answer (memory.organizing.titles): a few words a
person would write in a list of chats, or nothing."""

from __future__ import annotations

from memory.organizing.titles import clean_title


def test_it_keeps_the_words_of_a_title_without_quotes_markup_or_a_prefix():
    assert clean_title("“Sourdough starter troubles.”") == "Sourdough starter troubles"
    assert clean_title("Title: **Planning the Lisbon trip**\n\nSome explanation follows.") == (
        "Planning the Lisbon trip"
    )
    assert clean_title("  \n'Garden beds for spring'") == "Garden beds for spring"


def test_an_answer_that_is_no_title_gives_nothing():
    assert clean_title("") == ""
    assert clean_title("...") == ""
    assert clean_title(
        "This conversation is about the many ways in which a sourdough starter can go wrong over time"
    ) == ""
