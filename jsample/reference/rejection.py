"""NumPy reference of `rejection_sample` and `synthetic_rejection_sample` (STREAM.md, "Rejection sampling").

Written from the contract, independently of the kernels: probabilities in float64 (from x / T
rounded to fp32 in FP32 mode, as the kernels see it), the residual r = max(p - q, 0) in log space
(log r = log p + log(1 - q / p) where q < p: in linear space the entries of a row whose
log-probabilities span more than float64's range, ~745, underflow to 0, and the all-zero fallback
would be taken where exact arithmetic has a residual), a plain per-request loop. Imports numpy only.
"""

import numpy as np

from jsample.reference.gumbel import GREEDY_BELOW, greedy_rows
from jsample.reference.stream import STREAM_ACCEPT, STREAM_TOKEN, gumbel_noise, seed_values, stream_uniforms


def _row_positions(seeds, positions, rows):
    seeds = np.repeat(seed_values(seeds), rows)
    positions = (np.asarray(positions).astype(np.int64).reshape(-1)[:, None] + np.arange(rows)).reshape(-1)
    return seeds, positions


def _scaled(logits, temperature, fp64):
    """x / T in float64 (computed in fp32 unless fp64); -inf for non-finite logits."""
    logits = np.asarray(logits, dtype=np.float32)
    t = temperature.reshape((-1,) + (1,) * (logits.ndim - 1))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scaled = logits.astype(np.float64) / t.astype(np.float64) if fp64 else (logits / t).astype(np.float64)
    return np.where(np.isfinite(logits), scaled, -np.inf)


def _log_normalizer(scaled):
    """log sum exp over the last axis (-inf for a row without a finite entry)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        top = scaled.max(axis=-1, keepdims=True)
        shift = np.where(np.isfinite(top), top, 0.0)
        return (shift + np.log(np.exp(scaled - shift).sum(axis=-1, keepdims=True)))[..., 0]


def _argmax_and_gap(scores):
    """(first argmax or -1 when all -inf, gap between the two best scores; inf when < 2 candidates)."""
    best = scores.max()
    if np.isneginf(best) or np.isnan(best):
        return -1, np.inf
    top2 = np.sort(scores[np.isfinite(scores)])[-2:]
    gap = np.inf if len(top2) < 2 else top2[1] - top2[0]
    return int(np.argmax(scores)), gap / max(1.0, abs(best))


def rejection_sample_reference(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, *,
                               draft_logits=None, method="probabilistic", fp64=False, return_margins=False):
    """Reference (tokens [B, K+1] int32, num_sampled [B] int32) of `rejection_sample`.

    With `return_margins=True` also returns, per request, how close its decisions were to flipping
    (float64 [B] each; inf when no such decision was taken):
    `ratio_margin` = min over examined probabilistic rows of |u - p(d)/q(d)| / (p(d)/q(d)), and
    `score_margin` = min over the argmaxes taken with noise (strict target tokens, the emitted token)
    of the top-2 score gap / max(1, |best|). Greedy argmaxes are exact and never count.
    """
    target_logits = np.asarray(target_logits, dtype=np.float32)
    batch, rows, vocab = target_logits.shape
    k = rows - 1
    draft_tokens = np.asarray(draft_tokens).reshape(batch, k)
    num_drafts = np.clip(np.asarray(num_draft_tokens).astype(np.int64), 0, k)
    temperature = np.broadcast_to(np.asarray(temperature, dtype=np.float32), (batch,)).copy()
    row_seeds, row_positions = _row_positions(seeds, positions, rows)
    noise = gumbel_noise(stream_uniforms(row_seeds, row_positions, STREAM_TOKEN, vocab, fp64=fp64))
    noise = noise.reshape(batch, rows, vocab)
    accept_u = stream_uniforms(row_seeds, row_positions, STREAM_ACCEPT, 1, fp64=fp64).reshape(batch, rows)
    scaled_target = _scaled(target_logits, temperature, fp64)
    scaled_draft = None if draft_logits is None else _scaled(np.asarray(draft_logits, dtype=np.float32),
                                                              temperature, fp64)
    finite = np.isfinite(target_logits)
    # greedy rows (STREAM.md, clarifications): T < 1e-5, or a row whose scaled target logits overflow; a
    # probabilistic draft row j < n_b whose draft logits overflow makes row j greedy too
    row_greedy = greedy_rows(target_logits.reshape(batch * rows, vocab), np.repeat(temperature, rows))
    row_greedy = row_greedy.reshape(batch, rows)
    if draft_logits is not None and method == "probabilistic" and k > 0:
        draft_greedy = greedy_rows(np.asarray(draft_logits, dtype=np.float32).reshape(batch * k, vocab),
                                   np.repeat(temperature, k)).reshape(batch, k)
        row_greedy[:, :k] |= draft_greedy & (np.arange(k)[None, :] < num_drafts[:, None])

    def gumbel_scores(b, j):
        if row_greedy[b, j]:
            return np.where(finite[b, j], target_logits[b, j].astype(np.float64), -np.inf)
        scores = scaled_target[b, j] + noise[b, j]
        return np.where(finite[b, j] & ~np.isnan(scores), scores, -np.inf)

    tokens = np.full((batch, rows), -1, dtype=np.int32)
    num_sampled = np.zeros(batch, dtype=np.int32)
    ratio_margin = np.full(batch, np.inf)
    score_margin = np.full(batch, np.inf)
    for b in range(batch):
        n = int(num_drafts[b])
        greedy = not temperature[b] >= GREEDY_BELOW  # NaN too
        by_token = greedy or method == "strict"
        accepted = n
        for j in range(n):
            d = int(draft_tokens[b, j])
            in_range = 0 <= d < vocab
            if by_token or row_greedy[b, j]:
                target_token, gap = _argmax_and_gap(gumbel_scores(b, j))
                if not row_greedy[b, j]:
                    score_margin[b] = min(score_margin[b], gap)
                accept = in_range and d == target_token
            else:
                # p(d) / q(d) from log-probabilities: both may underflow in float64 where the ratio does not
                log_p = scaled_target[b, j, d] - _log_normalizer(scaled_target[b, j]) if in_range else -np.inf
                log_q = 0.0
                if scaled_draft is not None:
                    log_q = scaled_draft[b, j, d] - _log_normalizer(scaled_draft[b, j]) if in_range else -np.inf
                with np.errstate(invalid="ignore", over="ignore"):
                    ratio = np.exp(log_p - log_q)  # NaN (rejected) when both are -inf
                accept = bool(accept_u[b, j] < ratio)
                if 0 < ratio < np.inf:
                    ratio_margin[b] = min(ratio_margin[b], abs(accept_u[b, j] - ratio) / ratio)
            if not accept:
                accepted = j
                break
        scores = gumbel_scores(b, accepted)
        if accepted < n and not by_token and not row_greedy[b, accepted]:
            d = int(draft_tokens[b, accepted])
            if scaled_draft is None:  # r = p with the draft removed
                residual = scores.copy()
                if 0 <= d < vocab:
                    residual[d] = -np.inf
            else:  # r = max(p - q, 0): log r = log p + log(1 - q / p) where q < p
                x, y = scaled_target[b, accepted], scaled_draft[b, accepted]
                lse_p, lse_q = _log_normalizer(x), _log_normalizer(y)
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    log_ratio = np.where(np.isneginf(y), -np.inf, (y - x) + (lse_p - lse_q))  # log(q / p)
                    log_r = (x - lse_p) + np.log1p(-np.exp(log_ratio))
                residual = np.where(finite[b, accepted] & (log_ratio < 0) & (log_r > -np.inf),
                                    log_r + noise[b, accepted], -np.inf)
            if np.isfinite(residual).any():  # all-zero residual: fall back to p
                scores = residual
        token, gap = _argmax_and_gap(scores)
        if not row_greedy[b, accepted]:
            score_margin[b] = min(score_margin[b], gap)
        tokens[b, :accepted] = draft_tokens[b, :accepted]
        tokens[b, accepted] = token
        num_sampled[b] = accepted + 1
    if return_margins:
        return tokens, num_sampled, ratio_margin, score_margin
    return tokens, num_sampled


def synthetic_rejection_sample_reference(target_tokens, draft_tokens, num_draft_tokens, seeds, positions,
                                         conditional_rates, *, fp64=False):
    """Reference (tokens [B, K+1] int32, num_sampled [B] int32) of `synthetic_rejection_sample`.

    Draft j of request b is accepted iff u < conditional_rates[(b,) j], u the stream-2 uniform (call 0)
    at position positions[b] + j; the first rejected row a (n_b when none) emits target_tokens[b, a].
    """
    target_tokens = np.asarray(target_tokens)
    batch, rows = target_tokens.shape
    k = rows - 1
    draft_tokens = np.asarray(draft_tokens).reshape(batch, k)
    num_drafts = np.clip(np.asarray(num_draft_tokens).astype(np.int64), 0, k)
    rates = np.broadcast_to(np.asarray(conditional_rates, dtype=np.float32), (batch, k))
    row_seeds, row_positions = _row_positions(seeds, positions, rows)
    u = stream_uniforms(row_seeds, row_positions, STREAM_ACCEPT, 1, fp64=fp64).reshape(batch, rows)[:, :k]
    tokens = np.full((batch, rows), -1, dtype=np.int32)
    num_sampled = np.zeros(batch, dtype=np.int32)
    for b in range(batch):
        n = int(num_drafts[b])
        rejected = [j for j in range(n) if not u[b, j] < rates[b, j].astype(u.dtype)]
        accepted = rejected[0] if rejected else n
        tokens[b, :accepted] = draft_tokens[b, :accepted]
        emitted = int(target_tokens[b, accepted])
        tokens[b, accepted] = emitted if -2**31 <= emitted < 2**31 else -1  # int64 beyond int32: no token id
        num_sampled[b] = accepted + 1
    return tokens, num_sampled
