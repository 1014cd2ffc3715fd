"""gumbel_sample on a real GPU: real sizes, one process
holding both frameworks. Skipped without a CUDA GPU (see conftest)."""

import os

import numpy as np
import pytest
from conftest import ON_GPU

from jsample.reference import gumbel_sample_reference

pytestmark = pytest.mark.gpu

if ON_GPU:
    import jax
    import jax.numpy as jnp
    import torch

    import jsample
    import torch_backend


def _requests(batch, vocab, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(batch, vocab, device="cuda", generator=gen) * 3
    seeds = torch.randint(-(2**62), 2**62, (batch,), device="cuda", generator=gen)
    positions = torch.randint(0, 2**40, (batch,), device="cuda", generator=gen)
    temperature = torch.rand(batch, device="cuda", generator=gen) * 1.5
    temperature[::7] = 0
    return logits, seeds, positions, temperature


@pytest.mark.parametrize("batch,vocab", [(1024, 151936), (1024, 262144), (1, 262144)])
@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
def test_gumbel_gpu_real_sizes_torch_equals_jax_and_reference(batch, vocab, fp64):
    logits, seeds, positions, temperature = _requests(batch, vocab, seed=batch + vocab)
    from_torch = torch_backend.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64).cpu().numpy()
    from_jax = np.asarray(jax.jit(lambda *a: jsample.gumbel_sample(*a, fp64=fp64))(
        *(jnp.from_dlpack(t) for t in (logits, seeds, positions, temperature))))
    np.testing.assert_array_equal(from_torch, from_jax)
    rows = np.arange(0, batch, max(1, batch // 16))  # the NumPy reference on a subset of rows
    expected = gumbel_sample_reference(logits[rows].cpu().numpy(), seeds[rows].cpu().numpy(),
                                       positions[rows].cpu().numpy(), temperature[rows].cpu().numpy(), fp64=fp64)
    np.testing.assert_array_equal(from_torch[rows], expected)


def test_gumbel_gpu_jax_triton_import_keeps_triton_cache_dir():
    from jsample._jax import _launch

    before = os.environ.get("TRITON_CACHE_DIR")
    _launch._import_jax_triton()
    assert os.environ.get("TRITON_CACHE_DIR") == before
    logits, seeds, positions, temperature = _requests(4, 1000)
    torch_backend.gumbel_sample(logits, seeds, positions, temperature, draft=True)  # torch still launches
