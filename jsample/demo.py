"""The main job: sample one batch with both frontends and say whether the tokens are identical.

    python -m jsample.demo

Runs on the GPU when there is one, otherwise on the CPU through the Triton interpreter. With only one
of JAX and PyTorch installed, it samples with that one and compares with the NumPy reference. 64-bit
seeds reach JAX as (low, high) words (jsample.seed_words), so jax_enable_x64 is left as it is.
"""

import jsample.kernels  # noqa: F401  (chooses the Triton interpreter first on a CPU-only machine)
import numpy as np

import jsample
from jsample.reference import gumbel_sample_reference


def main(batch: int = 8, vocab: int = 32000) -> bool:
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
    seeds = np.arange(batch, dtype=np.int64) * 1_000_003 - 5  # any 64-bit values
    positions = np.arange(batch, dtype=np.int32) * 1000
    temperatures = [0.0, 0.7, 1.0, 1.3]
    temperature = np.float32(temperatures * (batch // 4 + 1))[:batch]  # 0 = greedy
    results, where = {}, "CPU (Triton interpreter)"
    try:
        import torch

        import torch_backend
    except ImportError:
        torch = None
    if torch is not None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda":
            where = "GPU: " + torch.cuda.get_device_name()
        results["torch"] = torch_backend.gumbel_sample(*(torch.from_numpy(a).to(device) for a in
                                                         (logits, seeds, positions, temperature))).cpu().numpy()
    try:
        import jax
    except ImportError:
        jax = None
    if jax is not None:
        results["JAX"] = np.asarray(jax.jit(jsample.gumbel_sample)(logits, jsample.seed_words(seeds), positions,
                                                                   temperature))
        print(f"JAX backend: {jax.default_backend()}")
    ran = [name for name in ("torch", "JAX") if name in results]
    if len(results) < 2:  # one frontend: compare with the reference (exact on the CPU)
        results["NumPy reference"] = gumbel_sample_reference(logits, seeds, positions, temperature)
    print(f"jsample {jsample.__version__}, random stream v{jsample.STREAM_VERSION}, ran on {where}")
    print(f"batch {batch}, vocabulary {vocab}, temperature {(temperatures * batch)[:batch]}")
    for name, tokens in results.items():
        print(f"{name + ' tokens':22s}: {tokens.tolist()}")
    if not ran:  # nothing to compare: say so, and fail
        print("neither torch nor JAX is installed: no kernel ran, nothing was compared "
              "(pip install torch, or jax; see the README's quick start)")
        return False
    first, *others = results.values()
    identical = all(np.array_equal(first, other) for other in others)
    print(f"compared              : {' and '.join(results)}")
    print("identical             :", "yes" if identical else "NO")
    return identical


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
