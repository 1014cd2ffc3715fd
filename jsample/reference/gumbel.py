"""NumPy reference of `gumbel_sample` (STREAM.md, "Gumbel-max")."""

import numpy as np

from jsample.reference.stream import STREAM_DRAFT, STREAM_TOKEN, gumbel_noise, stream_uniforms


GREEDY_BELOW = np.float32(1e-5)  # a temperature below this is greedy (STREAM.md, clarifications)


def greedy_rows(logits, temperature) -> np.ndarray:
    """Boolean [B]: the rows sampled greedily (STREAM.md, "Clarifications of version 1"): T < 1e-5, or
    some finite logit with |x| * (1 / T) beyond the float32 range (product and 1 / T rounded in
    float32, as the FP32 scores). A NaN temperature is greedy too (STREAM.md allows -1 only for rows
    without a finite logit)."""
    logits = np.asarray(logits, dtype=np.float32)
    temperature = np.broadcast_to(np.asarray(temperature, dtype=np.float32), (logits.shape[0],))
    magnitude = np.where(np.isfinite(logits), np.abs(logits), np.float32(0)).max(axis=1, initial=np.float32(0))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        overflow = np.isinf(magnitude * (np.float32(1) / temperature))
    return ~(temperature >= GREEDY_BELOW) | overflow


def gumbel_scores_reference(logits, seeds, positions, temperature, *, fp64=False, draft=False) -> np.ndarray:
    """The [B, V] float64 scores whose argmax is the token; -inf for non-candidates.

    s_k = x_k / T + g(u_k) with x / T in fp32 (FP64 mode: in fp64) and g evaluated in float64 from
    the exact uniform; greedy rows (greedy_rows) score x_k. Non-finite logits score -inf.
    """
    logits = np.asarray(logits, dtype=np.float32)
    batch, vocab = logits.shape
    temperature = np.broadcast_to(np.asarray(temperature, dtype=np.float32), (batch,))
    u = stream_uniforms(seeds, positions, STREAM_DRAFT if draft else STREAM_TOKEN, vocab, fp64=fp64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if fp64:
            scaled = logits.astype(np.float64) / temperature.astype(np.float64)[:, None]
        else:
            scaled = (logits / temperature[:, None]).astype(np.float64)
        scores = np.where(greedy_rows(logits, temperature)[:, None], logits.astype(np.float64),
                          scaled + gumbel_noise(u))
    candidate = np.isfinite(logits) & ~np.isnan(scores)
    return np.where(candidate, scores, -np.inf)


def gumbel_sample_reference(logits, seeds, positions, temperature, *, fp64=False, draft=False) -> np.ndarray:
    """Reference tokens [B] int32: argmax of the scores, lowest column on ties, -1 if no finite logit."""
    scores = gumbel_scores_reference(logits, seeds, positions, temperature, fp64=fp64, draft=draft)
    tokens = np.argmax(scores, axis=1).astype(np.int32)  # np.argmax returns the first maximum
    return np.where(np.isneginf(scores.max(axis=1)), np.int32(-1), tokens)
