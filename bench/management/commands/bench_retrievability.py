"""manage.py bench_retrievability: issue 13 §1's "100% retrievability", measured.

A scratch user stores messages of many sizes (100 characters to 2 million by default) and tool
calls whose results have those sizes. Then, through the memory tools only (`execute_tool`, as a
chat turn runs the model's calls), one random sentence of each is read back by following ids
and paging with next_offset until it turns up. Every reading tool takes its turn: messages are
read with get_message_by_id, get_messages_by_ids and get_message_with_chunks (then the chunk's
own pages), tool results with get_tool_call and via get_tool_calls_by_message. Prints the share
found (goal 100%) and the tool calls it took; exits non-zero under 100%.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from bench.scratch import add_database_argument, use_database
from memory.context.tools import MAX_RESULT_CHARS, execute_tool
from memory.models import Conversation
from memory.progress import Progress
from memory.storage.store import NewMessage, store_messages, store_tool_call

DEFAULT_SIZES = "100,1000,6001,20000,50000,200000,2000000"
QUICK_SIZES = "100,7000,30000"
MESSAGE_READERS = ("get_message_by_id", "get_messages_by_ids", "get_message_with_chunks")
TOOL_READERS = ("get_tool_call", "get_tool_calls_by_message")

WORDS = [
    "river", "stone", "lantern", "orchard", "copper", "violet", "harbour", "meadow", "ledger",
    "signal", "quartz", "timber", "falcon", "glacier", "pepper", "saddle", "thimble", "canyon",
    "marble", "velvet", "compass", "anchor", "beacon", "cellar", "drizzle", "ember", "fennel",
    "gravel", "hollow", "inkwell", "juniper", "kettle", "lattice", "mosaic", "nectar", "oyster",
    "parsley", "quiver", "ribbon", "sapphire", "tundra", "umber", "walnut", "yarrow", "zephyr",
    "café", "naïve", "façade", "résumé", "Zürich",
]


@dataclass
class Target:
    kind: str  # "message" or "tool result"
    reader: str
    size: int
    id: str  # the message id (a tool result is found from its message or its own id)
    sentence: str
    call_id: str | None = None
    other_id: str | None = None  # a second message asked for alongside, for get_messages_by_ids


class Reader:
    """Follows ids and next_offsets through execute_tool, counting calls and result sizes."""

    def __init__(self, owner, max_calls: int) -> None:
        self.owner = owner
        self.max_calls = max_calls
        self.calls = 0
        self.largest = 0

    def call(self, name: str, **args) -> dict:
        if self.calls >= self.max_calls:
            raise LookupError(f"gave up after {self.calls} tool calls")
        self.calls += 1
        outcome = execute_tool(self.owner, name, args)
        self.largest = max(self.largest, len(outcome.content()))
        if not outcome.ok:
            raise LookupError(f"{name}: {outcome.error}")
        return outcome.result

    def page_until(
        self, sentence: str, first: dict, key: str, more: Callable[[int], dict]
    ) -> bool:
        """Read `first` and the pages after it (`more(offset)`) until `sentence` is read."""
        text, page = "", first
        while True:
            text += page[key]
            if sentence in text[-(len(page[key]) + len(sentence)) :]:
                return True
            following = page.get("next_offset")
            if following is None:
                return False
            if following <= page["offset"]:
                raise LookupError(f"next_offset {following} does not move on")
            page = more(following)

    def read_until(self, sentence: str, name: str, key: str, **args) -> bool:
        """Call tool `name` with `args`, then page through its `key` until `sentence` is read."""
        return self.page_until(
            sentence, self.call(name, **args), key, lambda at: self.call(name, **args, offset=at)
        )


def make_text(rng: random.Random, size: int) -> tuple[str, str]:
    """`size` characters of sentences (with paragraphs, quotes and accents, which JSON
    escapes or not) and one random whole sentence of it."""
    sentences: list[str] = []
    length = 0
    while length < size:
        words = rng.choices(WORDS, k=rng.randint(5, 14))
        sentence = " ".join(words).capitalize() + rng.choice([".", ".", "!", '?"', '."'])
        if rng.random() < 0.2:
            sentence = '"' + sentence
        sentences.append(sentence)
        length += len(sentence) + 1
    parts, spans, at = [], [], 0
    for s in sentences:
        sep = "\n\n" if rng.random() < 0.1 else " "
        if parts:
            parts.append(sep)
            at += len(sep)
        spans.append((at, at + len(s)))
        parts.append(s)
        at += len(s)
    text = "".join(parts)[:size]
    whole = [(a, b) for a, b in spans if b <= len(text)] or [(0, len(text))]
    a, b = rng.choice(whole)
    return text, text[a:b]


class Command(BaseCommand):
    help = (
        "Issue 13 §1: can a random sentence of any message or tool result, of any size, be read "
        "through the tools alone? Prints the share found; exits non-zero under 100%."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--sizes",
            default=None,
            help=f"comma-separated text sizes in characters (default {DEFAULT_SIZES})",
        )
        parser.add_argument(
            "--quick", action="store_true", help=f"small sizes only ({QUICK_SIZES})"
        )
        parser.add_argument("--seed", type=int, default=13)
        parser.add_argument("--user", default="bench_retrievability")
        add_database_argument(parser, "retrievability")
        parser.add_argument("--keep", action="store_true", help="keep the user afterwards")

    def handle(self, *args, **opts) -> None:
        sizes = self._sizes(opts["sizes"] or (QUICK_SIZES if opts["quick"] else DEFAULT_SIZES))
        use_database(opts["database"], self.stdout)
        User = get_user_model()
        User.objects.filter(username=opts["user"]).delete()
        user = User.objects.create_user(opts["user"])
        try:
            started = time.perf_counter()
            targets = self._store(user, sizes, random.Random(opts["seed"]))
            store_s = time.perf_counter() - started
            self._read(user, targets, store_s)
        finally:
            if not opts["keep"]:
                user.delete()

    def _sizes(self, text: str) -> list[int]:
        try:
            sizes = [int(s.replace("_", "")) for s in text.split(",") if s.strip()]
        except ValueError:
            raise CommandError(f"--sizes must be whole numbers separated by commas: {text!r}") from None
        if not sizes or min(sizes) < 1:
            raise CommandError("--sizes must be at least 1 character each")
        return sizes

    def _store(self, user, sizes: list[int], rng: random.Random) -> list[Target]:
        conversation = Conversation.objects.create(owner=user, title="retrievability")
        clock = timezone.now() - dt.timedelta(days=1)
        targets: list[Target] = []
        per_size = len(MESSAGE_READERS) + len(TOOL_READERS)
        with Progress(len(sizes) * per_size, "storing") as bar:
            for size in sizes:
                for reader in MESSAGE_READERS:
                    text, sentence = make_text(rng, size)
                    clock += dt.timedelta(seconds=30)
                    [m] = store_messages(
                        user, conversation, [NewMessage("user", text, timestamp=clock)], embed=False
                    )
                    targets.append(Target("message", reader, size, m.pk, sentence))
                    bar.update()
                for reader in TOOL_READERS:
                    text, sentence = make_text(rng, size)
                    clock += dt.timedelta(seconds=30)
                    [m] = store_messages(
                        user,
                        conversation,
                        [NewMessage("assistant", "I fetched the document.", timestamp=clock)],
                        embed=False,
                    )
                    call = store_tool_call(
                        user, m, "fetch_document", {"url": f"https://example.org/{size}"}, text,
                        timestamp=clock, embed=False,
                    )
                    targets.append(Target("tool result", reader, size, m.pk, sentence, call.pk))
                    bar.update()
        # get_messages_by_ids is asked for two messages at once, as a model would.
        ids = [t.id for t in targets if t.kind == "message"]
        for t in targets:
            if t.reader == "get_messages_by_ids":
                t.other_id = ids[(ids.index(t.id) + 1) % len(ids)]
        return targets

    def _read(self, user, targets: list[Target], store_s: float) -> None:
        rows: list[tuple[Target, bool, int, str]] = []
        largest = 0
        started = time.perf_counter()
        with Progress(len(targets), "reading") as bar:
            for t in targets:
                # Generous: a sentence of a text takes at most a page per 1,000 characters.
                reader = Reader(user, max_calls=50 + t.size // 1000)
                try:
                    found, why = self._find(reader, t), ""
                except LookupError as exc:
                    found, why = False, str(exc)
                largest = max(largest, reader.largest)
                rows.append((t, found, reader.calls, why))
                bar.update()
        read_s = time.perf_counter() - started

        self.stdout.write(f"{'size':>10}  {'kind':<12} {'read with':<26} found  tool calls")
        for t, found, calls, why in rows:
            self.stdout.write(
                f"{t.size:>10,}  {t.kind:<12} {t.reader:<26} {'yes' if found else 'NO ':<5}  "
                f"{calls:>5}" + (f"  ({why})" if why else "")
            )
        hits = sum(found for _, found, _, _ in rows)
        calls = sorted(c for _, _, c, _ in rows)
        self.stdout.write("")
        self.stdout.write(
            f"stored {len(targets)} texts ({sum(t.size for t in targets):,} characters) "
            f"in {store_s:.1f} s; read back in {read_s:.1f} s"
        )
        self.stdout.write(
            f"sentences found through the tools: {hits}/{len(rows)} ({hits / len(rows):.0%})"
        )
        self.stdout.write(
            f"tool calls per sentence: mean {sum(calls) / len(calls):.1f}, "
            f"median {calls[len(calls) // 2]}, max {calls[-1]} (total {sum(calls)})"
        )
        self.stdout.write(
            f"largest tool result: {largest:,} characters (limit {MAX_RESULT_CHARS:,})"
        )
        if hits < len(rows):
            raise CommandError(f"only {hits}/{len(rows)} sentences could be read through the tools")
        if largest > MAX_RESULT_CHARS:
            raise CommandError(f"a tool result took {largest:,} characters, over MAX_RESULT_CHARS")

    def _find(self, r: Reader, t: Target) -> bool:
        if t.reader == "get_message_by_id":
            return r.read_until(t.sentence, "get_message_by_id", "content", id=t.id)
        if t.reader == "get_messages_by_ids":
            ids = [t.id, t.other_id]

            def mine(result: dict) -> dict:
                return next(m for m in result["messages"] if m["id"] == t.id)

            return r.page_until(
                t.sentence,
                mine(r.call("get_messages_by_ids", ids=ids)),
                "content",
                lambda at: mine(r.call("get_messages_by_ids", ids=ids, offset=at)),
            )
        if t.reader == "get_message_with_chunks":
            return self._find_in_chunks(r, t)
        if t.reader == "get_tool_call":
            return r.read_until(t.sentence, "get_tool_call", "result", id=t.call_id)
        # get_tool_calls_by_message: the message's calls, then read on in the one it made.
        listed = r.call("get_tool_calls_by_message", message_id=t.id)["tool_calls"]
        first = listed[0]
        return r.page_until(
            t.sentence,
            first,
            "result",
            lambda at: r.call("get_tool_call", id=first["id"], offset=at),
        )

    def _find_in_chunks(self, r: Reader, t: Target) -> bool:
        """Chunk by chunk (they overlap, so a sentence lies whole in one of them); a chunk too
        long for one result is read on with get_message_by_id on the chunk's id."""
        offset: int | None = 0
        while offset is not None:
            result = r.call("get_message_with_chunks", id=t.id, offset=offset)
            if not result["chunk_count"]:  # a short message: its content is the text
                head = result["message"]
                return r.page_until(
                    t.sentence,
                    head,
                    "content",
                    lambda at: r.call("get_message_by_id", id=t.id, offset=at),
                )
            for chunk in result["chunks"]:
                if r.page_until(
                    t.sentence,
                    chunk,
                    "content",
                    lambda at, cid=chunk["id"]: r.call("get_message_by_id", id=cid, offset=at),
                ):
                    return True
            offset = result["next_offset"]
        return False

