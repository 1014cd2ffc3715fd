"""Bits: the NumPy twin of the stream equals the words and uniforms the Triton kernels produce."""

import numpy as np
import pytest
import torch
from conftest import TORCH_DEVICE

from jsample import kernels
from jsample.reference import gumbel_noise, philox4x32, stream_uniforms

SEEDS = [0, 1, -1, -(2**31), 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40 + 12345, 2**63 - 1, -(2**63), -987654321987]
POSITIONS = [0, 1, 7, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 3]
STREAMS = [0, 1, 2]
CALLS = [0, 1, 3, 1000, 2**20 + 1]


@pytest.mark.parametrize("fast_math", [False, pytest.param(True, marks=pytest.mark.gpu)],
                         ids=["tl_ops", "mul_wide"])
def test_stream_philox_words_match_reference(fast_math):
    grid = np.array(np.meshgrid(np.arange(len(SEEDS)), np.arange(len(POSITIONS)), STREAMS, CALLS)).reshape(4, -1)
    seeds = np.array(SEEDS, dtype=np.int64)[grid[0]]
    positions = np.array(POSITIONS, dtype=np.int64)[grid[1]]
    streams, calls = grid[2].astype(np.int32), grid[3].astype(np.int32)
    words = torch.zeros(len(seeds), 4, dtype=torch.int32, device=TORCH_DEVICE)
    kernels.philox_words_kernel[(len(seeds),)](*(torch.from_numpy(a).to(TORCH_DEVICE)
                                                 for a in (seeds, positions, streams, calls)), words,
                                               FAST_MATH=fast_math)
    got = words.cpu().numpy().view(np.uint32)
    expected = np.stack(philox4x32(seeds, calls, positions & 0xFFFFFFFF, positions >> 32, streams), axis=1)
    np.testing.assert_array_equal(got, expected)


def test_stream_philox_known_answer():
    # Random123's published known-answer vectors for philox4x32-10.
    words = philox4x32(np.uint64(0), 0, 0, 0, 0)
    assert [hex(int(w)) for w in words] == ["0x6627e8d5", "0xe169c58d", "0xbc57ac4c", "0x9b00dbd8"]
    key = np.uint64(0x299F31D0A4093822)  # key words (k0, k1) = (0xa4093822, 0x299f31d0)
    words = philox4x32(key, 0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344)
    assert [hex(int(w)) for w in words] == ["0xd16cfe09", "0x94fdcceb", "0x5001e420", "0x24126ea1"]


@pytest.mark.parametrize("fast_math", [False, pytest.param(True, marks=pytest.mark.gpu)], ids=["exact", "fast_math"])
@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("seed_dtype", ["int32", "uint32", "int64"])
def test_stream_uniforms_and_noise_match_reference(fp64, seed_dtype, fast_math):
    vocab, block_v = 37, 16  # several blocks and a ragged last block
    info = np.iinfo(seed_dtype)
    seeds = np.array([s for s in SEEDS if info.min <= s <= info.max], dtype=seed_dtype)
    positions = np.array((POSITIONS * 3)[: len(seeds)], dtype=np.int64)
    float_dtype = torch.float64 if fp64 else torch.float32
    for stream in STREAMS:
        noise = torch.zeros(len(seeds), vocab, dtype=float_dtype, device=TORCH_DEVICE)
        uniforms = torch.zeros_like(noise)
        torch_seeds = torch.from_numpy(seeds.view(np.int32) if seed_dtype == "uint32" else seeds)
        if seed_dtype == "uint32":
            torch_seeds = torch_seeds.view(torch.uint32)
        kernels.uniforms_kernel[(len(seeds), 3)](torch_seeds.to(TORCH_DEVICE), torch.from_numpy(positions).to(TORCH_DEVICE),
                                                 vocab, noise, uniforms, STREAM=stream, BLOCK_V=block_v, FP64=fp64,
                                                 FAST_MATH=fast_math)
        expected_u = stream_uniforms(seeds, positions, stream, vocab, fp64=fp64)
        np.testing.assert_array_equal(uniforms.cpu().numpy(), expected_u)  # bit-exact
        # The noise uses GPU logs: close to the float64 ideal, not bit-equal (lg2.approx: ~1e-5).
        atol = 1e-12 if fp64 else (2e-5 if fast_math else 2e-6)
        np.testing.assert_allclose(noise.cpu().numpy(), gumbel_noise(expected_u), rtol=0, atol=atol)


@pytest.mark.parametrize("fast_math", [False, pytest.param(True, marks=pytest.mark.gpu)], ids=["exact", "fast_math"])
@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
def test_stream_uniforms_at_scattered_columns_are_the_stream_s(fp64, fast_math):
    """uniform_at (filtered.py's candidate lists: a Philox call per column) gives the stream's uniform
    of each column, bit for bit, in any order: every column residue mod 4 and mod 2, repeats, large
    columns."""
    rng = np.random.default_rng(7)
    vocab, count = 300000, 100
    seeds = np.array(SEEDS[:6], dtype=np.int64)
    positions = np.array(POSITIONS[:6], dtype=np.int64)
    cols = rng.integers(0, vocab, size=(len(seeds), count)).astype(np.int32)
    cols[:, :8] = np.arange(8)  # every residue
    cols[:, 8] = cols[:, 9]  # a repeat
    cols[:, 10] = vocab - 1
    for stream in STREAMS:
        uniforms = torch.zeros(len(seeds), count, dtype=torch.float64 if fp64 else torch.float32, device=TORCH_DEVICE)
        kernels.scattered_uniforms_kernel[(len(seeds),)](
            *(torch.from_numpy(a).to(TORCH_DEVICE) for a in (seeds, positions, cols)), count, uniforms,
            STREAM=stream, BLOCK=128, FP64=fp64, FAST_MATH=fast_math)
        expected = stream_uniforms(seeds, positions, stream, vocab, fp64=fp64)
        np.testing.assert_array_equal(uniforms.cpu().numpy(), np.take_along_axis(expected, cols, axis=1))


def test_stream_uniform_extremes_are_clamped():
    from jsample.reference import uniforms_f32, uniforms_f64

    assert uniforms_f32(np.uint32(0)) == np.float32(2.0**-32)
    assert uniforms_f32(np.uint32(2**32 - 1)) == np.float32(1 - 2.0**-24)
    assert uniforms_f32(np.uint32(1)) == np.float32(2.0**-32)
    assert uniforms_f32(np.uint32(3)) == np.float32(3 * 2.0**-32)  # small u keeps full resolution
    assert uniforms_f64(np.uint32(0), np.uint32(0)) == 2.0**-64
    assert uniforms_f64(np.uint32(2**32 - 1), np.uint32(2**32 - 1)) == 1 - 2.0**-53
    # the tails the STREAM promises: about 22 (FP32) and 44 (FP64)
    assert 22.1 < gumbel_noise(np.float32(2.0**-32)) < 22.2
    assert 44.3 < gumbel_noise(2.0**-64) < 44.4


def _edge_words():
    """(lo, hi) words at the edges of fp64_noise_in_fp32's bound: u near 0 (the largest noise) and
    2**-17, around the series' end (u = 2**-6) and FP64's (2**-8), near 1 - 2**-20 and near 1, and
    random words."""
    words = []
    for edge in (1 << 15, (1 << 32) - (1 << 12)):  # where the bound turns +inf
        words += [(lo, hi) for hi in (edge - 2, edge - 1, edge, edge + 1) for lo in (0, 1, 1 << 31, (1 << 32) - 1)]
    small = [0, 1, 2, 3, 5, 1 << 11, (1 << 11) + 1, 1 << 20, (1 << 31) + 7, (1 << 32) - 1]
    words += [(lo, hi) for hi in (0, 1, 2, 1000, (1 << 24) - 1, 1 << 24) for lo in small]
    for edge in (1 << 24, 1 << 26):  # u = 2**-8, 2**-6
        words += [(lo, hi) for hi in (edge - 2, edge - 1, edge, edge + 1) for lo in small]
    top = (1 << 32) - 1
    words += [(lo, hi) for hi in (top, top - 1, top - 3) for lo in small + [(1 << 32) - k for k in (2, 3, 1 << 10, 1 << 11, (1 << 11) + 1)]]
    words += [(lo, top - k) for k in (0, 1, 2, 3, 4, 5) for lo in (0, 1 << 31)]  # 1 - u around 2**-30
    rng = np.random.default_rng(0)
    random = rng.integers(0, 1 << 32, size=(20000, 2), dtype=np.uint64)
    words += [(int(lo), int(hi)) for lo, hi in random]
    lo, hi = np.array(words, dtype=np.uint64).T
    return lo.astype(np.uint32), hi.astype(np.uint32)


@pytest.mark.parametrize("fast_math", [False, pytest.param(True, marks=pytest.mark.gpu)], ids=["tl_log", "lg2_approx"])
def test_stream_fp64_noise_in_fp32_stays_within_its_bound(fast_math):
    """The FP32 evaluation of the FP64 noise that shortlists FP64 sampling's candidates is within its
    stated bound (2**-13 + |g| * 2**-20, +inf where u < 2**-17 or 1 - u < 2**-20) of the FP64 noise
    the kernels compute, at every edge of the bound's argument and on random words; and the bound is
    tight enough to shortlist (below 1.7e-4 wherever it is finite)."""
    lo, hi = _edge_words()
    n = len(lo)
    noise = torch.zeros(n, dtype=torch.float32, device=TORCH_DEVICE)
    bound = torch.zeros_like(noise)
    exact = torch.zeros(n, dtype=torch.float64, device=TORCH_DEVICE)
    block = 1024
    kernels.fp64_noise_bound_kernel[(triton_cdiv(n, block),)](
        torch.from_numpy(lo.view(np.int32)).to(TORCH_DEVICE), torch.from_numpy(hi.view(np.int32)).to(TORCH_DEVICE), n,
        noise, bound, exact, BLOCK=block, FAST_MATH=fast_math)
    noise, bound, exact = noise.cpu().numpy().astype(np.float64), bound.cpu().numpy(), exact.cpu().numpy()
    expected = gumbel_noise(stream_uniforms_of_words(lo, hi))
    wrong = ~(np.abs(exact - expected) <= 1e-12)  # the kernels' FP64 noise is the reference's
    assert not wrong.any(), list(zip(lo[wrong][:5], hi[wrong][:5], exact[wrong][:5], expected[wrong][:5]))
    error = np.abs(noise - exact)
    assert np.all(error <= bound), (error / bound).max()
    assert np.all(np.isinf(bound) == ((hi < (1 << 15)) | (hi >= (1 << 32) - (1 << 12)))), (
        "the bound is +inf exactly where u < 2**-17 or 1 - u < 2**-20")
    assert np.max(bound[np.isfinite(bound)]) < 1.7e-4
    assert np.max((error / bound)[np.isfinite(bound)]) > 1e-4  # the words reach the bound's scale


def triton_cdiv(n, block):
    return -(-n // block)


def stream_uniforms_of_words(lo, hi):
    from jsample.reference import uniforms_f64

    return uniforms_f64(lo, hi)
