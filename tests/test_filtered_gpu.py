"""top_k_top_p_sample on a real GPU: the benchmark's size
with torch and JAX in one process. Skipped without a CUDA GPU (see conftest)."""

import numpy as np
import pytest
from conftest import ON_GPU, set_filtered

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


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("batch", [1, 3])
def test_filtered_gpu_one_launch_lists_give_the_searches_tokens(batch, dtype):
    """The one-launch plan (B = 1 and 3 at V = 151936: dozens of programs a row, meeting at barriers)
    takes top-k's threshold, and top-p's after it, from the row's candidate list where k <=
    SHORT_TOP_K_LIST and it fits (searched, not sorted), and searches the row where it overflows (one
    block holds the top) or has no bound (k above the blocks, all logits tied). Its tokens equal the same plan's without lists and the launches'
    plan's, in both frontends, and the NumPy reference's."""
    import dataclasses
    import functools

    import ml_dtypes
    from conftest import both_frontends, run_torch
    from test_filtered import assert_tokens_match_reference

    from jsample import kernels
    from jsample.kernels import filtered
    from torch_backend import _execute

    rng = np.random.default_rng(batch)
    vocab = 151936
    rows = 4 * batch  # the calls take `batch` rows of these at a time
    logits = (rng.standard_normal((rows, vocab)) * 3).astype(np.float32)
    logits[1] = np.round(logits[1] * 2) / 2  # ties, at the threshold too: longer lists
    logits[2, 1000:6000] += 8.0  # one region holds the top: the list overflows
    logits[3] = 1.0 if batch == 1 else logits[3]  # all tied: no bound
    seeds = rng.integers(-(2**62), 2**62, size=rows)
    positions = rng.integers(0, 2**40, size=rows)
    temperature = rng.choice(np.float32([0.6, 1.0, 1.5]), size=rows)
    top_k = rng.choice(np.int32([1, 5, 20, 30, 2000]), size=rows).astype(np.int32)
    top_k[:4] = [30, 20, 20, 5]
    top_p = rng.choice(np.float32([0.5, 0.9, 1.0]), size=rows).astype(np.float32)
    min_p = rng.choice(np.float32([0.0, 0.02]), size=rows).astype(np.float32)
    logits = logits.astype(getattr(ml_dtypes, dtype, dtype))
    spec = kernels.ArgSpec.contiguous((batch, vocab), dtype)
    plan = kernels.plan_top_k_top_p_sample(spec, kernels.ArgSpec.contiguous((batch,), "int64"),
                                           _execute.target(torch.device("cuda")), has_top_k=True, has_top_p=True,
                                           has_min_p=True, fp64=False)
    assert plan.variant == "one launch" and dict(plan.launches[0].constexprs)["LIST"] == filtered.SHORT_TOP_K_LIST
    assert plan.launches[0].grid[1] >= 16, plan.launches[0].grid  # programs a row

    def call(run, lists=True, launches_plan=False):
        with pytest.MonkeyPatch.context() as m:
            if not lists:
                set_filtered(m, "TOP_K_LIST", 0)
            if launches_plan:  # no program may wait for another
                target = _execute.target
                m.setattr(_execute, "target", lambda device: dataclasses.replace(target(device), resident_programs=0))
            # a planning function of its own: neither its cache nor the executors' memo holds an older plan
            m.setattr(kernels, "plan_top_k_top_p_sample",
                      functools.partial(filtered.plan_top_k_top_p_sample.__wrapped__))
            return np.concatenate([run(OP, logits[i:i + batch], seeds[i:i + batch], positions[i:i + batch],
                                       temperature[i:i + batch], top_k=top_k[i:i + batch], top_p=top_p[i:i + batch],
                                       min_p=min_p[i:i + batch]) for i in range(0, rows, batch)])

    listed = call(both_frontends)
    np.testing.assert_array_equal(call(run_torch, lists=False), listed)
    np.testing.assert_array_equal(call(run_torch, launches_plan=True), listed)
    assert_tokens_match_reference(listed, logits, seeds, positions, temperature, top_k, top_p, min_p)


OP = "top_k_top_p_sample"


if ON_GPU:
    import triton
    import triton.language as tl

    from jsample.kernels import filtered

    @triton.jit
    def _masses_kernel(x_ptr, temperature_ptr, x_max_ptr, out_ptr, n, KEY_SHIFT: tl.constexpr,
                       FAST_MATH: tl.constexpr, BLOCK: tl.constexpr):
        """Row r of out: _fixed_point_mass of every x with setting r's temperature and largest logit."""
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        r = tl.program_id(1)
        key_max = filtered._key(tl.load(x_max_ptr + r), KEY_SHIFT)
        mass = filtered._fixed_point_mass(tl.load(x_ptr + i, mask=i < n), tl.load(temperature_ptr + r), key_max,
                                          KEY_SHIFT, False, FAST_MATH)
        tl.store(out_ptr + r * n + i, mass, mask=i < n)


@pytest.mark.parametrize("key_shift", [16, 0])
def test_fast_math_masses_equal_the_exact_exponentials_masses(key_shift):
    """On a GPU every top-p mass takes ex2.approx with subnormal results flushed (FAST_MATH); that must not
    change one mass: floor(e * 2**24) is 0 for every e < 2**-126. Every bfloat16 value (and, for float32
    keys, values between them), with infinities and NaNs, at temperatures and largest logits that put
    the exponent on both sides of the subnormal boundary and of the mass-1 boundary (e = 2**-24), is
    compared bit for bit with tl.exp's masses."""
    bf16 = torch.arange(-(2**15), 2**15, device="cuda", dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    x = bf16.float()
    if key_shift == 0:  # float32 keys: also values no bfloat16 has
        x = torch.cat([x, x * (1 + 2.0**-10), x * (1 - 2.0**-20)])
    temperatures, x_maxes = zip(*[(t, m) for t in (1e-5, 0.003, 0.05, 0.8, 1.0, 3.0, 1e4)
                                  for m in (0.0, -5.0, 10.0, 3.0e38)])
    temperature = torch.tensor(temperatures, device="cuda", dtype=torch.float32)
    x_max = torch.tensor(x_maxes, device="cuda", dtype=torch.float32).bfloat16().float()
    masses = {}
    for fast_math in (False, True):
        out = torch.empty(len(temperatures), x.numel(), device="cuda", dtype=torch.int32)
        _masses_kernel[(triton.cdiv(x.numel(), 1024), len(temperatures))](
            x, temperature, x_max, out, x.numel(), KEY_SHIFT=key_shift, FAST_MATH=fast_math, BLOCK=1024)
        masses[fast_math] = out.cpu().numpy()
    np.testing.assert_array_equal(masses[True], masses[False])
    # the grid reaches both sides of each boundary: masses 0 and 1, subnormal and normal exponentials
    below_x_max = (x[None, :].cpu() <= x_max[:, None].cpu()).numpy()
    assert ((masses[False] == 0) & below_x_max).any() and ((masses[False] == 1) & below_x_max).any()
    assert (masses[False] == 2**24).any()
    inverse_t = (1 / temperature)[:, None]
    exponent = (x[None, :] * inverse_t - x_max[:, None] * inverse_t) * 1.4426950408889634
    assert ((exponent < -126) & (exponent > -149)).any()  # where tl.exp's result is subnormal
