"""The main job: sample one batch with both frontends and say whether the tokens are identical.

    python -m jsample.demo

Runs on the GPU when there is one, otherwise on the CPU through the Triton interpreter.
"""

import jsample.kernels  # noqa: F401  (chooses the Triton interpreter first on a CPU-only machine)

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jsample
import torch_backend


def main(batch: int = 8, vocab: int = 32000) -> bool:
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
    seeds = np.arange(batch, dtype=np.int64) * 1_000_003 - 5  # any 64-bit values
    positions = np.arange(batch, dtype=np.int64) + 2**32  # positions past 2**32 too
    temperature = np.float32([0.0, 0.7, 1.0, 1.3] * (batch // 4 + 1))[:batch]  # 0 = greedy

    device = "cuda" if torch.cuda.is_available() else "cpu"
    from_torch = torch_backend.gumbel_sample(*(torch.from_numpy(a).to(device) for a in
                                               (logits, seeds, positions, temperature))).cpu().numpy()
    sample = jax.jit(jsample.gumbel_sample)
    from_jax = np.asarray(sample(*(jnp.asarray(a) for a in (logits, seeds, positions, temperature))))

    where = ("GPU: " + torch.cuda.get_device_name()) if device == "cuda" else "CPU (Triton interpreter)"
    print(f"jsample {jsample.__version__}, random stream v{jsample.STREAM_VERSION}, ran on {where}")
    print(f"JAX backend: {jax.default_backend()}; batch {batch}, vocabulary {vocab}")
    print(f"temperature : {temperature.tolist()}")
    print(f"torch tokens: {from_torch.tolist()}")
    print(f"JAX tokens  : {from_jax.tolist()}")
    identical = bool(np.array_equal(from_torch, from_jax))
    print("identical   :", "yes" if identical else "NO")
    return identical


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
