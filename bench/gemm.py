"""The machine's ceiling for an encoder's matrix products, measured where an embedder runs.

A BERT-sized encoder layer (e5-small, MiniLM: width 384, FFN 1536) spends its work in four
products per token: Q/K/V (384 -> 1152), the attention output (384 -> 384) and the FFN
(384 -> 1536 -> 384), plus attention itself (scores and weighted sum: 2 x tokens x width
multiply-adds per token). `ceilings` times the four products alone for a batch of tokens, in
fp32 (numpy's BLAS) and in int8 (ONNX Runtime's MatMulInteger: u8 x s8, VNNI where the CPU has
it), so an embedder's own rate (`encoder_flops` / seconds) can be read against what these cores
do at best with the same shapes, in the same run.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

HIDDEN, FFN = 384, 1536


def shapes(hidden: int = HIDDEN, ffn: int = FFN) -> list[tuple[int, int]]:
    """(inputs, outputs) of each product of one layer."""
    return [(hidden, 3 * hidden), (hidden, hidden), (hidden, ffn), (ffn, hidden)]


def encoder_flops(lengths, layers: int, hidden: int = HIDDEN, ffn: int = FFN) -> float:
    """Floating-point operations (2 per multiply-add) of an encoder over sequences of `lengths`
    tokens: the four products of every token, and attention's 2 x n x width per token."""
    per_token = sum(k * n for k, n in shapes(hidden, ffn))
    lengths = np.asarray(list(lengths), dtype=np.float64)
    return float(2 * layers * (per_token * lengths.sum() + 2 * hidden * (lengths**2).sum()))


def _timed(run, flops: float, repeats: int) -> tuple[float, float]:
    """Giga-operations per second of the clock and per second of CPU this process used (on a
    machine others share, the clock's figure falls with their load; the CPU's much less)."""
    run()  # warm up: first-touch pages, packed weights
    times, cpu = [], []
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    return flops / statistics.median(times) / 1e9, flops / statistics.median(cpu) / 1e9


def fp32_gflops(tokens: int = 2048, repeats: int = 5) -> tuple[float, float]:
    """GFLOP/s of numpy (its BLAS, every core) on one layer's products for `tokens` tokens."""
    rng = np.random.default_rng(0)
    pairs = [(rng.standard_normal((tokens, k), dtype=np.float32),
              rng.standard_normal((k, n), dtype=np.float32)) for k, n in shapes()]
    flops = 2.0 * tokens * sum(k * n for k, n in shapes())
    return _timed(lambda: [a @ b for a, b in pairs], flops, repeats)


def int8_gops(tokens: int = 2048, threads: int = 2, repeats: int = 5) -> tuple[float, float]:
    """Giga-operations/s of ONNX Runtime's int8 product (MatMulInteger, u8 activations x s8
    weights, int32 sums) on one layer's products for `tokens` tokens, on `threads` threads."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, initializers, inputs, outputs, feeds = [], [], [], [], {}
    for i, (k, n) in enumerate(shapes()):
        initializers.append(numpy_helper.from_array(rng.integers(-127, 128, (k, n), dtype=np.int8), f"w{i}"))
        inputs.append(helper.make_tensor_value_info(f"a{i}", TensorProto.UINT8, [tokens, k]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.INT32, [tokens, n]))
        nodes.append(helper.make_node("MatMulInteger", [f"a{i}", f"w{i}"], [f"y{i}"]))
        feeds[f"a{i}"] = rng.integers(0, 256, (tokens, k), dtype=np.uint8)
    model = helper.make_model(helper.make_graph(nodes, "gemm", inputs, outputs, initializers),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ops = 2.0 * tokens * sum(k * n for k, n in shapes())
    return _timed(lambda: session.run(None, feeds), ops, repeats)


def ceilings(threads: int = 2) -> dict[str, float]:
    """fp32 and int8 rates of one layer's products: per second, and per CPU-second (`_cpu`)."""
    fp32, fp32_cpu = fp32_gflops()
    int8, int8_cpu = int8_gops(threads=threads)
    return {"fp32_gflops": round(fp32, 1), "int8_gops": round(int8, 1),
            "fp32_gflops_cpu": round(fp32_cpu, 1), "int8_gops_cpu": round(int8_cpu, 1)}
