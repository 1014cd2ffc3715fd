"""The JAX executor: runs any launch plan (jsample.kernels.plan) on JAX arrays, under jax.jit or not.

Each launch becomes one jax-triton call on a GPU (one FFI call into the Triton interpreter on
the CPU: `_launch.launch`, `_host_call`); a launch's outputs are new arrays bound to their buffer names, so a
buffer written by several launches is a new value each time. A buffer that no launch writes is a
constant zero array (a stand-in for an empty input, never read).
"""

import dataclasses

import jax
import jax.numpy as jnp

from jsample import kernels
from jsample._jax._launch import launch
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
            env[buffer.name] = jnp.zeros(buffer.shape, jnp.dtype(buffer.dtype))
    for step in plan.launches:
        results = launch(
            step.kernel, *[env[a] if isinstance(a, str) else a for a in step.args], grid=step.grid,
            out_shapes=[shapes[name] for name in step.outputs],
            zeroed_outputs=tuple(i for i, name in enumerate(step.outputs)
                                 if plan.buffer(name).zeroed or plan.buffer(name).counters),
            num_warps=step.num_warps, num_stages=step.num_stages, enable_fp_fusion=step.enable_fp_fusion,
            **dict(step.constexprs))
        env.update(zip(step.outputs, results))
    return tuple(env[name] for name in plan.outputs)


def run_sharded(sharded: ShardedPlan, inputs: dict, axis) -> tuple:
    """The outputs of a vocab-parallel op's rounds on this device's shard (plan.run_rounds), each round's record
    all-gathered over mesh axis `axis` (inside shard_map or a partitioning rule's per-device function)."""
    return run_rounds(sharded.rounds, run, lambda record: jax.lax.all_gather(record, axis), inputs)


def axis_shards(op: str, axis, logits_shape, return_logprobs) -> int:
    """How many devices mesh axis `axis` holds (inside shard_map), this device's shard `logits_shape` [B, V / n]
    checked (check_vocab_parallel: equal shards in axis order) as every vocab-parallel op checks it."""
    shards = int(jax.lax.axis_size(axis) if hasattr(jax.lax, "axis_size") else jax.lax.psum(1, axis))
    check_vocab_parallel(op, "vocab_axis", logits_shape, return_logprobs,
                         [i * logits_shape[1] for i in range(shards)])
    return shards


def shard_start(axis, shards: int, width: int) -> tuple:
    """(this device's first global column as a [1] int32 array, the largest power of two dividing every shard's
    first column) for equal shards of `width` columns over mesh axis `axis`."""
    start = (jax.lax.axis_index(axis) * width).astype(jnp.int32).reshape(1)
    return start, kernels.start_alignment([i * width for i in range(shards)])
