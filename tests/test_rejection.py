"""rejection_sample and synthetic_rejection_sample: tokens vs the NumPy reference, torch == JAX, the
speculative-sampling theorem, the greedy / strict / synthetic rules, edge cases and errors."""

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import (
    FRONTENDS,
    SCORE_MARGIN,
    SIZE,
    both_frontends,
    make_requests,
    run_jax,
    run_torch,
)
from distribution_checks import P_VALUE
from scipy import stats

import jsample
import torch_backend
from jsample.reference import (
    gumbel_sample_reference,
    rejection_sample_reference,
    synthetic_rejection_sample_reference,
)

# Requests whose reference decisions lie this close to flipping may differ (GPU logs are not NumPy's):
# |u - p/q| / (p/q) for acceptances, top-2 score gap / max(1, |best|) for sampled tokens.
RATIO_MARGIN = {False: 1e-5, True: 1e-12}
# (batch, K, vocab) of the token tests; 5000 = three 2048-column blocks FP32, five 1024-column blocks FP64
BATCH, K, VOCAB = {"cpu": (6, 3, 5000), "gpu": (64, 8, 151936)}[SIZE]
# Requests per speculative-sampling theorem test. 500 detects "resample from p instead of the residual"
# (chi-square noncentrality ~50-90 against a critical value of 30 at p = 1e-4).
THEOREM_DRAWS = {"cpu": 500, "gpu": 100_000}[SIZE]
SYNTHETIC_DRAWS = {"cpu": 600, "gpu": 200_000}[SIZE]
STAT_FRONTENDS = ["torch", "jax"] if SIZE == "gpu" else ["torch"]  # the same kernels; torch == JAX is tested bit for bit


def make_problem(rng, batch, k, vocab, *, close=True, scale=2.0):
    """Target logits [B, K+1, V], draft logits [B, K, V] near them, drafts sampled from the draft."""
    target = (rng.standard_normal((batch, k + 1, vocab)) * scale).astype(np.float32)
    draft = target[:, :k] + (rng.standard_normal((batch, k, vocab)) * (0.5 if close else scale)).astype(np.float32)
    probs = np.exp(draft - draft.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    cdf = probs.cumsum(-1)
    drafts = (cdf < rng.random((batch, k, 1)) * cdf[..., -1:]).sum(-1).clip(0, vocab - 1).astype(np.int32)
    return target, draft.astype(np.float32), drafts


def assert_matches_reference(out, target, drafts, num_drafts, seeds, positions, temperature, **kwargs):
    """Exact, except requests whose reference decisions lie within the margins; those must be rare."""
    tokens, num_sampled = out
    expected_tokens, expected_num, ratio_margin, score_margin = rejection_sample_reference(
        target.astype(np.float32), drafts, num_drafts, seeds, positions, temperature, return_margins=True, **kwargs)
    fp64 = kwargs.get("fp64", False)
    checked = (ratio_margin >= RATIO_MARGIN[fp64]) & (score_margin >= SCORE_MARGIN[fp64])
    assert (~checked).sum() <= max(1, len(checked) // 50), f"{(~checked).sum()} near-ties: the test lost its teeth"
    assert tokens.dtype == np.int32 and num_sampled.dtype == np.int32
    np.testing.assert_array_equal(tokens[checked], expected_tokens[checked])
    np.testing.assert_array_equal(num_sampled[checked], expected_num[checked])


def rejection_inputs(rng, dtype="float32", batch=BATCH, k=K, vocab=VOCAB):
    target, draft, drafts = make_problem(rng, batch, k, vocab)
    num_drafts = rng.integers(0, k + 1, size=batch).astype(np.int32)
    num_drafts[:2] = [0, k]
    seeds, positions = make_requests(rng, batch, wide_seeds=False)
    temperature = rng.choice(np.float32([0.0, 0.5, 1.0, 1.3]), size=batch)
    temperature[:3] = [1.0, 0.0, 0.7]  # greedy and non-greedy requests in one batch
    return target.astype(getattr(ml_dtypes, dtype, dtype)), draft, drafts, num_drafts, seeds, positions, temperature


@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("method", ["probabilistic", "strict"])
@pytest.mark.parametrize("one_hot", [False, True], ids=["draft_logits", "one_hot"])
def test_rejection_tokens_match_reference(frontend, fp64, method, one_hot):
    rng = np.random.default_rng(10 + 4 * fp64 + 2 * (method == "strict") + one_hot)
    target, draft, drafts, num_drafts, seeds, positions, temperature = rejection_inputs(rng)
    draft_logits = None if one_hot else draft
    out = frontend("rejection_sample", target, drafts, num_drafts, seeds, positions, temperature,
                   draft_logits=draft_logits, method=method, fp64=fp64)
    assert out[0].shape == (BATCH, K + 1) and out[1].shape == (BATCH,)
    assert_matches_reference(out, target, drafts, num_drafts, seeds, positions, temperature,
                             draft_logits=draft_logits, method=method, fp64=fp64)


@pytest.mark.parametrize("fp64, method, one_hot", [(False, "probabilistic", False), (False, "probabilistic", True),
                                                  (False, "strict", False), (True, "probabilistic", False)],
                         ids=["draft_logits", "one_hot", "strict", "fp64"])
def test_single_draft_rejection_matches_reference(fp64, method, one_hot):
    """K = 1 takes the other launch plan (config.bonus_in_stats: the stats launch reduces the bonus
    row): tokens against the reference and torch == JAX, with n_b of 0 and 1 and greedy rows."""
    rng = np.random.default_rng(90 + 4 * fp64 + 2 * (method == "strict") + one_hot)
    batch, k = (12, 1) if SIZE == "cpu" else (64, 1)
    target, draft, drafts, num_drafts, seeds, positions, temperature = rejection_inputs(rng, batch=batch, k=k)
    sure = np.arange(0, batch, 2)
    target[sure, 0, drafts[sure, 0]] += 20.0  # these drafts are (almost) sure to be accepted: bonus rows
    draft_logits = None if one_hot else draft
    out = both_frontends("rejection_sample", target, drafts, num_drafts, seeds, positions, temperature,
                         draft_logits=draft_logits, method=method, fp64=fp64)
    assert_matches_reference(out, target, drafts, num_drafts, seeds, positions, temperature,
                             draft_logits=draft_logits, method=method, fp64=fp64)
    assert set(num_drafts) == {0, 1} and set(out[1]) == {1, 2}  # bonus tokens of rows 0 and 1, and rejections


@pytest.mark.parametrize("k", [1, 3])
def test_rejection_launch_plans_give_the_same_outputs(force_variant, k):
    """Every plan variant an input can get (kernels.plan_rejection_sample: four launches, three with
    the decision in every emit program, one at K <= 1) runs the same decision and emit code, so the
    outputs are equal bit for bit, in both frontends, and match the reference."""
    import jax.numpy as jnp

    rng = np.random.default_rng(70 + k)
    target, draft, drafts, num_drafts, seeds, positions, temperature = rejection_inputs(rng, batch=8, k=k)
    target[::2, 0, drafts[::2, 0]] += 20.0  # bonus rows as well as rejections
    cases = (dict(draft_logits=draft), dict(), dict(method="strict"), dict(draft_logits=draft, fp64=True))
    args = (target, drafts, num_drafts, seeds, positions, temperature)
    variants = [v for v in jsample.kernels.REJECTION_VARIANTS if k <= 1 or v != "one launch"]
    for kwargs in cases:
        outputs = []
        for variant in variants:
            force_variant(variant)
            from_torch = run_torch("rejection_sample", *args, **kwargs)
            if variant == variants[-1]:  # JAX runs the same kernels: once is enough on the interpreter
                from_jax = jsample.rejection_sample(*[jnp.asarray(a) for a in args],
                                                    **{n: jnp.asarray(v) if isinstance(v, np.ndarray) else v
                                                       for n, v in kwargs.items()})
                for t, j in zip(from_torch, from_jax):
                    np.testing.assert_array_equal(t, np.asarray(j), err_msg=f"{variant} {sorted(kwargs)}: torch, JAX")
            outputs.append(from_torch)
        for variant, other in zip(variants[1:], outputs[1:]):
            for a, b in zip(outputs[0], other):
                np.testing.assert_array_equal(a, b, err_msg=f"{sorted(kwargs)}: {variant} differs")
        assert_matches_reference(outputs[0], *args, **kwargs)
        all_accepted = outputs[0][1] == num_drafts + 1
        assert all_accepted.any() and not all_accepted.all(), f"{sorted(kwargs)}: {outputs[0][1]} {num_drafts}"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_rejection_conformance_torch_equals_jax(dtype):
    rng = np.random.default_rng(20)
    # GPU: real vocabulary, modest batch (the NumPy reference of 4 cases dominates the test's time)
    batch, k, vocab = (10, 2, 700) if SIZE == "cpu" else (32, 4, 151936)
    target, draft, drafts, num_drafts, seeds, positions, temperature = rejection_inputs(rng, dtype, batch, k, vocab)
    seed_dtype, position_dtype = ("int32", "int64") if dtype == "bfloat16" else ("uint32", "int32")
    seeds, positions = make_requests(rng, batch, seed_dtype, position_dtype, wide_seeds=False)
    cases = ((dict(draft_logits=draft), temperature), (dict(draft_logits=draft, fp64=True), 0.8),
             (dict(method="strict"), temperature), (dict(fp64=True), 0.8))
    for kwargs, temp in cases:  # an array and a Python float temperature
        out = both_frontends("rejection_sample", target, drafts, num_drafts, seeds, positions, temp, **kwargs)
        assert_matches_reference(out, target, drafts, num_drafts, seeds, positions, temp, **kwargs)


def test_rejection_bonus_equals_gumbel_sample(frontend):
    """K = 0: only the bonus token, equal to gumbel_sample of that row; and a fully accepted request's
    bonus equals gumbel_sample of row n at position P + n."""
    rng = np.random.default_rng(30)
    batch, vocab = 8, 3000
    target = (rng.standard_normal((batch, 1, vocab)) * 2).astype(np.float32)
    seeds, positions = make_requests(rng, batch, wide_seeds=False)
    temperature = np.float32([0, 0.5, 1, 1, 2, 1, 0.8, 1])
    for fp64 in (False, True):
        tokens, num_sampled = frontend("rejection_sample", target, np.zeros((batch, 0), np.int32),
                                       np.zeros(batch, np.int32), seeds, positions, temperature, fp64=fp64)
        expected = frontend("gumbel_sample", target[:, 0], seeds, positions, temperature, fp64=fp64)
        np.testing.assert_array_equal(tokens[:, 0], expected)
        np.testing.assert_array_equal(num_sampled, np.ones(batch, np.int32))
    # p == q: every draft is accepted (ratio exactly 1), then the bonus of row K at position P + K
    k = 2
    target = (rng.standard_normal((batch, k + 1, vocab)) * 2).astype(np.float32)
    drafts = rng.integers(0, vocab, size=(batch, k)).astype(np.int32)
    temperature = np.float32([0.5, 1, 1, 2, 1, 0.8, 1, 3])
    for fp64 in (False, True):
        tokens, num_sampled = frontend("rejection_sample", target, drafts, np.full(batch, k, np.int32), seeds,
                                       positions, temperature, draft_logits=target[:, :k].copy(), fp64=fp64)
        np.testing.assert_array_equal(num_sampled, np.full(batch, k + 1, np.int32))
        np.testing.assert_array_equal(tokens[:, :k], drafts)
        bonus = frontend("gumbel_sample", target[:, k], seeds, positions + k, temperature, fp64=fp64)
        np.testing.assert_array_equal(tokens[:, k], bonus)


def test_rejection_greedy_rows_follow_the_argmax_rule(frontend):
    rng = np.random.default_rng(40)
    batch, k, vocab = 8, 4, 400
    target = (rng.standard_normal((batch, k + 1, vocab)) * 2).astype(np.float32)
    argmax = target.argmax(-1).astype(np.int32)
    drafts = argmax[:, :k].copy()
    num_drafts = np.int32([4, 4, 4, 3, 0, 2, 4, 1])
    mismatch_at = np.array([4, 0, 2, 1, 0, 9, 3, 0])  # the first wrong draft (>= n: none)
    for b, j in enumerate(mismatch_at):
        if j < k:
            drafts[b, j] = (argmax[b, j] + 1) % vocab
    seeds, positions = make_requests(rng, batch, wide_seeds=False)
    draft_logits = (rng.standard_normal((batch, k, vocab))).astype(np.float32)
    for kwargs in (dict(), dict(draft_logits=draft_logits), dict(method="strict"), dict(fp64=True)):
        tokens, num_sampled = frontend("rejection_sample", target, drafts, num_drafts, seeds, positions, 0.0, **kwargs)
        for b in range(batch):  # the step-by-step rule
            a = 0
            while a < num_drafts[b] and drafts[b, a] == argmax[b, a]:
                a += 1
            expected = np.full(k + 1, -1, np.int32)
            expected[:a] = drafts[b, :a]
            expected[a] = argmax[b, a]
            np.testing.assert_array_equal(tokens[b], expected)
            assert num_sampled[b] == a + 1


def test_rejection_strict_follows_the_compare_with_target_rule(frontend):
    rng = np.random.default_rng(50)
    batch, k, vocab = 8, 3, 300
    target = (rng.standard_normal((batch, k + 1, vocab)) * 1.5).astype(np.float32)
    seeds, positions = make_requests(rng, batch, wide_seeds=False)
    temperature = np.float32([1, 0.7, 1, 2, 1, 0, 1, 1.2])
    rows = [gumbel_sample_reference(target[:, j], seeds, positions + j, temperature) for j in range(k + 1)]
    sampled = np.stack(rows, axis=1).astype(np.int32)  # the target's own sample of every row
    drafts = sampled[:, :k].copy()
    drafts[1, 0] += 1
    drafts[2, 2] += 1
    drafts[3, 1] = -7  # out of range: rejected
    num_drafts = np.int32([3, 3, 3, 3, 2, 3, 0, 1])
    tokens, num_sampled = frontend("rejection_sample", target, drafts, num_drafts, seeds, positions, temperature,
                                   method="strict")
    for b in range(batch):
        a = 0
        while a < num_drafts[b] and drafts[b, a] == sampled[b, a]:
            a += 1
        expected = np.full(k + 1, -1, np.int32)
        expected[:a] = drafts[b, :a]
        expected[a] = sampled[b, a]  # the target's sample at the first mismatch, or the bonus
        np.testing.assert_array_equal(tokens[b], expected)
        assert num_sampled[b] == a + 1
    assert num_sampled[0] == k + 1 and num_sampled[5] == k + 1  # all drafts match: the bonus token


def test_rejection_edge_cases(frontend):
    rng = np.random.default_rng(60)
    batch, k, vocab = 6, 3, 200
    target, draft, drafts, _, seeds, positions, _ = rejection_inputs(rng, batch=batch, k=k, vocab=vocab)
    num_drafts = np.int32([0, 3, 1, 3, 2, 0])
    temperature = np.float32([1, 1, 0, 0.8, 1, 0])
    out = frontend("rejection_sample", target, drafts, num_drafts, seeds, positions, temperature, draft_logits=draft)
    # entries past num_draft_tokens are ignored
    garbage = drafts.copy()
    for b, n in enumerate(num_drafts):
        garbage[b, n:] = -1
    np.testing.assert_array_equal(frontend("rejection_sample", target, garbage, num_drafts, seeds, positions,
                                           temperature, draft_logits=draft)[0], out[0])
    assert out[1][0] == 1 and out[1][5] == 1 and (out[0][[0, 5], 1:] == -1).all()
    # a draft token with target probability 0 is always rejected, and never emitted
    target = target.copy()
    target[np.arange(batch), 0, drafts[:, 0]] = -np.inf
    for kwargs in (dict(draft_logits=draft), dict(), dict(method="strict"), dict(fp64=True)):
        tokens, num_sampled = frontend("rejection_sample", target, drafts, np.full(batch, k, np.int32), seeds,
                                       positions, temperature, **kwargs)
        np.testing.assert_array_equal(num_sampled, np.ones(batch, np.int32))
        assert (tokens[:, 0] != drafts[:, 0]).all() and (tokens[:, 0] >= 0).all() and (tokens[:, 1:] == -1).all()


def test_int64_draft_tokens_and_counts_are_read_as_int64(frontend):
    """torch's default integer dtype is accepted for draft_tokens and num_draft_tokens and read as
    int64: the same outputs as int32, and a draft 2**32 + d is out of range (rejected), not d."""
    rng = np.random.default_rng(61)
    batch, k, vocab = 6, 3, 200
    target, draft, drafts, num_drafts, seeds, positions, _ = rejection_inputs(rng, batch=batch, k=k, vocab=vocab)
    temperature = np.float32([0, 0, 0, 1, 0.7, 0])
    drafts[:, 0] = target[:, 0].argmax(axis=-1)  # greedy rows accept it
    num_drafts[:] = k
    for kwargs in (dict(draft_logits=draft), dict(), dict(method="strict")):
        narrow = frontend("rejection_sample", target, drafts, num_drafts, seeds, positions, temperature, **kwargs)
        wide = frontend("rejection_sample", target, drafts.astype(np.int64), num_drafts.astype(np.int64), seeds,
                        positions, temperature, **kwargs)
        np.testing.assert_array_equal(wide[0], narrow[0])
        np.testing.assert_array_equal(wide[1], narrow[1])
        assert (narrow[1][temperature == 0] >= 2).all()  # the argmax draft was accepted
        aliased = drafts.astype(np.int64)
        aliased[:, 0] += 2**32
        out_of_range = drafts.copy()
        out_of_range[:, 0] = -1
        tokens, num_sampled = frontend("rejection_sample", target, aliased, num_drafts.astype(np.int64), seeds,
                                       positions, temperature, **kwargs)
        expected = frontend("rejection_sample", target, out_of_range, num_drafts, seeds, positions, temperature,
                            **kwargs)
        np.testing.assert_array_equal(tokens, expected[0])
        np.testing.assert_array_equal(num_sampled, np.ones(batch, np.int32))


def test_rejection_non_finite_logits_count_as_minus_inf(frontend):
    """NaN and +inf target or draft logits have probability 0, as -inf ones: replacing them by -inf
    changes no token and no count. Blocks holding one take the masked softmax and Gumbel paths, the
    others the unmasked ones, so this checks that the two agree (K = 1 reduces the bonus row in the
    stats launch, K = 3 in the emit launch)."""
    rng = np.random.default_rng(67)
    batch, vocab = 6, 5000
    for k in (1, 3):
        target, draft, drafts, num_drafts, seeds, positions, temperature = rejection_inputs(rng, batch=batch, k=k,
                                                                                            vocab=vocab)
        for logits in (target, draft):
            flat = logits.reshape(-1, vocab)
            rows, cols = np.repeat(np.arange(len(flat)), 5), rng.integers(0, vocab, 5 * len(flat))
            flat[rows, cols] = rng.choice(np.float32([np.nan, np.inf]), size=rows.size)
        target[2, 0, drafts[2, 0]] = np.nan  # a draft the target gives probability 0: rejected
        draft[3, 0, 2048:4096] = np.inf  # a draft block with no candidate

        def cleaned(logits):
            return np.where(np.isnan(logits) | (logits == np.inf), np.float32(-np.inf), logits)

        for kwargs in (dict(draft_logits=draft), dict(), dict(method="strict"), dict(draft_logits=draft, fp64=True)):
            clean_kwargs = {name: cleaned(value) if name == "draft_logits" else value for name, value in kwargs.items()}
            out = frontend("rejection_sample", target, drafts, num_drafts, seeds, positions, temperature, **kwargs)
            expected = frontend("rejection_sample", cleaned(target), drafts, num_drafts, seeds, positions,
                                temperature, **clean_kwargs)
            for got, want in zip(out, expected):
                np.testing.assert_array_equal(got, want, err_msg=f"K={k} {kwargs.keys()}")
            emitted = out[0][np.arange(batch), out[1] - 1]
            assert np.isfinite(target[np.arange(batch), out[1] - 1, emitted]).all()


def test_rejection_request_outputs_do_not_depend_on_the_batch(frontend):
    """Permuting requests permutes outputs; a sub-batch, and other requests' changed data, leave a
    request's tokens as they were (its outputs depend only on its own rows, seed, position, T, n_b)."""
    rng = np.random.default_rng(65)
    batch, k, vocab = 6, 3, 300
    target, draft, drafts, num_drafts, seeds, positions, temperature = rejection_inputs(rng, batch=batch, k=k,
                                                                                        vocab=vocab)
    for kwargs in (dict(draft_logits=draft), dict(method="strict")):
        def run(index, target=target):
            extra = {name: value[index] for name, value in kwargs.items() if isinstance(value, np.ndarray)}
            return frontend("rejection_sample", target[index], drafts[index], num_drafts[index], seeds[index],
                            positions[index], temperature[index], **{**kwargs, **extra})

        tokens, num_sampled = run(np.arange(batch))
        perm = rng.permutation(batch)
        permuted = run(perm)
        np.testing.assert_array_equal(permuted[0], tokens[perm])
        np.testing.assert_array_equal(permuted[1], num_sampled[perm])
        alone = run(np.array([4, 1]))
        np.testing.assert_array_equal(alone[0], tokens[[4, 1]])
        changed = target.copy()
        changed[[0, 2, 3, 5]] = rng.standard_normal(changed[[0, 2, 3, 5]].shape).astype(np.float32)
        others_changed = run(np.arange(batch), target=changed)
        np.testing.assert_array_equal(others_changed[0][[1, 4]], tokens[[1, 4]])


def test_jax_rejection_never_recompiles_when_values_change():
    """Seeds, positions, temperatures, n_b, drafts and rates are traced values: one compilation each."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(66)
    batch, k, vocab = 4, 2, 64
    target, draft, drafts, num_drafts, seeds, positions, temperature = rejection_inputs(rng, batch=batch, k=k,
                                                                                        vocab=vocab)
    verify = jax.jit(lambda *a: jsample.rejection_sample(*a[:6], draft_logits=a[6]))
    synthetic = jax.jit(jsample.synthetic_rejection_sample)
    target_tokens = rng.integers(0, vocab, (batch, k + 1)).astype(np.int32)
    for step in range(3):
        verify(*map(jnp.asarray, (target, drafts, (num_drafts + step) % (k + 1), seeds + step, positions * step,
                                  temperature + step, draft)))[0].block_until_ready()
        synthetic(*map(jnp.asarray, (target_tokens, drafts, num_drafts, seeds + step, positions,
                                     np.float32([0.9, 0.5]) / (step + 1))))[0].block_until_ready()
    assert verify._cache_size() == 1 and synthetic._cache_size() == 1


@pytest.mark.slow
@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("one_hot", [False, True], ids=["draft_logits", "one_hot"])
@pytest.mark.parametrize("frontend_name", STAT_FRONTENDS)
def test_rejection_theorem_output_is_target_distributed(frontend_name, one_hot, fp64):
    """Drafts drawn from q (stream 1): the token emitted at position 0 is distributed as p, and row j's
    acceptance frequency matches prod_{i <= j} sum_k min(p_i(k), q_i(k))."""
    rng = np.random.default_rng(70 + 2 * fp64 + one_hot)
    draws, k, vocab = THEOREM_DRAWS, 2, 8
    target_rows = (rng.standard_normal((k + 1, vocab)) * 1.2).astype(np.float32)
    draft_rows = (rng.standard_normal((k, vocab)) * 1.2).astype(np.float32)
    target = np.broadcast_to(target_rows, (draws, k + 1, vocab)).copy()
    draft = np.broadcast_to(draft_rows, (draws, k, vocab)).copy()
    seeds = rng.integers(-(2**62), 2**62, size=draws)
    positions = rng.integers(0, 2**30, size=draws)
    drafts = np.stack([gumbel_sample_reference(draft[:, j], seeds, positions + j, 1.0, draft=True)
                       for j in range(k)], axis=1).astype(np.int32)  # q's samples, stream 1
    tokens, num_sampled = FRONTENDS[frontend_name](
        "rejection_sample", target, drafts, np.full(draws, k, np.int32), seeds, positions, 1.0,
        draft_logits=None if one_hot else draft, fp64=fp64)
    p = np.exp(target_rows.astype(np.float64))
    p /= p.sum(-1, keepdims=True)
    q = np.exp(draft_rows.astype(np.float64))
    q /= q.sum(-1, keepdims=True)
    counts = np.bincount(tokens[:, 0], minlength=vocab)
    assert stats.chisquare(counts, draws * p[0]).pvalue > P_VALUE
    if one_hot:  # q one-hot on the draft: row j accepts with probability p_j(d_j), d_j ~ q_j
        accept = (p[:k] * q).sum(-1)
    else:
        accept = np.minimum(p[:k], q).sum(-1)
    for j in range(k):
        expected = np.prod(accept[: j + 1])
        assert stats.binomtest(int((num_sampled > j + 1).sum()), draws, expected).pvalue > P_VALUE


@pytest.mark.parametrize("rates_shape", ["K", "BK"])
@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
def test_synthetic_tokens_match_reference(frontend, rates_shape, fp64):
    rng = np.random.default_rng(80)
    batch, k = 12, 4
    target_tokens = rng.integers(0, 1000, size=(batch, k + 1)).astype(np.int32)
    drafts = rng.integers(0, 1000, size=(batch, k)).astype(np.int32)
    num_drafts = rng.integers(0, k + 1, size=batch).astype(np.int32)
    num_drafts[:2] = [0, k]
    seeds, positions = make_requests(rng, batch, wide_seeds=False)
    rates = rng.random((batch, k) if rates_shape == "BK" else (k,)).astype(np.float32)
    out = frontend("synthetic_rejection_sample", target_tokens, drafts, num_drafts, seeds, positions, rates,
                   fp64=fp64)
    expected = synthetic_rejection_sample_reference(target_tokens, drafts, num_drafts, seeds, positions, rates,
                                                    fp64=fp64)
    np.testing.assert_array_equal(out[0], expected[0])
    np.testing.assert_array_equal(out[1], expected[1])
    if fp64 and rates_shape == "K":
        both_frontends("synthetic_rejection_sample", target_tokens, drafts, num_drafts, seeds, positions, rates)


def test_synthetic_takes_int64_drafts_and_rates_as_lists_or_float64(frontend):
    """What a newcomer passes: int64 drafts and counts (an int64 draft beyond int32 is no token id:
    rejected, even at rate 1), and the rates as jsample.rates gives them (a list), or as float64:
    both rounded to float32."""
    rng = np.random.default_rng(81)
    batch, k = 8, 4
    target_tokens = rng.integers(0, 1000, size=(batch, k + 1)).astype(np.int32)
    drafts = rng.integers(0, 1000, size=(batch, k)).astype(np.int32)
    num_drafts = np.full(batch, k, np.int32)
    seeds, positions = make_requests(rng, batch, wide_seeds=False)
    rates = jsample.unconditional_to_conditional_rates(jsample.resolve_synthetic_acceptance_rates(k, length=2.5))
    assert isinstance(rates, list)
    expected = frontend("synthetic_rejection_sample", target_tokens, drafts, num_drafts, seeds, positions,
                        np.float32(rates))
    for given in (rates, tuple(rates), np.float64(rates), [list(rates)] * batch):
        out = frontend("synthetic_rejection_sample", target_tokens, drafts.astype(np.int64),
                       num_drafts.astype(np.int64), seeds, positions, given)
        np.testing.assert_array_equal(out[0], expected[0])
        np.testing.assert_array_equal(out[1], expected[1])
    aliased = drafts.astype(np.int64)
    aliased[:, 1] += 2**32
    ones = np.ones(k, np.float32)
    tokens, num_sampled = frontend("synthetic_rejection_sample", target_tokens, aliased, num_drafts, seeds,
                                   positions, ones)
    np.testing.assert_array_equal(num_sampled, np.full(batch, 2, np.int32))  # draft 0 accepted, draft 1 rejected
    np.testing.assert_array_equal(tokens[:, :2], np.stack([drafts[:, 0], target_tokens[:, 1]], axis=1))


@pytest.mark.slow
@pytest.mark.parametrize("rates_shape", ["K", "BK"])
@pytest.mark.parametrize("frontend_name", STAT_FRONTENDS)
def test_synthetic_acceptance_matches_unconditional_rates(frontend_name, rates_shape):
    """Over N requests the fraction accepting draft j estimates a_j; |error| < 4.5 binomial sigmas
    (two-sided p ~ 7e-6 per position), a stated tolerance that cannot flake with fixed seeds."""
    rng = np.random.default_rng(90)
    draws, k = SYNTHETIC_DRAWS, 4
    schedules = [jsample.resolve_synthetic_acceptance_rates(k, length=2.7),
                 jsample.resolve_synthetic_acceptance_rates(k, rates=[0.8, 0.6, 0.3, 0.1])]
    if rates_shape == "K":
        unconditional = np.broadcast_to(np.float64(schedules[1]), (draws, k))
        conditional = np.float32(jsample.unconditional_to_conditional_rates(schedules[1]))
    else:  # one schedule per request: half the batch on each
        which = np.arange(draws) % 2
        unconditional = np.float64(schedules)[which]
        conditional = np.float32([jsample.unconditional_to_conditional_rates(s) for s in schedules])[which]
    target_tokens = rng.integers(0, 50, size=(draws, k + 1)).astype(np.int32)
    drafts = rng.integers(0, 50, size=(draws, k)).astype(np.int32)
    seeds = rng.integers(-(2**62), 2**62, size=draws)
    positions = rng.integers(0, 2**30, size=draws)
    tokens, num_sampled = FRONTENDS[frontend_name]("synthetic_rejection_sample", target_tokens, drafts,
                                             np.full(draws, k, np.int32), seeds, positions, conditional)
    accepted = num_sampled - 1
    for j in range(k):
        measured = (accepted > j).mean()
        expected = unconditional[:, j].mean()
        sigma = np.sqrt((unconditional[:, j] * (1 - unconditional[:, j])).sum()) / draws
        assert abs(measured - expected) <= 4.5 * sigma + 1e-12, (j, measured, expected)
    rows = np.arange(draws)
    np.testing.assert_array_equal(tokens[rows, accepted], target_tokens[rows, accepted])
    assert abs(accepted.mean() + 1 - unconditional.sum(1).mean() - 1) < 0.1


def _error_cases():
    """(kwargs overrides, exception type, expected message) for rejection_sample."""
    return [
        (dict(target_logits=np.zeros((2, 3), np.float32)), ValueError,
         "rejection_sample: target_logits must be a 3-D array [B, K+1, V], got shape (2, 3)."),
        (dict(target_logits=np.zeros((2, 3, 5), np.int32)), TypeError,
         "rejection_sample: target_logits must have dtype float32, bfloat16, float16 or float64, got int32. float64 "
         "logits are read as float32."),
        (dict(draft_tokens=np.zeros((2, 3), np.int32)), ValueError,
         "rejection_sample: draft_tokens must be a 2-D array [B, K] = [2, 2], got shape (2, 3)."),
        (dict(draft_tokens=np.zeros((2, 2), np.float32)), TypeError,
         "rejection_sample: draft_tokens must have dtype int32 or int64, got float32."),
        (dict(num_draft_tokens=np.zeros(2, np.int16)), TypeError,
         "rejection_sample: num_draft_tokens must have dtype int32 or int64, got int16."),
        (dict(num_draft_tokens=np.zeros(3, np.int32)), ValueError,
         "rejection_sample: num_draft_tokens must be a 1-D array [B] with B = 2 (the batch size of the logits), "
         "got shape (3,)."),
        (dict(draft_logits=np.zeros((2, 2, 5), np.float16)), TypeError,
         "rejection_sample: draft_logits must have dtype float32 or float64, got float16. Draft logits are kept in "
         "float32 because the acceptance ratio p/q is precision-sensitive; cast them to float32 (float64 is read as "
         "float32)."),
        (dict(draft_logits=np.zeros((2, 3, 5), np.float32)), ValueError,
         "rejection_sample: draft_logits must be a 3-D array [B, K, V] = [2, 2, 5], got shape (2, 3, 5)."),
        (dict(method="typical"), ValueError,
         "rejection_sample: method must be 'probabilistic' or 'strict', got 'typical'."),
        (dict(fp64=1), TypeError, "rejection_sample: fp64 must be True or False, got 1 (int)."),
        (dict(temperature=-1.0), ValueError,
         "rejection_sample: temperature must be finite, >= 0 and at most the float32 maximum 3.4028235e38 (below "
         "1e-5 means greedy), got -1.0."),
    ]


def test_rejection_errors_are_the_same_in_both_frontends():
    base = dict(target_logits=np.zeros((2, 3, 5), np.float32), draft_tokens=np.zeros((2, 2), np.int32),
                num_draft_tokens=np.zeros(2, np.int32), seeds=np.zeros(2, np.int64), positions=np.zeros(2, np.int64),
                temperature=1.0)
    positional = list(base)
    for overrides, error, message in _error_cases():
        kwargs = {**base, **overrides}
        args = [kwargs.pop(name) for name in positional]
        for run in (run_torch, run_jax):
            with pytest.raises(error) as info:
                run("rejection_sample", *args, **kwargs)
            assert str(info.value) == message


def test_synthetic_errors_are_the_same_in_both_frontends():
    base = dict(target_tokens=np.zeros((2, 3), np.int32), draft_tokens=np.zeros((2, 2), np.int32),
                num_draft_tokens=np.zeros(2, np.int32), seeds=np.zeros(2, np.int64), positions=np.zeros(2, np.int64),
                conditional_rates=np.zeros(2, np.float32))
    cases = [
        (dict(conditional_rates=np.zeros(2, np.float16)), TypeError,
         "synthetic_rejection_sample: conditional_rates must have dtype float32 or float64, got float16."),
        (dict(conditional_rates=[0.5, "high"]), TypeError,
         "synthetic_rejection_sample: conditional_rates must be a float32 or float64 array [K] or [B, K], or a "
         "list of numbers, got [0.5, 'high']."),
        (dict(conditional_rates=[0.5, 0.5, 0.5]), ValueError,
         "synthetic_rejection_sample: conditional_rates must be an array [K] = [2] (one schedule) or [B, K] = "
         "[2, 2] (one per request), got shape (3,)."),
        (dict(draft_tokens=np.zeros((2, 2), np.uint32)), TypeError,
         "synthetic_rejection_sample: draft_tokens must have dtype int32 or int64, got uint32."),
        (dict(conditional_rates=np.zeros((3, 2), np.float32)), ValueError,
         "synthetic_rejection_sample: conditional_rates must be an array [K] = [2] (one schedule) or [B, K] = "
         "[2, 2] (one per request), got shape (3, 2)."),
        (dict(target_tokens=np.zeros((2, 3), np.uint32)), TypeError,
         "synthetic_rejection_sample: target_tokens must have dtype int32 or int64, got uint32."),
        (dict(conditional_rates=[1.5, 0.5]), ValueError,
         "synthetic_rejection_sample: conditional_rates must be acceptance probabilities in [0, 1], got 1.5 in "
         "[1.5, 0.5]."),
        (dict(target_tokens=np.zeros(3, np.int32)), ValueError,
         "synthetic_rejection_sample: target_tokens must be a 2-D array [B, K+1] with K+1 >= 1, got shape (3,)."),
        (dict(draft_tokens=np.zeros((2, 1), np.int32)), ValueError,
         "synthetic_rejection_sample: draft_tokens must be a 2-D array [B, K] = [2, 2], got shape (2, 1)."),
    ]
    positional = list(base)
    for overrides, error, message in cases:
        kwargs = {**base, **overrides}
        args = [kwargs.pop(name) for name in positional]
        for run in (run_torch, run_jax):
            with pytest.raises(error) as info:
                run("synthetic_rejection_sample", *args, **kwargs)
            assert str(info.value) == message


def test_rejection_api_is_the_same_in_both_frontends():
    import inspect

    import jsample._jax.rejection as jax_rejection
    import torch_backend.rejection as torch_rejection

    def parameters(fn):  # (the vocabulary split's argument: a mesh axis name in JAX, a process group in torch)
        return [(p.name.replace("vocab_axis", "vocab_group"), p.kind, p.default)
                for p in inspect.signature(fn).parameters.values()]

    for name in ("rejection_sample", "synthetic_rejection_sample"):
        assert parameters(getattr(jax_rejection, name)) == parameters(getattr(torch_rejection, name))
        assert getattr(jsample, name) is getattr(jax_rejection, name)
        assert getattr(torch_backend, name) is getattr(torch_rejection, name)
    for name in ("acceptance_length_to_rates", "unconditional_to_conditional_rates",
                 "resolve_synthetic_acceptance_rates"):
        assert getattr(jsample, name) is getattr(torch_backend, name)


@pytest.mark.gpu
def test_rejection_cuda_graph_replay_follows_new_seeds():
    batch, k, vocab = 64, 4, 151936
    rng = np.random.default_rng(100)
    target, draft, drafts = make_problem(rng, batch, k, vocab)
    args = [torch.from_numpy(a).cuda() for a in (target, drafts, np.full(batch, k, np.int32))]
    seeds, positions = (torch.from_numpy(a).cuda() for a in make_requests(rng, batch, wide_seeds=False))
    temperature = torch.ones(batch, device="cuda")
    draft_logits = torch.from_numpy(draft).cuda()
    torch_backend.rejection_sample(*args, seeds, positions, temperature, draft_logits=draft_logits)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch_backend.rejection_sample(*args, seeds, positions, temperature, draft_logits=draft_logits)
    for step in range(3):
        seeds.add_(step + 1)
        graph.replay()
        expected = torch_backend.rejection_sample(*args, seeds, positions, temperature, draft_logits=draft_logits)
        torch.testing.assert_close(out[0], expected[0], rtol=0, atol=0)
        torch.testing.assert_close(out[1], expected[1], rtol=0, atol=0)


def test_synthetic_target_tokens_take_int64(frontend):
    """torch.argmax gives int64: target_tokens accept it (read as int64, equal tokens); a value beyond int32 is
    no token id and is emitted as -1, in the kernel and in the reference alike."""
    rng = np.random.default_rng(5)
    batch, k = 6, 3
    target_tokens = rng.integers(0, 1000, size=(batch, k + 1)).astype(np.int32)
    drafts = rng.integers(0, 1000, size=(batch, k)).astype(np.int32)
    num_drafts = np.array([0, 1, 2, 3, 3, 0], np.int32)
    seeds, positions = make_requests(rng, batch, wide_seeds=False)
    rates = np.float32([0.9, 0.5, 0.2])
    expected = frontend("synthetic_rejection_sample", target_tokens, drafts, num_drafts, seeds, positions, rates)
    wide = target_tokens.astype(np.int64)
    out = frontend("synthetic_rejection_sample", wide, drafts, num_drafts, seeds, positions, rates)
    np.testing.assert_array_equal(out[0], expected[0])
    np.testing.assert_array_equal(out[1], expected[1])
    wide += 2**32  # every emitted token beyond int32
    tokens, num_sampled = frontend("synthetic_rejection_sample", wide, drafts, num_drafts, seeds, positions, rates)
    reference = synthetic_rejection_sample_reference(wide, drafts, num_drafts, seeds, positions, rates)
    np.testing.assert_array_equal(tokens, reference[0])
    np.testing.assert_array_equal(num_sampled, expected[1])
    emitted = tokens[np.arange(batch), num_sampled - 1]
    np.testing.assert_array_equal(emitted, -1)
