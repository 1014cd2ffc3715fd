"""gumbel_sample: tokens vs the NumPy reference, torch == JAX, invariants, distribution, errors."""

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from conftest import (
    SCORE_MARGIN,
    SIZE,
    both_frontends,
    make_requests,
    run_jax,
    run_torch,
)
from distribution_checks import P_VALUE, chi_square_pvalue, softmax
from scipy import stats

from jsample.reference import gumbel_sample_reference, gumbel_scores_reference

# Rows whose reference top-2 scores are closer than this may differ (GPU logs are not NumPy's).
BATCH, VOCAB = {"cpu": (24, 9000), "gpu": (64, 151936)}[SIZE]  # 9000 > 2 blocks of 4096; B=1024: test_gumbel_gpu
DRAWS = {"cpu": 1200, "gpu": 200_000}[SIZE]  # draws per distribution test


def make_logits(rng, batch, vocab, scale=3.0):
    return (rng.standard_normal((batch, vocab)) * scale).astype(np.float32)


def assert_tokens_match_reference(tokens, logits, seeds, positions, temperature, fp64=False, draft=False):
    """Exact, except rows whose reference top-2 scores lie within SCORE_MARGIN; those must be rare."""
    expected = gumbel_sample_reference(logits, seeds, positions, temperature, fp64=fp64, draft=draft)
    scores = np.sort(gumbel_scores_reference(logits, seeds, positions, temperature, fp64=fp64, draft=draft), axis=1)
    with np.errstate(invalid="ignore"):
        near_tie = (scores[:, -1] - scores[:, -2]) < SCORE_MARGIN[fp64] * np.maximum(1.0, np.abs(scores[:, -1]))
    greedy = np.broadcast_to(np.asarray(temperature) == 0, near_tie.shape)
    checked = ~near_tie | greedy  # greedy rows are exact whatever the gap
    assert checked.mean() > 0.99, f"{(~checked).sum()} near-tie rows: the test would lose its teeth"
    np.testing.assert_array_equal(tokens[checked], expected[checked])


@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_gumbel_tokens_match_reference(frontend, fp64, dtype):
    rng = np.random.default_rng(1)
    logits = make_logits(rng, BATCH, VOCAB).astype(getattr(ml_dtypes, dtype, dtype))
    seeds, positions = make_requests(rng, BATCH)
    temperature = rng.choice(np.float32([0.0, 0.3, 0.7, 1.0, 1.5, 4.0]), size=BATCH)
    tokens = frontend("gumbel_sample", logits, seeds, positions, temperature, fp64=fp64)
    assert tokens.dtype == np.int32 and tokens.shape == (BATCH,)
    assert_tokens_match_reference(tokens, logits.astype(np.float32), seeds, positions, temperature, fp64=fp64)


@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("draft", [False, True], ids=["target", "draft"])
@pytest.mark.parametrize("seed_dtype", ["int32", "uint32", "int64"])
@pytest.mark.parametrize("position_dtype", ["int32", "int64"])
def test_gumbel_conformance_torch_equals_jax(fp64, draft, seed_dtype, position_dtype):
    rng = np.random.default_rng(2)
    batch, vocab = (16, 5000) if SIZE == "cpu" else (32, 262144)
    logits = make_logits(rng, batch, vocab)
    seeds, positions = make_requests(rng, batch, seed_dtype, position_dtype)
    temperature = rng.choice(np.float32([0.0, 0.6, 1.0, 2.0]), size=batch)
    for temp in (temperature, 0.8, 0.0):  # an array, a Python float, greedy
        tokens = both_frontends("gumbel_sample", logits, seeds, positions, temp, fp64=fp64, draft=draft)
        assert_tokens_match_reference(tokens, logits, seeds, positions, temp, fp64=fp64, draft=draft)


def test_gumbel_conformance_with_x64_disabled():
    import jax

    rng = np.random.default_rng(3)
    logits = make_logits(rng, 8, 700)
    seeds, positions = make_requests(rng, 8, "uint32", "int32")
    with jax.enable_x64(False):
        for fp64 in (False, True):
            from_jax = run_jax("gumbel_sample", logits, seeds, positions, 0.9, fp64=fp64)
            np.testing.assert_array_equal(from_jax, run_torch("gumbel_sample", logits, seeds, positions, 0.9, fp64=fp64))


def test_gumbel_greedy_ties_and_non_finite(frontend):
    vocab = 9000
    logits = np.full((6, vocab), -5.0, dtype=np.float32)
    logits[0, [4100, 17, 8999]] = 2.0  # tie across blocks: lowest column wins
    logits[1, :] = -np.inf
    logits[1, 8500] = -1e30  # the only finite logit
    logits[2, :] = np.nan  # no finite logit
    logits[3, :] = -np.inf  # no finite logit
    logits[4, [3, 5000]] = [np.inf, np.nan]  # non-finite never chosen, even +inf
    logits[4, 6000] = 1.0
    logits[5, [0, 4096]] = 7.0  # tie at two block starts
    seeds, positions = np.arange(6, dtype=np.int64), np.zeros(6, dtype=np.int64)
    expected = [17, 8500, -1, -1, 6000, 0]
    for fp64 in (False, True):
        np.testing.assert_array_equal(frontend("gumbel_sample", logits, seeds, positions, 0.0, fp64=fp64), expected)
        sampled = frontend("gumbel_sample", logits, seeds, positions, 1.0, fp64=fp64)
        assert sampled[1] == 8500 and sampled[2] == -1 and sampled[3] == -1
        assert sampled[4] not in (3, 5000)


def test_gumbel_non_finite_logits_count_as_minus_inf(frontend):
    """NaN and +inf logits are never candidates, in whichever block: replacing them by -inf changes
    no token. Blocks holding one take gumbel.noisy_scores' masked path, the others its unmasked
    one (a NaN-propagating max tells them apart), so this checks that the two paths agree."""
    rng = np.random.default_rng(12)
    batch, vocab = 8, 9000
    logits = make_logits(rng, batch, vocab)
    rows, cols = np.repeat(np.arange(batch), 6), rng.integers(0, vocab, 6 * batch)
    logits[rows, cols] = rng.choice(np.float32([np.nan, np.inf]), size=rows.size)
    logits[np.arange(batch), logits.argmax(axis=1)] = np.inf  # where the finite best was: must not win
    logits[7, 4096:8192] = np.nan  # a block with no candidate
    cleaned = np.where(np.isnan(logits) | (logits == np.inf), np.float32(-np.inf), logits)
    seeds, positions = make_requests(rng, batch)
    temperature = np.float32([0.0, 0.7, 1.3, 1.0, 0.0, 0.5, 1.0, 0.9])
    for fp64 in (False, True):
        tokens = frontend("gumbel_sample", logits, seeds, positions, temperature, fp64=fp64)
        np.testing.assert_array_equal(
            tokens, frontend("gumbel_sample", cleaned, seeds, positions, temperature, fp64=fp64))
        assert np.isfinite(logits[np.arange(batch), tokens]).all()


def test_gumbel_invariants(frontend):
    rng = np.random.default_rng(4)
    batch, vocab = 12, 5000
    logits = make_logits(rng, batch, vocab)
    seeds, positions = make_requests(rng, batch)
    temperature = rng.choice(np.float32([0.0, 0.5, 1.0]), size=batch)
    tokens = frontend("gumbel_sample", logits, seeds, positions, temperature)
    # same inputs twice
    np.testing.assert_array_equal(frontend("gumbel_sample", logits, seeds, positions, temperature), tokens)
    # a row alone equals the row inside the batch
    for row in (0, 5, 11):
        alone = frontend("gumbel_sample", logits[row:row + 1], seeds[row:row + 1], positions[row:row + 1],
                         temperature[row:row + 1])
        assert alone[0] == tokens[row]
    # permuting requests permutes tokens
    perm = rng.permutation(batch)
    np.testing.assert_array_equal(frontend("gumbel_sample", logits[perm], seeds[perm], positions[perm],
                                           temperature[perm]), tokens[perm])
    # a larger batch (the same rows repeated) changes nothing
    np.testing.assert_array_equal(frontend("gumbel_sample", np.tile(logits, (3, 1)), np.tile(seeds, 3),
                                           np.tile(positions, 3), np.tile(temperature, 3)), np.tile(tokens, 3))
    # padding the vocabulary with -inf columns (across a block boundary) changes nothing
    padded = np.concatenate([logits, np.full((batch, 4096 + 37), -np.inf, np.float32)], axis=1)
    np.testing.assert_array_equal(frontend("gumbel_sample", padded, seeds, positions, temperature), tokens)


def test_gumbel_fp64_shortlist_gives_the_fp64_tokens(frontend):
    """FP64 sampling scores every column in FP32 with an error bound and only the shortlist that can
    hold the FP64 maximum in FP64 (common.fp64_sampled_best). Rows of large logits widen the bound
    (|x / T| * 2**-20), so the shortlists here hold one column, several, and more than
    FP64_SHORTLIST_MAX (the whole block in FP64): every row's token is the FP64 reference's."""
    from jsample.reference import gumbel_scores_reference

    rng = np.random.default_rng(21)
    vocab, per_scale = 3000, 6
    scales = np.repeat(np.float32([1.0, 3e4, 3e5, 1e6, 3e6]), per_scale)
    logits = (scales[:, None] + rng.standard_normal((len(scales), vocab))).astype(np.float32)
    seeds, positions = make_requests(rng, len(scales))
    temperature = np.float32(1.0)
    tokens = frontend("gumbel_sample", logits, seeds, positions, temperature, fp64=True)
    assert_tokens_match_reference(tokens, logits, seeds, positions, temperature, fp64=True)
    # the shortlists these rows get (one block a row here: vocab < every plan's FP64 block on the CPU)
    scores = gumbel_scores_reference(logits, seeds, positions, temperature, fp64=True)
    noise = scores - logits.astype(np.float64)
    bound = 2.0**-14 + (np.abs(logits) + np.abs(noise)) * 2.0**-20
    counts = ((scores + bound) >= np.max(scores - bound, axis=1, keepdims=True)).sum(axis=1)
    assert (counts == 1).any() and ((counts > 1) & (counts <= 8)).any() and (counts > 8).any(), counts


def _fp64_tie_rows(vocab, score):
    """Rows whose FP64 winner FP32 cannot tell: columns spread over blocks of 512 (two to five in one
    block too) get logits x_k = fl32(score - g_k), g_k their FP64 noise at T = 1, so their FP32 scores
    agree to the rounding of x and only FP64 separates them; among them, a column whose uniform is
    below 2**-17 and one above 1 - 2**-20 (fp64_noise_estimate's extremes) where the rows have one.
    The other columns score far below (x = -20; a few -inf)."""
    from jsample.reference import gumbel_noise, stream_uniforms

    seeds = np.arange(1000, 1400, dtype=np.int64)
    positions = np.full(len(seeds), 7, dtype=np.int64)
    u = stream_uniforms(seeds, positions, 0, vocab, fp64=True)
    small = np.argwhere(u < 2.0**-17)
    large = np.argwhere(u > 1 - 2.0**-20)
    assert len(small) >= 2 and len(large) >= 1, "the scan finds both extremes"
    patterns = [[5, 3 * 512 + 17, 7 * 512 + 400], [2 * 512 + 1, 10 * 512 + 3, 10 * 512 + 300],
                [0, 511, 512], [8 * 512 + 100, 12 * 512 + 9, 17 * 512 + 2, 16 * 512 + 77]]
    rows = [(row, pattern) for row, pattern in zip(range(8), patterns * 2)]
    rows += [(8, [4 * 512 + 5, 4 * 512 + 200, 4 * 512 + 450]), (9, [11 * 512 + 7 + 100 * k for k in range(4)]),
             (10, [6 * 512 + 3 + 89 * k for k in range(5)])]
    rows += [(r, [k, (k + 700) % vocab, (k + 3000) % vocab]) for r, k in small[:2]]
    rows += [(r, [k, (k + 1100) % vocab]) for r, k in large[:1]]
    chosen = np.array([r for r, _ in rows])
    logits = np.full((len(rows), vocab), -20.0, np.float32)
    logits[:, 1000:1003] = -np.inf
    for i, (r, columns) in enumerate(rows):
        logits[i, columns] = (score - gumbel_noise(u[r, columns])).astype(np.float32)
    return logits, seeds[chosen], positions[chosen], u[chosen]


@pytest.mark.parametrize("intervals", [False, True], ids=["block shortlists", "intervals"])
@pytest.mark.parametrize("score", [30.0, 3e4])
def test_gumbel_fp64_candidates_across_blocks_give_the_fp64_tokens(force_target, request, score, intervals):
    """FP64 blocks score their own shortlists in FP64 (common.fp64_sampled_best), or, in large
    two-launch plans, store an FP32 interval and the reduce scores only the row's candidates in FP64
    (common.store_fp64_block_interval, reduce_fp64_intervals): with near ties across blocks and within
    one, and extreme uniforms among the tied columns, every plan (one block a row, blocks of 512 in
    two launches, one launch: the interpreter's arrival counters turned off for the first two) gives
    the FP64 reference's token, which FP32 scores would often miss."""
    if intervals:
        request.getfixturevalue("fp64_intervals_everywhere")
    vocab = 9000
    logits, seeds, positions, u = _fp64_tie_rows(vocab, score)
    temperature = np.float32(1.0)
    expected = gumbel_sample_reference(logits, seeds, positions, temperature, fp64=True)
    scores = np.sort(gumbel_scores_reference(logits, seeds, positions, temperature, fp64=True), axis=1)
    assert np.all(scores[:, -1] - scores[:, -2] > 1e-9 * score)  # the reference's answer is not a tie
    noise32 = (-np.log(-np.log1p(-u.astype(np.float32)))).astype(np.float32)
    fp32_winner = np.argmax(np.where(np.isfinite(logits), logits + noise32, -np.inf), axis=1)
    assert (fp32_winner != expected).sum() >= 2, "FP32 scores alone would pick other tokens"
    for changes in (dict(arrival_counters=False), dict(large_programs=False, arrival_counters=False),
                    dict(large_programs=False, arrival_counters=True)):
        force_target(**changes)
        from jsample import kernels

        specs = kernels.ArgSpec.contiguous(logits.shape, "float32"), kernels.ArgSpec.contiguous(seeds.shape, "int64")
        target = dataclasses.replace(kernels.Target(interpreter=True, large_programs=True), **changes)  # the frontends'
        variant = kernels.plan_gumbel_sample(*specs, target, fp64=True, draft=False).variant
        assert variant == ("one launch" if changes.get("arrival_counters") else
                           "two launches, FP64 intervals" if intervals else "two launches"), (changes, variant)
        np.testing.assert_array_equal(both_frontends("gumbel_sample", logits, seeds, positions, temperature,
                                                     fp64=True), expected, err_msg=str(changes))


@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
def test_gumbel_tokens_do_not_depend_on_the_tiling(force_target, fp64):
    """The interpreter plans one block a row up to 65536 columns (Target.large_programs); the GPU's
    one-launch plan blocks of 4096 (2048 FP64), its two-launch plan blocks of 512: all must give the
    same tokens: the argmax is exact under any tiling, and so is the overflow flag (the row with a
    huge logit at T = 0.5 is greedy)."""
    rng = np.random.default_rng(12)
    batch, vocab = 5, 9000
    logits = make_logits(rng, batch, vocab)
    logits[2, 7000] = 3e38
    seeds, positions = make_requests(rng, batch)
    temperature = np.float32([0.0, 0.7, 0.5, 1.0, 2.0])
    shipped = both_frontends("gumbel_sample", logits, seeds, positions, temperature, fp64=fp64)
    assert shipped[2] == 7000
    from jsample import kernels

    def blocks(large_programs, arrival_counters=False):
        spec = kernels.ArgSpec.contiguous(logits.shape, "float32")
        target = kernels.Target(interpreter=True, large_programs=large_programs, arrival_counters=arrival_counters)
        plan = kernels.plan_gumbel_sample(spec, kernels.ArgSpec.contiguous(seeds.shape, "int64"), target, fp64=fp64,
                                          draft=False)
        return plan.variant, plan.launches[0].grid[1]
    assert blocks(True) == ("two launches", 1)
    assert blocks(False) == ("two launches", 18)
    assert blocks(False, arrival_counters=True) == ("one launch", 3 if not fp64 else 5)
    for arrival_counters in (False, True):  # the torch target: two launches, one launch
        force_target(large_programs=False, arrival_counters=arrival_counters)
        np.testing.assert_array_equal(both_frontends("gumbel_sample", logits, seeds, positions, temperature,
                                                     fp64=fp64), shipped)


def test_gumbel_row_stride_changes_nothing():
    import torch
    from conftest import TORCH_DEVICE

    import torch_backend

    rng = np.random.default_rng(5)
    logits = make_logits(rng, 6, 3001)
    seeds, positions = make_requests(rng, 6)
    expected = run_torch("gumbel_sample", logits, seeds, positions, 0.7)
    for extra in (1, 3, 64):  # row stride V + extra (odd strides break 16-byte alignment)
        wide = torch.zeros(6, 3001 + extra, device=TORCH_DEVICE)
        wide[:, :3001] = torch.from_numpy(logits)
        tokens = torch_backend.gumbel_sample(wide[:, :3001], torch.from_numpy(seeds).to(TORCH_DEVICE),
                                             torch.from_numpy(positions).to(TORCH_DEVICE), 0.7)
        np.testing.assert_array_equal(tokens.cpu().numpy(), expected)
    transposed = torch.from_numpy(np.ascontiguousarray(logits.T)).to(TORCH_DEVICE).T  # column stride != 1
    tokens = torch_backend.gumbel_sample(transposed, torch.from_numpy(seeds).to(TORCH_DEVICE),
                                         torch.from_numpy(positions).to(TORCH_DEVICE), 0.7)
    np.testing.assert_array_equal(tokens.cpu().numpy(), expected)


def _draws(frontend, row, num_draws, temperature, fp64, draft=False, first_seed=0):
    logits = np.broadcast_to(np.float32(row), (num_draws, len(row)))
    seeds = np.arange(first_seed, first_seed + num_draws, dtype=np.int64)
    positions = np.full(num_draws, 11, dtype=np.int64)
    return frontend("gumbel_sample", logits, seeds, positions, np.float32(temperature), fp64=fp64, draft=draft)


@pytest.mark.slow
@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
def test_gumbel_distribution_follows_softmax(frontend, fp64):
    row = np.float32(np.linspace(-3, 2, 12))
    tokens = _draws(frontend, row, DRAWS, 0.7, fp64)
    assert chi_square_pvalue(tokens, softmax(row / 0.7)) > P_VALUE


@pytest.mark.slow
@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
def test_gumbel_distribution_heavy_tail(frontend, fp64):
    # One top token; 97% of the mass lies in 3000 tokens 4.5 nats below it.
    row = np.zeros(3001, dtype=np.float32)
    row[0] = 4.5
    probs = softmax(np.float64(row))
    tokens = _draws(frontend, row, DRAWS, 1.0, fp64)
    assert abs(probs[0] - 0.029) < 0.001
    tail = np.minimum(tokens, 1)  # top token vs the tail, and the tail's spread over its columns
    assert chi_square_pvalue(tail, np.array([probs[0], 1 - probs[0]])) > P_VALUE
    tail_tokens = tokens[tokens > 0]
    assert stats.chisquare(np.bincount((tail_tokens - 1) * 10 // 3000, minlength=10)).pvalue > P_VALUE


@pytest.mark.slow
def test_gumbel_distribution_reference_large_sample():
    """The documented stream itself, with many draws (NumPy only: fast on any machine)."""
    row = np.float32([3.0, 2.5, 0.0, -1.0, -4.0, -8.0, -12.0, 1.0])
    num = 400_000
    for fp64 in (False, True):
        tokens = gumbel_sample_reference(np.broadcast_to(row, (num, 8)), np.arange(num), np.full(num, 3), 1.3,
                                         fp64=fp64)
        assert chi_square_pvalue(tokens, softmax(np.float64(row) / 1.3)) > P_VALUE


@pytest.mark.slow
def test_gumbel_draft_stream_is_independent(frontend):
    row = np.zeros(64, dtype=np.float32)  # uniform over 64 tokens
    target = _draws(frontend, row, DRAWS, 1.0, False)
    draft = _draws(frontend, row, DRAWS, 1.0, False, draft=True)
    assert (target != draft).any()
    # independent draws agree with probability 1/64; a shared stream would agree always
    agree = (target == draft).sum()
    assert stats.binomtest(agree, DRAWS, 1 / 64).pvalue > P_VALUE
    # and the draft stream itself follows the distribution
    assert chi_square_pvalue(draft, np.full(64, 1 / 64)) > P_VALUE


def test_gumbel_seed_and_position_change_the_draw(frontend):
    row = np.zeros(1000, dtype=np.float32)
    base = _draws(frontend, row, 64, 1.0, False)
    other_seed = _draws(frontend, row, 64, 1.0, False, first_seed=64)
    assert (base != other_seed).mean() > 0.9
    logits = np.zeros((2, 1000), np.float32)
    positions = np.array([0, 2**32], dtype=np.int64)  # differ only in the high word
    tokens = frontend("gumbel_sample", logits, np.array([5, 5]), positions, 1.0)
    expected = gumbel_sample_reference(logits, np.array([5, 5]), positions, 1.0)
    np.testing.assert_array_equal(tokens, expected)
    assert tokens[0] != tokens[1]


def test_gumbel_empty_batch(frontend):
    out = frontend("gumbel_sample", np.zeros((0, 10), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64), 1.0)
    assert out.shape == (0,) and out.dtype == np.int32


TEMPERATURE_RANGE = ("temperature must be finite, >= 0 and at most the float32 maximum 3.4028235e38 (below 1e-5 "
                     "means greedy)")
BAD_INPUTS = [
    # (description, argument overrides, exception type, message)
    ("1-D logits", {"logits": np.zeros(5, np.float32)}, ValueError,
     "gumbel_sample: logits must be a 2-D array [B, V], got shape (5,)."),
    ("int logits", {"logits": np.zeros((3, 5), np.int32)}, TypeError,
     "gumbel_sample: logits must have dtype float32, bfloat16, float16 or float64, got int32. float64 logits are "
     "read as float32."),
    ("empty vocabulary", {"logits": np.zeros((3, 0), np.float32)}, ValueError,
     "gumbel_sample: logits must have a vocabulary size V in [1, 2**30], got V = 0."),
    ("float seeds", {"seeds": np.zeros(3, np.float32)}, TypeError,
     "gumbel_sample: seeds must have dtype int32, uint32 or int64, got float32."),
    ("bool seeds", {"seeds": np.zeros(3, bool)}, TypeError,
     "gumbel_sample: seeds must have dtype int32, uint32 or int64, got bool."),
    ("uint64 seeds", {"seeds": np.zeros(3, np.uint64)}, TypeError,
     "gumbel_sample: seeds must have dtype int32, uint32 or int64, got uint64. Seeds are integers; "
     "a 64-bit unsigned seed can be passed as int64 (same bits)."),
    ("seeds batch", {"seeds": np.zeros(4, np.int64)}, ValueError,
     "gumbel_sample: seeds must be a 1-D array [B] or a 2-D array [B, 2] of (low, high) 32-bit words with B = 3 "
     "(the batch size of the logits), got shape (4,)."),
    ("2-D seeds", {"seeds": np.zeros((3, 1), np.int64)}, ValueError,
     "gumbel_sample: seeds must be a 1-D array [B] or a 2-D array [B, 2] of (low, high) 32-bit words with B = 3 "
     "(the batch size of the logits), got shape (3, 1)."),
    ("int64 seed words", {"seeds": np.zeros((3, 2), np.int64)}, TypeError,
     "gumbel_sample: seeds must have dtype uint32 or int32, got int64. Seeds of shape [B, 2] are the (low, high) "
     "32-bit words of 64-bit seeds."),
    ("list seeds", {"seeds": [1, 2, 3]}, TypeError, "gumbel_sample: seeds must be an array [B] or [B, 2], got list."),
    ("float positions", {"positions": np.zeros(3, np.float64)}, TypeError,
     "gumbel_sample: positions must have dtype int32 or int64, got float64."),
    ("uint32 positions", {"positions": np.zeros(3, np.uint32)}, TypeError,
     "gumbel_sample: positions must have dtype int32 or int64, got uint32."),
    ("positions batch", {"positions": np.zeros(2, np.int64)}, ValueError,
     "gumbel_sample: positions must be a 1-D array [B] with B = 3 (the batch size of the logits), got shape (2,)."),
    ("negative temperature", {"temperature": -0.5}, ValueError, f"gumbel_sample: {TEMPERATURE_RANGE}, got -0.5."),
    ("nan temperature", {"temperature": float("nan")}, ValueError, f"gumbel_sample: {TEMPERATURE_RANGE}, got nan."),
    ("inf temperature", {"temperature": float("inf")}, ValueError, f"gumbel_sample: {TEMPERATURE_RANGE}, got inf."),
    ("temperature above float32", {"temperature": 3.5e38}, ValueError,
     f"gumbel_sample: {TEMPERATURE_RANGE}, got 3.5e+38."),
    ("huge int temperature", {"temperature": 10**400}, ValueError,
     f"gumbel_sample: {TEMPERATURE_RANGE}, got {10**400!r}."),
    ("bool temperature", {"temperature": True}, TypeError,
     "gumbel_sample: temperature must be a float array [B] or (), or a number, got bool."),
    ("int temperature array", {"temperature": np.ones(3, np.int32)}, TypeError,
     "gumbel_sample: temperature must have dtype float32, float64, bfloat16 or float16, got int32. It is read as "
     "float32."),
    ("temperature batch", {"temperature": np.ones(2, np.float32)}, ValueError,
     "gumbel_sample: temperature must be a number or an array of shape [B] with B = 3, got shape (2,)."),
    ("fp64 flag", {"fp64": 1}, TypeError, "gumbel_sample: fp64 must be True or False, got 1 (int)."),
    ("draft flag", {"draft": "yes"}, TypeError, "gumbel_sample: draft must be True or False, got 'yes' (str)."),
]


def _call_with(runner, overrides):
    args = {"logits": np.zeros((3, 5), np.float32), "seeds": np.zeros(3, np.int64),
            "positions": np.zeros(3, np.int64), "temperature": 1.0}
    flags = {"fp64": False, "draft": False}
    for key, value in overrides.items():
        (flags if key in flags else args)[key] = value
    return runner("gumbel_sample", args["logits"], args["seeds"], args["positions"], args["temperature"], **flags)


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_gumbel_errors_same_text_in_both_frontends(case):
    import jax
    import jax.numpy as jnp
    import torch

    import jsample
    import torch_backend

    _, overrides, error, message = case

    def torch_runner(name, *args, **kwargs):
        return getattr(torch_backend, name)(*(torch.from_numpy(a) if isinstance(a, np.ndarray) else a
                                              for a in args), **kwargs)

    def jax_runner(name, *args, **kwargs):
        return getattr(jsample, name)(*(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args), **kwargs)

    for runner in (torch_runner, jax_runner):
        with pytest.raises(error) as info:
            _call_with(runner, overrides)
        assert str(info.value) == message
    # under jax.jit the same error comes at trace time
    if all(isinstance(v, np.ndarray) for v in overrides.values()):
        names = list(overrides)
        with pytest.raises(error) as info:
            jax.jit(lambda *arrays: _call_with(jax_runner, dict(zip(names, arrays))))(
                *(jnp.asarray(v) for v in overrides.values()))
        assert str(info.value) == message


def test_gumbel_torch_rejects_mixed_devices():
    import torch

    import torch_backend

    logits = torch.zeros(3, 5)
    meta = torch.zeros(3, dtype=torch.int64, device="meta")
    with pytest.raises(ValueError, match=r"gumbel_sample: seeds must be on the same device as the logits \(cpu\), "
                                         r"got meta\."):
        torch_backend.gumbel_sample(logits, meta, torch.zeros(3, dtype=torch.int64), 1.0)


def test_gumbel_jax_rejects_silent_int64_narrowing():
    import jax

    import jsample

    with jax.enable_x64(False):
        with pytest.raises(TypeError, match="gumbel_sample: seeds has dtype int64, which JAX narrows to 32 bits"):
            jsample.gumbel_sample(np.zeros((3, 5), np.float32), np.zeros(3, np.int64), np.zeros(3, np.int32), 1.0)


@pytest.mark.parametrize("x64", [False, True])
def test_float64_logits_are_read_as_float32_in_both_frontends(x64):
    """One rule, whatever JAX's x64 flag: float64 logits (NumPy's default, jax.random's with x64 on) are rounded to
    float32, so the tokens are those of the float32 logits, in both frontends."""
    import jax

    rng = np.random.default_rng(64)
    logits = rng.standard_normal((5, 300)) * 3
    seeds, positions = np.int32([3, -7, 11, 2**30, 5]), np.int32([0, 9, 2**20, 77, 5])  # 32-bit: x64 on or off
    temperature = np.float32([0.0, 0.5, 1.0, 1.5, 0.8])
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", x64)
    try:
        expected = run_torch("gumbel_sample", logits.astype(np.float32), seeds, positions, temperature)
        for run in (run_torch, run_jax):
            np.testing.assert_array_equal(run("gumbel_sample", logits, seeds, positions, temperature), expected)
            np.testing.assert_array_equal(run("top_k_top_p_sample", logits, seeds, positions, temperature, top_k=7),
                                          run_torch("top_k_top_p_sample", logits.astype(np.float32), seeds, positions,
                                                    temperature, top_k=7))
    finally:
        jax.config.update("jax_enable_x64", before)
