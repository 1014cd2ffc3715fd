"""The JAX executor: runs any launch plan (jsample.kernels.plan) on JAX arrays, under jax.jit or not.

Each launch becomes one jax-triton call on a GPU (one FFI call into the Triton interpreter on
the CPU: `_launch.launch`, `_host_call`); a launch's outputs are new arrays bound to their buffer names, so a
buffer written by several launches is a new value each time. A buffer that no launch writes is a
constant array (zeros: a stand-in for an empty input, never read; or its `value`).
"""

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp

from jsample import kernels
from jsample._jax import _launch
from jsample._jax._launch import launch
from jsample.kernels.compiles import compile_threads
from jsample.kernels.plan import ArgSpec, Plan, ShardedPlan, Target, resident_programs, run_rounds
from jsample.validation import check_vocab_parallel

# jax-triton cannot chain launches (no PDL); counters buffers are zeroed outputs (a memset each call,
# cheaper than the launch a one-launch plan saves); resident_programs -1: the GPU's SM count, looked up
# at the first call (target()); tests replace TARGET to run other tilings
TARGET = Target(interpreter=kernels.INTERPRETER, large_programs=kernels.INTERPRETER, pdl=False, launch_bound=True,
                arrival_counters=True, resident_programs=0 if kernels.INTERPRETER else -1)


def target() -> Target:
    """TARGET, with resident_programs from the default GPU's SM count (0 if JAX does not say it)."""
    global TARGET
    if TARGET.resident_programs == -1:
        device = jax.devices()[0]
        count = getattr(device, "core_count", 0) if device.platform == "gpu" else 0
        TARGET = dataclasses.replace(TARGET, resident_programs=resident_programs(int(count or 0)))
    return TARGET


def compiled_target(sm_count: int) -> Target:
    """TARGET on a GPU with `sm_count` SMs, compiled (what the CPU tests plan for, to count compilations)."""
    return dataclasses.replace(TARGET, interpreter=False, large_programs=False,
                               resident_programs=resident_programs(sm_count))


def arg_spec(array) -> ArgSpec:
    """The plan's view of an array: JAX arrays are contiguous."""
    return ArgSpec.contiguous(array.shape, jnp.dtype(array.dtype).name)


def run(plan: Plan, inputs: dict) -> tuple:
    """The plan's outputs, computed from `inputs` (name -> array)."""
    env = dict(inputs)
    shapes = {b.name: jax.ShapeDtypeStruct(b.shape, jnp.dtype(b.dtype)) for b in plan.buffers}
    written = {name for step in plan.launches for name in step.outputs}
    for buffer in plan.buffers:
        if buffer.name not in written:
            env[buffer.name] = jnp.full(buffer.shape, buffer.value or 0, jnp.dtype(buffer.dtype))
    _lower_ahead(plan, env, shapes)
    for step in plan.launches:
        results = launch(step.kernel, *_step_args(step, env), grid=step.grid, **_step_options(plan, step, shapes))
        env.update(zip(step.outputs, results))
    return tuple(env[name] for name in plan.outputs)


def _step_args(step, env) -> list:
    """A launch's arguments: its inputs' and buffers' arrays (by name, from `env`) and its integers."""
    return [env[a] if isinstance(a, str) else a for a in step.args]


def _step_options(plan: Plan, step, shapes: dict) -> dict:
    """_launch.launch's keywords for a launch of `plan`: its outputs (zeroed ones named), warps, options,
    constexprs."""
    return dict(out_shapes=[shapes[name] for name in step.outputs],
                zeroed_outputs=tuple(i for i, name in enumerate(step.outputs)
                                     if plan.buffer(name).zeroed or plan.buffer(name).counters),
                num_warps=step.num_warps, num_stages=step.num_stages, enable_fp_fusion=step.enable_fp_fusion,
                **dict(step.constexprs))


# threads lowering a plan's launches ahead of its first trace (JSAMPLE_COMPILE_THREADS, as torch's compile-ahead;
# 0 or 1: none, each kernel compiled as the plan's lowering reaches it)
COMPILE_THREADS = compile_threads()
_LOWERED_AHEAD = set()  # (kernel, constexprs, options, argument facts) lowered by _lower_ahead
_LOCK = threading.Lock()


def _lower_ahead(plan: Plan, env: dict, shapes: dict) -> None:
    """On a GPU, before a plan's launches are traced: each distinct launch not yet lowered in this process is
    lowered alone (jax.jit(...).lower of that one launch, public API), side by side in threads. jax-triton
    compiles a kernel where it lowers a call to it, one call after another, and keeps the kernels it compiled
    for the process, so the plan's own lowering then finds them compiled (issue 39: a filtered plan's dozen
    kernels). The compilers' Python holds the GIL; the threads overlap their native passes. Nothing here
    decides anything: a launch that fails to lower here is left to the plan's, which raises."""
    if COMPILE_THREADS < 2 or len(plan.launches) < 2 or not _launch.on_gpu():
        return
    pending = {}
    known = dict(shapes, **env)  # (what earlier launches write: its shape and dtype)
    for step in plan.launches:
        args = _step_args(step, known)
        # (what jax-triton compiles a kernel by: its arrays' dtypes, not their shapes, and its integers' values; a
        # new batch size lowers nothing ahead)
        facts = tuple(jnp.dtype(a.dtype).name if hasattr(a, "dtype") else (type(a), a) for a in args)
        key = (step.kernel, step.constexprs, step.num_warps, step.num_stages, step.enable_fp_fusion, facts,
               tuple(jnp.dtype(shapes[name].dtype).name for name in step.outputs))
        if key not in _LOWERED_AHEAD:
            pending.setdefault(key, (step, args))
    if len(pending) < 2:
        return

    def lower(item):
        key, (step, args) = item
        arrays = [i for i, a in enumerate(args) if not isinstance(a, int)]

        def one_launch(*values):
            full = list(args)
            for i, value in zip(arrays, values):
                full[i] = value
            return launch(step.kernel, *full, grid=step.grid, **_step_options(plan, step, shapes))

        try:
            jax.jit(one_launch).lower(*[jax.ShapeDtypeStruct(args[i].shape, args[i].dtype) for i in arrays])
        except Exception:  # noqa: BLE001 (the plan's own lowering of it raises)
            return None
        return key

    with ThreadPoolExecutor(min(COMPILE_THREADS, len(pending))) as pool:
        lowered = [key for key in pool.map(lower, pending.items()) if key is not None]
    with _LOCK:
        if len(_LOWERED_AHEAD) > 4096:
            _LOWERED_AHEAD.clear()
        _LOWERED_AHEAD.update(lowered)


def run_sharded(sharded: ShardedPlan, inputs: dict, axis) -> tuple:
    """The outputs of a vocab-parallel op's rounds on this device's shard (plan.run_rounds), each round's record
    all-gathered over mesh axis `axis` (inside shard_map or a partitioning rule's per-device function)."""
    return run_rounds(sharded.rounds, run, lambda record: jax.lax.all_gather(record, axis), inputs)


def axis_shards(op: str, axis, logits_shape, rows: bool = False) -> int:
    """How many devices mesh axis `axis` holds (inside shard_map), this device's shard `logits_shape` [B, V / n]
    ([B, K+1, V / n] with `rows`) checked (check_vocab_parallel: equal shards in axis order) as every
    vocab-parallel op checks it."""
    shards = int(jax.lax.axis_size(axis) if hasattr(jax.lax, "axis_size") else jax.lax.psum(1, axis))
    check_vocab_parallel(op, "vocab_axis", logits_shape, [i * logits_shape[-1] for i in range(shards)], rows)
    return shards


def shard_start(axis, shards: int, width: int) -> tuple:
    """(this device's first global column as a [1] int32 array, the largest power of two dividing every shard's
    first column) for equal shards of `width` columns over mesh axis `axis`."""
    start = (jax.lax.axis_index(axis) * width).astype(jnp.int32).reshape(1)
    return start, kernels.start_alignment([i * width for i in range(shards)])
