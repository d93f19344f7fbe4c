"""What an import reads, as streams (memory.transfer.sources): the items of a JSON array one at a
time, the same as json.loads reads them, whatever the reads cut; an item too large to buffer read
without its long ignored fields; a zip's conversations.json through its caps; nesting too deep
as a clear error."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.transfer import import_jobs, sources
from memory.transfer.portability import InvalidExport

text = st.text(alphabet=st.sampled_from([*'ab "\\\n/é😀\t{}[],:', "\ud800"]), max_size=30)
number = st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
leaf = st.none() | st.booleans() | number | text
value = st.recursive(
    leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4), max_leaves=20
)


def read_items(raw: str, *, read: int, large: int, monkeypatch) -> list:
    monkeypatch.setattr(sources, "READ_CHARS", read)
    monkeypatch.setattr(sources, "LARGE_ITEM", large)
    return list(sources.ArrayReader(io.StringIO(raw)))


@settings(max_examples=150, deadline=None)
@given(items=st.lists(value, max_size=6), read=st.integers(1, 40), large=st.integers(1, 200),
       indent=st.sampled_from([None, 1]))
def test_the_items_are_what_json_reads_whatever_the_reads_cut(items, read, large, indent):
    raw = json.dumps(items, indent=indent, ensure_ascii=indent is None)
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert read_items(raw, read=read, large=large, monkeypatch=monkeypatch) == json.loads(raw)


def test_an_item_too_large_to_buffer_is_read_without_its_long_ignored_fields(monkeypatch):
    monkeypatch.setattr(sources, "KEEP_STRING", 100)
    paste = 'a "quoted" \\ paste ' * 50  # a text a person wrote: kept, whatever its length
    conversation = {
        "title": "Ports", "moderation_results": "x\\\"y" * 1000, "mapping": {"n1": {"message": {
            "content": {"parts": [paste]}, "metadata": {"huge_blob": "z" * 5000, "model_slug": "gpt-4o"}}}},
    }
    raw = json.dumps([conversation, {"title": "next"}])
    items = read_items(raw, read=64, large=256, monkeypatch=monkeypatch)
    assert items[0]["moderation_results"] == "" and items[0]["mapping"]["n1"]["message"]["metadata"] == {
        "huge_blob": "", "model_slug": "gpt-4o"}
    assert items[0]["mapping"]["n1"]["message"]["content"]["parts"] == [paste]
    assert items[1] == {"title": "next"}


@pytest.mark.parametrize(("raw", "says"), [
    ("[1, 2", "the file ends inside the array"),
    ("[1 2]", "expected , or ] after an item at line 1 column 4"),
    ("[1]\nx", "more text after the array at line 2 column 1"),
    ('[{"a": }]', "Expecting value at line 1 column 8"),
    ('{"a": 1}', "expected a JSON array of conversations"),
])
def test_text_that_is_not_one_json_array_says_where(raw, says):
    with pytest.raises(InvalidExport) as err:
        list(sources.ArrayReader(io.StringIO(raw)))
    assert says in str(err.value)


DEEP_ARRAYS = "[" * 100_000 + "]" * 100_000
DEEP_OBJECTS = '[{"a":' * 100_000 + "1" + "}" * 100_000 + "]"


@pytest.mark.parametrize("raw", [DEEP_ARRAYS, DEEP_OBJECTS], ids=["arrays", "objects"])
def test_nesting_too_deep_is_a_clear_error_not_a_recursion_error(raw):
    with pytest.raises(sources.TooDeep) as err:
        import_jobs.parse(raw)
    assert "nested too deeply" in str(err.value)


def zipped(member: bytes, name: str = "conversations.json") -> io.BytesIO:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name, member)
    archive.seek(0)
    return archive


def test_a_zip_bomb_is_refused_from_its_header_before_anything_is_inflated(settings):
    settings.IMPORT_MAX_COMPRESSION_RATIO = 100
    with pytest.raises(sources.InvalidUpload) as err:
        sources.open_file(zipped(b"[" + b" " * 20_000_000 + b"]"), "export.zip")
    assert "expand" in str(err.value) and "zip bomb" in str(err.value)


def test_a_conversations_json_over_the_uncompressed_cap_is_refused(settings):
    settings.IMPORT_MAX_UNCOMPRESSED_MB = 1
    member = json.dumps([{"title": str(i), "mapping": {}} for i in range(60_000)]).encode()
    with pytest.raises(sources.InvalidUpload) as err:
        sources.open_file(zipped(member), "export.zip")
    assert "more than 1 MB (IMPORT_MAX_UNCOMPRESSED_MB)" in str(err.value)


def test_a_zip_whose_header_lies_about_its_size_stops_at_the_cap(settings):
    settings.IMPORT_MAX_UNCOMPRESSED_MB = 1
    member = b"[" + b"1," * 1_500_000 + b"1]"
    data = bytearray(zipped(member).getvalue())
    # The member's declared size, in both headers, says 1,000 bytes.
    real = len(member).to_bytes(4, "little")
    for at in [i for i in range(len(data) - 3) if data[i:i + 4] == real]:
        data[at:at + 4] = (1000).to_bytes(4, "little")
    source = sources.open_file(io.BytesIO(bytes(data)), "export.zip")
    with pytest.raises(sources.InvalidUpload) as err:
        import_jobs.parse(source)
    assert "broken zip" in str(err.value)


def test_an_export_zip_is_read_as_its_conversations_json():
    member = json.dumps([{"title": "t", "mapping": {"a": {"message": {
        "id": "a", "author": {"role": "user"}, "content": {"parts": ["hello"]}}}}}]).encode()
    parsed = import_jobs.parse(sources.open_file(zipped(member), "export.zip"))
    assert (parsed.kind, parsed.messages, parsed.conversations) == ("chatgpt", 1, 1)
