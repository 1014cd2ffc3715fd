"""top_k_top_p_sample on a real GPU: the benchmark's size
with torch and JAX in one process. Skipped without a CUDA GPU (see conftest)."""

import numpy as np
import pytest
from conftest import ON_GPU

pytestmark = pytest.mark.gpu

if ON_GPU:
    import jax.numpy as jnp
    import torch

    import jsample
    import torch_backend


def _requests(batch, vocab, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    logits = (torch.randn(batch, vocab, device="cuda", generator=gen) * 3).to(torch.bfloat16)
    seeds = torch.randint(-(2**62), 2**62, (batch,), device="cuda", generator=gen)
    positions = torch.randint(0, 2**40, (batch,), device="cuda", generator=gen)
    temperature = torch.rand(batch, device="cuda", generator=gen) * 1.5 + 0.1
    temperature[::9] = 0
    filters = {"top_k": torch.randint(0, 400, (batch,), device="cuda", dtype=torch.int32, generator=gen),
               "top_p": torch.rand(batch, device="cuda", generator=gen) * 0.9 + 0.1,
               "min_p": torch.rand(batch, device="cuda", generator=gen) * 0.1}
    return logits, seeds, positions, temperature, filters


@pytest.mark.parametrize("batch", [1, 256])
def test_filtered_gpu_benchmark_size_torch_equals_jax(batch):
    """Both search variants (16 pivots at B = 1, 4 at B = 256) in one process, torch against JAX."""
    logits, seeds, positions, temperature, filters = _requests(batch, 151936, seed=batch)
    torch_tokens = torch_backend.top_k_top_p_sample(logits, seeds, positions, temperature, **filters)
    jax_tokens = jsample.top_k_top_p_sample(
        jnp.from_dlpack(logits), jnp.from_dlpack(seeds), jnp.from_dlpack(positions), jnp.from_dlpack(temperature),
        **{name: jnp.from_dlpack(value) for name, value in filters.items()})
    np.testing.assert_array_equal(torch_tokens.cpu().numpy(), np.asarray(jax_tokens))
    kept = torch_backend.top_k_top_p_sample(logits, seeds, positions, temperature, top_k=filters["top_k"])
    # top-k alone: the token is among the k largest logits (ties kept), or the argmax for greedy rows
    for b in range(batch):
        row = logits[b].float()
        k = int(filters["top_k"][b])
        if float(temperature[b]) > 0 and k >= 1:
            assert row[kept[b]] >= torch.topk(row, k).values[-1]
        elif float(temperature[b]) == 0:
            assert row[kept[b]] == row.max()
