"""Hostile inputs at real sizes on a GPU: V = 1,000,000 and B * V > 2**31 for every op, both frontends.

The rows checked against the reference are few (the reference is NumPy); the others are checked by
the invariance that a row's outputs do not depend on the batch around it.
"""

import numpy as np
import pytest
import torch
from conftest import both_frontends, run_torch

from jsample.reference import (
    gumbel_sample_reference,
    rejection_sample_reference,
    synthetic_rejection_sample_reference,
    top_k_top_p_sample_reference,
)

pytestmark = pytest.mark.gpu
MILLION = 1_000_000


def _close_enough(tokens, expected, scores_fn, margin=1e-4):
    """Equal, or the reference's top two scores of that row lie within `margin` (GPU logs)."""
    for b in np.nonzero(tokens != expected)[0]:
        scores = np.sort(scores_fn(b))
        assert scores[-1] - scores[-2] < margin * max(1.0, abs(scores[-1])), (b, tokens[b], expected[b])


def test_every_op_at_a_million_columns():
    from jsample.reference import gumbel_scores_reference

    rng = np.random.default_rng(30)
    batch = 4
    logits = (rng.standard_normal((batch, MILLION)) * 3).astype(np.float32)
    logits[1, 999_999] = 3e38  # an overflowing row: greedy, at the last column
    seeds = rng.integers(-(2**62), 2**62, batch)
    positions = rng.integers(0, 2**40, batch)
    temperature = np.float32([0.7, 0.5, 1.0, 0.0])
    tokens = both_frontends("gumbel_sample", logits, seeds, positions, temperature)
    expected = gumbel_sample_reference(logits, seeds, positions, temperature)
    _close_enough(tokens, expected, lambda b: gumbel_scores_reference(logits[b:b + 1], seeds[b:b + 1],
                                                                      positions[b:b + 1], temperature[b:b + 1])[0])
    assert tokens[1] == 999_999
    for filters in (dict(top_k=50, top_p=0.9), dict(min_p=0.05), dict(top_p=0.99)):
        filtered = both_frontends("top_k_top_p_sample", logits, seeds, positions, temperature, **filters)
        reference = top_k_top_p_sample_reference(logits, seeds, positions, temperature, **filters)
        assert (filtered == reference).mean() >= 0.75 and filtered[1] == 999_999, (filters, filtered, reference)
    k = 2
    target = (rng.standard_normal((batch, k + 1, MILLION)) * 3).astype(np.float32)
    draft_logits = (target[:, :k] + rng.standard_normal((batch, k, MILLION)).astype(np.float32))
    drafts = target[:, :k].argmax(-1).astype(np.int32)
    num_drafts = np.full(batch, k, np.int32)
    for kwargs in (dict(), dict(draft_logits=draft_logits), dict(method="strict")):
        out = both_frontends("rejection_sample", target, drafts, num_drafts, seeds, positions, temperature, **kwargs)
        ref, ref_n, ratio_margin, score_margin = rejection_sample_reference(
            target, drafts, num_drafts, seeds, positions, temperature, return_margins=True, **kwargs)
        clear = (ratio_margin > 1e-4) & (score_margin > 1e-4)
        np.testing.assert_array_equal(out[0][clear], ref[clear])
    rates = np.float32([0.9, 0.5])
    target_tokens = target.argmax(-1).astype(np.int32)
    out = both_frontends("synthetic_rejection_sample", target_tokens, drafts, num_drafts, seeds, positions, rates)
    for o, e in zip(out, synthetic_rejection_sample_reference(target_tokens, drafts, num_drafts, seeds, positions,
                                                              rates)):
        np.testing.assert_array_equal(o, e)


def test_every_op_beyond_2_pow_31_elements():
    """B * V > 2**31 (bf16 logits, so the test fits): the first, a middle and the last row equal
    the same rows sampled alone, in torch (one process holds one copy of the logits)."""
    import torch_backend

    torch.manual_seed(31)
    batch, vocab = 2200, MILLION
    assert batch * vocab > 2**31
    logits = (torch.randn(batch, vocab, device="cuda") * 3).to(torch.bfloat16)
    seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 7919 + 2**40
    positions = torch.arange(batch, device="cuda", dtype=torch.int64)
    rows = [0, batch // 2, batch - 1]
    sub = torch.tensor(rows, device="cuda")
    for op, extra in (("gumbel_sample", {}), ("top_k_top_p_sample", dict(top_k=50, top_p=0.9, min_p=0.01))):
        whole = getattr(torch_backend, op)(logits, seeds, positions, 0.8, **extra)
        alone = getattr(torch_backend, op)(logits[sub], seeds[sub], positions[sub], 0.8, **extra)
        assert torch.equal(whole[sub], alone), op
    del logits
    batch, k = 1100, 1
    target = (torch.randn(batch, k + 1, vocab, device="cuda") * 3).to(torch.bfloat16)
    assert target.numel() > 2**31
    draft_logits = target[:, :k].float() + 0.5 * torch.randn(batch, k, vocab, device="cuda")
    drafts = target[:, :k].float().argmax(-1).to(torch.int32)
    num_drafts = torch.full((batch,), k, dtype=torch.int32, device="cuda")
    seeds, positions = seeds[:batch], positions[:batch]
    rows = [0, batch // 2, batch - 1]
    sub = torch.tensor(rows, device="cuda")
    for kwargs in (dict(), dict(draft_logits=draft_logits), dict(method="strict")):
        whole = torch_backend.rejection_sample(target, drafts, num_drafts, seeds, positions, 0.8, **kwargs)
        sub_kwargs = {n: (v[sub] if isinstance(v, torch.Tensor) else v) for n, v in kwargs.items()}
        alone = torch_backend.rejection_sample(target[sub], drafts[sub], num_drafts[sub], seeds[sub],
                                               positions[sub], 0.8, **sub_kwargs)
        for w, a in zip(whole, alone):
            assert torch.equal(w[sub], a), kwargs


def test_stride_zero_and_strided_arguments_at_real_sizes():
    rng = np.random.default_rng(32)
    batch, vocab = 1024, 151936
    logits = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
    seed = np.int64(2**41 + 5)
    seeds = np.full(batch, seed)
    positions = np.arange(batch, dtype=np.int64) * 3
    for op, extra in (("gumbel_sample", {}), ("top_k_top_p_sample", dict(top_k=40, top_p=0.95))):
        expected = run_torch(op, logits, seeds, positions, 0.9, **extra)
        x = torch.from_numpy(logits).cuda()
        expanded = torch.tensor([seed], device="cuda").expand(batch)
        wide = torch.zeros(2 * batch, dtype=torch.int64, device="cuda")
        wide[::2] = torch.from_numpy(positions).cuda()
        import torch_backend

        out = getattr(torch_backend, op)(x, expanded, wide[::2], 0.9, **extra).cpu().numpy()
        np.testing.assert_array_equal(out, expected, err_msg=op)


@pytest.mark.parametrize("peak", [1e30, 1e4, 500.0, 70.0])
def test_rejection_decisions_with_huge_finite_scaled_logits(peak):
    """A target and draft row that put all their mass on the draft (a logit of `peak`, far from
    overflowing once scaled) accept it, and a draft row that does while the target does not accepts
    with probability p(d): the folded FAST_MATH softmax terms once came out inf or 0 there (a 1e30
    logit), a wrong decision; beyond kernels.rejection.FOLD_LIMIT the exact formulas run."""
    rng = np.random.default_rng(int(peak) % 1000)
    batch, k, vocab = 64, 1, 300
    target = rng.standard_normal((batch, k + 1, vocab)).astype(np.float32)
    drafts = rng.integers(0, vocab, (batch, k)).astype(np.int32)
    draft_logits = rng.standard_normal((batch, k, vocab)).astype(np.float32)
    rows = np.arange(batch)
    target[rows[::2], 0, drafts[::2, 0]] = peak  # even requests: p(d) = q(d) = 1 (or nearly, at 70)
    draft_logits[rows, 0, drafts[:, 0]] = peak  # every request: q(d) = 1
    target[1::2, 1, 7] = peak  # odd requests' bonus rows
    num_drafts = np.ones(batch, np.int32)
    seeds, positions = np.arange(batch, dtype=np.int64) * 7919, np.arange(batch, dtype=np.int64)
    temperature = np.float32(0.7)
    tokens, num_sampled = both_frontends("rejection_sample", target, drafts, num_drafts, seeds, positions,
                                         temperature, draft_logits=draft_logits)
    expected, expected_n, ratio_margin, score_margin = rejection_sample_reference(
        target, drafts, num_drafts, seeds, positions, temperature, draft_logits=draft_logits, return_margins=True)
    assert (num_sampled[::2] == 2).all()  # p(d) / q(d) = 1: accepted
    decided = (ratio_margin > 1e-4) & (score_margin > 1e-4)
    assert decided.sum() >= batch // 2
    np.testing.assert_array_equal(tokens[decided], expected[decided])
    np.testing.assert_array_equal(num_sampled[decided], expected_n[decided])
