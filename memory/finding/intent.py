"""What a question asks for, beyond its words: whose words answer it, whether it seeks a fact
(so a turn that only asks about it is no answer), and whether it wants the present value.

Read by memory.finding.fusion when it ranks; plain rules over the question's own words, so they
hold for any history (measured by `manage.py eval_recall` on LoCoMo and LongMemEval).
"""

from __future__ import annotations

import functools
import re

# "What did you suggest…", "the restaurant you recommended", "remind me what you said about…":
# the assistant's words answer it, not the person's own.
_ASKS_ABOUT_ASSISTANT = re.compile(
    r"\byou\s+(?:\w+\s+)?(?:said|told|mentioned|recommended|suggested|gave|listed|provided|wrote|"
    r"explained|shared|named|proposed|described|offered|answered|replied|advised|came up with|"
    r"recommend|suggest|mention|tell)\b"
    r"|\b(?:did|have|had|could|would)\s+you\s+(?:\w+\s+)?(?:say|tell|mention|recommend|suggest|give|"
    r"list|provide|write|explain|share|name|propose|describe|offer|advise)\b"
    r"|\byour\s+(?:suggestion|recommendation|answer|advice|list|reply|response|explanation|tips?)\b",
    re.I,
)
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll|im|ive)\b", re.I)
# A question that seeks a fact opens with a question word (after a polite opening at most):
# "Where do I work now?", "How many bikes do I own?", "Did I go to Rome?". "Any
# recommendations?" or "Do you think it's my living room?" ask for advice, not a fact.
_SEEKS_FACT = re.compile(
    r"^(?:(?:so|and|hey|hi|ok|okay|quick question|by the way|remind me)[,:]?\s+)*"
    r"(?:what|which|where|when|who|whom|whose|how\s+(?:many|much|long|old|often|far|did|do|was|is)"
    r"|(?:did|do|does|have|has|had|is|are|was|were|am)(?!\s+you\b))\b",
    re.I,
)
# ...unless what it seeks is a question once asked.
_ASKS_ABOUT_QUESTIONS = re.compile(r"\b(?:ask|asked|asking|question|questions|wonder|wondered)\b", re.I)
# The present value: "Where do I work now?", "my current car", "the latest version", "still".
_PRESENT = re.compile(
    r"\b(?:now|currently|current|latest|still|anymore|any more|these days|at the moment|at present|"
    r"nowadays|most recent|most recently|right now|so far|to date)\b",
    re.I,
)
# A question in the present tense about the person ("How many bikes do I own?", "Where am I
# staying?") wants what holds now too.
_PRESENT_ABOUT_ME = re.compile(
    r"\b(?:do|does|am|is|are)\s+(?:i|my)\b|\bi\s+(?:have|own|use|live|work)\b", re.I
)
# A question about when something happened ("When did…", "What day did…", "How long ago…",
# "In which month…", "How many days passed between…"): a turn that says when answers it.
# The question may open politely ("Can you remind me when…", "Do you remember when…", "I forget
# when…") or ask roughly ("Around when…", "Since when…").
_ASKS_WHEN = re.compile(
    r"^(?:(?:so|and|hey|hi|ok|okay|remind me|(?:can|could|would)\s+you\s+(?:remind|tell)\s+me"
    r"|do\s+you\s+(?:remember|know|recall)|i\s+(?:forget|forgot|can't\s+remember|don't\s+remember))[,:]?\s+)*"
    r"(?:(?:since|around|about|roughly|approximately|by|until|till)\s+)?"
    r"(?:when\b|how long ago\b|(?:in|on|during)?\s*"
    r"(?:what|which)\s+(?:day|date|month|year|week|weekend|season|time of year)\b"
    r"|how\s+many\s+(?:days|weeks|months|years)\s+(?:\w+\s+){0,2}?"
    r"(?:passed|went by|elapsed|between|before|after|since|ago)\b)",
    re.I,
)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")


def speaker(query: str) -> str | None:
    """Whose words answer `query`: "assistant" when it asks what the assistant said or
    recommended, "user" when it asks about the person ("I", "my", "me"), else None (a question
    about someone by name, or no one)."""
    if _ASKS_ABOUT_ASSISTANT.search(query):
        return "assistant"
    if _FIRST_PERSON.search(query):
        return "user"
    return None


def seeks_fact(query: str) -> bool:
    """Whether `query` asks for a fact (so a turn that only asks about its subject is no answer)."""
    question = query.strip()
    return bool(_SEEKS_FACT.search(question)) and not _ASKS_ABOUT_QUESTIONS.search(question)


def wants_present(query: str) -> bool:
    """Whether `query` asks what holds now (the newest statement of it answers first)."""
    return bool(_PRESENT.search(query) or _PRESENT_ABOUT_ME.search(query))


def asks_when(query: str) -> bool:
    """Whether `query` asks when something happened (a turn that says when answers it)."""
    return bool(_ASKS_WHEN.search(query.strip()))


@functools.lru_cache(maxsize=2048)
def only_asks(text: str) -> bool:
    """Whether `text` asks and tells nothing: every sentence of more than three words is a
    question ("Where do I work again? Thanks!"). "I now work at the council. Any tips?" tells.
    Asked of every candidate in a search (cached: the same passages come back turn after turn)."""
    if "?" not in (text or ""):
        return False
    sentences = [s.strip() for s in _SENTENCES.split(text or "") if s.strip()]
    asked = [s for s in sentences if s.endswith("?")]
    told = [s for s in sentences if not s.endswith("?") and len(s.split()) > 3]
    return bool(asked) and not told
