"""precompile on a real GPU: after it, calls at any batch size within its range compile nothing, in torch
and in JAX (Triton's post-compile hook counts torch's compilations; jax-triton's kernel cache JAX's).
Skipped without a CUDA GPU (see conftest)."""

import pytest
from conftest import ON_GPU

pytestmark = pytest.mark.gpu

if ON_GPU:
    import jax
    import jax.numpy as jnp
    import torch
    import triton

    import jsample
    import torch_backend

V = 32000
BATCHES = (1, 2, 3, 5, 8, 13, 21, 34, 55, 64, 100, 128)


@pytest.fixture
def compile_count():
    found = []
    previous = triton.knobs.runtime.jit_post_compile_hook
    triton.knobs.runtime.jit_post_compile_hook = lambda *args, **kwargs: found.append(1)
    yield found
    triton.knobs.runtime.jit_post_compile_hook = previous


def test_torch_after_precompile_no_batch_size_compiles(compile_count):
    report = torch_backend.precompile([V], ["bfloat16"], ops=["gumbel_sample", "top_k_top_p_sample"],
                                      flags=[dict(top_k=True, top_p=True)], max_batch=128)
    assert report.compiled and report.kernels >= 3
    compile_count.clear()  # (whether precompile compiled here depends on what this process ran before)
    for b in BATCHES:
        logits = torch.randn(b, V, device="cuda").to(torch.bfloat16)
        seeds = torch.arange(b, device="cuda", dtype=torch.int64)
        positions = torch.arange(b, device="cuda", dtype=torch.int64)
        temperature = torch.full((b,), 0.8, device="cuda")
        torch_backend.gumbel_sample(logits, seeds, positions, temperature)
        torch_backend.top_k_top_p_sample(logits, seeds, positions, temperature,
                                         top_k=torch.full((b,), 50, device="cuda", dtype=torch.int64),
                                         top_p=torch.full((b,), 0.9, device="cuda"))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            torch_backend.gumbel_sample(logits, seeds, positions, temperature)
        graph.replay()
    torch.cuda.synchronize()
    assert compile_count == [], f"{len(compile_count)} compilations after precompile"


def test_jax_after_precompile_no_batch_size_compiles():
    from jsample._jax._launch import _import_jax_triton

    _import_jax_triton()  # the one import of jax_triton, which restores TRITON_CACHE_DIR (jax-triton 0.3.1 clears it)
    from jax_triton import triton_lib

    if not hasattr(triton_lib, "_COMPILED_KERNEL_CACHE"):
        pytest.skip("this jax-triton keeps no kernel cache to count (0.3.1 does)")
    report = jsample.precompile([V], ["bfloat16"], ops=["top_k_top_p_sample"], flags=[dict(top_k=True, top_p=True)],
                                max_batch=128)
    assert report.compiled
    cached = len(triton_lib._COMPILED_KERNEL_CACHE)
    assert cached >= report.kernels
    fn = jax.jit(lambda x, s, p, t, k, q: jsample.top_k_top_p_sample(x, s, p, t, top_k=k, top_p=q))
    for b in BATCHES:
        wide = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
        fn(jnp.zeros((b, V), jnp.bfloat16), jnp.arange(b, dtype=wide), jnp.arange(b, dtype=wide),
           jnp.full((b,), 0.8, jnp.float32), jnp.full((b,), 50, wide), jnp.full((b,), 0.9, jnp.float32)
           ).block_until_ready()
    assert len(triton_lib._COMPILED_KERNEL_CACHE) == cached, "jax-triton compiled kernels after precompile"


def test_torch_first_call_compiles_its_plan_side_by_side(compile_count, monkeypatch):
    """A plan's first run compiles its kernels in threads before launching them (torch_backend._execute's
    _compile_ahead, through Triton's warmup): every kernel variant the plan lacks is compiled once, by a
    warmup, most of them off the caller's thread, and its launches compile nothing more; the tokens are
    those of a run that compiled at its launches, on this thread (COMPILE_THREADS = 0: no compile-ahead),
    on the same logits in rows of another stride."""
    import threading

    from jsample import kernels
    from jsample.kernels.compiles import compile_key
    from torch_backend import _execute

    compiles = []  # (kernel, key, a warmup's, thread)

    def hook(*args, **kwargs):
        fn = kwargs.get("fn")
        compiles.append((getattr(fn, "name", fn), kwargs.get("key"), kwargs.get("is_manual_warmup"),
                         threading.get_ident()))

    triton.knobs.runtime.jit_post_compile_hook = hook
    b, v = 48, 20011  # a vocabulary no other test compiles for: the plan's row kernels are new here
    logits = torch.randn(b, v, device="cuda").to(torch.bfloat16)
    seeds = torch.arange(b, device="cuda", dtype=torch.int64)
    temperature = torch.full((b,), 0.8, device="cuda")
    filters = dict(top_k=torch.full((b,), 40, device="cuda", dtype=torch.int64),
                   top_p=torch.full((b,), 0.9, device="cuda"))
    plan = kernels.plan_top_k_top_p_sample(kernels.ArgSpec.contiguous((b, v), "bfloat16"),
                                           kernels.ArgSpec.contiguous((b,), "int64"), _execute.target(logits.device),
                                           has_top_k=True, has_top_p=True, has_min_p=False, fp64=False)
    variants = {compile_key(step, "torch") for step in plan.launches}
    assert len(variants) >= 6, plan.variant
    tokens = torch_backend.top_k_top_p_sample(logits, seeds, seeds, temperature, **filters)
    torch.cuda.synchronize()
    assert 4 <= len(compiles) <= len(variants), compiles  # (kernels other tests compiled are not compiled again)
    assert len({(name, key) for name, key, _, _ in compiles}) == len(compiles)  # each once
    assert all(warmup for _, _, warmup, _ in compiles), compiles  # none at a launch
    assert sum(thread != threading.get_ident() for _, _, _, thread in compiles) >= len(compiles) - 1
    compiles.clear()
    # the same logits in rows 20016 apart (16-byte aligned rows: other kernel variants), compiled at the launches
    monkeypatch.setattr(_execute, "COMPILE_THREADS", 0)
    wide = torch.zeros(b, v + 5, device="cuda", dtype=torch.bfloat16)
    wide[:, :v] = logits
    again = torch_backend.top_k_top_p_sample(wide[:, :v], seeds, seeds, temperature, **filters)
    torch.cuda.synchronize()
    assert compiles and {(warmup, thread) for _, _, warmup, thread in compiles} == {(False, threading.get_ident())}
    assert torch.equal(again, tokens)
