"""The torch executor: runs any launch plan (jsample.kernels.plan) on torch tensors.

It binds names to tensors, allocates the plan's buffers on the caller's device and launches every
kernel on the caller's current CUDA stream. Eager calls cost little host time:

* plans are memoised per (planning function, shapes, dtypes, strides, flags, device), and a call whose
  argument facts were seen before, with its tensors used as given, replays its plan (`replay`): no
  validation, conversion or planning again;
* each plan's buffers are worked out once (`_Recipe`);
* after a plan's first run, each launch goes straight to the compiled kernel's launcher (as Triton's
  own launch does, launch hooks included), cached per plan, device and the facts Triton specialises a
  compiled kernel on that the plan does not fix (each input's dtype and 16-byte alignment, or its
  type: a temperature may be a number), instead of through Triton's per-call argument binding;
* the scratch buffers of a call live in one workspace, reused by the next call of the same thread on
  the same stream and device (stream order puts that call's launches after this one's; another
  thread or stream gets a workspace of its own), and allocated per call while a CUDA graph is being
  captured (the graph keeps its own); so are the arrival counters of one-launch plans, which their
  kernels leave at zero.

Outputs are fresh tensors every call. Nothing else is shared between calls but these caches, so
threads and streams may call at once.
"""

import threading

import torch
from triton import knobs
from triton.runtime import driver

from jsample import kernels
from jsample.kernels.plan import ArgSpec, Plan, Target, resident_programs

_DTYPES = {"int32": torch.int32, "float32": torch.float32}
_ALIGN = 256  # bytes between workspace buffers: every buffer 16-byte aligned, as the compiled kernels assume
DIRECT_LAUNCHES = True  # tests turn it off to compare with Triton's own launch path
_TARGETS = {}
_PLANS = {}
_LAUNCHERS = {}  # (plan, device index, facts) -> [(compiled kernel, constexpr tail)]
_WORKSPACES = {}  # (device index, stream, thread) -> uint8 tensor
_COUNTERS = {}  # (device index, stream, thread) -> int32 tensor, all zero between calls
_RECIPES = {}  # plan -> _Recipe
_REPLAYS = {}  # validated call key -> (plan, device, ((input name, argument name or None, constant), ...))
_LOCK = threading.Lock()


def arg_spec(tensor: torch.Tensor) -> ArgSpec:
    return ArgSpec(tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), tuple(tensor.stride()))


def target(device: torch.device) -> Target:
    """What the plans may use on this device: programmatic dependent launch on compiled Hopper or newer;
    arrival counters (one-launch plans) for eager calls, whose host time a launch less saves, but not
    while a CUDA graph is captured: there launches cost no host time, and the one-launch gumbel
    plan's atomics cost 5-11% of device time at small batches (benchmarks/lab/INDEX.md)."""
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    key = (device.type, device.index, capturing)
    found = _TARGETS.get(key)
    if found is None:
        compiled = device.type == "cuda" and not kernels.INTERPRETER
        pdl = compiled and torch.cuda.get_device_capability(device)[0] >= 9
        resident = resident_programs(torch.cuda.get_device_properties(device).multi_processor_count) if compiled else 0
        found = _TARGETS[key] = Target(interpreter=kernels.INTERPRETER, large_programs=kernels.INTERPRETER, pdl=pdl,
                                       launch_bound=False, arrival_counters=not capturing, resident_programs=resident)
    return found


def plan(planner, arrays, device: torch.device, call=None, **flags) -> Plan:
    """planner(*specs of `arrays` (None stays None), target(device), **flags), memoised by `call` (the
    key of the validated call the arrays come from: _launch.validate) or by the arrays' specs."""
    device_target = target(device)
    if call is not None:
        key = (planner, device_target, call)
    else:
        key = (planner, device_target, tuple(None if a is None else (a.shape, a.dtype, a.stride()) for a in arrays),
               tuple(flags.items()))
    found = _PLANS.get(key)
    if found is None:
        found = planner(*(None if a is None else arg_spec(a) for a in arrays), device_target, **flags)
        with _LOCK:
            if len(_PLANS) > 4096:
                _PLANS.clear()
                _LAUNCHERS.clear()
            _PLANS[key] = found
    return found


class _Pointer:
    """A workspace buffer as Triton's launcher sees a tensor: an address and a dtype."""

    __slots__ = ("address", "dtype")

    def __init__(self, address: int, dtype: torch.dtype):
        self.address, self.dtype = address, dtype

    def data_ptr(self) -> int:
        return self.address


def replay(call, arguments: dict, planner):
    """The outputs of an eager call that an earlier call with the same key (_launch.validate: shapes,
    dtypes, strides, devices, numbers, flags), planning function and target ran with its arguments
    unchanged (numbers converted the same way): that plan on these arguments, without the wrapper's
    conversions and planning. None where there is none, or while the call is traced or a CUDA graph
    is captured (another plan)."""
    if call is None:  # traced (torch.compile) or unhashable arguments
        return None
    entry = _REPLAYS.get((call, planner, target))
    if entry is None or torch._C._len_torch_dispatch_stack() > 0 or torch._C._cuda_isCurrentStreamCapturing():
        return None
    found, device, sources = entry
    return run(found, device, {name: arguments[source] if source is not None else constant
                               for name, source, constant in sources})


def run(plan: Plan, device: torch.device, inputs: dict, remember: tuple = None) -> tuple:
    """The plan's outputs, computed from `inputs` (name -> tensor or number, on `device`). With
    `remember` = (validated call key, the user's arguments, planning function), an eager call whose
    tensors reached the plan unchanged is remembered for `replay`."""
    if device.type != "cuda" or not DIRECT_LAUNCHES or not plan.launches or torch._C._cuda_isCurrentStreamCapturing():
        return _run_general(plan, device, inputs)
    if remember is not None and remember[0] is not None:
        _remember(*remember, plan, device, inputs)
    recipe = _RECIPES.get(plan)
    if recipe is None:
        recipe = _Recipe(plan)
        with _LOCK:
            if len(_RECIPES) > 4096:
                _RECIPES.clear()
            _RECIPES[plan] = recipe
    current = torch._C._cuda_getDevice()
    if device.index is not None and device.index != current:
        with torch.cuda.device(device):
            return _run_eager(plan, recipe, device, device.index, inputs)
    return _run_eager(plan, recipe, device, current, inputs)


class _Recipe:
    """What an eager GPU call of a plan needs, worked out once: the buffers made fresh per call (outputs),
    the arrival counters, the workspace layout of the scratch buffers."""

    def __init__(self, plan: Plan):
        self.fresh, self.counters, self.scratch, total = [], [], [], 0
        for buffer in plan.buffers:
            dtype = _DTYPES[buffer.dtype]
            if buffer.counters:
                self.counters.append((buffer.name, buffer.shape[0]))
            elif buffer.name in plan.outputs or buffer.zeroed:
                self.fresh.append((buffer.name, buffer.shape, dtype, buffer.zeroed))
            else:
                self.scratch.append((buffer.name, total, dtype))
                size = 4
                for extent in buffer.shape:
                    size *= extent
                total += -(-size // _ALIGN) * _ALIGN
        self.scratch_bytes = total


def _run_eager(plan: Plan, recipe: _Recipe, device: torch.device, index: int, inputs: dict) -> tuple:
    stream = driver.active.get_current_stream(index)
    place = (index, stream, threading.get_ident())
    env = dict(inputs)
    for name, shape, dtype, zeroed in recipe.fresh:
        env[name] = (torch.zeros if zeroed else torch.empty)(shape, dtype=dtype, device=device)
    for name, count in recipe.counters:
        env[name] = _counters(device, count, place)
    if recipe.scratch:
        workspace = _workspace(device, recipe.scratch_bytes, place)  # held until the launches are enqueued
        base = workspace.data_ptr()
        for name, offset, dtype in recipe.scratch:
            env[name] = _Pointer(base + offset, dtype)
    _launch_all(plan, index, stream, inputs, env)
    return tuple(env[name] for name in plan.outputs)


def _run_general(plan: Plan, device: torch.device, inputs: dict) -> tuple:
    """run() on the CPU (the interpreter), while a CUDA graph is captured, or through Triton's launch
    path (DIRECT_LAUNCHES off): every buffer a tensor of its own, counters zeroed."""
    env = dict(inputs)
    for buffer in plan.buffers:
        env[buffer.name] = (torch.zeros if buffer.zeroed or buffer.counters else torch.empty)(
            buffer.shape, dtype=_DTYPES[buffer.dtype], device=device)
    if device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):
            _launch_through_triton_all(plan, env)
    else:
        _launch_through_triton_all(plan, env)
    return tuple(env[name] for name in plan.outputs)


def _remember(call, arguments: dict, planner, plan: Plan, device: torch.device, inputs: dict) -> None:
    sources = []
    for name, value in inputs.items():
        given = arguments.get(name)
        if value is given:
            sources.append((name, name, None))
        elif isinstance(given, (bool, int, float)):  # in the key: converted the same way every time
            sources.append((name, None, value))
        else:  # a tensor the wrapper converted (a copy, a dtype): only the full path does that
            return
    with _LOCK:
        if len(_REPLAYS) > 4096:
            _REPLAYS.clear()
        _REPLAYS[(call, planner, target)] = (plan, device, tuple(sources))


def _counters(device: torch.device, count: int, place: tuple) -> torch.Tensor:
    """`count` int32 arrival counters at zero, kept per (device, stream, thread) = `place` like the
    workspace: the plans' kernels leave them at zero, and stream order puts the next call after this
    one. (During a capture, or in the interpreter, a call gets zeroed counters of its own.)"""
    counters = _COUNTERS.get(place)
    if counters is None or counters.numel() < count:
        counters = torch.zeros(max(count, 1024), dtype=torch.int32, device=device)
        with _LOCK:
            if len(_COUNTERS) > 256:
                _COUNTERS.clear()
            _COUNTERS[place] = counters
    return counters


def _workspace(device: torch.device, nbytes: int, place: tuple) -> torch.Tensor:
    """At least `nbytes` of scratch for this call (see the module's docstring), kept per `place`. The
    caller holds the tensor until its launches are enqueued."""
    space = _WORKSPACES.get(place)
    if space is None or space.numel() < nbytes:
        # a smaller workspace that calls still in the stream use is freed to torch's stream-ordered allocator
        space = torch.empty(max(nbytes, 1 << 16), dtype=torch.uint8, device=device)
        with _LOCK:
            if len(_WORKSPACES) > 256:  # threads or streams come and go: start over
                _WORKSPACES.clear()
            _WORKSPACES[place] = space
    return space


def _launch_all(plan: Plan, index: int, stream: int, inputs: dict, env: dict) -> None:
    """Every launch of the plan straight to its compiled kernel's launcher (the first run of a plan and
    facts goes through Triton, which compiles)."""
    steps = [([env[a] if isinstance(a, str) else a for a in step.args] + [env[o] for o in step.outputs])
             for step in plan.launches]
    facts = (plan, index, tuple((t.dtype, t.data_ptr() % 16 == 0) if isinstance(t, torch.Tensor) else type(t)
                                for t in inputs.values()))
    compiled = _LAUNCHERS.get(facts)
    if compiled is None:
        compiled = [_compile_and_launch(step, args) for step, args in zip(plan.launches, steps)]
        with _LOCK:
            _LAUNCHERS[facts] = compiled
        return
    enter_hook, exit_hook = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    for step, args, (kernel, constexpr_tail) in zip(plan.launches, steps, compiled):
        grid = step.grid
        full = (*args, *constexpr_tail)
        metadata = kernel.launch_metadata(grid, stream, *full) if enter_hook is not None else None
        kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream,
                   kernel.function, kernel.packed_metadata, metadata, enter_hook, exit_hook, *full)


def _launch_through_triton_all(plan: Plan, env: dict) -> None:
    for step in plan.launches:
        _launch_through_triton(step, [env[a] if isinstance(a, str) else a for a in step.args]
                               + [env[o] for o in step.outputs])


def _launch_through_triton(step, args):
    """Launch through Triton (compiling on first use); returns the compiled kernel (None in the interpreter)."""
    options = dict(num_warps=step.num_warps, num_stages=step.num_stages, enable_fp_fusion=step.enable_fp_fusion)
    if step.pdl:
        options["launch_pdl"] = True
    return step.kernel[step.grid](*args, **dict(step.constexprs), **options)


def _compile_and_launch(step, args):
    """_launch_through_triton, then (compiled kernel, the constexpr values that follow the runtime
    arguments in the kernel's signature): what a direct launch passes."""
    compiled = _launch_through_triton(step, args)
    constexprs = dict(step.constexprs)
    params = step.kernel.params
    runtime = [p for p in params if not p.is_constexpr]
    if len(runtime) != len(args) or any(p.is_constexpr for p in params[:len(args)]):
        raise RuntimeError(f"{step.kernel.fn.__name__}: a plan passes every runtime argument, then constexprs")
    tail = tuple(constexprs[p.name] if p.name in constexprs else p.default for p in params[len(args):])
    return compiled, tail
