"""Topic labels as a person would write them: 2-5 words of the topic's own messages, in their
language, never an id or a word of Recollect's own, never a sibling's."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from memory.models import Topic
from memory.organizing import labels, topics
from tests.memory.conftest import add_turns

SPANISH = [
    "Mi perro se llama Toby y le encanta correr por el parque del barrio.",
    "El parque del barrio tiene un lago pequeño con patos.",
    "Toby persigue a los patos del lago cada mañana.",
    "Los patos del lago ya conocen a Toby, el perro más rápido del parque.",
]
IDS = [
    "The ticket m88dk6dhp09gb6vfxy0g4kha is about the garden fence repair.",
    "Message 01JD4Q8ZK3N5V7X9B2C4D6F8GH says the garden fence repair costs 300 euros.",
    "Commit 3f9c2ab7e1 fixed the garden fence repair invoice, ref a1b2c3.",
    "The garden fence repair is booked for Tuesday, ticket m88dk6dhp09gb6vfxy0g4kha again.",
]


@pytest.mark.parametrize(
    "word",
    ["m88dk6dhp09gb6vfxy0g4kha", "01JD4Q8ZK3N5V7X9B2C4D6F8GH", "3f9c2ab7e1", "a1b2c3", "x7", "v2",
     "9f3a2c1d"],
)
def test_ids_hashes_and_number_letter_codes_are_id_like(word):
    assert labels.is_id_like(word)


@pytest.mark.parametrize("word", ["garden", "1990s", "21st", "2023", "self-care", "Melanie's", "café"])
def test_words_years_ordinals_and_decades_are_not_id_like(word):
    assert not labels.is_id_like(word)


def test_the_language_of_a_text_is_the_one_whose_stop_words_it_uses():
    spanish = ["mi", "perro", "se", "llama", "toby", "y", "le", "encanta", "el", "parque"]
    english = ["my", "dog", "is", "called", "toby", "and", "he", "loves", "the", "park"]
    assert labels.language_of(spanish) == "es"
    assert labels.language_of(english) == "en"
    assert labels.language_of(["toby"]) == "en"


def test_siblings_choose_distinct_labels_and_fall_back_to_their_period():
    chosen = labels.distinct_labels(
        [["Garden roses", "Rose pruning"], ["Garden rose"], ["Garden roses"]],
        ["May 2023", "June 2023", "July 2023"],
    )
    assert chosen[0] == "Garden roses"
    assert chosen[1] == "Garden rose, June 2023"  # "Garden rose" is "Garden roses" to a reader
    assert chosen[2] == "Garden roses, July 2023"
    assert len(set(chosen)) == 3


def test_counts_are_pluralized():
    assert labels.count_of(1, "message") == "1 message"
    assert labels.count_of(2345, "message") == "2,345 messages"
    assert labels.count_of(0, "subtopic") == "0 subtopics"


@pytest.mark.django_db
def test_a_topic_is_never_named_with_an_id(owner, conversation):
    add_turns(owner, conversation, IDS)
    topics.rebuild(owner)
    leaf = Topic.objects.owned_by(owner).get(children__isnull=True)
    words = re.findall(r"[\w'-]+", leaf.label) + leaf.keywords
    assert not [w for w in words if labels.is_id_like(w)], (leaf.label, leaf.keywords)
    assert 2 <= len(leaf.label.split()) <= 5
    assert "fence repair" in leaf.label.lower()


@pytest.mark.django_db
def test_a_spanish_topic_is_named_in_spanish(owner, conversation):
    add_turns(owner, conversation, SPANISH)
    topics.rebuild(owner)
    leaf = Topic.objects.owned_by(owner).get(children__isnull=True)
    words = [w.lower() for w in re.findall(r"[\w'-]+", leaf.label)]
    assert 2 <= len(words) <= 5, leaf.label
    spanish = " ".join(SPANISH).lower()
    assert leaf.label.lower() in spanish, leaf.label
    # No English stop word leaks in, and the label neither starts nor ends with a Spanish one.
    assert not set(words) & labels.STOP_WORDS["en"], leaf.label
    assert words[0] not in labels.STOP_WORDS["es"] and words[-1] not in labels.STOP_WORDS["es"]


@pytest.mark.django_db
def test_siblings_in_the_tree_never_share_a_label(owner, conversation, settings):
    settings.TOPIC_MAX_CHILDREN = 3
    start = timezone.now() - dt.timedelta(days=30)
    garden = [
        "the roses in the garden need pruning",
        "garden roses and tulips bloom in May",
        "pruning roses in the garden before June",
    ]
    for day in range(8):  # the same talk on eight days: eight leaves, all about garden roses
        add_turns(owner, conversation, garden, start=start + dt.timedelta(days=day))
    topics.rebuild(owner)
    assert Topic.objects.owned_by(owner).filter(children__isnull=True).count() == 8
    for parent_id in set(Topic.objects.owned_by(owner).values_list("parent_id", flat=True)):
        siblings = Topic.objects.owned_by(owner).filter(parent_id=parent_id)
        names = list(siblings.values_list("label", flat=True))
        assert len({labels.label_key(n) for n in names}) == len(names), names
    for label in Topic.objects.owned_by(owner).values_list("label", flat=True):
        assert 2 <= len(label.split(",")[0].split()) <= 5, label


@pytest.mark.django_db
def test_a_growing_leaf_is_named_again_from_what_it_became(owner, conversation, settings):
    from memory.tasks import run_upkeep

    settings.INDEX_CLUSTERING_THRESHOLD = 0.5  # every message joins the one leaf

    start = timezone.now() - dt.timedelta(hours=2)
    first = add_turns(owner, conversation, ["which bread flour should I buy for baking"], start=start)
    run_upkeep(owner, [m.pk for m in first])
    later = add_turns(
        owner,
        conversation,
        ["the sourdough starter needs feeding", "my sourdough starter smells sour",
         "feeding the sourdough starter twice a day"],
        start=start + dt.timedelta(minutes=1),
    )
    run_upkeep(owner, [m.pk for m in later])
    leaf = Topic.objects.owned_by(owner).get(children__isnull=True)
    assert leaf.message_count == 4
    assert "sourdough" in leaf.label.lower(), leaf.label


@pytest.mark.parametrize(
    "label",
    ["Tips for the first", "Orange engine warning light came", "Depends and instinct", "Work", "Getting",
     "Finished already", "Trip to the", "May 2024: the"],
)
def test_pieces_of_a_sentence_are_fragments(label):
    assert labels.is_fragment(label)


@pytest.mark.parametrize(
    "label",
    ["React dashboard", "Thesis chapter", "Baking bread", "Trip to the beach", "Wedding plans",
     "Clases de baile", "Garden roses, June 2023",
     "May–June 2024: moving house, running, the React dashboard"],
)
def test_noun_phrases_and_named_periods_are_not_fragments(label):
    assert not labels.is_fragment(label)


GARDEN = ["the roses in the garden need pruning", "garden roses and tulips bloom in May",
          "pruning roses in the garden before June"]
MOVING = ["the moving boxes are packed for the new flat", "moving boxes fill the hallway of the flat",
          "the removal van takes the moving boxes to the flat"]
RUNNING = ["my marathon training plan has a long run on Sunday", "marathon training means tempo runs",
           "the marathon training schedule peaks in week six"]


@pytest.mark.django_db
def test_a_parent_of_several_subjects_is_named_for_its_period_and_main_subjects(
    owner, conversation, settings
):
    settings.TOPIC_MAX_CHILDREN = 3
    start = timezone.now() - dt.timedelta(days=90)
    for day, texts in enumerate([GARDEN, MOVING, RUNNING, GARDEN, MOVING, RUNNING, GARDEN, MOVING, RUNNING]):
        add_turns(owner, conversation, texts, start=start + dt.timedelta(days=day * 9))
    topics.rebuild(owner)
    every = list(Topic.objects.owned_by(owner).values_list("label", flat=True))
    assert not [label for label in every if labels.is_fragment(label)], every
    parents = list(Topic.objects.owned_by(owner).filter(children__isnull=False).distinct()
                   .values_list("label", flat=True))
    named_for_periods = [p for p in parents if labels.is_period_label(p)]
    assert named_for_periods, parents
    for label in named_for_periods:
        period, subjects = label.split(": ")
        month = r"[A-Z][a-z]+"
        assert re.fullmatch(rf"{month}(?:–{month})? \d{{4}}|{month} \d{{4}} – {month} \d{{4}}", period), label
        assert 2 <= len(subjects.split(", ")) <= 3, label
        # Its subjects are what its leaves are about, as the words run in a sentence.
        assert any(w in subjects for w in ("garden", "moving", "marathon")), label
        assert subjects[:1].islower(), label


@pytest.mark.django_db
def test_a_parent_of_one_subject_is_named_for_it(owner, conversation, settings):
    settings.TOPIC_MAX_CHILDREN = 3
    start = timezone.now() - dt.timedelta(days=30)
    for day in range(6):
        add_turns(owner, conversation, GARDEN, start=start + dt.timedelta(days=day))
    topics.rebuild(owner)
    top = list(Topic.objects.owned_by(owner).filter(parent=None).values_list("label", flat=True))
    assert top and not any(labels.is_period_label(t) for t in top), top
    assert all("garden" in t.lower() or "roses" in t.lower() or "pruning" in t.lower() for t in top), top


@pytest.mark.django_db
def test_a_short_chat_is_one_topic_not_one_per_message(owner, conversation):
    from memory.tasks import run_upkeep

    start = timezone.now() - dt.timedelta(minutes=30)
    said = add_turns(owner, conversation, ["I work at the harbour office on Mondays",
                                           "my sister Ana lives in Porto",
                                           "the tomatoes by the south wall need water"], start=start)
    for message in said:  # one turn at a time, as a chat stores them
        run_upkeep(owner, [message.pk])
    leaves = list(Topic.objects.owned_by(owner).filter(children__isnull=True).values_list("label", flat=True))
    assert len(leaves) == 1, leaves
    assert not labels.is_fragment(leaves[0]), leaves


def test_a_label_ending_in_its_period_is_judged_by_its_words():
    assert not labels.is_fragment("Garden roses, 3 May 2024")
    assert not labels.is_fragment("Garden roses, 28 May – 2 June 2023 (2)")
    assert labels.is_fragment("Tips for the first, 3 May 2024")


@pytest.mark.django_db
def test_a_run_of_messages_naming_nothing_is_a_brief_exchange_of_its_day(owner, conversation):
    add_turns(owner, conversation, ["ok", "thanks!", "yes", "see you"])
    topics.rebuild(owner)
    leaf = Topic.objects.owned_by(owner).get(children__isnull=True)
    assert leaf.label.startswith("Brief exchange, ") and not labels.is_fragment(leaf.label), leaf.label
