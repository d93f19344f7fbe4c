"""What an import reads, as streams: an uploaded file (on disk, or in memory when small) or the
conversations.json of an export zip, and the items of a JSON array one at a time.

Nothing here holds a whole file. A zip member is read through a cap on its uncompressed size
(IMPORT_MAX_UNCOMPRESSED_MB) and on its compression ratio (IMPORT_MAX_COMPRESSION_RATIO), both
checked against the zip's own header before a byte is inflated and again while it is read; a
ChatGPT or Claude export is decoded a conversation at a time.

The items are decoded by the standard library's C decoder (json.JSONDecoder.raw_decode) over a
bounded buffer rather than by an event parser such as ijson: ijson's fast backend (yajl) turns a
lone "\\ud800" into "?" and fails on a lone "\\udc00", where an export's odd characters must
cost at most a U+FFFD (memory.transfer.importers), and its pure-Python backend reads about a
tenth as fast. An item is held whole while it is decoded: the largest is the largest
conversation, not the file.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from django.conf import settings

from memory.transfer.portability import InvalidExport

MB = 1024 * 1024
# Text is read (and an item's buffer grows) this many characters at a time.
READ_CHARS = 1 << 20


class InvalidUpload(ValueError):
    """A file that is none of the formats an import reads (the message says why)."""


class TooDeep(InvalidExport):
    """JSON nested deeper than Python's decoder can follow (it raises RecursionError)."""

    def __init__(self) -> None:
        super().__init__(
            "the JSON is nested too deeply to read (thousands of levels of [ or {): no chat export "
            "looks like this"
        )


def loads(text: str) -> Any:
    """json.loads, with nesting too deep for the decoder as TooDeep (an InvalidExport), not a
    RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeep() from None


# --- sources -------------------------------------------------------------------------------------


@dataclass
class Source:
    """An import's input: `open()` gives a fresh binary stream of its bytes each time (the
    format is told apart, checked, copied into the job and stored in separate passes)."""

    name: str
    open: Callable[[], IO[bytes]]
    member: str = ""  # the zip member read, if the upload was an export zip

    def text(self) -> io.TextIOWrapper:
        """The bytes as text: UTF-8 with or without a byte-order mark, an invalid byte read as
        U+FFFD."""
        return io.TextIOWrapper(self.open(), encoding="utf-8-sig", errors="replace", newline="")


class _Unclosed(io.RawIOBase):
    """A view of a seekable file from its start that leaves the file open when closed (each pass
    opens one; the upload is closed by whoever opened it)."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.file.seek(self.pos)
        data = self.file.read(len(buffer))
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


class _Capped(io.RawIOBase):
    """A zip member's stream that stops with InvalidUpload once it has given more than `cap`
    bytes: the header's sizes can lie, so what is inflated is counted too."""

    def __init__(self, stream: IO[bytes], cap: int, why: str) -> None:
        self.stream = stream
        self.cap = cap
        self.why = why
        self.given = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(len(buffer))
        self.given += len(data)
        if self.given > self.cap:
            raise InvalidUpload(self.why)
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.stream.close()
        super().close()


def open_file(file: IO[bytes], name: str = "") -> Source:
    """The Source of an uploaded or local file (seekable): an export zip's conversations.json,
    or the file itself. Raises InvalidUpload for a zip without one, a broken zip, or one whose
    conversations.json would expand past the caps."""
    file.seek(0)
    if file.read(4) != b"PK\x03\x04":
        return Source(name, lambda: io.BufferedReader(_Unclosed(file), READ_CHARS))
    label = name or "the file"
    try:
        archive = zipfile.ZipFile(file)  # leaves `file` open when it closes
        names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "conversations.json"]
        if not names:
            raise InvalidUpload(f"{label}: a zip file without conversations.json")
        info = archive.getinfo(min(names, key=len))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as exc:
        raise InvalidUpload(f"{label}: a broken zip file ({exc})") from None
    cap = settings.IMPORT_MAX_UNCOMPRESSED_MB * MB
    ratio = settings.IMPORT_MAX_COMPRESSION_RATIO
    too_big = (
        f"{label}: its conversations.json expands to more than {settings.IMPORT_MAX_UNCOMPRESSED_MB:,} MB "
        "(IMPORT_MAX_UNCOMPRESSED_MB)"
    )
    # A little slack for tiny members, where a ratio means nothing.
    allowed = min(cap, ratio * max(info.compress_size, 1) + 64 * 1024)
    bomb = (
        f"{label}: its conversations.json expands more than {ratio}-fold (IMPORT_MAX_COMPRESSION_RATIO) "
        "as it is read, which no chat export does: it looks like a zip bomb"
    )
    if info.file_size > ratio * max(info.compress_size, 1) + 64 * 1024:
        fold = info.file_size / max(info.compress_size, 1)
        raise InvalidUpload(
            f"{label}: its conversations.json would expand {fold:,.0f}-fold, to "
            f"{info.file_size / MB:,.0f} MB; no chat export expands more than {ratio}-fold "
            "(IMPORT_MAX_COMPRESSION_RATIO): it looks like a zip bomb"
        )
    if info.file_size > cap:
        raise InvalidUpload(too_big.replace("more than", f"{info.file_size / MB:,.0f} MB, more than"))

    def member() -> IO[bytes]:
        try:
            stream = archive.open(info)
        except (zipfile.BadZipFile, NotImplementedError, RuntimeError) as exc:
            raise InvalidUpload(f"{label}: a broken zip file ({exc})") from None
        return io.BufferedReader(_Capped(stream, allowed, bomb if allowed < cap else too_big), READ_CHARS)

    return Source(name, member, member=info.filename)


def open_text(text: str, name: str = "") -> Source:
    """A Source over text already in memory (tests, benchmarks)."""
    return open_file(io.BytesIO(text.encode("utf-8", "surrogatepass")), name)


def read_errors(source: Source) -> str | None:
    """Why `source` cannot be read to its end (a zip member over a cap, a corrupt member), or
    None: the first pass over an upload reads it whole, a byte stream at a time."""
    try:
        with source.open() as stream:
            while stream.read(READ_CHARS):
                pass
    except InvalidUpload as exc:
        return str(exc)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        return f"{source.name or 'the file'}: a broken zip file ({exc})"
    return None


# --- the items of a JSON array ---------------------------------------------------------------------


_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"


class ArrayReader:
    """The items of the JSON array a text stream holds, one at a time, each decoded whole.

    `line` and `column` say where the reader is (for errors). Raises InvalidExport, saying
    where, for text that is not one JSON array (trailing text included), and TooDeep for
    nesting the decoder cannot follow."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.buffer = ""
        self.pos = 0
        self.eof = False
        self.lines_before = 0  # newlines in the text dropped from the buffer
        self.dropped = 0  # characters dropped from the buffer

    # Reading.
    def _more(self, chars: int | None = None) -> bool:
        if self.eof:
            return False
        piece = self.stream.read(chars or READ_CHARS)
        if not piece:
            self.eof = True
            return False
        if self.pos > READ_CHARS:
            self.lines_before += self.buffer.count("\n", 0, self.pos)
            self.dropped += self.pos
            self.buffer = self.buffer[self.pos :]
            self.pos = 0
        self.buffer += piece
        return True

    def _skip_space(self) -> str:
        """The next character that is not white space ("" at the end of the text)."""
        while True:
            while self.pos < len(self.buffer) and self.buffer[self.pos] in _SPACE:
                self.pos += 1
            if self.pos < len(self.buffer):
                return self.buffer[self.pos]
            if not self._more():
                return ""

    def where(self, pos: int | None = None) -> str:
        pos = self.pos if pos is None else pos
        line = self.lines_before + self.buffer.count("\n", 0, pos) + 1
        start = self.buffer.rfind("\n", 0, pos) + 1
        return f"line {line} column {pos - start + 1}"

    def _invalid(self, what: str, pos: int | None = None) -> InvalidExport:
        return InvalidExport(f"not valid JSON ({what} at {self.where(pos)})")

    # The array.
    def __iter__(self) -> Iterator[Any]:
        first = self._skip_space()
        if first != "[":
            raise self._invalid("expected a JSON array of conversations")
        self.pos += 1
        if self._skip_space() == "]":
            self.pos += 1
            self._end()
            return
        while True:
            yield self._item()
            after = self._skip_space()
            if after == ",":
                self.pos += 1
                continue
            if after == "]":
                self.pos += 1
                self._end()
                return
            raise self._invalid(
                "expected , or ] after an item" if after else "the file ends inside the array"
            )

    def _item(self) -> Any:
        """The item at the reader's position, decoded once enough of it is buffered (an item
        larger than LARGE_ITEM is read by _large_item instead)."""
        if not self._skip_space():
            raise self._invalid("the file ends inside the array")
        want = READ_CHARS
        while True:
            try:
                item, end = _DECODER.raw_decode(self.buffer, self.pos)
            except RecursionError:
                raise TooDeep() from None
            except json.JSONDecodeError as exc:
                # Cut off by the buffer's end (or inside a string that runs past it): read on,
                # twice as much each time, so an item is decoded a few times at most.
                cut = exc.pos >= len(self.buffer) - 12 or exc.msg.startswith("Unterminated string")
                if cut and len(self.buffer) - self.pos >= LARGE_ITEM and self.buffer[self.pos] in "[{":
                    return self._large_item()
                if cut and self._more(want):
                    want = min(2 * want, LARGE_ITEM)
                    continue
                raise self._invalid(exc.msg, exc.pos) from None
            if self.buffer[self.pos] not in '[{"' and len(self.buffer) - end < 64 and self._more(want):
                continue  # a number may go on past the buffer ("0." of "0.5")
            self.pos = end
            return item

    def _large_item(self) -> Any:
        """The object or array at the reader's position when it is too large to buffer whole:
        lexed a read at a time, a string value longer than KEEP_STRING of a key no importer
        reads (READ_KEYS) left out as "" without ever being held, the rest decoded. A text a
        person wrote is kept whatever its length (message texts are read by key or in lists)."""
        lexer = _Lexer()
        while True:
            end = lexer.feed(self.buffer, self.pos)
            if end is not None:
                self.pos = end
                break
            self.pos = len(self.buffer)
            if not self._more():
                raise self._invalid("the file ends inside the array")
        try:
            return _DECODER.decode(lexer.text())
        except RecursionError:
            raise TooDeep() from None
        except json.JSONDecodeError as exc:
            raise self._invalid(f"{exc.msg} in a conversation of {len(lexer.text()):,} characters") from None

    def _end(self) -> None:
        if self._skip_space():
            raise self._invalid("more text after the array")


# An item larger than this is lexed a read at a time (ArrayReader._large_item), not buffered.
LARGE_ITEM = 4 * READ_CHARS
# In such an item, a string value longer than this of a key none of the importers reads
# (memory.transfer.importers) is left out.
KEEP_STRING = 64 * 1024
READ_KEYS = frozenset({
    # ChatGPT
    "mapping", "create_time", "current_node", "title", "conversation_id", "id", "parent", "message",
    "author", "role", "content", "parts", "text", "content_type", "metadata",
    "is_visually_hidden_from_conversation", "model_slug",
    # Claude
    "chat_messages", "created_at", "name", "uuid", "sender", "type", "parent_message_uuid",
    "attachments", "files", "file_name",
})
# The longest key remembered (to tell which key a string is the value of).
KEY_CHARS = 256


class _Lexer:
    """Finds where a JSON object or array ends in text given a piece at a time, keeping its text
    but for long string values of keys no importer reads (see ArrayReader._large_item).

    Outside strings it walks character by character (that text is brackets, numbers and
    punctuation); strings are skipped to their closing quote with str.find."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.depth = 0
        self.in_string = False
        self.backslashes = 0  # a run of backslashes at the end of the last piece, inside a string
        self.string: list[str] = []
        self.string_len = 0
        self.value_of: str | None = None  # the key whose value the current string is
        self.dropping = False
        self.last_string: str | None = None  # the last string read, if short (a key, maybe)
        self.key: str | None = None  # the key of the value being read
        self.after_colon = False

    def text(self) -> str:
        if len(self.out) > 1:
            self.out = ["".join(self.out)]
        return self.out[0] if self.out else ""

    def feed(self, buffer: str, start: int) -> int | None:
        """Take buffer[start:]; the index just past the item if it ends there, else None."""
        i, n = start, len(buffer)
        seg = start  # where the text not yet copied to `out` begins (outside strings)
        while i < n:
            if self.in_string:
                j = self._closing_quote(buffer, i)
                if j < 0:
                    piece = buffer[i:]
                    self._string_piece(piece)
                    tail = len(piece) - len(piece.rstrip("\\"))
                    self.backslashes = self.backslashes + tail if tail == len(piece) else tail
                    return None
                self._string_piece(buffer[i:j])
                self._end_string()
                i = seg = j + 1
                continue
            c = buffer[i]
            if c == '"':
                self.out.append(buffer[seg:i])
                seg = i + 1
                self.in_string, self.backslashes = True, 0
                self.string, self.string_len, self.dropping = [], 0, False
                self.value_of = self.key if self.after_colon else None
                self.after_colon = False
                i += 1
                continue
            if c in "[{":
                self.depth += 1
                self.after_colon = False
            elif c in "]}":
                self.depth -= 1
                if self.depth == 0:
                    self.out.append(buffer[seg : i + 1])
                    return i + 1
            elif c == ":":
                self.key, self.after_colon = self.last_string, True
            elif c == ",":
                self.after_colon = False
            i += 1
        if not self.in_string:
            self.out.append(buffer[seg:n])
        return None

    def _closing_quote(self, buffer: str, i: int) -> int:
        """The index of the quote that ends the string from buffer[i], or -1 if it goes on."""
        j = buffer.find('"', i)
        while j >= 0:
            run = 0
            while j - run - 1 >= i and buffer[j - run - 1] == "\\":
                run += 1
            if j - run == i:
                run += self.backslashes  # the run goes back into the last piece
            if run % 2 == 0:
                return j
            j = buffer.find('"', j + 1)
        return -1

    def _string_piece(self, piece: str) -> None:
        self.string_len += len(piece)
        if self.dropping:
            return
        self.string.append(piece)
        if self.string_len > KEEP_STRING and self.value_of is not None and self.value_of not in READ_KEYS:
            self.dropping, self.string = True, []

    def _end_string(self) -> None:
        self.in_string = False
        text = "".join(self.string)
        self.out.append(f'"{text}"')
        self.last_string = text if self.string_len <= KEY_CHARS else None
        self.string = []


def peek(source: Source) -> tuple[str, str]:
    """The first character of `source` that is not white space ("" for an empty file), and its
    first line (at most max_line_chars() of it)."""
    with source.text() as stream:
        while True:
            line = stream.readline(max_line_chars())
            if not line:
                return "", ""
            if line.strip(_SPACE):
                body = line.lstrip(_SPACE)
                return body[0], body.rstrip("\r\n")


def max_line_chars() -> int:
    """The longest JSON Lines line read: a message of MAX_MESSAGE_CHARS with room for its fields
    (a longer line is reported as bad, never held)."""
    return settings.MAX_MESSAGE_CHARS + 64 * 1024


class TooLong(str):
    """A JSON Lines line longer than max_line_chars(): the line's number is counted, its text is
    not kept (memory.transfer.importers.parse_line says why it is bad)."""


def blank(line: str) -> bool:
    """Whether a line of lines() holds nothing (a TooLong line is not blank: it was too long)."""
    return not isinstance(line, TooLong) and not line.strip()


def lines(stream: IO[str]) -> Iterator[str]:
    """The lines of a text stream, each at most max_line_chars() long; a longer one is given as
    a TooLong (empty), its text skipped a piece at a time."""
    cap = max_line_chars()
    while True:
        line = stream.readline(cap)
        if not line:
            return
        if len(line) >= cap and not line.endswith("\n"):
            while True:
                rest = stream.readline(cap)
                if not rest or rest.endswith("\n"):
                    break
            yield TooLong()
            continue
        yield line
