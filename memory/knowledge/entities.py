"""Entities without an LLM: the heuristic entity graph.

Regular expressions and a few heuristics find what embeddings tend to blur: names, numbers with
units, money, identifiers like INFRA-992, dates, URLs, emails and code identifiers. They are
stored per message (EntityMention) with co-occurrence edges (EntityEdge), so the index can show
the key entities of what it retrieved and `memory_graph_query` can walk from one to the next.

Reads that show entities to the model go through visible messages only, so the name of
something said in a deleted message never comes back through the graph.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Exists, Max, Min, OuterRef

from memory.models import Entity, EntityEdge, EntityMention, Fact, Message

MAX_ENTITIES_PER_MESSAGE = 24
MAX_EDGE_ENTITIES = 12  # pairs per message stay bounded (66 at most)

_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December|"
    "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
_UNITS = (
    r"ms|milliseconds?|s|secs?|seconds?|minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?|"
    r"kb|mb|gb|tb|pb|kib|mib|gib|tib|bytes?|bits?|kbps|mbps|gbps|hz|khz|mhz|ghz|"
    r"%|percent|nodes?|servers?|cores?|threads?|replicas?|users?|requests?|rps|qps|"
    r"km|m|cm|mm|kg|g|mg|lbs?|miles?|feet|ft|°c|°f|"
    r"million|billion|thousand|k|m|bn|euros?|dollars?|pounds?|usd|eur|gbp"
)

PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("email", re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")),
    ("url", re.compile(r"\bhttps?://[^\s<>\"')\]]+")),
    ("identifier", re.compile(r"\b[A-Z][A-Z0-9]{1,11}-\d{1,7}\b")),
    (
        "date",
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}\b|"
            rf"\b(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:\s*[-–]\s*\d{{1,2}}(?:st|nd|rd|th)?)?"
            r"(?:,?\s+\d{4})?\b|"
            rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\b(?:,?\s+\d{{4}})?|"
            r"\bQ[1-4](?:\s+\d{4})?\b"
        ),
    ),
    (
        "money",
        re.compile(
            r"[$€£]\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:million|billion|thousand|[kKmMbB]n?)\b)?|"
            r"\b\d[\d,]*(?:\.\d+)?\s?(?:million|billion|thousand|[kKmM])?\s?"
            r"(?:euros?|dollars?|pounds?|USD|EUR|GBP)\b|\b\d[\d,]*(?:\.\d+)?[MBK]€"
        ),
    ),
    (
        "quantity",
        re.compile(rf"\b\d[\d,]*(?:\.\d+)?\s?(?:{_UNITS})(?![\w])", re.IGNORECASE),
    ),
    ("number", re.compile(r"\b(?:port|pool|timeout|version|v)\s*:?\s*\d[\d.]*\b", re.IGNORECASE)),
    ("code", re.compile(r"`([^`\n]{2,60})`")),
    (
        "code",
        re.compile(
            r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\b[a-z]+[A-Z][a-z0-9]+[A-Za-z0-9]*\b|"
            r"\b[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+\(\)|\b[A-Za-z_]\w*\(\)"
        ),
    ),
]

# Words that begin sentences or are capitalised for reasons other than being a name.
_NOT_NAMES_TEXT = """
a an the this that these those i i'm i've i'd i'll we you he she it they my our your his her
its their me us them what when where which who whom why how yes no ok okay hi hello hey
thanks thank please sure also and but or so if then than because while after before since
until as at by for from in into of on to with without about above below over under again
here there all any both each few more most other some such only own same too very can will
just should now monday tuesday wednesday thursday friday saturday sunday today tomorrow
yesterday let note remember great good nice fine well actually however therefore although
though do does did don't is are was were be been being have has had not let's please january
february march april may june july august september october november december user assistant
system yeah yep yup nope wow whoa congrats congratulations bye goodbye oh ah aw aww awesome cool
omg lol haha hmm sorry glad last next mon tue tues wed weds thu thur thurs fri sat feb mar apr
jun jul aug sep sept oct nov dec absolutely definitely totally really lately go btw woohoo yay
hooray even it's that's there's here's what's we're you're they're he's she's
none true false null nan undefined nil
"""
# Verbs that open an instruction or a list item ("Use Instagram Stories", "Avoid sugar"), not a
# name: dropped from the front of a name at a sentence or list item's start.
_OPENING_VERBS = {
    "use", "avoid", "try", "make", "add", "check", "create", "consider", "keep", "set", "get", "find",
    "choose", "look", "start", "take", "include", "explore", "visit", "plan", "ask", "follow", "join",
    "read", "watch", "listen", "practice", "focus", "limit", "drink", "eat", "go", "stay", "book",
    "bring", "pack", "write", "open", "click", "select", "install", "run", "enable", "disable",
    "configure", "update", "replace", "remove", "buy", "compare", "learn", "contact", "call", "email",
    "share", "post", "schedule", "prepare", "review", "research", "test", "build", "apply", "store",
    "save", "skip", "wear"
}
_NOT_NAMES = set(_NOT_NAMES_TEXT.split())
_TITLE = r"(?:Dr|Mr|Mrs|Ms|Prof|Sir|Dame|St)\.?\s+"
# A capitalised word, any alphabet's letters ("São", "João", "Zoë").
_CAP = r"(?:[A-Z]|[À-ÖØ-Þ])(?:[^\W\d_]|['’-](?=[^\W\d_]))+"
_NAME = re.compile(
    rf"(?:{_TITLE})?{_CAP}(?:\s+(?:of\s+|de\s+|da\s+|do\s+|dos\s+|das\s+|del\s+|van\s+|von\s+|"
    rf"la\s+)?{_CAP}){{0,3}}"
)
# A sentence or a Markdown list item, heading or emphasis starts here.
_SENTENCE_START = re.compile(
    r"(?:^|[.!?:;\n]\s*|[\"'“(]\s*|^\s*(?:[-*+•]|\d+[.)]|#+)\s+(?:\*\*|__)?|\*\*|__)$", re.M
)


@dataclass(frozen=True)
class Found:
    name: str
    kind: str

    @property
    def normalized(self) -> str:
        return normalize(self.name)


def normalize(name: str) -> str:
    """The key an entity is stored under: case, commas, spacing, a possessive and a title do not
    count ("Melanie", "melanie", "Melanie's" are one entity; so are "Dr. Elena Rostova" and
    "Elena Rostova")."""
    flat = " ".join(name.lower().replace(",", "").replace("’", "'").split())
    return _TITLE_KEY.sub("", _POSSESSIVE.sub("", flat))[:300] or flat[:300]


_POSSESSIVE = re.compile(r"(?<=\w)'s?$")
# "Dr. Elena Rostova" is Elena Rostova (a title before a name of two words or more).
_TITLE_KEY = re.compile(r"^(?:dr|mr|mrs|ms|prof)\.?\s+(?=\S+\s+\S)")
# Plural endings of common nouns, most specific first ("parties" -> "party", "boxes" -> "box").
_PLURALS = (("ies", "y"), ("sses", "ss"), ("ches", "ch"), ("shes", "sh"), ("xes", "x"), ("s", ""))


def singular_forms(normalized: str, kind: str | None = None) -> list[str]:
    """What `normalized` would be if its last word were a plural: candidates only. A plural
    joins its singular only when memory holds both ("tulips" into "tulip"), so a word that
    merely ends in s ("paris") never loses its s on its own; and a one-word name is a name
    ("Lucas" is not two Lucas), so only names of several words ("Pride Parades") and other
    kinds (`tulips`) have plurals. `kind` None is read as a name."""
    head, _, last = normalized.rpartition(" ")
    if (kind in (None, "name") and not head) or len(last) < 4 or not last.isalpha():
        return []
    if last.endswith(("ss", "us", "is")):
        return []
    prefix = f"{head} " if head else ""
    return [prefix + last[: -len(end)] + repl for end, repl in _PLURALS if last.endswith(end)]


# Ids Recollect generates (ULIDs: 26 characters of Crockford's base32, as quoted in replies and
# in the index) are not things a person talked about; neither are their fragments.
_RECOLLECT_ID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")


def extract(text: str) -> list[Found]:
    """Entities in `text`, most frequent first, at most MAX_ENTITIES_PER_MESSAGE."""
    return [f for f, _ in extract_counted(text)]


def extract_counted(text: str, known: set[str] | frozenset[str] = frozenset()) -> list[tuple[Found, int]]:
    """extract(), with how often each entity occurs in `text`. A single capitalised word at a
    sentence start ("Tom doesn't eat mushrooms") is a name when `known` holds it (lower case):
    a name memory has met where only a name is capitalised."""
    text = text[:20000]  # a 1 MB paste does not need every entity found on the hot path
    text = _RECOLLECT_ID.sub(lambda m: " " * len(m.group(0)), text)
    counts: Counter[Found] = Counter()
    taken: list[tuple[int, int]] = []

    def overlaps(a: int, b: int) -> bool:
        return any(a < e and s < b for s, e in taken)

    for kind, pattern in PATTERNS:
        for match in pattern.finditer(text):
            value = match.group(1) if pattern.groups else match.group(0)
            start, end = match.span()
            if overlaps(start, end):
                continue
            value = value.strip().rstrip(".,;:")
            if len(value) < 2:
                continue
            if (
                kind == "quantity"
                and re.fullmatch(r"\d+\s?(?:s|m|g|k)", value, re.IGNORECASE) is None
                and len(value) < 3
            ):
                continue
            taken.append((start, end))
            counts[Found(value[:300], kind)] += 1
    for match in _NAME.finditer(text):
        start, end = match.span()
        if overlaps(start, end):
            continue
        words = match.group(0).split()
        # Drop a leading sentence-start word that is not a name ("Please Elena" -> "Elena").
        while words and words[0].lower().replace("’", "'").strip("'") in _NOT_NAMES:
            start += len(words[0]) + 1
            words = words[1:]
        # A possessive or a closing quote is not part of the name ("Oliver's", "Activists'").
        words = (re.sub(r"['’]s$", "", " ".join(words)).rstrip("'’-") or "").split()
        # Capitals over several words are shouting ("DOING IT"), not a name.
        if len(words) > 1 and all(w.isupper() for w in words):
            continue
        # A trailing word of the list is not part of the name either ("Knowing I'm").
        while words and words[-1].lower().replace("’", "'") in _NOT_NAMES:
            words = words[:-1]
        # A span of only such words ("Last Friday", "Tues") is a time, not a name.
        if not words or all(w.lower().strip("'’") in _NOT_NAMES for w in words):
            continue
        line_start = text.rfind("\n", 0, start) + 1
        before = text[max(line_start, start - 8) : start]
        at_sentence_start = bool(_SENTENCE_START.search(before)) or start == 0
        # "Use Instagram Stories": an instruction's verb is not part of the name.
        while at_sentence_start and len(words) > 1 and words[0].lower() in _OPENING_VERBS:
            words = words[1:]
        name = " ".join(words)
        if len(words) == 1:
            lower = name.lower()
            if at_sentence_start or len(name) < 3:
                if lower not in known:
                    continue  # one capitalised word at a sentence start is just a sentence start
            elif lower in _OPENING_VERBS or re.search(rf"(?<![\w'’]){re.escape(lower)}(?![\w'’])", text):
                continue  # a common word, capitalised here ("Window", "Avoid"), said in lower case too
        counts[Found(name[:300], "name")] += 1
    return counts.most_common(MAX_ENTITIES_PER_MESSAGE)


def key_entities(texts: Iterable[str], limit: int = 12) -> list[str]:
    """The entities most shared across `texts` (for the index's KEY ENTITIES line)."""
    counts: Counter[str] = Counter()
    display: dict[str, str] = {}
    for text in texts:
        for f in set(_extracted(text) if len(text) <= _REMEMBERED_MAX_CHARS else extract(text)):
            counts[f.normalized] += 1
            display.setdefault(f.normalized, f.name)
    return [display[k] for k, _ in counts.most_common(limit)]


# A turn's index names the key entities of its best hits, mostly the same passages turn after
# turn: what each holds is remembered (per process, at most 2,048 x 4,000 characters).
_REMEMBERED_MAX_CHARS = 4000


@lru_cache(maxsize=2048)
def _extracted(text: str) -> tuple[Found, ...]:
    return tuple(extract(text))


# --- storing -----------------------------------------------------------------------------------


def known_names(owner, texts: Iterable[str] = ()) -> set[str]:
    """Single-word names memory has met where only a name is capitalised (in the middle of a
    sentence): the owner's one-word name entities, the people its facts are about, and those
    of `texts`. A sentence that starts with one of them ("Tom doesn't eat mushrooms") names it."""
    names = set(
        Entity.objects.owned_by(owner).filter(kind="name", mention_count__gt=0)
        .exclude(normalized__contains=" ")
        .values_list("normalized", flat=True)[:5000]
    )
    subjects = Fact.objects.owned_by(owner).values_list("subject", flat=True).distinct()[:500]
    names |= {s.lower() for s in subjects}
    for text in texts:
        found = extract_counted(text)
        names |= {f.normalized for f, _ in found if f.kind == "name" and " " not in f.normalized}
    return names


def index_messages(owner, messages: Sequence[Message], known: set[str] | None = None) -> int:
    """Extract and store the entities of `messages` (logical, visible); replaces their old
    mentions and edges, so an edited message is re-indexed by calling this again. Returns
    mentions stored. Entities no visible message names any more go."""
    # Text that only repeats memory (offline-recall answers, quoted tool results) names
    # nothing new: its names and ids would only echo memory back into the graph.
    messages = [m for m in messages if not m.is_chunk and m.owner_id == owner.pk and m.is_source]
    if not messages:
        return 0
    if known is None:
        known = known_names(owner, [m.content for m in messages])
    found = {m.pk: extract_counted(m.content, known) for m in messages}
    when = {m.pk: m.timestamp for m in messages}
    with transaction.atomic():
        touched = remove_mentions(owner, list(found), refresh=False)
        wanted: dict[tuple[str, str], str] = {}
        for fs in found.values():
            for f, _ in fs:
                wanted.setdefault((f.normalized, f.kind), f.name)
        if not wanted:
            refresh_counts(owner, touched)
            prune_orphans(owner, touched)
            return 0
        ids = _entity_ids(owner, wanted)
        mentions = []
        for message_id, fs in found.items():
            counts: dict[int, int] = {}
            for f, n in fs:
                eid = ids.get((f.normalized, f.kind))
                if eid is not None:
                    counts[eid] = counts.get(eid, 0) + n
            mentions += [
                EntityMention(owner_id=owner.pk, entity_id=eid, message_id=message_id, count=n)
                for eid, n in counts.items()
            ]
        EntityMention.objects.bulk_create(mentions, ignore_conflicts=True, batch_size=1000)
        _add_edges(owner, _pairs((m.message_id, m.entity_id, m.count) for m in mentions), when)
        refresh_counts(owner, touched | {m.entity_id for m in mentions})
        prune_orphans(owner, touched - {m.entity_id for m in mentions})
    return len(mentions)


def _entity_ids(owner, wanted: dict[tuple[str, str], str]) -> dict[tuple[str, str], int]:
    """The entity id of each (normalized, kind), made where missing. A plural finds its singular
    when memory holds it ("tulips" joins "tulip"; graph upkeep merges the other way round)."""
    keys = {n for n, _ in wanted}
    singulars = {(n, k): singular_forms(n, k) for n, k in wanted}
    lookup = keys | {s for forms in singulars.values() for s in forms}
    known = {
        (e.normalized, e.kind): e.pk
        for e in Entity.objects.owned_by(owner).filter(normalized__in=lookup).only("normalized", "kind")
    }
    ids: dict[tuple[str, str], int] = {}
    missing = []
    for key, name in wanted.items():
        n, kind = key
        eid = known.get(key)
        if eid is None:
            # A plural whose singular memory already holds joins it at once.
            eid = next((known[(s, kind)] for s in singulars[key] if (s, kind) in known), None)
        if eid is not None:
            ids[key] = eid
        elif not any((s, kind) in wanted for s in singulars[key]):
            missing.append(Entity(owner_id=owner.pk, name=name, normalized=n, kind=kind))
    if missing:
        Entity.objects.bulk_create(missing, ignore_conflicts=True, batch_size=500)
        made = {(e.normalized, e.kind) for e in missing}
        for e in Entity.objects.owned_by(owner).filter(normalized__in={n for n, _ in made}):
            if (e.normalized, e.kind) in made:
                ids[(e.normalized, e.kind)] = e.pk
    for n, kind in wanted:  # plurals whose singular came in the same batch
        if (n, kind) not in ids:
            ids[(n, kind)] = next(
                (ids[(s, kind)] for s in singulars[(n, kind)] if (s, kind) in ids),
                None,
            )
    return {key: eid for key, eid in ids.items() if eid is not None}


def _pairs(mentions: Iterable[tuple[str, int, int]]) -> dict[str, list[tuple[int, int]]]:
    """The entity pairs each message links: among its MAX_EDGE_ENTITIES most named entities
    (by count, then id), so what a message added can be taken away again from its mention
    rows alone."""
    by_message: dict[str, list[tuple[int, int]]] = {}
    for message_id, entity_id, count in mentions:
        by_message.setdefault(message_id, []).append((-count, entity_id))
    pairs = {}
    for message_id, ranked in by_message.items():
        top = sorted(eid for _, eid in sorted(ranked)[:MAX_EDGE_ENTITIES])
        pairs[message_id] = [(a, b) for i, a in enumerate(top) for b in top[i + 1 :]]
    return pairs


def _add_edges(owner, pairs: dict[str, list[tuple[int, int]]], when: dict) -> None:
    """Add each message's pairs to the edges: weight counts the message, decay moves back
    towards 1 by its share, last_seen follows the newest message."""
    weights: Counter[tuple[int, int]] = Counter()
    seen: dict[tuple[int, int], Any] = {}
    for message_id, ps in pairs.items():
        for pair in ps:
            weights[pair] += 1
            t = when.get(message_id)
            if t is not None and (seen.get(pair) is None or t > seen[pair]):
                seen[pair] = t
    if not weights:
        return
    rows = [(owner.pk, a, b, w, seen.get((a, b))) for (a, b), w in weights.items()]
    with connection.cursor() as cursor:
        for start in range(0, len(rows), 1000):
            batch = rows[start : start + 1000]
            cursor.execute(
                "INSERT INTO memory_entityedge (owner_id, source_id, target_id, weight, decay, last_seen) "
                "VALUES " + ",".join(["(%s,%s,%s,%s,1.0,%s)"] * len(batch))
                + " ON CONFLICT (source_id, target_id) DO UPDATE SET "
                "decay = (memory_entityedge.weight * memory_entityedge.decay + EXCLUDED.weight)"
                " / (memory_entityedge.weight + EXCLUDED.weight), "
                "weight = memory_entityedge.weight + EXCLUDED.weight, "
                "last_seen = greatest(memory_entityedge.last_seen, EXCLUDED.last_seen)",
                [x for row in batch for x in row],
            )


def remove_mentions(owner, message_ids: Sequence[str], *, refresh: bool = True) -> set[int]:
    """Take these messages out of the graph: their mentions go, and so does their share of
    every edge (an edge no message supports any more goes with it). Called when a message is
    deleted, forgotten or re-indexed; entities no visible message names any more are pruned.
    Returns the ids of the entities they mentioned."""
    message_ids = [str(m) for m in message_ids]
    if not message_ids:
        return set()
    rows = list(
        EntityMention.objects.filter(owner_id=owner.pk, message_id__in=message_ids).values_list(
            "message_id", "entity_id", "count"
        )
    )
    if not rows:
        return set()
    weights: Counter[tuple[int, int]] = Counter()
    for ps in _pairs(rows).values():
        weights.update(ps)
    with transaction.atomic():
        if weights:
            items = list(weights.items())
            with connection.cursor() as cursor:
                for start in range(0, len(items), 1000):
                    batch = items[start : start + 1000]
                    cursor.execute(
                        "UPDATE memory_entityedge e SET weight = e.weight - d.w FROM (VALUES "
                        + ",".join(["(%s::bigint,%s::bigint,%s::int)"] * len(batch))
                        + ") AS d(s, t, w) WHERE e.source_id = d.s AND e.target_id = d.t "
                        "AND e.owner_id = %s",
                        [*(x for (a, b), w in batch for x in (a, b, w)), owner.pk],
                    )
            EntityEdge.objects.filter(owner_id=owner.pk, weight__lte=0).filter(
                source_id__in={a for a, _ in weights}
            ).delete()
        EntityMention.objects.filter(owner_id=owner.pk, message_id__in=message_ids).delete()
        touched = {eid for _, eid, _ in rows}
        if refresh:
            refresh_counts(owner, touched)
            prune_orphans(owner, touched)
    return touched


def refresh_counts(owner, entity_ids: Iterable[int]) -> None:
    """Recount mentions (of visible messages only) and first/last seen for these entities."""
    entity_ids = list(entity_ids)
    if not entity_ids:
        return
    stats = (
        EntityMention.objects.filter(
            owner_id=owner.pk, entity_id__in=entity_ids, message__deleted=False
        )
        .values("entity_id")
        .annotate(n=Count("id"), first=Min("message__timestamp"), last=Max("message__timestamp"))
    )
    by_id = {s["entity_id"]: s for s in stats}
    rows = list(Entity.objects.owned_by(owner).filter(pk__in=entity_ids))
    for e in rows:
        s = by_id.get(e.pk)
        e.mention_count = s["n"] if s else 0
        e.first_seen = s["first"] if s else None
        e.last_seen = s["last"] if s else None
    Entity.objects.bulk_update(rows, ["mention_count", "first_seen", "last_seen"], batch_size=500)


def rebuild(owner, *, progress=None, batch: int = 500) -> int:
    """Re-extract every visible message of `owner` from scratch (edges recounted exactly)."""
    with transaction.atomic():
        EntityEdge.objects.filter(owner_id=owner.pk).delete()
        EntityMention.objects.filter(owner_id=owner.pk).delete()
        Entity.objects.filter(owner_id=owner.pk).delete()
    Message.objects.visible_to(owner).flag_quotes()
    qs = Message.objects.visible_to(owner).logical().sources().order_by("timestamp", "position")
    # Names met anywhere in the history count at any sentence start, however early.
    known = known_names(owner, qs.values_list("content", flat=True).iterator(chunk_size=1000))
    done = 0
    while True:
        rows = list(qs[done : done + batch])
        if not rows:
            break
        index_messages(owner, rows, known)
        done += len(rows)
        if progress:
            progress(len(rows))
    return done


def prune_orphans(owner, entity_ids: Iterable[int] | None = None) -> int:
    """Drop entities no visible message mentions any more (all of the owner's, or of these),
    with their edges: the name of something said only in deleted text is gone from the graph."""
    orphans = Entity.objects.owned_by(owner).exclude(
        Exists(EntityMention.objects.filter(entity=OuterRef("pk"), message__deleted=False))
    )
    if entity_ids is not None:
        orphans = orphans.filter(pk__in=list(entity_ids))
    return orphans.delete()[0]


forget_orphans = prune_orphans
