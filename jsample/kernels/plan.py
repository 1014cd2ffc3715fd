"""Launch plans: what an op launches, as a framework-free value that both frontends' executors run.

Each op's planning function (`plan_<op>` in jsample/kernels/<op>.py) takes the specs of its array
arguments (shape, dtype, strides), its flags and a `Target` (what the executor can do), and returns
a `Plan`: the scratch and output buffers, and the launches in order, each with its kernel, grid,
positional arguments (names of inputs or buffers, or integers), output buffers, constexprs and
compile options. Every launch decision is made there, once; an executor only allocates, binds names
to arrays and launches (torch_backend/_execute.py, jsample/_jax/_execute.py). Identical plans are what
make identical tokens possible, and the tests run every plan an input can get.

Buffers follow value semantics in both executors: a launch writes every element of its outputs that a
later launch (or the plan's result) reads, or the buffer is `zeroed` and starts at zero; a buffer name
written by several launches (ping-pong state) is, in JAX, a new, uninitialised value each time and, in
torch, the same memory, so a launch may not leave an element for an earlier launch's value to show
through (filter_compact_step_kernel writes the state of the rows it searches, and no later launch reads
another row's). A launch that names a buffer both as an argument and as an output gets, in torch, the
same memory for both (in JAX, its input and a new array): every thread's read of an element must come
before any thread's write of it (filter_decide_kernel reads its counters, then a barrier, then resets
them). A buffer no launch writes is a constant zero array (e.g. a stand-in for an empty input, never
read), or its `value` everywhere. A plan names its results in `outputs`; further outputs (e.g.
log-probabilities) or further kinds of steps (e.g. a collective over a vocabulary-sharded axis) extend
`Plan` without changing the executors' contract.
"""

import dataclasses
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ArgSpec:
    """What a plan needs of an array argument. Strides are in elements; a frontend that passes
    contiguous arrays (JAX) gives contiguous strides."""

    shape: tuple
    dtype: str  # numpy-style name: "float32", "bfloat16", "int64", "uint32", ...
    strides: tuple

    @staticmethod
    def contiguous(shape, dtype: str) -> "ArgSpec":
        strides, step = [], 1
        for size in reversed(tuple(shape)):
            strides.append(step)
            step *= max(int(size), 1)
        return ArgSpec(tuple(int(s) for s in shape), dtype, tuple(reversed(strides)))


@dataclass(frozen=True)
class Target:
    """What the executor can do, as far as plans care.

    interpreter: the kernels run through the Triton interpreter (no inline PTX: FAST_MATH off).
    large_programs: every program costs host time (the interpreter runs them one after another, each
        operation a NumPy call): plans take few, large programs and more launches, wherever tokens
        do not depend on the tiling (executors set it with `interpreter`; tests turn it off to run
        the GPU's tilings through the interpreter).
    pdl: launches can form a programmatic dependent launch chain (torch on Hopper and newer).
    launch_bound: every launch costs the caller host time that chaining does not hide (JAX through
        jax-triton or host callbacks): plans fuse launches where a fused kernel exists.
    arrival_counters: the executor provides `counters` buffers (zero on entry, left zero by the plan's
        kernels), so that a launch's last program per row can finish the row (torch: kept per thread
        and stream, no memset per call; JAX: zeroed outputs, a memset per call).
    resident_programs: how many programs of one launch the GPU is sure to run at once (its SM count,
        or the process's share of it: `resident_programs()`; one program of a jsample kernel fits on
        any SM), so that a plan may have them wait for each other (a barrier on arrival counters,
        which every executor provides, zeroed where it must); 0: no barrier across programs. The
        interpreter runs programs one after another: barriers only among one program a row there
        (plans decide that from `large_programs`).
    """

    interpreter: bool
    large_programs: bool = False
    pdl: bool = False
    launch_bound: bool = False
    arrival_counters: bool = False
    resident_programs: int = 0


def resident_programs(sm_count: int) -> int:
    """Target.resident_programs for a GPU with `sm_count` SMs: JSAMPLE_RESIDENT_PROGRAMS if set (0 turns
    off every plan whose programs wait for each other), else the SMs this process may use (under MPS,
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of them)."""
    override = os.environ.get("JSAMPLE_RESIDENT_PROGRAMS")
    if override:
        return max(0, int(override))
    share = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    try:
        percent = min(100.0, float(share)) if share else 100.0
    except ValueError:
        percent = 100.0
    return max(0, int(sm_count * percent // 100))


@dataclass(frozen=True)
class Buffer:
    name: str
    shape: tuple
    dtype: str  # "int32", "float32" or "uint8" (row flags); 64-bit values are stored as pairs of 32-bit words
    zeroed: bool = False  # zero before the first launch
    counters: bool = False  # int32 arrival counters: zero on entry, and the kernels leave them zero (Target.arrival_counters)
    # a constant int32 buffer, every element `value`, never written: a number a kernel needs at every batch size
    # without compiling for it (Triton specialises integer arguments, jax-triton compiles per value), e.g. the
    # batch of a launch whose grid does not have it (ROW_SLOTS)
    value: int = None


# Padded plans (row_valid) run their many-program row kernels on at most this many row slots, slot s taking rows s,
# s + slots, ... (a padding row costs a flag load, not programs; full batches read as fast: lab INDEX,
# explore_padding_grids). The kernels take B from the constant buffer num_rows_buffer(B).
PADDED_ROW_SLOTS = 32


def padded_row_slots(batch: int) -> int:
    return min(batch, PADDED_ROW_SLOTS)


def num_rows_buffer(batch: int) -> Buffer:
    return Buffer("num_rows", (1,), "int32", value=batch)


@dataclass(frozen=True)
class Launch:
    kernel: object  # a triton JITFunction (or InterpretedFunction)
    grid: tuple
    args: tuple  # input or buffer names (str) and runtime integers, in the kernel's order
    outputs: tuple  # buffer names, after `args` in the kernel's signature (as jax-triton appends outputs)
    constexprs: tuple  # (name, value) pairs
    num_warps: int
    num_stages: int = 1
    enable_fp_fusion: bool = False  # no FMA contraction: the NumPy reference's rounding
    pdl: bool = False  # launched as a programmatic dependent launch (Target.pdl plans only)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: planning functions cache their plans
class Plan:
    buffers: tuple  # Buffer, for every name a launch writes or reads that is not an input
    launches: tuple  # Launch, in order
    outputs: tuple  # buffer names returned, in order
    variant: str = ""  # a name for tests and benchmarks
    # the same op's plan on the same inputs, with the same outputs and tokens, that an eager call may run while
    # this plan's kernels are not compiled yet (seconds to compile, its few kernels one after another) and
    # compile in the background: the launches' plan of kernels that compile side by side in less time
    # (torch's executor only; JAX compiles at lowering and keeps the plan it lowered)
    while_compiling: "Plan" = None

    def buffer(self, name: str) -> Buffer:
        return next(b for b in self.buffers if b.name == name)


@dataclass(frozen=True, eq=False)
class ShardedPlan:
    """A vocab-parallel op's plans ("rounds"), run in turn on every shard by `run_rounds`: after each round but
    the last, its first output is all-gathered over the shards (stacked on a new leading axis, in shard order)
    and given to every later round as `gathered_<name>`; its other outputs go to the later rounds as
    `<name>_in`. The last round's outputs are the results (every device's are the same)."""

    rounds: tuple
    variant: str = ""


def launch(kernel, grid, args, outputs, *, num_warps, num_stages=1, enable_fp_fusion=False, pdl=False,
           **constexprs) -> Launch:
    """A Launch, constexprs given as keywords."""
    return Launch(kernel, tuple(grid), tuple(args), tuple(outputs), tuple(constexprs.items()), num_warps,
                  num_stages, enable_fp_fusion, pdl)


def run_rounds(rounds: tuple, run_plan, gather, inputs: dict) -> tuple:
    """The outputs of a vocab-parallel op's rounds (e.g. vocab_parallel_filtered.ShardedPlan.rounds), each
    plan run by `run_plan(plan, inputs)` (an executor's run) on this device's shard: after each round but the
    last, its first output is all-gathered over the shards by `gather` (the frontend's collective: [shards,
    ...] in shard order) and given to the later rounds as `gathered_<name>`, its other outputs to the later
    rounds as `<name>_in` (until a round's output of the same name replaces it); the last round's outputs are
    the results."""
    env = dict(inputs)
    outputs = ()
    for i, plan in enumerate(rounds):
        outputs = tuple(run_plan(plan, env))
        if i < len(rounds) - 1:
            env["gathered_" + plan.outputs[0]] = gather(outputs[0])
            env.update((name + "_in", value) for name, value in zip(plan.outputs[1:], outputs[1:]))
    return outputs


def merged_rounds(rounds: tuple, shards: int) -> Plan:
    """A vocab-parallel op's rounds (run_rounds') as one plan: every round's launches in order, every buffer, and
    what the all-gathers (of `shards` shards) and earlier rounds would give as zeroed stand-ins, so
    that one executor pass can compile every kernel the rounds launch (precompile, a first call's compile-ahead);
    its values are not the op's."""
    buffers = {}
    for plan in rounds:
        buffers.update((buffer.name, buffer) for buffer in plan.buffers)
    for plan in rounds[:-1]:
        first = plan.buffer(plan.outputs[0])
        buffers["gathered_" + first.name] = Buffer("gathered_" + first.name, (shards,) + first.shape, first.dtype,
                                                   zeroed=True)
        for name in plan.outputs[1:]:
            buffer = plan.buffer(name)
            buffers[name + "_in"] = Buffer(name + "_in", buffer.shape, buffer.dtype, zeroed=True)
    return Plan(tuple(buffers.values()), tuple(step for plan in rounds for step in plan.launches),
                rounds[-1].outputs, "rounds merged")


def single_shard_plan(sharded: ShardedPlan, prefix: str, renames: dict) -> Plan:
    """A vocab-parallel op's rounds with a single shard (the whole vocabulary, on one device) as one plan: a stack of
    one shard's record holds the record's words, so a later round reads `gathered_<name>` (and `<name>_in`) from
    the earlier round's buffer itself, as run_rounds would give it. Every round's buffers are renamed, round i's
    `prefix + f"{i}_" + name` (a record a later round writes again is another buffer: no launch reads what it
    writes), but the last round's outputs (the plan's); `renames` maps the rounds' input names to the plan's."""
    env = dict(renames)
    buffers, steps = [], []
    for i, plan in enumerate(sharded.rounds):
        last = i == len(sharded.rounds) - 1
        local = {b.name: b.name if last and b.name in plan.outputs else f"{prefix}{i}_{b.name}" for b in plan.buffers}
        buffers += [dataclasses.replace(b, name=local[b.name]) for b in plan.buffers]
        names = {**env, **local}
        steps += [dataclasses.replace(step, args=tuple(names.get(a, a) if isinstance(a, str) else a for a in step.args),
                                      outputs=tuple(local[name] for name in step.outputs)) for step in plan.launches]
        if not last:
            env["gathered_" + plan.outputs[0]] = local[plan.outputs[0]]
            env.update((name + "_in", local[name]) for name in plan.outputs[1:])
    return Plan(tuple(buffers), tuple(steps), sharded.rounds[-1].outputs, sharded.variant + ", one shard")
