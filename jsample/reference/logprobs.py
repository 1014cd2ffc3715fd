"""Float64 NumPy reference of the log-probabilities of sampled tokens (issue 41; docs/LOGPROBS.md says
what each number means). Imports numpy only.

For a row x [V] (float32 logits, as the samplers read them), its temperature T, its filters and a token t:

* raw    = log_softmax(x)[t];
* scaled = log_softmax(x / T)[t], with T = 1 where the row is greedy (T < 1e-5 or NaN, or some finite
  x / T overflows float32: gumbel.greedy_rows);
* kept   = log of t's probability in the distribution the sampler draws from: softmax(x / T) restricted
  to the kept set of top_k_top_p_sample (reference.filtered.kept_tokens: the same rules, the same
  fixed-point masses) and renormalised; -inf when t is outside the kept set. A greedy row is not
  filtered (as top_k_top_p_sample does not filter it): its kept set is every finite logit;
* log_kept_mass = log S, S the softmax(x / T) mass of the kept set, so kept == scaled - log_kept_mass;
* rank   = 1 + the number of columns whose logit is strictly larger than x[t];
* top_ids, top_logprobs [num_top]: the columns of the num_top largest raw logprobs, largest first,
  the lowest column first among equal logits (non-finite logits last; a row with fewer finite logits
  than num_top ends with -1 and -inf).

A token of -1 (the samplers' token of a row without a finite logit) gives NaN logprobs and rank 0; so
does a token outside [0, V) (which the frontends refuse where they can see it). A non-finite x[t] gives
raw = scaled = kept = -inf when it is -inf, NaN when it is NaN or +inf. Sums are float64 over the
finite logits (the largest subtracted first).
"""

from typing import NamedTuple, Optional

import numpy as np

from jsample.reference.filtered import kept_tokens
from jsample.reference.gumbel import greedy_rows


class Logprobs(NamedTuple):
    raw: np.ndarray  # [B] float32
    scaled: np.ndarray  # [B] float32
    kept: np.ndarray  # [B] float32
    log_kept_mass: np.ndarray  # [B] float32
    rank: np.ndarray  # [B] int32
    top_ids: np.ndarray  # [B, num_top] int32
    top_logprobs: np.ndarray  # [B, num_top] float32


def _log_softmax(x64, finite):
    """float64 log_softmax over the finite entries of x64 (-inf elsewhere)."""
    out = np.full(x64.shape, -np.inf)
    if finite.any():
        z = x64[finite] - x64[finite].max()
        out[finite] = z - np.log(np.exp(z).sum())
    return out


def _per_row(value, batch, dtype):
    if value is None:
        return [None] * batch
    array = np.broadcast_to(np.asarray(value, dtype=dtype), (batch,))
    return list(array)


def token_logprobs_reference(logits, tokens, temperature, *, top_k=None, top_p=None, min_p=None,
                             num_top: int = 0, fp64: bool = False) -> Logprobs:
    """The reference of `token_logprobs` (module docstring): logits [B, V] (read as float32), tokens [B]
    (any integer dtype), temperature, top_k, top_p, min_p a number or [B]; fp64 as the samplers' flag
    (it decides the fixed-point masses of top-p and min-p, so the kept set)."""
    x = np.asarray(logits, dtype=np.float32)
    batch, vocab = x.shape
    tokens = np.asarray(tokens).astype(np.int64).reshape(batch)
    temperatures = np.broadcast_to(np.asarray(temperature, dtype=np.float32), (batch,))
    top_ks, top_ps, min_ps = (_per_row(top_k, batch, np.int64), _per_row(top_p, batch, np.float32),
                              _per_row(min_p, batch, np.float32))
    out = {name: np.full(batch, np.nan) for name in ("raw", "scaled", "kept", "log_kept_mass")}
    rank = np.zeros(batch, np.int32)
    top_ids = np.full((batch, num_top), -1, np.int32)
    top_logprobs = np.full((batch, num_top), -np.inf)
    for b in range(batch):
        row = x[b]
        finite = np.isfinite(row)
        raw = _log_softmax(row.astype(np.float64), finite)
        order = sorted(np.flatnonzero(finite), key=lambda c: (-row[c], c))[:num_top]
        top_ids[b, :len(order)] = order
        top_logprobs[b, :len(order)] = raw[order]
        greedy = bool(greedy_rows(row[None], temperatures[b])[0])
        t = np.float64(1.0) if greedy or not finite.any() else np.float64(temperatures[b])
        scaled = _log_softmax(row.astype(np.float64) / t, finite)
        keep = kept_tokens(row, temperatures[b], top_ks[b], top_ps[b], min_ps[b], fp64)
        mass = np.exp(scaled[keep & finite]).sum() if finite.any() else 0.0
        token = tokens[b]
        if not 0 <= token < vocab or not finite.any():
            continue  # NaN logprobs, rank 0
        rank[b] = 1 + int(np.sum(row > row[token]))
        if np.isnan(row[token]) or row[token] == np.inf:
            continue
        log_mass = np.log(mass)
        out["raw"][b], out["scaled"][b] = raw[token], scaled[token]
        out["log_kept_mass"][b] = log_mass
        out["kept"][b] = scaled[token] - log_mass if keep[token] else -np.inf
    return Logprobs(*(out[name].astype(np.float32) for name in ("raw", "scaled", "kept", "log_kept_mass")),
                    rank, top_ids, top_logprobs.astype(np.float32))


def kept_distribution(row, temperature, top_k: Optional[int] = None, top_p=None, min_p=None, fp64=False):
    """float64 [V]: the distribution a top_k_top_p_sample row draws from (softmax(x / T) on the kept set,
    renormalised; T = 1 for a greedy row, which is not filtered)."""
    x = np.asarray(row, dtype=np.float32)
    finite = np.isfinite(x)
    greedy = bool(greedy_rows(x[None], temperature)[0])
    t = np.float64(1.0) if greedy else np.float64(np.float32(temperature))
    p = np.exp(_log_softmax(x.astype(np.float64) / t, finite))
    p = np.where(kept_tokens(x, temperature, top_k, top_p, min_p, fp64), p, 0.0)
    return p / p.sum()
