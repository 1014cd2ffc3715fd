"""`precompile` for JAX: compile, before the first real call, every Triton kernel a range of batch sizes reaches."""

import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp

from jsample import kernels
from jsample._jax import _execute as execute
from jsample._jax._launch import on_gpu
from jsample.kernels.warmup import PrecompileReport, _plan, warmup_cases


def precompile(vocab_sizes, dtypes=("bfloat16",), *, ops=None, flags=None, max_batch=512, num_speculative_tokens=(4,),
               workers=1) -> PrecompileReport:
    """Compiles every Triton kernel that calls of `ops` at batch sizes 1..max_batch can reach, in parallel.

    Under `jax.jit` each new batch shape is a new trace and XLA compilation of the caller's function
    (JAX's cost, tens of milliseconds); the Triton kernels inside it are the expensive part, and none
    of them follows the batch beyond two tilings (tests/test_compiles.py). This lowers each op once per
    tiling, so that a bucketed jit (batches padded to 1, 2, 4, ..., 512) compiles no Triton kernel at any
    bucket. jax-triton keeps compiled kernels for the
    process.

    The calls use the argument types of a typical call: seeds and positions int64 (int32 with x64 off),
    temperature float32 [B], top_k int64 (int32 with x64 off), top_p and min_p float32 [B], draft tokens
    and counts int32.

    Args: as `torch_backend.precompile` (without `capture` and `device`: JAX's default GPU), but `workers`
        are threads of this process (jax-triton keeps its kernels in the process), 1 by default: one
        lowering after another (a torch precompile in threads saw Triton's cache keys differ between
        threads and processes; benchmarks/lab/results/diag_second_process*.txt).

    Returns:
        A PrecompileReport. On the CPU (the Triton interpreter) nothing is compiled: the report lists
        the calls a GPU would lower.
    """
    start = time.perf_counter()
    dtypes = tuple(jnp.dtype(d).name for d in dtypes)
    compiled = on_gpu() and not kernels.INTERPRETER
    target = execute.target() if compiled else execute.compiled_target(132)
    cases = warmup_cases(vocab_sizes, dtypes, ops, flags, max_batch, num_speculative_tokens, [target], "jax")
    if compiled:
        def lower(case):
            flags_ = dict(case.flags)
            plan = _plan(case.op, case.batch, case.vocab, case.dtype, case.k, flags_, target)
            jax.jit(lambda inputs: execute.run(plan, inputs)).lower(_input_shapes(case, flags_)).compile()

        for kernel in {step.kernel for case in cases
                       for step in _plan(case.op, case.batch, case.vocab, case.dtype, case.k, dict(case.flags),
                                         target).launches}:
            kernel.cache_key  # noqa: B018  (Triton's source hash, computed once, not by several threads at once)
        with ThreadPoolExecutor(max(1, workers)) as pool:
            list(pool.map(lower, cases))
    keys = set().union(*(case.keys for case in cases)) if cases else set()
    return PrecompileReport(cases, len(keys), time.perf_counter() - start, compiled)


def _input_shapes(case, flags) -> dict:
    b, v, k = case.batch, case.vocab, case.k
    wide = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    s = jax.ShapeDtypeStruct
    requests = dict(seeds=s((b,), wide), positions=s((b,), wide), temperature=s((b,), jnp.float32))
    if flags.get("num_valid"):
        requests["row_valid"] = s((b,), jnp.int32)
    if case.op in ("gumbel_sample", "top_k_top_p_sample"):
        inputs = dict(requests, logits=s((b, v), jnp.dtype(case.dtype)))
        for name, dtype in (("top_k", wide), ("top_p", jnp.float32), ("min_p", jnp.float32)):
            if flags.get(name):
                inputs[name] = s((b,), dtype)
        return inputs
    drafts = dict(draft_tokens=s((b, k), jnp.int32), num_draft_tokens=s((b,), jnp.int32))
    if case.op == "rejection_sample":
        inputs = dict(requests, **drafts, target_logits=s((b, k + 1, v), jnp.dtype(case.dtype)))
        if flags.get("draft_logits"):
            inputs["draft_logits"] = s((b, k, v), jnp.float32)
        return inputs
    return dict(drafts, **{name: requests[name] for name in ("seeds", "positions", "row_valid") if name in requests},
                target_tokens=s((b, k + 1), jnp.int32),
                conditional_rates=s((b, k) if flags.get("batched_rates") else (k,), jnp.float32))
