"""A fact in the words a person reads about themselves.

A fact keeps the speaker's own clause in the first person ("I lead a team of five engineers").
The person reads it in the second person on their own pages ("You lead a team of five
engineers"); the model and anyone else read it in the third person ("the user leads a team of
five engineers", "Melanie is a counsellor"). First to second person never needs a verb changed
but am/was; first to third does ("I panic" -> "panics", "I don't" -> "doesn't"), and the verb
forms come from lemminflect's English lexicon. Where a clause cannot be rewritten correctly (it
speaks as "we", or a verb after "I" is not one the lexicon knows), the third person shows the
speaker's own words as a quote instead.
"""

from __future__ import annotations

import functools
import re
import sys

# Words between "I" and its verb ("I really like", "I just got") that are not the verb.
_ADVERBS = {
    "also", "just", "still", "really", "actually", "usually", "always", "never", "often", "sometimes",
    "recently", "finally", "already", "now", "only", "even", "mostly", "generally", "currently",
    "definitely", "totally", "absolutely", "truly", "honestly", "rarely", "seldom", "normally",
    "typically", "occasionally", "certainly", "probably", "basically", "personally", "mainly", "first",
    "newly", "sort", "kind", "kinda", "ever", "once", "then", "too", "all", "both", "lately",
}
_MODALS = {"can", "could", "will", "would", "should", "might", "must", "may", "shall", "can't", "cannot",
           "couldn't", "won't", "wouldn't", "shouldn't", "mightn't", "mustn't", "didn't", "used", "had",
           "hadn't", "did"}
_SECOND = [
    (re.compile(r"\bI\s+am\b"), "you are"),
    (re.compile(r"\bI'm\b|\bIm\b(?=\s)"), "you're"),
    (re.compile(r"\bI\s+was\b"), "you were"),
    (re.compile(r"\bI\s+wasn't\b"), "you weren't"),
    (re.compile(r"\bam\s+I\b"), "are you"),
    (re.compile(r"\bwas\s+I\b"), "were you"),
    (re.compile(r"\bI(?='(?:ve|d|ll)\b)"), "you"),
    (re.compile(r"\bI\b"), "you"),
    (re.compile(r"\bmyself\b"), "yourself"),
    (re.compile(r"\bMyself\b"), "Yourself"),
    (re.compile(r"\bmine\b"), "yours"),
    (re.compile(r"\bmy\b"), "your"),
    (re.compile(r"\bMy\b"), "Your"),
    (re.compile(r"\bme\b"), "you"),
]
_WE = re.compile(r"\b(?:we|we're|we've|we'd|we'll|us|our|ours|ourselves)\b", re.I)
_I = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|[Mm]e|[Mm]y|[Mm]ine|[Mm]yself)\b")


def capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def second_person(wording: str) -> str:
    """'I'm allergic to peanuts' -> 'You're allergic to peanuts' (how the person reads it)."""
    text = wording
    for pattern, replacement in _SECOND:
        text = pattern.sub(replacement, text)
    return capitalized(text)


@functools.cache
def _lexicon():
    import lemminflect

    return lemminflect


def lexicon():
    """lemminflect, loaded once per process."""
    return _lexicon()


def lexicon_ready() -> bool:
    """Whether the verb lexicon is loaded (it takes a few seconds once per process)."""
    return "lemminflect" in sys.modules and _lexicon.cache_info().currsize > 0


def _third_singular(verb: str, past: bool = False) -> str | None:
    """The verb after 'I' as after 'she' ('panic' -> 'panics', 'got' -> 'got'); None when the
    word is no verb the lexicon knows."""
    low = verb.lower()
    fixed = {"am": "is", "'m": "is", "have": "has", "do": "does", "don't": "doesn't", "haven't": "hasn't",
             "was": "was", "wasn't": "wasn't", "'ve": "has", "'ll": "will", "'d": "would", "go": "goes"}
    if low in fixed:
        return fixed[low]
    if low in _MODALS:
        return low
    lexicon = _lexicon()
    lemmas = lexicon.getAllLemmas(low, upos="VERB").get("VERB")
    if not lemmas:
        return None
    forms = lexicon.getAllInflections(lemmas[0], upos="VERB")
    present = low in forms.get("VB", ()) or low in forms.get("VBP", ())
    if low in forms.get("VBD", ()) and (past or not present):
        return low  # a past tense reads the same after any subject ("I put in 10 hours")
    if present:
        return (forms.get("VBZ") or (None,))[0]  # "I run" -> "runs" (run is a participle too)
    if low in forms.get("VBN", ()):
        return low
    return None


_THEY = {"m": "they're", "ve": "they've", "d": "they'd", "ll": "they'll"}
_HAS = {"m": "is", "ve": "has", "d": "would", "ll": "will"}
_PARTICIPLE = re.compile(r"\s+(?:been|gone|had|done|seen|\w+ed)\b")
_PAST_HINT = re.compile(r"\b(?:yesterday|last|ago|already|earlier|once|then)\b", re.I)
_FIRST_I = re.compile(r"\bI(?:'(?P<contraction>m|ve|d|ll)\b|\s+(?P<word>[A-Za-z']+))")


def third_person(wording: str, subject: str, *, quick: bool = False) -> str:
    """The clause about `subject` ('the user', 'Melanie'): the first 'I' becomes the subject
    with its verb agreeing, later ones 'they'; 'my' becomes '<subject>'s' at the start and
    'their' after it. A clause that speaks as 'we', or whose verb the lexicon does not know, is
    quoted: 'the user said: "…"'. With `quick`, a clause that would need the lexicon before it
    is loaded is quoted too (nothing waits for it on a chat turn)."""
    clause = " ".join(wording.split()).rstrip()
    quoted = f'{subject} said: "{capitalized(clause)}"'
    if _WE.search(clause) or not clause:
        return quoted
    text = clause
    possessive = f"{subject}'s"
    text = re.sub(r"^(?:My|my)\b", possessive, text)
    done = False
    out: list[str] = []
    position = 0
    for m in _FIRST_I.finditer(text):
        out.append(text[position:m.start()])
        position = m.end()
        if m["contraction"]:
            if done:
                out.append(_THEY[m["contraction"]])
                continue
            had = m["contraction"] == "d" and _PARTICIPLE.match(text[m.end():])
            out.append(f"{subject} " + ("had" if had else _HAS[m["contraction"]]))
            done = True
            continue
        word = m["word"]
        if done:
            out.append("they " + {"am": "are", "was": "were", "wasn't": "weren't"}.get(word, word))
            continue
        words = [word]
        rest = text[m.end():]
        # Adverbs before the verb stay where they are ("I really like" -> "really likes").
        while words[-1].lower() in _ADVERBS:
            nxt = re.match(r"\s+([A-Za-z']+)", rest)
            if not nxt:
                return quoted
            words.append(nxt[1])
            rest = rest[nxt.end():]
            position += nxt.end()
        if quick and not lexicon_ready() and words[-1].lower() not in _MODALS and words[-1].lower() not in {
            "am", "have", "do", "don't", "haven't", "was", "wasn't", "go"
        }:
            return quoted
        verb = _third_singular(words[-1], past=bool(_PAST_HINT.search(text)))
        if verb is None:
            return quoted
        words[-1] = verb
        out.append(f"{subject} " + " ".join(words))
        done = True
    out.append(text[position:])
    text = "".join(out)
    text = re.sub(r"\bmyself\b", "themselves", text)
    text = re.sub(r"\bmine\b", "theirs", text)
    text = re.sub(r"\bmy\b", "their", text)
    text = re.sub(r"\bMy\b", "Their", text)
    text = re.sub(r"\bme\b", "them", text)
    if _I.search(text):
        return quoted
    return text


def shown_to_owner(wording: str, kind: str = "") -> str:
    """A fact about the person as they read it on their own pages: their instruction or a
    clause that speaks as "we" in their own words, quoted; anything else in the second person
    ("You lead a team of five engineers")."""
    clause = " ".join(wording.split())
    if kind == "instruction":
        return f"You asked: “{capitalized(clause)}”"
    if _WE.search(clause) and not _I.search(clause):
        return f"You said: “{capitalized(clause)}”"
    return second_person(clause)


def stated(wording: str, subject: str, kind: str = "", *, quick: bool = False) -> str:
    """A fact as the model and anyone but its owner read it (memory.knowledge.facts' statement)."""
    clause = " ".join(wording.split())
    if kind == "instruction":
        return f'{subject} asked: "{capitalized(clause)}"'
    if not _I.search(clause) and not _WE.search(clause):
        return capitalized(clause)  # already about someone else ("Tom doesn't eat mushrooms")
    return third_person(clause, subject, quick=quick)
