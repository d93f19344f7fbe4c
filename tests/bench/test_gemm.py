"""bench.gemm: the ceiling bench_embedders reads an embedder's rate against."""

from bench import gemm


def test_an_encoders_work_is_its_four_products_per_token_plus_attention():
    # One layer of width 4, FFN 8, over sequences of 2 and 3 tokens: the products are
    # 4x12 + 4x4 + 4x8 + 8x4 = 128 multiply-adds per token, attention 2 x width x n per token.
    products = 128 * (2 + 3)
    attention = 2 * 4 * (2**2 + 3**2)
    assert gemm.encoder_flops([2, 3], layers=1, hidden=4, ffn=8) == 2 * (products + attention)
    assert gemm.encoder_flops([2, 3], layers=12, hidden=4, ffn=8) == 12 * 2 * (products + attention)


def test_e5_smalls_layer_has_the_shapes_of_width_384_and_ffn_1536():
    assert gemm.shapes() == [(384, 1152), (384, 384), (384, 1536), (1536, 384)]


def test_the_ceilings_are_measured_in_fp32_and_int8_per_second_and_per_cpu_second():
    fp32, fp32_cpu = gemm.fp32_gflops(tokens=32, repeats=1)
    int8, int8_cpu = gemm.int8_gops(tokens=32, threads=1, repeats=1)
    assert min(fp32, fp32_cpu, int8, int8_cpu) > 0
