"""Facts without a model: what people say that lasts, picked by rules, dated, superseded.

A fact is one clause (a sentence or two) of a source message that states something lasting about
its speaker: who they are, their relations, home, work, plans, preferences, possessions and the
events of their life. Two kinds of rule pick them:

- attribute rules read an exclusive attribute out of a sentence ("I moved to Lisbon" -> lives in
  Lisbon, "my favourite colour is green", "the trip is now on 12 June", "actually it's ..."); a
  newer fact on the same subject and attribute supersedes the older one (its valid_to closes and
  superseded_by links to the newer fact; both stay, nothing is deleted on a contradiction);
- a statement score weighs what marks a message that tells something about its speaker rather
  than reacting to the other person: first-person statements, past events, states ("I'm a ...",
  "I have ..."), the words of a life (job, family, home, pets, hobbies), a time it names, its
  length; against questions, greetings, praise and replies about "you". A message above
  STATEMENT_THRESHOLD gives one fact (attribute "about"), its best clause.

Only MessageQuerySet.sources() are read: text that repeats memory is never a fact. Extraction
runs in background work (memory.tasks), never on a turn's path.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import Q
from django.db.models.signals import pre_delete
from django.dispatch import receiver

from memory.dates import query_period
from memory.models import STATEMENT_LAST, Fact, FactQuerySet, Message, Role
from memory.tokens import count_tokens

logger = logging.getLogger(__name__)

ABOUT = "about"  # the attribute of a statement no newer one replaces
CORRECTION = "correction"
STATEMENT_THRESHOLD = 0.0
MAX_STATEMENT_CHARS = 320

_FIRST = re.compile(r"\b(I|I'm|I've|I'd|I'll|Im|my|me|mine|myself|we|we're|we've|our|us)\b")
_SECOND = re.compile(r"\b(you|your|you're|you've|yours)\b", re.I)
_LIFE = re.compile(
    r"\b(job|work(?:ing|ed|s)?|career|business|company|boss|school|college|university|class(?:es)?|"
    r"degree|studying|moved?|moving|live[sd]?|living|home|house|apartment|city|family|kids?|children|"
    r"son|daughter|wife|husband|partner|boyfriend|girlfriend|married|wedding|divorce|mom|mother|dad|"
    r"father|parents?|brother|sister|grandma|grandmother|friends?|dog|cat|pets?|puppy|born|birthday|"
    r"adopt\w*|volunteer\w*|joined|started|starting|finished|graduat\w*|bought|got|signed|lost|won|"
    r"hired|fired|quit|trip|travel\w*|visit\w*|vacation|camping|hobby|passion|favou?rite|love[sd]?|"
    r"plan(?:s|ning|ned)?|going to|gonna|want to|hoping|decided|learn\w*|paint\w*|book|read|reading|"
    r"game|music|band|concert|instrument|play(?:ing|ed)?|sport|team|race|marathon|run(?:ning)?|hike|"
    r"hiking|church|faith|health|doctor|hospital|surgery|injur\w*|car|project|store|studio|shop|"
    r"recipe|cook\w*|bake\w*|garden\w*|collect\w*)\b",
    re.I,
)
_TIME = re.compile(
    r"\b(yesterday|today|tomorrow|last (?:week|weekend|month|year|night|monday|tuesday|wednesday|"
    r"thursday|friday|saturday|sunday)|next (?:week|month|year|weekend)|recently|ago|"
    r"this (?:week|month|weekend|year)|since|years?|months?|weeks?|January|February|March|April|May|"
    r"June|July|August|September|October|November|December)\b",
    re.I,
)
_PAST = re.compile(
    r"\b(?:I|we)\s+(?:just\s+|finally\s+|recently\s+|also\s+|actually\s+)?(?:\w+ed|went|got|took|"
    r"made|had|did|saw|met|found|bought|began|started|won|lost|ran|gave|left|came|wrote|read|built|"
    r"became|brought|taught|held|sold|threw|grew|drew|felt)\b",
    re.I,
)
_STATE = re.compile(
    r"\b(?:I'm|I am|I've been|I have|I've got|I own|I live|I work|my \w+ (?:is|are|was))\b", re.I
)
_OPENING = re.compile(
    r"^\s*(hey|hi|hello|wow|thanks|thank you|that's|that is|sounds|glad|awesome|cool|great|aww+|"
    r"yeah|haha|congrats|congratulations|so cool|nice|sorry|oh|omg|ha|lol|totally|definitely|"
    r"absolutely|agreed|sure)\b",
    re.I,
)
_PRAISE = re.compile(
    r"\b(proud of you|you got this|good luck|keep (?:it up|going)|take care|bye|see you|"
    r"talk (?:to you )?(?:soon|later)|can't wait to (?:see|hear)|so happy for you|you're (?:so|doing)|"
    r"that's (?:so |really )?(?:great|awesome|amazing|cool))\b",
    re.I,
)
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")
_PHOTO = re.compile(r"\[shares a photo:[^\]]*\]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")

# Weights of the statement score, per sentence kind counted over a message's statements (not its
# questions); set on conversations of two people telling each other about their lives.
_WEIGHTS = {
    "length": 1.5, "photo": -0.25, "sentences": -0.1, "questions": -1.4, "first": 0.25,
    "second": -0.2, "time": 0.9, "past": 0.5, "state": 0.55, "opening": -0.2, "praise": -0.35,
    "name": 0.15, "life": 0.2, "first_opening": -0.35,
}
_BIAS = -7.0


def sentences(text: str) -> list[str]:
    text = _PHOTO.sub(" ", text or "")
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


def _sentence_marks(s: str) -> dict[str, float]:
    question = s.endswith("?")
    return {
        "question": question,
        "first": bool(_FIRST.search(s)) and not question,
        "second": bool(_SECOND.search(s)),
        "life": min(3, len(_LIFE.findall(s))),
        "time": bool(_TIME.search(s)),
        "past": bool(_PAST.search(s)),
        "state": bool(_STATE.search(s)),
        "opening": bool(_OPENING.match(s)),
        "praise": bool(_PRAISE.search(s)),
        "name": bool(_NAME.search(s)),
    }


def statement_score(text: str) -> float:
    """How much a message reads as its speaker telling something about themselves (log-odds;
    above STATEMENT_THRESHOLD it gives a fact)."""
    parts = sentences(text)
    marks = [_sentence_marks(s) for s in parts] or [_sentence_marks("")]
    said = [m for m in marks if not m["question"]]
    features = {
        "length": math.log(1 + len(_PHOTO.sub("", text or ""))),
        "photo": 1.0 if _PHOTO.search(text or "") else 0.0,
        "sentences": min(len(parts), 5),
        "questions": sum(m["question"] for m in marks) / len(marks),
        "life": sum(m["life"] for m in said),
        "first_opening": 1.0 if marks[0]["opening"] else 0.0,
    }
    for key in ("first", "second", "time", "past", "state", "opening", "praise", "name"):
        features[key] = min(3, sum(m[key] for m in said))
    return _BIAS + sum(_WEIGHTS[k] * v for k, v in features.items())


def _clause_rank(s: str) -> float:
    m = _sentence_marks(s)
    return (
        (-5 if m["question"] else 0) + 2 * m["first"] + 0.4 * m["life"] + 0.8 * m["time"]
        + 0.6 * m["past"] + 0.6 * m["state"] - 0.5 * m["opening"] - 0.8 * m["praise"]
        - 0.5 * m["second"] + min(len(s.split()), 30) / 30
    )


def best_clause(text: str) -> str:
    """The sentence (and the one after it, while short) that best states something lasting."""
    parts = sentences(text)
    if not parts:
        return ""
    i = max(range(len(parts)), key=lambda j: _clause_rank(parts[j]))
    clause = parts[i]
    if i + 1 < len(parts) and not parts[i + 1].endswith("?") and len(clause) + len(parts[i + 1]) < 200:
        clause = f"{clause} {parts[i + 1]}"
    return clause[:MAX_STATEMENT_CHARS]


# --- First person to third ------------------------------------------------------------------

_VERB_S = {"have": "has", "do": "does", "go": "goes", "am": "is", "was": "was"}
_PRESENT = re.compile(
    r"^(love|like|want|work|live|hope|think|enjoy|need|plan|feel|prefer|hate|know|own|play|"
    r"teach|study|run|keep|miss|believe|volunteer|paint|write|read|make|try|wish|use|cook|dance)$"
)
_PERSON = [
    (re.compile(r"\bI'm\b|\bI am\b"), "{s} is"),
    (re.compile(r"\bI've\b"), "{s} has"),
    (re.compile(r"\bI'd\b"), "{s} would"),
    (re.compile(r"\bI'll\b"), "{s} will"),
    (re.compile(r"\bmyself\b", re.I), "themselves"),
    (re.compile(r"\bmine\b", re.I), "theirs"),
    (re.compile(r"\bmy\b"), "their"),
    (re.compile(r"\bMy\b"), "Their"),
    (re.compile(r"\bme\b"), "them"),
]


def third_person(text: str, subject: str) -> str:
    """'I moved to Lisbon with my sister' -> 'Ana moved to Lisbon with their sister'."""
    for pattern, replacement in _PERSON:
        text = pattern.sub(replacement.format(s=subject), text)

    def verb(m: re.Match) -> str:
        word = m[2]
        if word in _VERB_S:
            word = _VERB_S[word]
        elif _PRESENT.match(word):
            word = word + ("es" if word.endswith(("sh", "ch", "ss", "o")) else "s")
            word = re.sub(r"([^aeiou])ys$", r"\1ies", word)
        return f"{subject}{m[1]}{word}"

    text = re.sub(r"\bI(\s+(?:really\s+|still\s+|also\s+|just\s+)?)(\w+)", verb, text)
    return text[:1].upper() + text[1:]


# --- Attribute rules ------------------------------------------------------------------------

_VALUE = r"(?P<value>[A-Z][\w'&.-]*(?:\s+(?:of\s+|de\s+)?[A-Z][\w'&.-]*)*)"
_THING = r"(?P<value>[\w'&-]+(?:\s+[\w'&-]+){0,3}?)"
_WHEN = (
    r"(?P<value>(?:the\s+)?(?:\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?)?(?:January|February|March|April|"
    r"May|June|July|August|September|October|November|December|Monday|Tuesday|Wednesday|Thursday|"
    r"Friday|Saturday|Sunday|next\s+\w+|tomorrow|\d{4}-\d{2}-\d{2})(?:\s+\d{1,2}(?:st|nd|rd|th)?)?"
    r"(?:,?\s+\d{4})?)"
)
_PLAN_NOUN = (
    r"(?P<key>trip|flight|holiday|vacation|appointment|interview|wedding|party|meeting|surgery|"
    r"move|visit|concert|exam|launch|dinner|operation|show|race|marathon|match|game|presentation)"
)
_NAME_END = r"\b(?!['&.-]\w)"
_END = r"(?=\s*(?:[.,;!?]|$|\s+(?:and|but|because|since|with|for|now|last|next|this|in\s+(?:19|20)\d\d)\b))"

_I_MOVED = (
    r"\b(?:I|we)\s+(?:just\s+|recently\s+|finally\s+|have\s+|'ve\s+)?(?:moved|relocated)\s+(?:back\s+)?to\s+"
)
_I_WORK = (
    r"\b(?:I|I'm|I am)\s+(?:just\s+|now\s+)?(?:started\s+(?:a\s+new\s+job\s+|working\s+)?|got\s+a\s+job\s+|"
    r"work(?:ing)?\s+|joined\s+)(?:at|for)?\s*"
)
_NO_JOB = r"lost my job|quit my job|got fired|was laid off|got laid off|left my job|retired"
_MY_PARTNER = (
    r"\b[Mm]y\s+(?:new\s+)?(?:boyfriend|girlfriend|partner|husband|wife|fianc[ée]e?)(?:,)?\s+(?:is\s+)?"
)
_DATING = r"\bI(?:'m| am)\s+(?:now\s+)?(?:dating|seeing|engaged to|married to|going out with|with)\s+"
_SINGLE = (
    r"\bI\s+(?P<value>broke up with \w+|split up with \w+|got divorced|am single)\b|"
    r"\bI(?P<value2>'m single)\b"
)
_FAVOURITE = r"\bmy\s+(?:new\s+)?favou?rite\s+(?P<key>\w+(?:\s+\w+)?)\s+(?:is|are)\s+(?:now\s+)?"
_RESCHEDULED = (
    r"(?:\s+to\s+[A-Z]\w+)?\s+(?:is|was|has been|got)\s+(?:now\s+)?(?:moved\s+|rescheduled\s+|postponed\s+|"
    r"pushed\s+(?:back\s+)?|brought\s+forward\s+|set\s+|booked\s+)?(?:to|for|on)\s+"
)
_MOVED_PLAN = r"\b(?:moved|rescheduled|postponed|pushed|changed)\s+(?:back\s+)?(?:my|our|the)\s+"

RULES: list[tuple[str, re.Pattern[str]]] = [
    ("lives in", re.compile(rf"{_I_MOVED}{_VALUE}{_NAME_END}")),
    ("lives in", re.compile(rf"\b(?:I|we)\s+(?:now\s+|still\s+)?live\s+in\s+{_VALUE}{_NAME_END}")),
    ("lives in", re.compile(rf"\b(?:I'm|I am|we're)\s+(?:now\s+)?living\s+in\s+{_VALUE}{_NAME_END}")),
    ("works at", re.compile(rf"{_I_WORK}{_VALUE}{_NAME_END}")),
    ("works at", re.compile(rf"\b(?:my\s+new\s+job|I\s+now\s+work)\s+(?:is\s+)?(?:at|for)\s+{_VALUE}\b")),
    ("works at", re.compile(rf"\bI\s+(?:just\s+|have\s+)?(?P<value>{_NO_JOB})\b", re.I)),
    ("partner", re.compile(rf"{_MY_PARTNER}{_VALUE}{_NAME_END}")),
    ("partner", re.compile(rf"{_DATING}{_VALUE}{_NAME_END}")),
    ("partner", re.compile(_SINGLE, re.I)),
    ("favourite", re.compile(rf"{_FAVOURITE}{_THING}{_END}", re.I)),
    ("plan", re.compile(rf"\b(?:my|our|the)\s+{_PLAN_NOUN}{_RESCHEDULED}{_WHEN}", re.I)),
    ("plan", re.compile(rf"{_MOVED_PLAN}{_PLAN_NOUN}(?:\s+to\s+[A-Z]\w+)?\s+to\s+{_WHEN}", re.I)),
]
_LIKES = re.compile(
    r"\bI\s+(?P<how>(?:really\s+|absolutely\s+|still\s+)?(?:love|like|enjoy|adore)|"
    r"(?:now\s+)?(?:hate|dislike|can't stand)|(?:no longer|don't)\s+(?:really\s+)?(?:like|love|enjoy))\s+"
    r"(?P<value>[a-z][\w'-]+(?:\s+(?!anymore|any\b|now\b|these\b|too\b|so\b|a lot)[a-z][\w'-]+)?)"
    r"(?:\s+(?:anymore|any more|now|these days|too|so much|a lot))?\s*(?:[.!,]|$)"
)
_CORRECTION = re.compile(
    r"^(?:actually|sorry|correction|oops|wait)[,:!]?\s+(?:it's|it is|it was|I meant|that's|that should be)\s+"
    r"(?P<value>[^,.;!]+?)(?:,?\s+not\s+(?P<old>[^,.;!]+?))?\s*[.!]?$",
    re.I,
)
_NOT_A_VALUE = {"a", "the", "it", "that", "this", "there", "here", "home", "work", "him", "her", "them"}


@dataclass
class Found:
    attribute: str
    value: str
    clause: str
    score: float = 0.0
    old: str = ""  # a correction's "not X"
    refers: tuple[dt.datetime, dt.datetime] | None = None
    extra: dict = field(default_factory=dict)


def attribute_facts(sentence: str) -> list[Found]:
    """The exclusive attributes a sentence states about its speaker."""
    if sentence.endswith("?"):
        return []
    if m := _CORRECTION.match(sentence):
        return [Found(CORRECTION, m["value"].strip(), sentence, old=(m["old"] or "").strip())]
    found: list[Found] = []
    for attribute, pattern in RULES:
        m = pattern.search(sentence)
        if not m:
            continue
        value = (m.groupdict().get("value") or m.groupdict().get("value2") or "").strip()
        if not value or value.lower() in _NOT_A_VALUE:
            continue
        key = (m.groupdict().get("key") or "").lower()
        name = {"favourite": f"favourite {key}", "plan": f"plan: {key}"}.get(attribute, attribute)
        if any(f.attribute == name for f in found):
            continue
        found.append(Found(name, value, sentence))
    if m := _LIKES.search(sentence):
        liked = not re.match(r"(?:now\s+)?(?:hate|dislike|can't)|don't|no longer", m["how"])
        found.append(Found(f"likes {m['value'].lower()}", "likes" if liked else "dislikes", sentence))
    return found


def extract(text: str) -> list[Found]:
    """The facts a message states about its speaker: its attribute facts, else (a message above
    the statement threshold) its best clause."""
    found = [f for s in sentences(text) for f in attribute_facts(s)]
    if found:
        return found
    score = statement_score(text)
    if score < STATEMENT_THRESHOLD:
        return []
    clause = best_clause(text)
    return [Found(ABOUT, "", clause, score=score)] if clause else []


# --- Storing, supersession --------------------------------------------------------------------


def subject_of(message: Message) -> str | None:
    """Whom a message speaks for: the speaker an import recorded, else the user for the user's own
    messages. An assistant's reply in a chat states nothing about anyone's life."""
    speaker = (message.metadata or {}).get("speaker")
    if isinstance(speaker, str) and speaker.strip():
        return " ".join(speaker.split())[:200]
    return "the user" if message.role == Role.USER else None


def _key(subject: str) -> str:
    return " ".join(subject.lower().split())


def _period(clause: str, said_at: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    return query_period(clause, now=said_at)


def _statement(found: Found, subject: str) -> str:
    """The fact in a sentence about its subject ("Ana's partner is Sam", "Ana lost their job")."""
    if found.extra.get("statement"):
        return found.extra["statement"][:MAX_STATEMENT_CHARS]  # the model's own sentence
    attribute, value = found.attribute, found.value
    if attribute == ABOUT or attribute.startswith("likes "):
        return third_person(found.clause, subject)
    if not value[:1].isupper() and attribute in ("works at", "partner"):
        return third_person(f"I {value}", subject)  # "lost my job", "broke up with Sam"
    if attribute.startswith("plan: "):
        return f"{subject}'s {attribute.removeprefix('plan: ')} is planned for {value}"
    if attribute.startswith("favourite "):
        return f"{subject}'s {attribute} is {value}"
    if attribute == "partner":
        return f"{subject}'s partner is {value}"
    return f"{subject} {attribute} {value}"


def supersede(old: Fact, new: Fact) -> None:
    """`new` replaces `old`: old's validity ends where new's begins, and they are linked."""
    old.valid_to = new.valid_from
    old.superseded_by = new
    old.save(update_fields=["valid_to", "superseded_by"])


def _correct(owner, subject: str, found: Found, message: Message) -> Fact | None:
    """'Actually it's X[, not Y]': the latest current exclusive fact of the subject (the one naming
    Y, when given) is superseded by the same fact with X."""
    facts = Fact.objects.owned_by(owner).current().about(subject).exclude(attribute=ABOUT)
    if found.old:
        facts = facts.filter(Q(value__icontains=found.old) | Q(statement__icontains=found.old))
    target = facts.order_by("-valid_from", "-id").first()
    if target is None:
        return None
    new = Fact.objects.create(
        owner=owner, message=message, subject=subject, subject_key=_key(subject),
        attribute=target.attribute, value=found.value,
        statement=_statement(Found(target.attribute, found.value, found.clause), subject),
        said_at=message.timestamp, valid_from=message.timestamp,
        refers_from=target.refers_from, refers_to=target.refers_to,
    )
    supersede(target, new)
    return new


def store_found(owner, message: Message, subject: str, found: Found, origin: str = "rules") -> Fact | None:
    """Store one found fact of a message; a newer one on the same subject and exclusive
    attribute supersedes the current one (the same value said again adds nothing)."""
    if found.attribute == CORRECTION:
        return _correct(owner, subject, found, message)
    period = _period(found.clause, message.timestamp)
    previous = None
    if found.attribute != ABOUT:
        previous = (
            Fact.objects.owned_by(owner).current().about(subject).filter(attribute=found.attribute)
            .order_by("-valid_from", "-id").first()
        )
        if previous and previous.value.lower() == found.value.lower():
            return None
        if previous and previous.valid_from > message.timestamp:
            previous = None  # an older message read late does not undo a newer fact
    fact = Fact.objects.create(
        owner=owner, message=message, subject=subject, subject_key=_key(subject),
        attribute=found.attribute, value=found.value[:300], statement=_statement(found, subject),
        said_at=message.timestamp, valid_from=message.timestamp,
        refers_from=period[0] if period else None, refers_to=period[1] if period else None,
        origin=origin, score=found.score,
    )
    if previous is not None:
        supersede(previous, fact)
    return fact


def extract_messages(owner, message_ids: Iterable[str] | None = None) -> int:
    """Facts of these messages (all the owner's messages when None), oldest first so a later
    statement supersedes an earlier one. Messages that already have facts are skipped; only
    sources() are read. Returns how many facts were stored."""
    messages = Message.objects.owned_by(owner).logical().visible().sources().filter(facts__isnull=True)
    if message_ids is not None:
        messages = messages.filter(pk__in=list(message_ids))
    stored = 0
    for message in messages.order_by("timestamp", "position").iterator(chunk_size=500):
        subject = subject_of(message)
        if subject is None:
            continue
        with transaction.atomic():
            for found in extract(message.content):
                stored += store_found(owner, message, subject, found) is not None
    return stored


def refresh_messages(owner, message_ids: Iterable[str]) -> dict[str, int]:
    """Background upkeep for these messages: an edited message's facts are drawn again (those the
    person pinned or corrected stay), a message that no longer is a source loses its facts, and
    new messages get theirs."""
    ids = [str(i) for i in message_ids]
    stale = Fact.objects.owned_by(owner).filter(message_id__in=ids, pinned=False, corrected="").filter(
        Q(message__edited=True) | Q(pk__in=Fact.objects.exclude(message__in=Message.objects.sources()))
    )
    removed = 0
    with transaction.atomic():
        for fact in stale:
            if fact.message.edited and fact.created_at > _last_edit(fact.message):
                continue  # drawn from the edited text already
            fact.delete()
            removed += 1
    done = {"facts_removed": removed, "facts": extract_messages(owner, ids)}
    return done | propose_with_model(owner, ids)


def _last_edit(message: Message) -> dt.datetime:
    times = [e.get("timestamp") for e in message.edit_history or [] if isinstance(e, dict)]
    parsed = [dt.datetime.fromisoformat(t) for t in times if isinstance(t, str)]
    return max(parsed, default=message.timestamp)


@receiver(pre_delete, sender=Fact, dispatch_uid="memory.knowledge.facts.reopen_superseded")
def _reopen_superseded(sender, instance: Fact, **kwargs) -> None:
    """A fact that goes (its message forgotten, or the person forgot it) gives the fact it had
    superseded its validity back: what it replaced holds again."""
    Fact.objects.filter(superseded_by_id=instance.pk).update(valid_to=None, superseded_by=None)


def about_entity(owner, name: str, aliases: Iterable[str] = ()) -> FactQuerySet:
    """The facts about someone or something the entity graph names: theirs (the subject), and
    those that name them."""
    names = [n for n in [name, *aliases] if n and len(n) > 1]
    match = Q()
    for n in names:
        match |= Q(subject_key=_key(n)) | Q(value__iregex=rf"\m{re.escape(n)}\M") \
            | Q(statement__iregex=rf"\m{re.escape(n)}\M")
    return Fact.objects.owned_by(owner).live().filter(match) if names else Fact.objects.none()


# --- What the model is shown ------------------------------------------------------------------

INDEX_SHARE = 0.15  # of the memory zone, at most, for the facts about the people a message names
INDEX_MAX_FACTS = 24
_WORD = re.compile(r"[\w'-]+")


def subjects_named(owner, text: str, user_subject: str = "the user") -> list[str]:
    """The subjects with current facts that `text` names, after the user (always first: they are
    the one talking). Read from at most 500 distinct subjects (subject_keys)."""
    lowered = " ".join(_WORD.findall((text or "").lower()))
    user = _key(user_subject)
    named = [k for k in subject_keys(owner) if k != user and _names(lowered, k)]
    return [user, *sorted(named, key=lowered.find)]


# The distinct subjects of an owner's current facts, in key order, one descent of the
# fact_current_rank index each (a DISTINCT reads every current fact, and joined each to its
# message: half a second a turn at 25,000 facts).
_SUBJECT_KEYS = """
    WITH RECURSIVE keys AS (
        (SELECT subject_key FROM memory_fact WHERE owner_id = %(owner)s
         AND superseded_by_id IS NULL ORDER BY subject_key LIMIT 1)
        UNION ALL
        SELECT (SELECT f.subject_key FROM memory_fact f WHERE f.owner_id = %(owner)s
                AND f.superseded_by_id IS NULL AND f.subject_key > keys.subject_key
                ORDER BY f.subject_key LIMIT 1)
        FROM keys WHERE keys.subject_key IS NOT NULL
    )
"""


def subject_keys(owner, limit: int = 500) -> list[str]:
    """The keys of the subjects of the owner's current facts (at most `limit`, in key order). A
    subject whose facts all come from deleted messages is among them: current_for_index finds
    nothing to show for it."""
    with connection.cursor() as cursor:
        cursor.execute(
            _SUBJECT_KEYS + "SELECT subject_key FROM keys WHERE subject_key IS NOT NULL LIMIT %(limit)s",
            {"owner": owner.pk, "limit": limit},
        )
        return [row[0] for row in cursor.fetchall()]


def subject_names(owner, limit: int) -> list[str]:
    """The subjects of the owner's current live facts as they were written (at most `limit`, in
    key order)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _SUBJECT_KEYS
            + """
            SELECT named.subject FROM keys, LATERAL (
                SELECT f.subject FROM memory_fact f JOIN memory_message m ON m.id = f.message_id
                WHERE f.owner_id = %(owner)s AND f.subject_key = keys.subject_key
                  AND f.superseded_by_id IS NULL AND NOT m.deleted
                ORDER BY f.id DESC LIMIT 1) named
            WHERE keys.subject_key IS NOT NULL LIMIT %(limit)s
            """,
            {"owner": owner.pk, "limit": limit},
        )
        return [row[0] for row in cursor.fetchall()]


def current_count(owner, subject: str) -> int:
    """How many current facts about `subject` hold (their messages not deleted): those the index
    counts, less those of deleted messages (found from the deleted messages, usually few), not a
    join of every fact to its message."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT (SELECT count(*) FROM memory_fact WHERE owner_id = %(owner)s
                    AND subject_key = %(key)s AND superseded_by_id IS NULL)
                 - (SELECT count(*) FROM memory_message m JOIN memory_fact f ON f.message_id = m.id
                    WHERE m.owner_id = %(owner)s AND m.deleted AND f.owner_id = %(owner)s
                      AND f.subject_key = %(key)s AND f.superseded_by_id IS NULL)
            """,
            {"owner": owner.pk, "key": _key(subject)},
        )
        return int(cursor.fetchone()[0])


_WORD_CHAR = re.compile(r"\w")


def _names(lowered: str, key: str) -> bool:
    """`key` occurs in `lowered` between word boundaries: re.search(rf"\\b{re.escape(key)}\\b")
    without compiling a pattern per subject (hundreds a turn, past the re module's cache)."""
    at = lowered.find(key)
    while at >= 0:
        if _boundary(lowered, at) and _boundary(lowered, at + len(key)):
            return True
        at = lowered.find(key, at + 1)
    return False


def _boundary(text: str, at: int) -> bool:
    before = at > 0 and _WORD_CHAR.match(text[at - 1]) is not None
    after = at < len(text) and _WORD_CHAR.match(text[at]) is not None
    return before != after


def _day(value: dt.datetime | None) -> str:
    return value.strftime("%Y-%m-%d") if value else ""


def fact_line(fact: Fact) -> str:
    """One fact as the model reads it: the statement, since when it holds and what it replaced,
    and the message that says it (readable with get_message_by_id)."""
    since = f"since {_day(fact.valid_from)}" if fact.attribute != ABOUT else f"said {_day(fact.said_at)}"
    previous = next(iter(fact.supersedes.all()), None)
    before = f"; was: {previous.value or previous.text}" if previous is not None else ""
    about = f"; about {_day(fact.refers_from)}..{_day(fact.refers_to)}" if fact.refers_from else ""
    pinned = "pinned; " if fact.pinned else ""
    return f"- {fact.text} ({pinned}{since}{about}{before}) [msg {fact.message_id}]"


def current_for_index(owner, text: str, limit: int = INDEX_MAX_FACTS) -> list[Fact]:
    """The current facts about the people `text` names (the user first): pinned ones, then the
    exclusive attributes (home, work, partner, plans...), then the newest statements."""
    chosen: list[Fact] = []
    for subject in subjects_named(owner, text):
        chosen += list(ranked(owner, subject).prefetch_related("supersedes")[: limit - len(chosen)])
        if len(chosen) >= limit:
            break
    return chosen


def ranked(owner, subject: str) -> FactQuerySet:
    """A subject's current facts in the order the index shows them, which is the order of the
    fact_current_rank index: the first rows are read from its top, however many there are."""
    return (
        Fact.objects.owned_by(owner).current().about(subject)
        .order_by("-pinned", STATEMENT_LAST, "-valid_from", "-id")
    )


def write_index(writer, facts: list[Fact], share: float = INDEX_SHARE) -> list[str]:
    """Write the FACTS section of a turn's memory index into `writer` (memory.context.index_builder's
    line writer): `facts` (current_for_index's, read while the turn's search runs) within `share`
    of its allowance. Returns the source message ids it names."""
    if not facts:
        return []
    room = int(writer.allowance * share)
    start = writer.used
    header = "FACTS (what holds now about the people named; get_facts for more and for what changed):"
    if not writer.add(header):
        return []
    named: list[str] = []
    subject = None
    for fact in facts:
        line = fact_line(fact) if fact.subject == subject else f"{fact.subject}:\n{fact_line(fact)}"
        if writer.used - start + count_tokens(line + "\n") > room or not writer.add(line):
            break
        subject = fact.subject
        named.append(fact.message_id)
    if not named:
        writer.lines.pop()  # the header alone says nothing
        writer.used = start
    return named


# --- With a model ---------------------------------------------------------------------------

MODEL_SYSTEM = (
    "You keep a list of lasting facts about people from their messages. Messages to read follow, "
    "each as [n] speaker (date): text. For each message that states something lasting about "
    "someone (who they are, relations, home, work, plans with dates, preferences, possessions, "
    "events in their life), write one line: [n] subject | attribute | value | fact. subject: the "
    "speaker's name as given (or a person the message names); attribute: one of lives in, works "
    "at, partner, favourite <thing>, plan: <thing>, likes <thing>, or about; value: the place, "
    "employer, name, date or thing (empty for about); fact: one short third-person sentence. "
    "Skip greetings, questions, small talk and praise. If no message states a fact, answer NONE."
)
MODEL_BATCH = 20
MODEL_EXCERPT_CHARS = 600
_MODEL_LINE = re.compile(r"^\s*\[(\d{1,3})\]\s*([^|]{1,200})\|([^|]{1,200})\|([^|]{0,300})\|(.{3,400})$")
_EXCLUSIVE = ("lives in", "works at", "partner")


def _model_attribute(attribute: str) -> str | None:
    attribute = " ".join(attribute.lower().split())
    if attribute in (*_EXCLUSIVE, ABOUT) or attribute.startswith(("favourite ", "plan: ", "likes ")):
        return attribute[:200]
    return None


def model_prompt(messages: list[Message]) -> str:
    lines = ["Messages to read:"]
    for i, m in enumerate(messages, 1):
        text = " ".join(m.content.split())[:MODEL_EXCERPT_CHARS]
        lines.append(f"[{i}] {subject_of(m)} ({_day(m.timestamp)}): {text}")
    return "\n".join(lines)


def parse_model_facts(answer: str, messages: list[Message]) -> list[tuple[Message, str, Found]]:
    """(message, subject, found) for each well-formed line of the model's answer that names a
    message of the batch, an attribute it knows, and a subject that is the message's speaker or
    named in it (anything else is dropped: a fact must come from its source)."""
    proposed = []
    for line in (answer or "").splitlines():
        m = _MODEL_LINE.match(line.strip())
        if not m or not 1 <= int(m[1]) <= len(messages):
            continue
        message = messages[int(m[1]) - 1]
        subject, attribute = " ".join(m[2].split()), _model_attribute(m[3])
        value, statement = " ".join(m[4].split()), " ".join(m[5].split())
        speaker = subject_of(message) or ""
        if attribute is None or (attribute != ABOUT and not value):
            continue
        named = re.search(rf"\b{re.escape(subject)}\b", message.content, re.I)
        if _key(subject) != _key(speaker) and not named:
            continue
        found = Found(attribute, value, statement, extra={"statement": statement})
        proposed.append((message, subject, found))
    return proposed


def propose_with_model(owner, message_ids: Iterable[str], client=None) -> dict[str, int]:
    """With a model configured (memory.organizing.summaries.is_configured), ask FACTS_MODEL for the facts of
    these messages, MODEL_BATCH at a time; each proposed fact is stored with its source message
    (origin "model") and supersedes as a rule's would. The model's statements replace the rules'
    statement facts of the messages it read (not the pinned or corrected ones). A provider
    failure leaves the rules' facts as they are."""
    from django.conf import settings

    from memory.organizing import summaries

    if not summaries.is_configured():
        return {"proposed": 0}
    # A message the model has read already is read again only once edited.
    unread = Q(edited=True) | ~Q(pk__in=Fact.objects.filter(origin="model").values("message_id"))
    messages = [
        m for m in Message.objects.owned_by(owner).logical().visible().sources()
        .filter(unread, pk__in=[str(i) for i in message_ids]).order_by("timestamp", "position")
        if subject_of(m) is not None
    ]
    client = client or summaries._client()
    stored = failed = 0
    for start in range(0, len(messages), MODEL_BATCH):
        batch = messages[start : start + MODEL_BATCH]
        try:
            response = client.chat.completions.create(
                model=settings.FACTS_MODEL,
                messages=[{"role": "system", "content": MODEL_SYSTEM},
                          {"role": "user", "content": model_prompt(batch)}],
                max_tokens=800, temperature=0,
            )
            answer = (response.choices[0].message.content or "") if response.choices else ""
        except Exception as exc:  # noqa: BLE001 - a provider problem; the rules' facts stay
            failed += 1
            logger.warning("fact proposal failed (%s): %s", type(exc).__name__, str(exc)[:200])
            continue
        proposed = parse_model_facts(answer, batch)
        with transaction.atomic():
            read = {m.pk for m, _, _ in proposed}
            replaced = Fact.objects.filter(message_id__in=read, pinned=False, corrected="").filter(
                Q(origin="model") | Q(origin="rules", attribute=ABOUT)
            )
            for fact in replaced:
                fact.delete()
            for message, subject, found in proposed:
                stored += store_found(owner, message, subject, found, origin="model") is not None
    return {"proposed": stored, "failed_batches": failed}
