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


@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_gumbel_gpu_fp64_rare_blocks_give_the_fp64_tokens(monkeypatch, temperature):
    """Equal logits make the row's winner the column of the largest noise, whose uniform is below
    2**-17 in about 2 rows of 3 at V = 151936: a block with an extreme column, which the FP64
    intervals (B = 256: the two-launch plan's intervals) score in FP64 column by column
    (common._fp64_near_best). Every row's token equals the one of the per-block shortlists (forced
    here), JAX's and, on a subset of rows, the NumPy FP64 reference's."""
    from jsample.kernels import gumbel
    from torch_backend import _execute

    batch, vocab = 256, 151936
    logits = torch.zeros(batch, vocab, device="cuda")
    logits[::5, 7] = 2.0  # and some rows with one favoured column
    seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 1000003 + 11
    positions = torch.arange(batch, device="cuda", dtype=torch.int64)
    temperatures = torch.full((batch,), temperature, device="cuda")

    def plans_with_intervals_from(programs):
        monkeypatch.setattr(gumbel, "FP64_INTERVALS_MIN_PROGRAMS", programs)
        gumbel.plan_gumbel_sample.cache_clear()
        for cache in (_execute._PLANS, _execute._LAUNCHERS, _execute._RECIPES, _execute._REPLAYS, _execute._LAST):
            cache.clear()

    plans_with_intervals_from(0)
    intervals = torch_backend.gumbel_sample(logits, seeds, positions, temperatures, fp64=True).cpu().numpy()
    from_jax = np.asarray(jax.jit(lambda *a: jsample.gumbel_sample(*a, fp64=True))(
        *(jnp.from_dlpack(t) for t in (logits, seeds, positions, temperatures))))
    plans_with_intervals_from(2**62)
    shortlists = torch_backend.gumbel_sample(logits, seeds, positions, temperatures, fp64=True).cpu().numpy()
    plans_with_intervals_from(gumbel.FP64_INTERVALS_MIN_PROGRAMS)
    np.testing.assert_array_equal(intervals, shortlists)
    np.testing.assert_array_equal(intervals, from_jax)
    rows = np.arange(0, batch, 17)
    expected = gumbel_sample_reference(logits[rows].cpu().numpy(), seeds[rows].cpu().numpy(),
                                       positions[rows].cpu().numpy(), temperatures[rows].cpu().numpy(), fp64=True)
    np.testing.assert_array_equal(intervals[rows], expected)
    # the premise: most winners are extreme columns (uniform below 2**-17), in a block of their own kind
    from jsample.reference import stream_uniforms

    u = stream_uniforms(seeds[rows].cpu().numpy(), positions[rows].cpu().numpy(), 0, vocab, fp64=True)
    assert (u[np.arange(len(rows)), expected] < 2.0**-17).mean() > 0.3
