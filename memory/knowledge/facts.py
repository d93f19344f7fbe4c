"""Facts without a model: what people say that lasts, picked by rules, dated, superseded.

A fact is one thing about a person, in a clause of their own (memory.knowledge.statements picks
the clauses a person would keep, and leaves out pasted text, requests, questions, greetings and
reactions to an answer). It keeps the speaker's own words in the first person (`wording`): the
person reads it in the second person, anyone else in the third (memory.knowledge.wording). Two
kinds of rule draw them:

- attribute rules read an exclusive attribute out of a sentence ("I moved to Lisbon" -> lives in
  Lisbon, "my favourite colour is green", "the trip is now on 12 June", "actually it's ..."); a
  newer fact on the same subject and attribute supersedes the older one;
- every other clause is a statement (attribute "about", with its kind: health, family, work,
  count, plan…); a newer statement that gives a new value for the same thing supersedes the
  older one ("I now lead five engineers" after "I lead 4 engineers"; memory.knowledge.updates),
  and one that says the same as a current fact adds its message to that fact instead of a copy.

Superseding closes the older fact's valid_to and links superseded_by to the newer one; both
stay, nothing is deleted on a contradiction. A date a fact names is read against the day it was
said, forward for what is planned (memory.dates.resolve_when).

Only MessageQuerySet.sources() are read: text that repeats memory is never a fact. Extraction
runs in background work (memory.tasks, through memory.knowledge.fact_refresh, which also asks a
configured model), never on a turn's path, except a person's explicit "remember that…", which
the turn stores at once (`remember_now`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.db.models.signals import pre_delete
from django.dispatch import receiver

from memory.dates import resolve_when
from memory.knowledge import statements, updates, wording
from memory.models import STATEMENT_LAST, Fact, FactQuerySet, Message, Role
from memory.tokens import count_tokens

ABOUT = "about"  # a statement: no exclusive attribute, superseded only by a new value of its own
CORRECTION = "correction"
MAX_STATEMENT_CHARS = 320
USER = "the user"


def sentences(text: str) -> list[str]:
    """The sentences a speaker wrote themselves (what follows "here is…", code and long pastes
    left out)."""
    return statements.sentences(text)


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
    ("works at", re.compile(r"\bI\s+(?:just\s+|now\s+|recently\s+)?"
                            r"(?:work|started(?:\s+a\s+new\s+job|\s+working)?|"
                            r"got\s+a\s+job|joined)\s+(?:at|for)\s+(?P<value>(?:the|a|"
                            r"an)\s+[a-z][\w' -]{2,40}?)"
                            r"(?=\s+(?:as|since|in|and|but)\b|\s*[.,;!]|$)")),
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
    kind: str = ""
    wording: str = ""  # the speaker's own words, first person
    subject: str = ""  # someone the clause is about other than the speaker ("Tom")


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
        found.append(Found(name, value, sentence, kind=_ATTRIBUTE_KINDS.get(attribute, attribute)))
    if (m := _LIKES.search(sentence)) and not statements.is_reaction(sentence) and \
            m["value"].split()[0] not in ("to", "best", "it", "that", "this", "them", "how", "the"):
        liked = not re.match(r"(?:now\s+)?(?:hate|dislike|can't)|don't|no longer", m["how"])
        found.append(Found(f"likes {m['value'].lower()}", "likes" if liked else "dislikes", sentence,
                           kind="preference", wording=sentence))
    for f in found:
        f.wording = f.wording or attribute_wording(f.attribute, f.value)
    return found


_ATTRIBUTE_KINDS = {"lives in": "home", "works at": "work", "partner": "family", "favourite": "preference"}


def attribute_wording(attribute: str, value: str) -> str:
    """An exclusive attribute in the speaker's words ("I live in Hamburg", "My partner is Alex")."""
    if attribute == "lives in":
        return f"I live in {value}"
    if attribute == "works at" and re.match(r"(?:the|a|an)\s", value):
        return f"I work at {value}"
    if attribute in ("works at", "partner") and not value[:1].isupper():
        return f"I{value}" if value.startswith("'") else f"I {value}"  # "I lost my job", "I'm single"
    if attribute == "works at":
        return f"I work at {value}"
    if attribute == "partner":
        return f"My partner is {value}"
    if attribute.startswith("plan: "):
        return f"My {attribute.removeprefix('plan: ')} is planned for {value}"
    if attribute.startswith("favourite "):
        return f"My {attribute} is {value}"
    return f"I {attribute} {value}"


def extract(text: str, people: Iterable[str] = (), answer: str = "") -> list[Found]:
    """The facts a message states: its attribute facts (exclusive: home, work, partner,
    favourites, plans, likes), then the clauses memory.knowledge.statements keeps, each once.
    `answer`: the assistant's message it replies to (what only echoes it is a reaction)."""
    found: list[Found] = []
    for sentence in statements.sentences(text):
        if statements.carries_a_request(sentence):
            continue
        found += attribute_facts(sentence)
    covered = " ".join(f.clause for f in found).lower()
    for clause in statements.facts_of(text, set(people), answer):
        if not clause.explicit and clause.text.rstrip(".!").lower() in covered:
            continue  # the sentence already gave its attribute
        kind = "instruction" if clause.instruction else clause.kind
        found.append(Found(ABOUT, "", clause.text, score=clause.score, kind=kind, wording=clause.text,
                           subject=clause.subject))
    return found


# --- Storing, supersession --------------------------------------------------------------------


def subject_of(message: Message) -> str | None:
    """Whom a message speaks for: the speaker an import recorded, else the user for the user's own
    messages. An assistant's reply in a chat states nothing about anyone's life."""
    speaker = (message.metadata or {}).get("speaker")
    if isinstance(speaker, str) and speaker.strip():
        return " ".join(speaker.split())[:200]
    return USER if message.role == Role.USER else None


def _key(subject: str) -> str:
    return " ".join(subject.lower().split())


def _statement(found: Found, subject: str, quick: bool = False) -> str:
    """The fact in a sentence about its subject ("the user's partner is Sam", "Ana lost their
    job", "Tom doesn't eat mushrooms"): the model's own sentence, or the wording in the third person."""
    if found.extra.get("statement"):
        return found.extra["statement"][:MAX_STATEMENT_CHARS]  # the model's own sentence
    text = found.wording or found.clause
    return wording.stated(text, subject, found.kind, quick=quick)[:MAX_STATEMENT_CHARS]


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
    likes = target.attribute.startswith("likes ")
    said = "" if likes else attribute_wording(target.attribute, found.value)
    corrected = Found(target.attribute, found.value, found.clause, kind=target.kind, wording=said)
    new = Fact.objects.create(
        owner=owner, message=message, subject=subject, subject_key=_key(subject),
        attribute=target.attribute, value=found.value, statement=_statement(corrected, subject),
        wording=said, kind=target.kind, said_at=message.timestamp, valid_from=message.timestamp,
        refers_from=target.refers_from, refers_to=target.refers_to,
    )
    supersede(target, new)
    return new


class Ledger:
    """The current statements of an owner's subjects, read once per run and kept up to date as
    facts are stored, so each new statement is compared with them in memory (duplicates merge,
    new values supersede) rather than by a query per fact."""

    LIMIT = 5000  # the newest current statements of a subject compared with

    def __init__(self, owner, limit: int = LIMIT) -> None:
        self.owner = owner
        self.limit = limit
        self.rows: dict[str, list[Fact]] = {}

    def current(self, subject: str) -> list[Fact]:
        key = _key(subject)
        if key not in self.rows:
            self.rows[key] = list(
                Fact.objects.owned_by(self.owner).current().about(subject).filter(attribute=ABOUT)
                .exclude(kind="instruction").order_by("-valid_from", "-id")[: self.limit]
            )
        return self.rows[key]

    def same(self, subject: str, said: str) -> Fact | None:
        rows = self.current(subject)
        return next((f for f in rows if f.wording and updates.same_meaning(said, f.wording)), None)

    def replaced(self, subject: str, said: str, when: dt.datetime) -> list[Fact]:
        """The current statements (not newer) that `said` gives a new value of."""
        return [f for f in self.current(subject)
                if f.wording and f.valid_from <= when and updates.supersedes(said, f.wording)]

    def added(self, fact: Fact, replaced: list[Fact]) -> None:
        rows = self.current(fact.subject)
        for old in replaced:
            if old in rows:
                rows.remove(old)
        if fact.kind != "instruction":
            rows.insert(0, fact)


def store_found(owner, message: Message, subject: str, found: Found, origin: str = "rules",
                ledger: Ledger | None = None, quick: bool = False) -> Fact | None:
    """Store one found fact of a message: a newer one on the same subject and exclusive attribute
    (or, for a statement, the same thing with a new value) supersedes the current one; the same
    value said again adds this message to the fact that has it. None when nothing new is stored."""
    if found.attribute == CORRECTION:
        return _correct(owner, subject, found, message)
    subject = found.subject or subject
    said = found.wording or found.clause
    planned = True if found.attribute.startswith("plan: ") or found.kind == "plan" else None
    period = resolve_when(found.clause or said, message.timestamp, planned)
    previous: Fact | None = None
    replaced: list[Fact] = []
    if found.attribute != ABOUT:
        previous = (
            Fact.objects.owned_by(owner).current().about(subject).filter(attribute=found.attribute)
            .order_by("-valid_from", "-id").first()
        )
        if previous and previous.value.lower() == found.value.lower():
            previous.also_in.add(message)
            return None
        if previous and previous.valid_from > message.timestamp:
            previous = None  # an older message read late does not undo a newer fact
    elif found.kind != "instruction":
        ledger = ledger or Ledger(owner)
        same = ledger.same(subject, said)
        if same is not None:
            if same.message_id != message.pk:
                same.also_in.add(message)
            return None
        replaced = ledger.replaced(subject, said, message.timestamp)
    fact = Fact.objects.create(
        owner=owner, message=message, subject=subject, subject_key=_key(subject),
        attribute=found.attribute, value=found.value[:300], statement=_statement(found, subject, quick),
        wording=said[:2000], kind=found.kind[:32], said_at=message.timestamp, valid_from=message.timestamp,
        refers_from=period[0] if period else None, refers_to=period[1] if period else None,
        origin=origin, score=found.score,
    )
    for old in [previous] if previous is not None else replaced:
        supersede(old, fact)
    if found.attribute == ABOUT and ledger is not None:
        ledger.added(fact, replaced)
    return fact


def shown(fact: Fact, corrected: bool = True) -> str:
    """The fact as its owner reads it: their correction, or about themselves in the second
    person ("You lead a team of five engineers"); about anyone else as stated."""
    if corrected and fact.corrected:
        return fact.corrected
    if fact.subject_key != USER or not fact.wording:
        return wording.capitalized(fact.statement)
    return wording.shown_to_owner(fact.wording, fact.kind)


def known_people(owner) -> set[str]:
    """The names the owner has called their own ("my sister Ana", "our cat Luna") in facts
    already drawn, and the people facts are about."""
    names = set(
        Fact.objects.owned_by(owner).exclude(subject_key=USER).order_by()
        .values_list("subject", flat=True).distinct()[:500]
    )
    for said in Fact.objects.owned_by(owner).filter(kind__in=("family", "pet", "work", "remember")) \
            .order_by("-id").values_list("wording", flat=True)[:2000]:
        names |= statements.people_named(said)
    return names


def extract_messages(owner, message_ids: Iterable[str] | None = None, progress=None) -> int:
    """Facts of these messages (all the owner's messages when None), oldest first so a later
    statement supersedes an earlier one. Messages that already have facts are skipped; only
    sources() are read. Returns how many facts were stored; `progress(n)` is told as messages
    are read."""
    messages = Message.objects.owned_by(owner).logical().visible().sources().filter(
        facts__isnull=True, repeated_facts__isnull=True
    )
    if message_ids is not None:
        messages = messages.filter(pk__in=list(message_ids))
    stored = 0
    ledger = Ledger(owner)
    people = known_people(owner)
    rows = messages.select_related("parent").order_by("timestamp", "position")
    for message in rows.iterator(chunk_size=500):
        subject = subject_of(message)
        if progress:
            progress(1)
        if subject is None:
            continue
        people |= statements.people_named(" ".join(statements.own_words(message.content)))
        parent = message.parent
        answer = parent.content if parent is not None and parent.role == Role.ASSISTANT and \
            subject_of(parent) is None else ""
        with transaction.atomic():
            for found in extract(message.content, people, answer):
                stored += store_found(owner, message, subject, found, ledger=ledger) is not None
    return stored


EXPLICIT = ("remember", "instruction")


def remember_now(owner, message: Message) -> list[Fact]:
    """A person's explicit "remember that…" in a chat turn, stored at once (cheap: one message's
    rules, no model), so the reply can say what was saved. Other facts of the message are left
    to background upkeep. A message read before (a regenerated reply) is not read again."""
    subject = subject_of(message)
    if subject is None:
        return []
    if not Fact.objects.owned_by(owner).filter(Q(message=message) | Q(also_in=message)).exists():
        ledger = Ledger(owner, limit=500)
        with transaction.atomic():
            for clause in statements.explicit_requests(message.content):
                kind = "instruction" if clause.instruction else clause.kind
                found = Found(ABOUT, "", clause.text, score=clause.score, kind=kind, wording=clause.text)
                store_found(owner, message, subject, found, ledger=ledger, quick=True)
    return explicitly_saved(owner.pk, message.pk)


def explicitly_saved_for(owner_id: int, message_ids: Iterable[str]) -> dict[str, list[Fact]]:
    """explicitly_saved for many messages in one query (a page of a conversation)."""
    ids = {str(i) for i in message_ids}
    if not ids:
        return {}
    rows = (
        Fact.objects.filter(owner_id=owner_id, kind__in=EXPLICIT).live()
        .filter(Q(message_id__in=ids) | Q(also_in__in=ids)).distinct()
        .prefetch_related("also_in").order_by("id")
    )
    saved: dict[str, list[Fact]] = {}
    for fact in rows:
        for message_id in {fact.message_id, *(m.pk for m in fact.also_in.all())} & ids:
            saved.setdefault(message_id, []).append(fact)
    return saved


def explicitly_saved(owner_id: int, message_id: str) -> list[Fact]:
    """The facts a message asked to be remembered (stored from it, or said before and found)."""
    return list(
        Fact.objects.filter(owner_id=owner_id, kind__in=EXPLICIT).live()
        .filter(Q(message_id=message_id) | Q(also_in=message_id)).distinct().order_by("id")
    )


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


def subjects_named(
    owner, text: str, user_subject: str = "the user", *, keys: list[str] | None = None
) -> list[str]:
    """The subjects with current facts that `text` names, after the user (always first: they are
    the one talking). Read from at most 500 distinct subjects (subject_keys; `keys`: those, read
    already)."""
    lowered = " ".join(_WORD.findall((text or "").lower()))
    user = _key(user_subject)
    keys = subject_keys(owner) if keys is None else keys
    named = [k for k in keys if k != user and _names(lowered, k)]
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
    if hasattr(fact, "was"):  # current_for_index read it with the fact
        was = fact.was
    else:
        previous = next(iter(fact.supersedes.all()), None)
        was = (previous.value or previous.text) if previous is not None else None
    before = f"; was: {was}" if was is not None else ""
    about = f"; about {_day(fact.refers_from)}..{_day(fact.refers_to)}" if fact.refers_from else ""
    pinned = "pinned; " if fact.pinned else ""
    return f"- {fact.text} ({pinned}{since}{about}{before}) [msg {fact.message_id}]"


def current_for_index(
    owner, text: str, limit: int = INDEX_MAX_FACTS, *, kept: Callable[[Hashable, Callable], Any] | None = None
) -> list[Fact]:
    """The current facts about the people `text` names (the user first): pinned ones, then the
    exclusive attributes (home, work, partner, plans...), then the newest statements.
    kept: memory.context.kept_reads.Kept, which gives the subjects and a subject's rows as read
    on an earlier turn while the owner's facts are unchanged."""
    chosen: list[Fact] = []
    keys = kept(("fact subjects",), lambda: subject_keys(owner)) if kept is not None else None
    for subject in subjects_named(owner, text, keys=keys):
        n = limit - len(chosen)
        if kept is not None:
            chosen += kept(("facts of", _key(subject), n), lambda s=subject, n=n: _lines_of(owner, s, n))
        else:
            chosen += _lines_of(owner, subject, n)
        if len(chosen) >= limit:
            break
    return chosen


# ranked's rows (from the top of fact_current_rank) with only what fact_line shows, and what each
# replaced (`was`; None: nothing) in the same query. Written out: every turn reads it, and the ORM
# spent more CPU building it, and a prefetch of `supersedes`, than Postgres did running it.
_LINES = """
    SELECT f.id, f.message_id, f.subject, f.attribute, f.statement, f.corrected, f.said_at,
           f.refers_from, f.refers_to, f.valid_from, f.pinned,
           (SELECT coalesce(nullif(p.value, ''), nullif(p.corrected, ''), p.statement)
            FROM memory_fact p WHERE p.superseded_by_id = f.id ORDER BY p.id LIMIT 1) AS was
    FROM memory_fact f JOIN memory_message m ON m.id = f.message_id
    WHERE f.owner_id = %s AND NOT m.deleted AND f.kind <> %s AND f.superseded_by_id IS NULL
      AND f.subject_key = %s
    ORDER BY f.pinned DESC, CASE WHEN f.attribute = 'about' THEN 1 ELSE 0 END ASC,
             f.valid_from DESC, f.id DESC
    LIMIT %s
"""


def _lines_of(owner, subject: str, limit: int) -> list[Fact]:
    return list(Fact.objects.raw(_LINES, [owner.pk, Fact.FORGOTTEN, _key(subject), limit]))


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
