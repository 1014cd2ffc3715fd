"""`precompile` for JAX: compile, before the first real call, every Triton kernel a range of batch sizes reaches."""

import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp

from jsample import kernels
from jsample._jax import _execute as execute
from jsample._jax._launch import on_gpu
from jsample.kernels.warmup import PrecompileReport, _plan, input_specs, warmup_cases


def precompile(vocab_sizes, dtypes=("bfloat16",), *, ops=None, flags=None, max_batch=512, num_speculative_tokens=(4,),
               workers=1) -> PrecompileReport:
    """Compiles every Triton kernel that calls of `ops` at batch sizes 1..max_batch can reach.

    Under `jax.jit` each new batch shape is a new trace and XLA compilation of the caller's function
    (JAX's cost, tens of milliseconds); the Triton kernels inside it are the expensive part, and none
    of them follows the batch beyond two tilings (tests/test_compiles.py). This lowers each op once per
    tiling, so that a bucketed jit (batches padded to 1, 2, 4, ..., 512) compiles no Triton kernel at any
    bucket. jax-triton keeps compiled kernels for the process.

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
            plan = _plan(case.op, case.batch, case.vocab, case.dtype, case.k, dict(case.flags), target)
            jax.jit(lambda inputs: execute.run(plan, inputs)).lower(_input_shapes(case)).compile()

        with ThreadPoolExecutor(max(1, workers)) as pool:
            list(pool.map(lower, cases))
    keys = set().union(*(case.keys for case in cases)) if cases else set()
    return PrecompileReport(cases, len(keys), time.perf_counter() - start, compiled)


def _input_shapes(case) -> dict:
    """ShapeDtypeStructs of a call's inputs (jsample.kernels.warmup.input_specs; 64-bit integers with x64 only)."""
    wide = "int64" if jax.config.jax_enable_x64 else "int32"
    return {name: jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))
            for name, (shape, dtype) in input_specs(case, wide).items()}
