"""NumPy reference of `top_k_top_p_sample` (jsample/kernels/filtered/__init__.py states the rules).

Written from the rules, not from the kernels' search: top-k from a sort, top-p from the sorted masses
of the distinct logits, then gumbel_sample's reference on the row with the dropped logits at -inf.
The relative probabilities e = p / p_max are computed in FP32 (FP64 when fp64) as the kernels do,
so on the CPU (the Triton interpreter evaluates exp with NumPy too) the kept sets agree exactly.
Imports numpy only.
"""

import numpy as np

from jsample.reference.gumbel import greedy_rows, gumbel_sample_reference

MASS_SCALE = 2.0**24  # jsample.kernels.filtered.MASS_SCALE


def relative_probabilities(row, temperature, fp64=False):
    """e = exp(x / T - max(x) / T) of a row's finite logits (x / T as x * (1 / T)); 0 elsewhere."""
    x = np.asarray(row, dtype=np.float32)
    finite = np.isfinite(x)
    dtype = np.float64 if fp64 else np.float32
    inverse_t = dtype(1.0) / dtype(temperature)
    x_max = x[finite].max()
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x.astype(dtype) * inverse_t - dtype(x_max) * inverse_t)
    return np.where(finite, e, 0.0).astype(dtype)


def kept_tokens(row, temperature, top_k=None, top_p=None, min_p=None, fp64=False, *, top_p_scale=1.0,
                min_p_scale=1.0):
    """Boolean [V]: the tokens the filters keep (all finite logits for greedy rows, gumbel.greedy_rows). Out-of-range filter values are clamped (STREAM.md, clarifications).

    top_p_scale / min_p_scale multiply the limits: the tests use them to find the rows whose kept
    set a rounding of e could change."""
    x = np.asarray(row, dtype=np.float32)
    finite = np.isfinite(x)
    if greedy_rows(x[None], temperature)[0] or not finite.any():
        return finite
    keep = finite.copy()
    if top_k is not None and 1 <= top_k < finite.sum():
        keep &= x >= np.sort(x[finite])[::-1][top_k - 1]
    e = relative_probabilities(x, temperature, fp64)
    top_p = None if top_p is None else np.float32(top_p)
    if top_p is not None and not np.isnan(top_p) and top_p < 1:
        if top_p <= 0:
            keep &= x >= x[finite].max()
        else:
            mass = np.floor(e * MASS_SCALE).astype(np.int64)
            limit = np.float64(np.float32(top_p)) * np.float64(mass[keep].sum()) * top_p_scale
            # the distinct kept logits, largest first, and the kept mass strictly above each (an
            # exclusive cumulative sum of the per-value masses, in exact int64)
            values, value_of = np.unique(x[keep], return_inverse=True)
            value_mass = np.zeros(len(values), dtype=np.int64)
            np.add.at(value_mass, value_of.ravel(), mass[keep])
            values, value_mass = values[::-1], value_mass[::-1]
            above = np.concatenate([[0], np.cumsum(value_mass)[:-1]])
            threshold = values[above.astype(np.float64) < limit].min()
            keep &= x >= threshold
    if min_p is not None and min_p > 0:
        # min_p is a float32 value, as the kernel's; a scaled limit stays <= 1, where the largest logit
        # (e = exp(0) = 1 exactly, on any hardware) is always kept
        keep &= e >= min(e.dtype.type(np.float32(min_p)) * min_p_scale, 1.0)
    return keep


def top_k_top_p_sample_reference(logits, seeds, positions, temperature, *, top_k=None, top_p=None, min_p=None,
                                 fp64=False) -> np.ndarray:
    """Reference tokens [B] int32. top_k / top_p / min_p: None, a number, or one value per row."""
    logits = np.asarray(logits, dtype=np.float32)
    batch = logits.shape[0]
    temperature = np.broadcast_to(np.asarray(temperature, dtype=np.float32), (batch,))

    def per_row(value):
        return [None] * batch if value is None else list(np.broadcast_to(np.asarray(value), (batch,)))

    masked = np.full_like(logits, -np.inf)
    for b, (k, p, m) in enumerate(zip(per_row(top_k), per_row(top_p), per_row(min_p))):
        keep = kept_tokens(logits[b], temperature[b], None if k is None else int(k), p, m, fp64)
        masked[b] = np.where(keep, logits[b], -np.inf)
    # rows kept whole keep their +inf / NaN logits, which gumbel_sample never picks anyway
    return gumbel_sample_reference(masked, seeds, positions, temperature, fp64=fp64)
