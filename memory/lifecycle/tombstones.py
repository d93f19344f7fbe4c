"""Forgotten stays forgotten: a forget leaves a tombstone, and every import leaves out what one
names.

A tombstone holds no text and no id: keyed hashes (HMAC-SHA256 under SECRET_KEY, salted with
the owner) of each id the message was known by (its own, its source's: ChatGPT's or Claude's
message id, a JSON Lines line's key) and of its text (role and words, every version), with the
date. An import (web, `import_history`, `import_memory`, a resumed job that still holds the
file) asks `forgotten` about each message before storing it, and says how many it left out.
A text shorter than MIN_TEXT_CHARS is matched by its ids only: "ok, thanks" forgotten once
must not keep every later "ok, thanks" out.

Background tasks keep their arguments after they ran (django-tasks-db's result rows): topic and
fact upkeep take lists of message ids, and a forget itself queues upkeep for the ids it removed.
`forget_task_arguments` drops the ids of messages that no longer exist from finished tasks'
arguments: at the forget for tasks already done, and as each later task finishes.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django_tasks import TaskResultStatus

from memory.models import Message, Tombstone

MIN_TEXT_CHARS = 24
_SALT = "recollect.memory.tombstone"


@dataclass(frozen=True)
class Known:
    """What an import knows of a message: the ids it goes by, its role and its text."""

    ids: tuple[str, ...]
    role: str
    text: str


def _normal(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text or "").split())


def _id_values(ids: Iterable[str]) -> list[str]:
    return [f"id\x1f{i}" for i in dict.fromkeys(ids) if i]


def _text_values(role: str, text: str) -> list[str]:
    text = _normal(text)
    return [f"text\x1f{role}\x1f{text}"] if len(text) >= MIN_TEXT_CHARS else []


def _values(known: Known) -> list[str]:
    return _id_values(known.ids) + _text_values(known.role, known.text)


def _digest(owner_pk: object, value: str, secret: str) -> str:
    return salted_hmac(_SALT, f"{owner_pk}\x1f{value}", secret=secret, algorithm="sha256").hexdigest()


def _secrets() -> list[str]:
    """The key tombstones are made with, then the older ones (SECRET_KEY_FALLBACKS) they may
    have been made with before the key was rotated."""
    return [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]


def _ids_of(message: Message) -> list[str]:
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    ids = [message.pk, message.external_id or ""]
    ids += [str(metadata.get(k) or "") for k in ("external_id", "original_external_id")]
    return [i for i in ids if i]


def lay(owner, messages: Sequence[Message], texts_of) -> int:
    """Tombstones for these messages (in the forget's transaction); `texts_of(message)` gives
    every version of its text. Returns how many hashes were written."""
    values: set[str] = set()
    for message in messages:
        values.update(_id_values(_ids_of(message)))
        for text in texts_of(message):
            values.update(_text_values(message.role, text))
    rows = [Tombstone(owner_id=owner.pk, digest=_digest(owner.pk, v, settings.SECRET_KEY)) for v in values]
    Tombstone.objects.bulk_create(rows, batch_size=500, ignore_conflicts=True)
    return len(rows)


def forgotten(owner, messages: Sequence[Known]) -> dict[int, dt.datetime]:
    """Which of `messages` (by position) the owner forgot, and when."""
    wanted: dict[str, list[int]] = {}
    for n, known in enumerate(messages):
        for value in _values(known):
            for secret in _secrets():
                wanted.setdefault(_digest(owner.pk, value, secret), []).append(n)
    found: dict[int, dt.datetime] = {}
    digests = list(wanted)
    for start in range(0, len(digests), 2000):
        rows = Tombstone.objects.filter(owner_id=owner.pk, digest__in=digests[start:start + 2000])
        for digest, when in rows.values_list("digest", "forgotten_at"):
            for n in wanted[digest]:
                found[n] = max(found.get(n, when), when)
    return found


@dataclass
class LeftOut:
    """The messages an import left out because they were forgotten: how many, when they were
    forgotten last, and their texts (to scrub what the import brought that quotes them)."""

    count: int = 0
    last: dt.datetime | None = None
    texts: list[str] | None = None

    def add(self, when: dt.datetime, text: str) -> None:
        self.count += 1
        self.last = when if self.last is None else max(self.last, when)
        self.texts = [*(self.texts or []), text]

    def sentence(self) -> str:
        """What an import report says about them ("1 message skipped: you forgot it on …")."""
        if not self.count:
            return ""
        when = timezone.localtime(self.last) if self.last else None
        day = f"{when.day} {when:%B %Y}" if when else "an earlier day"
        if self.count == 1:
            return f"1 message skipped: you forgot it on {day}"
        return f"{self.count:,} messages skipped: you forgot them (the last on {day})"

    def as_report(self) -> dict:
        return {"forgotten": self.count, "forgotten_note": self.sentence()}


FINISHED = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


def forget_task_arguments(*, message_ids: Iterable[str] = (), task_id: object = None) -> int:
    """Finished background tasks whose arguments name one of `message_ids` (or the task
    `task_id`, just finished) lose the ids, in any list argument, of messages that no longer
    exist. The owner id and the rest of a task's arguments stay. Returns how many tasks changed."""
    from django_tasks_db.models import DBTaskResult

    ids = [str(i) for i in message_ids if i]
    if task_id is None and not ids:
        return 0
    rows = DBTaskResult.objects.filter(status__in=FINISHED)
    if task_id is not None:
        rows = rows.filter(pk=task_id)
    if ids:
        # Memory's tasks take (owner_id, [message ids]).
        naming = (Q(args_kwargs__args__1__contains=[i]) for i in ids)
        rows = rows.filter(functools.reduce(operator.or_, naming))
    changed = 0
    for pk, args_kwargs in rows.values_list("pk", "args_kwargs").iterator():
        args = (args_kwargs or {}).get("args") or []
        named = {v for a in args if isinstance(a, list) for v in a if isinstance(v, str)}
        if not named:
            continue
        gone = named - set(Message.objects.filter(pk__in=named).values_list("pk", flat=True))
        if gone:
            kept = [[v for v in a if v not in gone] if isinstance(a, list) else a for a in args]
            DBTaskResult.objects.filter(pk=pk).update(args_kwargs={**args_kwargs, "args": kept})
            changed += 1
    return changed
