"""Benchmark logits that look like a language model's, in three families (the speed of exact shortcuts
depends on the distribution; every benchmark table reports the family it ran on):

* "flat": randn * 3, what the tables used before (entropy about log V - 4.5 nats: nearly uniform);
* "typical": a long-tailed, Zipf-like row: token of rank r (a random permutation per row) has logit
  -a * log(r) plus N(0, 0.5) noise, with the exponent a chosen per V so that the softmax entropy is
  about 3 nats (2-4), as next-token distributions of language models mostly are;
* "peaked": flat logits with one random token raised far above the rest: entropy below 0.5 nat (a
  confident model; greedy-like rows).

Generated on the logits' device from a torch.Generator, float32 (cast as the benchmark needs).
`entropy_nats` measures what a family gives; tests/test_logit_families.py checks the ranges.
"""

import functools

FAMILIES = ("flat", "typical", "peaked")
TYPICAL_ENTROPY = 3.0  # nats
PEAK_MARGIN = 12.0  # the peaked token's logit above the row's log-sum-exp of the others


@functools.lru_cache(maxsize=None)
def zipf_exponent(vocab: int, entropy: float = TYPICAL_ENTROPY) -> float:
    """The exponent a for which p_r = r**-a / sum_r r**-a over r = 1..V has this entropy (bisection)."""
    import numpy as np

    log_ranks = np.log(np.arange(1, vocab + 1, dtype=np.float64))

    def entropy_of(a):
        logits = -a * log_ranks
        p = np.exp(logits - logits.max())
        p /= p.sum()
        return float(-(p * np.log(np.maximum(p, 1e-300))).sum())

    low, high = 0.5, 5.0  # entropy falls as a grows
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if entropy_of(middle) > entropy else (low, middle)
    return (low + high) / 2


def make_logits(family: str, batch: int, vocab: int, generator, device="cuda"):
    """[batch, vocab] float32 logits of one family."""
    import torch

    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    flat = torch.randn(batch, vocab, device=device, generator=generator) * 3
    if family == "flat":
        return flat
    if family == "peaked":
        peak = torch.randint(0, vocab, (batch, 1), device=device, generator=generator)
        top = torch.logsumexp(flat, dim=1, keepdim=True) + PEAK_MARGIN
        return flat.scatter(1, peak, top)
    ranks = torch.argsort(torch.rand(batch, vocab, device=device, generator=generator), dim=1) + 1
    noise = torch.randn(batch, vocab, device=device, generator=generator) * 0.5
    return -zipf_exponent(vocab) * torch.log(ranks.to(torch.float32)) + noise


def entropy_nats(logits):
    """Softmax entropy of each row, in nats (float64)."""
    import torch

    log_p = torch.log_softmax(logits.to(torch.float64), dim=1)
    return -(log_p.exp() * log_p).sum(dim=1)
