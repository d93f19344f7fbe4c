from __future__ import annotations

from memory.knowledge.entities import extract


def test_it_finds_names_numbers_identifiers_dates_urls_emails_and_code():
    text = (
        "Dr. Elena Rostova leads Project Vanguard with 850 million euros; drilling starts "
        "October 4th. Ticket INFRA-992: Redis on port 6379, timeout 5000ms, pool of 50 nodes. "
        "See https://example.com/runbook or mail ops@example.com, then call retry_policy()."
    )
    found = {(f.name, f.kind) for f in extract(text)}
    assert ("Dr. Elena Rostova", "name") in found
    assert ("Project Vanguard", "name") in found
    assert ("850 million euros", "money") in found
    assert ("October 4th", "date") in found
    assert ("INFRA-992", "identifier") in found
    assert ("port 6379", "number") in found
    assert ("5000ms", "quantity") in found
    assert ("https://example.com/runbook", "url") in found
    assert ("ops@example.com", "email") in found
    assert ("retry_policy", "code") in found


def test_a_capitalised_word_at_a_sentence_start_is_not_a_name():
    assert not [f for f in extract("Sure. Maybe later. Thanks!") if f.kind == "name"]


def test_ids_recollect_generates_never_become_entities():
    from memory.knowledge.entities import extract

    # Real ids whose letter runs looked like acronyms ("VNQY", "JWVMXR").
    ids = ["01M841MD8VNQY50E1X50JWVMXR", "01HXKQ8ZCCDT4M1KDJPS0RWQ3A"]
    text = "As you said in " + ", ".join(f"[{i}]" for i in ids) + ", Elena Rostova leads INFRA-992."
    names = {f.name for f in extract(text)}
    assert {"Elena Rostova", "INFRA-992"} <= names
    assert not any(n in i or i in n for n in names for i in ids)


def test_greetings_times_possessives_and_quotes_are_not_part_of_names():
    # Spans the extractor took for names in a real conversation (long-conversations conv-26).
    text = (
        "Yeah Mel, that was fun! Wow Mel, look. Congrats Caroline on the new job. "
        "We went there Last Friday and again on Tues. I read 'Embracing Identity' with "
        "Oliver's sister. Bye Caroline!"
    )
    names = {f.name for f in extract(text) if f.kind == "name"}
    assert {"Mel", "Caroline", "Oliver", "Embracing Identity"} <= names
    for wrong in ("Yeah Mel", "Wow Mel", "Congrats Caroline", "Bye Caroline", "Last Friday",
                  "Friday", "Tues", "Oliver's", "Embracing Identity'"):
        assert wrong not in names
    more = (
        "Absolutely Jon, go for it. Knowing I'm here helps. It's Shia Labeouf! DOING IT now. "
        "Here's the plan."
    )
    names = {f.name for f in extract(more) if f.kind == "name"}
    assert {"Jon", "Shia Labeouf"} <= names
    assert not names & {"Absolutely Jon", "Knowing I'm", "It's Shia Labeouf", "DOING IT", "DOING", "Here"}


# --- Names a person would recognise (issue 34) ----------------------------------------------------


def names(text: str, known: frozenset[str] = frozenset()) -> set[str]:
    from memory.knowledge.entities import extract_counted

    return {f.name for f, _ in extract_counted(text, known) if f.kind == "name"}


def test_code_literals_are_not_names():
    assert not names("It returns None when the flag is True, and False or Null otherwise; json null too.")


def test_an_instructions_opening_verb_is_not_part_of_a_name():
    text = ("1. **Use Instagram Stories** to share news.\n2. **Avoid** posting at night.\n"
            "- Try Google Maps offline.")
    assert names(text) == {"Instagram Stories", "Google Maps"}


def test_a_common_word_capitalised_is_not_a_name_when_the_text_also_says_it_plainly():
    assert "Window" not in names("Open the Window menu, then close the window.")
    assert "Python" in names("I write most of it in Python these days.")


def test_names_of_several_words_and_letters_stay_whole():
    assert names("My mother worked at Hospital São João for years.") == {"Hospital São João"}
    assert "Zoë" in names("I met Zoë at the market.")


def test_a_name_met_elsewhere_counts_at_a_sentence_start():
    assert names("Tom doesn't eat mushrooms.") == set()
    assert names("Tom doesn't eat mushrooms.", frozenset({"tom"})) == {"Tom"}


def test_a_rebuild_counts_every_mention_of_a_name_the_history_uses(owner, conversation, db):
    from memory.knowledge import entities
    from memory.models import Entity
    from tests.memory.test_facts import tell

    tell(owner, conversation, [(0, "Tom doesn't eat mushrooms."), (1, "Tom loves the sea."),
                               (2, "My partner Tom and I cook on Sundays.")])
    entities.rebuild(owner)
    assert Entity.objects.owned_by(owner).get(normalized="tom").mention_count == 3


def test_an_entity_no_live_message_names_goes_after_an_edit(owner, conversation, db):
    from memory.knowledge import entities
    from memory.models import Entity
    from memory.storage import store
    from tests.memory.test_facts import tell

    [message] = tell(owner, conversation, [(0, "We stayed with Bartholomew Quince in Leeds.")])
    entities.index_messages(owner, [message])
    assert Entity.objects.owned_by(owner).filter(normalized="bartholomew quince").exists()
    store.update_message(owner, message.pk, "We stayed in a hotel in Leeds.")
    message.refresh_from_db()
    entities.index_messages(owner, [message])
    assert not Entity.objects.owned_by(owner).filter(normalized="bartholomew quince").exists()


def test_key_entities_are_the_same_when_a_passage_was_read_before(monkeypatch):
    # The index's KEY ENTITIES line: what each passage names is remembered between turns; the
    # line is the same as reading every passage again, and a remembered passage is not read.
    from collections import Counter

    from memory.knowledge import entities

    texts = [
        "Elena and Marco flew to Lisbon on 2024-03-02; ticket LH-4471 cost 420 EUR.",
        "Marco asked Elena about the Lisbon hotel, the Alfama one near https://example.com/stay.",
        "The retreat in Porto: Elena books it, Marco pays. See PR #1337 and `make deploy`.",
        "x" * (entities._REMEMBERED_MAX_CHARS + 1) + " Lisbon Porto",
    ]

    def read_again(texts, limit):
        counts: Counter[str] = Counter()
        display: dict[str, str] = {}
        for text in texts:
            for f in set(entities.extract(text)):
                counts[f.normalized] += 1
                display.setdefault(f.normalized, f.name)
        return [display[k] for k, _ in counts.most_common(limit)]

    first = entities.key_entities(texts, limit=15)
    assert first == read_again(texts, 15)
    assert "Elena" in first and "Lisbon" in first
    read = []
    real = entities.extract
    monkeypatch.setattr(entities, "extract", lambda text: read.append(text) or real(text))
    assert entities.key_entities(texts[1:], limit=15) == read_again(texts[1:], 15)[:15]
    # Only the passage too long to remember, and read_again's own reads, went to extract.
    assert read.count(texts[1]) == 1 and read.count(texts[3]) == 2
