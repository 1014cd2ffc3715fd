"""The float64 reference of the sampled tokens' log-probabilities (docs/LOGPROBS.md), against direct NumPy
computations and against the sampler it describes: the tokens top_k_top_p_sample's reference draws follow
exp(kept) (a deterministic chi-square test), and every drawn token has a finite kept logprob."""

import numpy as np
import pytest
from distribution_checks import P_VALUE, chi_square_pvalue
from scipy.special import log_softmax

from jsample.reference import top_k_top_p_sample_reference
from jsample.reference.filtered import kept_tokens
from jsample.reference.logprobs import kept_distribution, token_logprobs_reference

FILTERS = [dict(), dict(top_k=5), dict(top_p=0.8), dict(min_p=0.05), dict(top_k=20, top_p=0.9, min_p=0.01)]


def _rows(seed=0, batch=6, vocab=200):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((batch, vocab)) * 2.5).astype(np.float32)
    x[1, ::3] = -np.inf
    x[2, :50] = x[2, 60]  # ties
    return x, np.float32([0.7, 1.0, 1.3, 0.0, 0.5, 2.0])


@pytest.mark.parametrize("filters", FILTERS, ids=[str(f) for f in FILTERS])
def test_logprobs_reference_against_direct_computation(filters):
    x, temperature = _rows()
    for t in range(0, 200, 7):
        tokens = np.full(len(x), t)
        out = token_logprobs_reference(x, tokens, temperature, **filters, num_top=8)
        for b, row in enumerate(x):
            finite = np.isfinite(row)
            if not finite[t]:
                assert out.raw[b] == -np.inf and out.kept[b] == -np.inf
                continue
            np.testing.assert_allclose(out.raw[b], log_softmax(row[finite].astype(np.float64))[finite[:t].sum()],
                                       rtol=0, atol=1e-5)
            temp = 1.0 if temperature[b] < 1e-5 else np.float64(temperature[b])
            np.testing.assert_allclose(out.scaled[b], log_softmax(row[finite].astype(np.float64) / temp)
                                       [finite[:t].sum()], rtol=0, atol=1e-5)
            p = kept_distribution(row, temperature[b], **filters)
            if p[t] > 0:
                np.testing.assert_allclose(out.kept[b], np.log(p[t]), rtol=0, atol=1e-5)
                np.testing.assert_allclose(out.kept[b], out.scaled[b] - out.log_kept_mass[b], rtol=0, atol=1e-6)
            else:
                assert out.kept[b] == -np.inf
            assert out.rank[b] == 1 + np.sum(row > row[t])
            order = np.lexsort((np.arange(len(row)), -np.where(finite, row, -np.inf)))[:8]
            np.testing.assert_array_equal(out.top_ids[b], order)


@pytest.mark.parametrize("filters", FILTERS[1:], ids=[str(f) for f in FILTERS[1:]])
def test_kept_logprobs_sum_to_one_over_the_kept_set(filters):
    x, temperature = _rows(seed=3)
    for b, row in enumerate(x):
        keep = kept_tokens(row, temperature[b], filters.get("top_k"), filters.get("top_p"), filters.get("min_p"))
        columns = np.flatnonzero(keep)
        out = token_logprobs_reference(np.repeat(row[None], len(columns), 0), columns,
                                       np.repeat(temperature[b], len(columns)), **filters)
        np.testing.assert_allclose(np.exp(out.kept.astype(np.float64)).sum(), 1.0, atol=1e-5)
        np.testing.assert_allclose(np.exp(out.log_kept_mass[0]),
                                   np.exp(log_softmax(row[np.isfinite(row)].astype(np.float64)
                                                      / (1.0 if temperature[b] < 1e-5 else temperature[b])))
                                   [keep[np.isfinite(row)]].sum(), rtol=1e-5)


def test_greedy_rows_are_unfiltered_at_temperature_one():
    x, _ = _rows(seed=5)
    out = token_logprobs_reference(x, np.argmax(x, axis=1), np.float32(0.0), top_k=3, top_p=0.5)
    np.testing.assert_allclose(out.log_kept_mass, 0.0, atol=1e-7)
    np.testing.assert_allclose(out.kept, out.scaled, atol=1e-7)
    np.testing.assert_allclose(out.scaled, out.raw, atol=1e-7)


def test_invalid_tokens_give_nan_and_rank_zero():
    x, temperature = _rows(seed=6)
    x[4] = -np.inf  # a row without a finite logit (its sampled token is -1)
    out = token_logprobs_reference(x, np.int64([-1, 200, 3, 2**40, -1, 5]), temperature, top_k=4, num_top=3)
    for b in (0, 1, 3, 4):
        assert np.isnan(out.raw[b]) and np.isnan(out.kept[b]) and out.rank[b] == 0
    assert np.isfinite(out.raw[2]) and out.rank[5] >= 1
    np.testing.assert_array_equal(out.top_ids[4], [-1, -1, -1])


@pytest.mark.parametrize("filters", [dict(top_k=6), dict(top_p=0.7), dict(top_k=10, top_p=0.9, min_p=0.02)],
                         ids=str)
def test_the_sampler_draws_from_exp_kept(filters):
    """RL replay: the reference sampler's tokens, over many seeds, have finite kept logprobs and follow
    exp(kept) (deterministic seeds: never flaky)."""
    rng = np.random.default_rng(11)
    row = (rng.standard_normal(40) * 1.5).astype(np.float32)
    draws = 4000
    x = np.repeat(row[None], draws, 0)
    seeds = np.arange(draws, dtype=np.int64) * 7919 + 3
    positions = np.zeros(draws, np.int64)
    tokens = top_k_top_p_sample_reference(x, seeds, positions, np.float32(0.9), **filters)
    out = token_logprobs_reference(x, tokens, np.float32(0.9), **filters)
    assert np.all(np.isfinite(out.kept))
    expected = kept_distribution(row, np.float32(0.9), **filters)
    support = np.flatnonzero(expected > 0)
    assert np.isin(tokens, support).all()
    assert chi_square_pvalue(np.searchsorted(support, tokens), expected[support]) > P_VALUE
