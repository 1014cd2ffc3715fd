"""Statistics helpers shared by the distribution tests (deterministic: fixed seeds, so never flaky)."""

import numpy as np
from scipy import stats

P_VALUE = 1e-4  # the tests' threshold: fixed seeds make them deterministic, and this keeps them honest


def chi_square_pvalue(tokens, probs, min_expected=5.0):
    """Chi-square goodness of fit; categories with small expected counts are pooled."""
    counts = np.bincount(tokens, minlength=len(probs)).astype(float)
    probs = np.asarray(probs, dtype=np.float64)
    expected = probs / probs.sum() * len(tokens)
    small = expected < min_expected
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    return stats.chisquare(counts, expected).pvalue


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()
