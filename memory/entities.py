"""Entities without an LLM (seed 001's cheat sheet, seed 003's heuristic graph mode).

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

from django.db import connection, transaction
from django.db.models import Count, Exists, Max, Min, OuterRef

from memory.models import Entity, EntityEdge, EntityMention, Message

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
"""
_NOT_NAMES = set(_NOT_NAMES_TEXT.split())
_TITLE = r"(?:Dr|Mr|Mrs|Ms|Prof|Sir|Dame|St)\.?\s+"
_CAP = r"[A-Z][a-zA-Z'’-]+"
_NAME = re.compile(rf"(?:{_TITLE})?{_CAP}(?:\s+(?:of\s+|de\s+|van\s+|von\s+)?{_CAP}){{0,3}}")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n]\s*|[\"'“(]\s*)$")


@dataclass(frozen=True)
class Found:
    name: str
    kind: str

    @property
    def normalized(self) -> str:
        return normalize(self.name)


def normalize(name: str) -> str:
    return " ".join(name.lower().replace(",", "").split())[:300]


# Ids Recollect generates (ULIDs: 26 characters of Crockford's base32, as quoted in replies and
# in the index) are not things a person talked about; neither are their fragments.
_RECOLLECT_ID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")


def extract(text: str) -> list[Found]:
    """Entities in `text`, most frequent first, at most MAX_ENTITIES_PER_MESSAGE."""
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
        name = " ".join(words)
        at_sentence_start = (
            bool(_SENTENCE_START.search(text[max(0, start - 3) : start])) or start == 0
        )
        if len(words) == 1 and (at_sentence_start or len(name) < 3):
            continue  # one capitalised word at a sentence start is just a sentence start
        counts[Found(name[:300], "name")] += 1
    return [f for f, _ in counts.most_common(MAX_ENTITIES_PER_MESSAGE)]


def key_entities(texts: Iterable[str], limit: int = 12) -> list[str]:
    """The entities most shared across `texts` (for the index's KEY ENTITIES line)."""
    counts: Counter[str] = Counter()
    display: dict[str, str] = {}
    for text in texts:
        for f in set(extract(text)):
            counts[f.normalized] += 1
            display.setdefault(f.normalized, f.name)
    return [display[k] for k, _ in counts.most_common(limit)]


# --- storing -----------------------------------------------------------------------------------


def index_messages(owner, messages: Sequence[Message]) -> int:
    """Extract and store the entities of `messages` (logical, visible); replaces their old
    mentions, so an edited message is re-indexed by calling this again. Returns mentions stored."""
    messages = [m for m in messages if not m.is_chunk and m.owner_id == owner.pk]
    if not messages:
        return 0
    found = {m.pk: extract(m.content) for m in messages}
    with transaction.atomic():
        EntityMention.objects.filter(owner_id=owner.pk, message_id__in=list(found)).delete()
        wanted = {(f.normalized, f.kind): f.name for fs in found.values() for f in fs}
        if not wanted:
            return 0
        Entity.objects.bulk_create(
            [
                Entity(owner_id=owner.pk, name=name, normalized=n, kind=k)
                for (n, k), name in wanted.items()
            ],
            ignore_conflicts=True,
            batch_size=500,
        )
        ids = {
            (e.normalized, e.kind): e.pk
            for e in Entity.objects.owned_by(owner).filter(normalized__in={n for n, _ in wanted})
        }
        mentions = []
        pairs: Counter[tuple[int, int]] = Counter()
        for message_id, fs in found.items():
            entity_ids = []
            for f in fs:
                eid = ids.get((f.normalized, f.kind))
                if eid is not None and eid not in entity_ids:
                    entity_ids.append(eid)
                    mentions.append(
                        EntityMention(owner_id=owner.pk, entity_id=eid, message_id=message_id)
                    )
            top = sorted(entity_ids[:MAX_EDGE_ENTITIES])
            for i, a in enumerate(top):
                for b in top[i + 1 :]:
                    pairs[(a, b)] += 1
        EntityMention.objects.bulk_create(mentions, ignore_conflicts=True, batch_size=1000)
        _add_edges(owner, pairs)
        refresh_counts(owner, {m.entity_id for m in mentions})
    return len(mentions)


def _add_edges(owner, pairs: Counter[tuple[int, int]]) -> None:
    if not pairs:
        return
    rows = [(owner.pk, a, b, w) for (a, b), w in pairs.items()]
    with connection.cursor() as cursor:
        for start in range(0, len(rows), 1000):
            batch = rows[start : start + 1000]
            cursor.execute(
                "INSERT INTO memory_entityedge (owner_id, source_id, target_id, weight) VALUES "
                + ",".join(["(%s,%s,%s,%s)"] * len(batch))
                + " ON CONFLICT (source_id, target_id) DO UPDATE "
                "SET weight = memory_entityedge.weight + EXCLUDED.weight",
                [x for row in batch for x in row],
            )


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
    qs = Message.objects.visible_to(owner).logical().order_by("timestamp", "position")
    done = 0
    while True:
        rows = list(qs[done : done + batch])
        if not rows:
            break
        index_messages(owner, rows)
        done += len(rows)
        if progress:
            progress(len(rows))
    return done


def forget_orphans(owner) -> int:
    """Drop entities no visible message mentions any more (after forgetting, whose mentions
    are gone with the message, so their entities cannot be found through them)."""
    orphans = Entity.objects.owned_by(owner).exclude(
        Exists(EntityMention.objects.filter(entity=OuterRef("pk"), message__deleted=False))
    )
    return orphans.delete()[0]
