"""The random stream of docs/STREAM.md (version 1), in plain NumPy.

This is the documented stream, written independently of Triton: the bit tests check that the
kernels' Philox words and uniforms equal these, and the token tests score with these uniforms.
"""

import numpy as np

_MASK32 = np.uint64(0xFFFFFFFF)
_ROUND_A = np.uint64(0xD2511F53)
_ROUND_B = np.uint64(0xCD9E8D57)
_KEY_A = np.uint64(0x9E3779B9)
_KEY_B = np.uint64(0xBB67AE85)

STREAM_TOKEN, STREAM_DRAFT, STREAM_ACCEPT = 0, 1, 2


def _as_u64_bits(values) -> np.ndarray:
    """Integer array -> the 64-bit two's complement of each value, as uint64."""
    values = np.asarray(values)
    if values.dtype.kind == "u":
        return values.astype(np.uint64)
    if values.dtype.kind == "i":
        return values.astype(np.int64).view(np.uint64)
    raise TypeError(f"integers expected, got dtype {values.dtype}")


def seed_values(seeds) -> np.ndarray:
    """Seeds [B] (any integers) or [B, 2] (low, high) 32-bit words -> the 64-bit seeds as uint64 [B]."""
    seeds = np.asarray(seeds)
    if seeds.ndim == 2:
        words = seeds.astype(np.int64) & 0xFFFFFFFF
        return (words[:, 0] | (words[:, 1] << 32)).view(np.uint64)
    return _as_u64_bits(seeds)


def philox4x32(key, c0, c1, c2, c3, rounds: int = 10):
    """Philox4x32 (10 rounds) as Triton's tl.philox: key words (low32(key), high32(key)).

    All arguments broadcast; counters are uint32 values. Returns four uint32 arrays.
    """
    key = _as_u64_bits(key)
    k0, k1 = key & _MASK32, key >> np.uint64(32)
    c = [np.asarray(v).astype(np.uint64) & _MASK32 for v in (c0, c1, c2, c3)]
    c0, c1, c2, c3 = np.broadcast_arrays(*c, k0)[:4]
    k0, k1 = np.broadcast_to(k0, c0.shape), np.broadcast_to(k1, c0.shape)
    for _ in range(rounds):
        prod_b = _ROUND_B * c2  # < 2**64: no overflow
        prod_a = _ROUND_A * c0
        c0, c1, c2, c3 = ((prod_b >> np.uint64(32)) ^ c1 ^ k0, prod_b & _MASK32,
                          (prod_a >> np.uint64(32)) ^ c3 ^ k1, prod_a & _MASK32)
        k0 = (k0 + _KEY_A) & _MASK32
        k1 = (k1 + _KEY_B) & _MASK32
    return tuple(w.astype(np.uint32) for w in (c0, c1, c2, c3))


def uniforms_f32(words) -> np.ndarray:
    """uint32 words -> fp32 uniforms: fp32(w) * 2**-32 (round to nearest), clamped to [2**-32, 1 - 2**-24]."""
    u = np.asarray(words, dtype=np.uint32).astype(np.float32) * np.float32(2.0**-32)
    return np.clip(u, np.float32(2.0**-32), np.float32(1 - 2.0**-24))


def uniforms_f64(lo, hi) -> np.ndarray:
    """Pairs of uint32 words -> fp64 uniforms: fp64(hi * 2**32 + lo) * 2**-64, clamped to [2**-64, 1 - 2**-53]."""
    bits = (np.asarray(hi, dtype=np.uint64) << np.uint64(32)) | np.asarray(lo, dtype=np.uint64)
    u = bits.astype(np.float64) * 2.0**-64
    return np.clip(u, 2.0**-64, 1 - 2.0**-53)


def stream_uniforms(seeds, positions, stream: int, num_columns: int, fp64: bool = False) -> np.ndarray:
    """The uniforms of columns 0 .. num_columns - 1 for each (seed, position): shape [B, num_columns].

    FP32: column k uses word k % 4 of call k // 4. FP64: column k uses words
    (w[2*(k % 2)], w[2*(k % 2) + 1]) of call k // 2.
    """
    seeds = seed_values(seeds).reshape(-1)[:, None]
    positions = _as_u64_bits(np.asarray(positions).reshape(-1))[:, None]
    per_call = 2 if fp64 else 4
    calls = np.arange((num_columns + per_call - 1) // per_call, dtype=np.uint64)[None, :]
    words = philox4x32(seeds, calls, positions & _MASK32, positions >> np.uint64(32), stream)
    columns = calls.shape[1] * per_call  # explicit: a reshape to (0, -1) fails for B = 0
    if fp64:
        lo = np.stack([words[0], words[2]], axis=-1).reshape(len(seeds), columns)
        hi = np.stack([words[1], words[3]], axis=-1).reshape(len(seeds), columns)
        return uniforms_f64(lo, hi)[:, :num_columns]
    return uniforms_f32(np.stack(words, axis=-1).reshape(len(seeds), columns))[:, :num_columns]


def gumbel_noise(u) -> np.ndarray:
    """g(u) = -log(-log1p(-u)), evaluated in float64 (the ideal the kernels approximate)."""
    return -np.log(-np.log1p(-np.asarray(u, dtype=np.float64)))
