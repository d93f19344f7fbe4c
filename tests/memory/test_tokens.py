"""Token counts: exact (cl100k), and a text counted again is not tokenized again."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from memory import tokens
from memory.tokens import count_tokens, encoding


def _exact(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


def test_counts_are_exact_for_short_long_and_very_long_texts():
    for text in ("", "hello there", "word " * 1000, "word " * 20_000, "ünïcode ✓ " * 9000):
        assert count_tokens(text) == (_exact(text) if text else 0)


def test_a_long_text_counted_again_in_the_same_turn_is_not_tokenized_again(monkeypatch):
    # The memory index is counted when it is written, in the system prompt and in the prompt's
    # fit: the later counts come from the cache.
    index = "\n".join(f"[01J{i:023d}] 2026-11-24 user: note {i} about the garden" for i in range(400))
    assert tokens._CACHED_MAX_CHARS < len(index) <= tokens._CACHED_LONG_MAX_CHARS
    first = count_tokens(index)
    calls = []
    real = encoding().encode
    monkeypatch.setattr(encoding(), "encode", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert count_tokens(str(index)) == first == _exact(index)
    assert count_tokens("".join([index])) == first
    assert len(calls) == 1  # only _exact above tokenized it again


def test_a_text_over_the_long_cache_limit_is_counted_without_being_kept():
    huge = "token " * (tokens._CACHED_LONG_MAX_CHARS // 6 + 10)
    before = tokens._count_long.cache_info().currsize
    assert count_tokens(huge) == _exact(huge)
    assert tokens._count_long.cache_info().currsize == before


# Lines as an index writes them: words, numbers, quotes and punctuation, indents, tabs, empty
# lines, newlines inside a line, and characters of several bytes.
_PIECES = ["a", "Zo", " ", "  ", "\t", "'s", "'", '"', ":", "(", ")", "…", "↳", "é", "7", "2024",
           "-", ".", "\n", "\r", "\r\n", "日本", "🙂", "_", "*", "- ", "    "]
_LINE = st.lists(st.sampled_from(_PIECES), max_size=10).map("".join)


@hypothesis_settings(max_examples=1500, deadline=None)
@given(lines=st.lists(_LINE, max_size=10))
def test_lines_joined_are_counted_exactly_without_encoding_the_whole_text(lines):
    assert tokens.count_joined(lines) == _exact("\n".join(lines))


def _spy_on_encoding(monkeypatch) -> tuple[list[str], object]:
    """The texts tokens encodes from now on (a list that grows), and the real encoding."""
    encoded: list[str] = []
    real = tokens.encoding()

    class Spy:
        def encode_ordinary(self, text):
            encoded.append(text)
            return real.encode_ordinary(text)

    monkeypatch.setattr(tokens, "encoding", lambda: Spy())
    return encoded, real


def test_an_index_counted_by_its_lines_encodes_only_the_lines_it_has_not_seen(monkeypatch):
    lines = ["Memory Levels:", "", '  - topic 1 "redis" (3 messages)', "FACTS:", "- the user lives in Porto"]
    assert tokens.count_joined(lines) == _exact("\n".join(lines))
    encoded, real = _spy_on_encoding(monkeypatch)
    more = [*lines, "- the user works at Acme"]
    assert tokens.count_joined(more) == len(real.encode_ordinary("\n".join(more)))
    # The lines before the last two were counted with the newline that follows them already.
    assert encoded == ["- the user lives in Porto\n", "- the user works at Acme"]


# Indents of every kind before a line's text, some holding a newline or a carriage return, and
# whitespace-only lines: where a piece of the pre-tokenizer can run past a newline.
_INDENTS = ["", " ", "  ", "    ", "\t", " \t", "\u00a0", "\u3000", "\x0b", "\x0c", "\x85", "\u2028",
            "\x1c", " \r", "\r", " \n ", "\r\n"]
_INDENTED = st.tuples(st.sampled_from(_INDENTS), _LINE).map("".join)


@hypothesis_settings(max_examples=3000, deadline=None)
@given(lines=st.lists(_INDENTED, max_size=12))
def test_indented_lines_joined_are_counted_exactly(lines):
    assert tokens.count_joined(lines) == _exact("\n".join(lines))


def test_an_indented_section_is_counted_line_by_line(monkeypatch):
    # The levels section lists messages indented under their heading; one line more (the newest
    # message) encodes that line alone, not the section again.
    lines = ["SUMMARY (messages 11-50 back):"] + [
        f'  - S{i:025d} [2023-04-18] user: "message {i} about the garden"' for i in range(40)
    ]
    assert tokens.count_joined(lines) == _exact("\n".join(lines))
    encoded, real = _spy_on_encoding(monkeypatch)
    newest = '  - S0000000000000000000000040 [2023-04-18] user: "message 40 about the garden"'
    more = [*lines, newest]
    assert tokens.count_joined(more) == len(real.encode_ordinary("\n".join(more)))
    assert encoded == [lines[-1] + "\n", newest]


def test_a_whitespace_only_line_keeps_its_newlines_in_one_piece():
    for lines in (["a", "   ", "  b"], ["x.", "", "\t", " y"], ["a", " \r b"], ["a", "\u2028\n c"]):
        assert tokens.count_joined(lines) == _exact("\n".join(lines))
