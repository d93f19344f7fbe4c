"""What a question asks for, beyond its words: whose words answer it, whether it seeks a fact
(so a turn that only asks about it is no answer), whether it wants the present value, and
whether it asks for a suggestion for the person (so what they said they like answers it).

Read by memory.finding.fusion when it ranks; plain rules over the question's own words, so they
hold for any history (measured by `manage.py eval_recall` on LoCoMo and LongMemEval).
"""

from __future__ import annotations

import functools
import re

# "What did you suggest…", "the restaurant you recommended", "the dish you pointed me to",
# "remind me what you said about…": the assistant's words answer it, not the person's own. A
# grammar, not a list of verbs: "you" before a verb in the past ("you said", "you pointed me to",
# "you just mentioned"), "did / have you" before any verb, "your" before what a reply holds.
# "What would you suggest?" and "Could you recommend…" ask for new advice: the person's own
# situation answers them, not an earlier reply.
_PAST_IRREGULAR = (
    "said|told|gave|wrote|shared|came up with|brought up|put|sent|showed|shown|found|made|"
    "thought|taught|meant|chose|drew|read|got|went over|ran through"
)
_ASKS_ABOUT_ASSISTANT = re.compile(
    rf"\byou\s+(?:\w+ly\s+|just\s+|once\s+|already\s+|also\s+)?(?:[a-z]+ed|{_PAST_IRREGULAR})\b"
    r"|\b(?:did|have|had)\s+you\s+(?:\w+\s+)?(?:[a-z]+)\b"
    r"|\byour\s+(?:suggestion|recommendation|answer|advice|list|reply|response|explanation|tips?|"
    r"idea|ideas|pick|picks|example)s?\b",
    re.I,
)
# "you" that is the person asking in a question put to someone else ("did you know", "have you
# got a minute") is rare in a question about memory; these few readings are not about a reply.
_NOT_ABOUT_REPLY = re.compile(r"\b(?:did|have|had)\s+you\s+(?:ever\s+)?(?:know|got|been|heard)\b", re.I)
# The person, and "we" / "our" (the person with others: "how many bass did we land?"); "US" in
# capitals is the country, not "us".
_FIRST_PERSON = re.compile(
    r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll|im|ive|we|our|ours|ourselves|we've|we're)\b"
    r"|(?-i:\bus\b)",
    re.I,
)
# A question seeks a fact when it asks something (a question word or a question mark, or "remind
# me / tell me…") and does not ask for advice: "Any recommendations?", "What would you suggest?",
# "Do you think it's my living room?", "Should I…" want the person's situation, not a fact.
_QUESTION_WORD = re.compile(r"\b(?:what|which|where|when|who|whom|whose|why|how)\b", re.I)
_ASKS_ASIDE = re.compile(
    r"^(?:(?:so|and|hey|hi|ok|okay|please|quick question|by the way)[,:]?\s+)*"
    r"(?:remind me|tell me|do you (?:remember|know|recall)"
    r"|i (?:forget|forgot|can't remember|don't remember))\b",
    re.I,
)
_WANTS_ADVICE = re.compile(
    r"\bany\s+(?:recommendations?|suggestions?|ideas?|tips?|advice|thoughts)\b"
    r"|\b(?:would|could|can|do|will)\s+you\s+(?:\w+\s+)?(?:suggest|recommend|advise|propose)\b"
    r"|\b(?:what|which|where|how)\s+should\s+i\b|^\s*should\s+i\b"
    r"|\bwhat\s+(?:do|would)\s+you\s+(?:suggest|recommend)\b",
    re.I,
)
# "Do you think it might be my living room?" asks for advice about the person; "do you think
# Caroline keeps Dr. Seuss books?" asks what the memory holds about someone.
_ASKS_OPINION = re.compile(r"\byou\s+think\b", re.I)
_OPENS_WITH_VERB = re.compile(
    r"^(?:(?:so|and|hey|hi|ok|okay)[,:]?\s+)*"
    r"(?:did|do|does|have|has|had|is|are|was|were|am|would|will|could|can)(?!\s+you\b)\b",
    re.I,
)
# ...unless what it seeks is a question once asked.
_ASKS_ABOUT_QUESTIONS = re.compile(r"\b(?:ask|asked|asking|question|questions|wonder|wondered)\b", re.I)
# The present value: "Where do I work now?", "my current car", "the latest version", "still",
# "at this point", "today", "my last trip" (the most recent, not "last month": a unit of time
# after "last" is a period, read by memory.dates).
_PRESENT = re.compile(
    r"\b(?:now|currently|current|latest|still|anymore|any more|these days|at the moment|at present|"
    r"nowadays|most recent|most recently|right now|so far|to date|at this point|as of today|today|"
    r"up to now|by now|as things stand|presently)\b"
    r"|\b(?:the|my|our|his|her|their)\s+(?:very\s+)?last\s+(?!(?:day|days|week|weeks|weekend|month|months|"
    r"year|years|night|time|monday|tuesday|wednesday|thursday|friday|saturday|sunday|spring|summer|"
    r"fall|autumn|winter|few|couple|two|three)\b)[a-z]",
    re.I,
)
# A question in the present tense about the person ("How many bikes do I own?", "Where am I
# staying?") wants what holds now too.
_PRESENT_ABOUT_ME = re.compile(
    r"\b(?:do|does|am|is|are)\s+(?:i|my)\b|\bi\s+(?:have|own|use|live|work)\b"
    r"|\b(?:i|we)(?:'ve|\s+have)\s+(?:got|had)\b|\bhave\s+(?:i|we)\s+(?:got|had)\b",
    re.I,
)
# A question about when something happened. A small grammar rather than the openings seen so far:
# - "when" as a question word: before a verb ("when did…", "when's that…", "when exactly was…"),
#   or closing the question ("…, when?"), or after a verb of telling or knowing ("tell me when…",
#   "do you remember when…"); "when I started…, how many…" (a clause) and "whenever" are not;
# - a word for a moment asked after: "what / which day, date(s), month, year, weekday…", "at what
#   point", "the date(s) of…", "how long ago", "how many years back";
# - a count of days between two moments: "how many days passed between / before / after…", "how
#   many days was that ahead of…", "the gap in days".
# A habit ("when do I usually go to the gym?") asks for a time of day, not a moment.
_TIME_UNITS = r"(?:days?|dates?|months?|years?|weeks?|weekends?|weekdays?|seasons?|time of (?:the )?year)"
_AUX = (
    r"(?:did|does|do|is|was|were|will|would|has|have|had|are|am|can|could|should|might|may)"
)
_ASKS_WHEN = re.compile(
    rf"\bwhen(?:'s|'d|'re|\s+(?:exactly\s+|roughly\s+|about\s+)?{_AUX}\b|\s+exactly\b|\s*[?.!]*\s*$)"
    r"|\b(?:tell|remind|show)\s+(?:me|us)\s+when\b|\b(?:remember|recall|know|forget|forgot|sure)\s+when\b"
    rf"|\b(?:what|which)(?:'s|\s+(?:was|were|is|are))?\s+(?:the\s+)?(?:exact\s+|specific\s+)?{_TIME_UNITS}\b"
    rf"|\bthe\s+(?:exact\s+)?(?:date|dates|day|month|year)\s+(?:of|when)\b"
    r"|\bat\s+what\s+(?:point|time of (?:the )?year|stage)\b|\bsince\s+when\b"
    r"|\bhow\s+long\s+ago\b|\bhow\s+(?:many|much)\s+(?:\w+\s+)?(?:days|weeks|months|years|time)\s+(?:back|ago)\b"
    r"|\bhow\s+(?:many|much)\s+(?:days|weeks|months|years|time)\s+(?:\w+\s+){0,4}?"
    r"(?:passed|went by|elapsed|between|before|after|since|ago|ahead of|apart|earlier|later)\b"
    r"|\bgap\s+in\s+(?:days|weeks|months|years)\b",
    re.I,
)
_HABIT = re.compile(
    r"\b(?:usually|normally|typically|generally|always|often|regularly|every|each|on\s+\w+s)\b", re.I
)
# "When Jon has lost his job?": "when" opening a question with no other question asked after it.
_OPENS_WITH_WHEN = re.compile(r"^(?:(?:so|and|hey|hi|ok|okay)[,:]?\s+)*when\b(?!ever)", re.I)
_LATER_QUESTION = re.compile(r"[,;:\u2014-]\s*(?:and\s+)?(?:what|which|where|who|whom|whose|why|how)\b", re.I)
# "Remind me…", "Can you tell me…", "Do you remember…": a request about the question, not the
# person's part in what it asks.
_REQUEST = re.compile(
    r"\b(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?)?(?:remind|tell|show)\s+me\b"
    r"|\b(?:can|could|would)\s+you\s+(?:please\s+)?(?:help\s+me\s+)?(?:remember|recall)\b"
    r"|\bi\s+(?:forget|forgot|can't\s+remember|don't\s+remember|wonder|was\s+wondering)\b",
    re.I,
)

# A request for a suggestion for the person ("Any ideas for something to stream?", "Can you
# recommend an app that would suit me?", "What should I do about it?", "a graphic novel I'd
# like?"): what the person once said they like, avoid or want answers it, though it shares no word
# with the request. A grammar of asking for advice, not a list of topics; "what did you recommend"
# asks what the assistant said (speaker), and "What advice did Caroline give?" is no request.
_ASKS_SUGGESTION = re.compile(
    r"\b(?:can|could|would|will)\s+you\s+(?:please\s+)?(?:\w+\s+)?(?:suggest|recommend|advise|propose)\b"
    r"|\bwhat\s+(?:would|do|could|can)\s+you\s+(?:suggest|recommend|advise|propose)\b"
    r"|\b(?:any|some|got|have|need)\s+(?:good\s+|other\s+|more\s+)?"
    r"(?:ideas?|suggestions?|recommendations?|tips|advice|pointers)\b"
    r"|\b(?:what|how|where|which)\s+should\s+(?:i|we)\b|^\s*should\s+(?:i|we)\b"
    r"|\b(?:suit|suits|fit|fits)\s+(?:me|us)\b|\bi'?d\s+(?:like|enjoy|love)\s*\?"
    r"|\b(?:i'm|i\s+am)\s+looking\s+for\b|\brecommend\s+me\b|\bsuggest\s+me\b",
    re.I,
)
# The person's own taste, habit, constraint or dislike, said in passing: "I love snapper", "I'm
# really into indie rock", "I've been watching a lot of documentaries", "I'd prefer fewer
# notifications", "I can't stand cilantro", "I'm allergic to nuts", "my favourite is…". First
# person only: the assistant's "you love…" repeats it, and a request ("can you recommend…")
# states nothing unless one of these rides along.
_STATES_TASTE = re.compile(
    r"\b(?:i'm|i\s+am)\s+(?:\w+\s+)?(?:into|a\s+(?:\w+\s+)?fan\s+of|interested\s+in|passionate\s+about|"
    r"obsessed\s+with|allergic\s+to|intolerant|vegan|vegetarian|not\s+a\s+fan|not\s+into|"
    r"trying\s+to\s+(?:avoid|cut|reduce|limit|stay|eat|save))\b"
    r"|\bi(?:'ve|\s+have)\s+(?:\w+\s+)?been\s+(?:\w+\s+)?(?:into|loving|enjoying|craving|watching|reading|"
    r"listening\s+to|getting\s+into|hooked|obsessed|avoiding|trying\s+to\s+avoid)\b"
    r"|\bi\s+(?:\w+ly\s+|just\s+|also\s+|still\s+|do\s+)?(?:love|like|enjoy|adore|prefer|hate|dislike|"
    r"loathe|avoid|crave|loved|enjoyed|liked|can't\s+stand|cannot\s+stand|don't\s+(?:like|eat|drink))\b"
    r"|\bi(?:'d|\s+would)\s+(?:\w+\s+)?(?:prefer|rather)\b"
    r"|\bmy\s+(?:\w+\s+)?(?:favou?rites?|go-to)\b|\bi\s+wish\b",
    re.I,
)


_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")


def _without_request(query: str) -> str:
    """`query` without its polite request ("remind me", "can you tell me", "I forget")."""
    return _REQUEST.sub(" ", query)


def speaker(query: str) -> str | None:
    """Whose words answer `query`: "assistant" when it asks what the assistant said or
    recommended, "user" when it asks about the person ("I", "my", "me"), else None (a question
    about someone by name, or no one)."""
    if _ASKS_ABOUT_ASSISTANT.search(query) and not _NOT_ABOUT_REPLY.search(query):
        return "assistant"
    if _FIRST_PERSON.search(_without_request(query)):
        return "user"
    return None


def seeks_fact(query: str) -> bool:
    """Whether `query` asks for a fact (so a turn that only asks about its subject is no answer)."""
    question = query.strip()
    asks = "?" in question or _QUESTION_WORD.search(question) or _ASKS_ASIDE.search(question)
    asks = asks or _OPENS_WITH_VERB.search(question)
    if not asks or _WANTS_ADVICE.search(question):
        return False
    if _ASKS_OPINION.search(question) and _FIRST_PERSON.search(_without_request(question)):
        return False
    return not _ASKS_ABOUT_QUESTIONS.search(question)


def wants_present(query: str) -> bool:
    """Whether `query` asks what holds now (the newest statement of it answers first)."""
    return bool(_PRESENT.search(query) or _PRESENT_ABOUT_ME.search(query))


def asks_when(query: str) -> bool:
    """Whether `query` asks when something happened (a turn that says when answers it)."""
    question = query.strip()
    opens = _OPENS_WITH_WHEN.search(question) and not _LATER_QUESTION.search(question)
    if not (opens or _ASKS_WHEN.search(question)):
        return False
    # "When do I usually go to the gym?" asks for a time of day, not a moment.
    habit = re.search(r"\bwhen\s+(?:do|does)\b", question, re.I) and _HABIT.search(question)
    return not habit


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


def asks_suggestion(query: str) -> bool:
    """Whether `query` asks for a suggestion for the person (not what the assistant suggested)."""
    return bool(_ASKS_SUGGESTION.search(query.strip())) and speaker(query) != "assistant"


@functools.lru_cache(maxsize=4096)
def states_taste(text: str) -> bool:
    """Whether `text` says what its speaker likes, avoids, prefers or keeps doing (cached, as
    only_asks: asked of every candidate of a request for a suggestion)."""
    return bool(_STATES_TASTE.search(text or ""))
