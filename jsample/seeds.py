"""64-bit seeds as pairs of 32-bit words, for JAX with jax_enable_x64 off. Plain NumPy: no jax import."""

import numpy as np


def seed_words(seeds) -> np.ndarray:
    """[B] integer seeds (any integer dtype, or Python ints in [-2**63, 2**64)) -> [B, 2] uint32 (low, high)
    words, which every op accepts as `seeds` in both frontends: the 64-bit seed without 64-bit arrays.

    With jax_enable_x64 off JAX narrows an int64 array to int32 before an op sees it (under jax.jit
    silently), so a seed >= 2**31 must cross as words: `jsample.gumbel_sample(x, jsample.seed_words(s), ...)`.

    Example:
        >>> import jsample
        >>> jsample.seed_words([1, 2**40 + 7, -1]).tolist()
        [[1, 0], [7, 256], [4294967295, 4294967295]]
    """
    values = np.asarray(seeds)
    if values.dtype == object or values.dtype.kind not in "iu":  # Python ints beyond int64, or not integers
        if not all(isinstance(v, (int, np.integer)) and -(2**63) <= v < 2**64 for v in values.reshape(-1).tolist()):
            raise TypeError(f"seed_words: seeds must be integers in [-2**63, 2**64), got dtype {values.dtype}.")
        values = np.array([v % 2**64 for v in values.reshape(-1).tolist()], dtype=np.uint64).reshape(values.shape)
    bits = values.astype(np.int64).view(np.uint64) if values.dtype.kind == "i" else values.astype(np.uint64)
    return np.stack([bits & 0xFFFFFFFF, bits >> 32], axis=-1).astype(np.uint32)
