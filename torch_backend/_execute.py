"""The torch executor: runs any launch plan (jsample.kernels.plan) on torch tensors.

It binds names to tensors, allocates the plan's buffers on the caller's device and launches every
kernel on the caller's current CUDA stream. Eager calls cost little host time:

* plans are memoised per (planning function, shapes, dtypes, strides, flags, device), and a call whose
  argument facts were seen before, with its tensors used as given, replays its plan (`replay`): no
  validation, conversion or planning again; an op's latest replay is recognised by a C++ check of
  the tensors (`_Match`) rather than by building the call's key;
* a replay on 16-byte aligned inputs passes the kernels' pointers as integers to the compiled
  launchers (`_launch_direct`), with the plan's argument lists worked out once;
* each plan's buffers are worked out once (`_Recipe`);
* after a plan's first run, each launch goes straight to the compiled kernel's launcher (as Triton's
  own launch does, launch hooks included), cached per plan, device and the facts Triton specialises a
  compiled kernel on that the plan does not fix (each input's dtype and 16-byte alignment, or its
  type: a temperature may be a number), instead of through Triton's per-call argument binding; a
  replay calls the launcher's C entry point itself with what Triton's Python launcher would pass it,
  read once from a dry run of that launcher (`_entry_point`), where that run shows nothing per call
  but the grid, stream and arguments;
* a replay allocates its outputs with `torch.empty_like` of a one-element template expanded to the
  output's shape (half `torch.empty`'s host time with a shape, dtype and device to parse): fresh
  contiguous tensors, never shared;
* a plan's first run on a device compiles its kernels side by side (`_compile_ahead`: Triton's public
  `warmup` in threads, which overlap the compilers' native passes, ptxas and the launchers' builds; their
  Python holds the GIL): the launches' plan of top_k_top_p_sample, a dozen kernels, 13.5 -> 7 s a first
  call on an H200's host (issue 39; benchmarks/lab/INDEX.md);
* a plan that names a stand-in (Plan.while_compiling: top_k_top_p_sample's one-launch plan, seconds to compile) runs
  it at eager calls until its own kernels, compiled on a thread behind it, are ready (torch_backend/_compile_behind.py;
  a CUDA-graph capture records the plan itself, waiting for such a compile rather than doing it again);
* the scratch buffers of a call live in one workspace, reused by the next call of the same thread on
  the same stream and device (stream order puts that call's launches after this one's; another
  thread or stream gets a workspace of its own), and allocated per call while a CUDA graph is being
  captured (the graph keeps its own); so are the arrival counters of one-launch plans, which their
  kernels leave at zero.

Outputs are fresh tensors every call. Nothing else is shared between calls but these caches, so
threads and streams may call at once.
"""

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter

import torch
from triton import knobs
from triton.runtime import driver

from jsample import kernels
from jsample.kernels.compiles import compile_threads
from jsample.kernels.plan import ArgSpec, Plan, Target, merged_rounds, resident_programs
from torch_backend._launch import call_key, kept_tensor

from torch_backend import _compile_behind, _fast_path, _triton_setup
from torch_backend._fast_path import entry_point as _entry_point

_TensorGuards = _fast_path.TensorGuards  # None where the fast path is off or this torch lacks them

_DTYPES = {"int32": torch.int32, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "uint8": torch.uint8}
_ALIGN = 256  # bytes between workspace buffers: every buffer 16-byte aligned, as the compiled kernels assume
DIRECT_LAUNCHES = _fast_path.ENABLED  # the fenced fast path (torch_backend/_fast_path.py); tests turn it off too
_TARGETS = {}
_PLANS = {}
_LAUNCHERS = {}  # (plan, device index, facts) -> [(compiled kernel, constexpr tail)]
_SCRATCH = {}  # (device index, stream, thread) -> _Scratch: a workspace, and int32 counters all zero between calls
_RECIPES = {}  # plan -> _Recipe
_REPLAYS = {}  # validated call key (_launch.call_key) -> _Replay
_LAST = {}  # op -> _Match: its latest replayed call
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
        if device.type == "cuda" and not kernels.INTERPRETER:
            found = compiled_target(torch.cuda.get_device_properties(device).multi_processor_count,
                                    torch.cuda.get_device_capability(device)[0], capturing)
        else:
            found = Target(interpreter=kernels.INTERPRETER, large_programs=kernels.INTERPRETER,
                           arrival_counters=not capturing)
        _TARGETS[key] = found
    return found


def compiled_target(sm_count: int, capability_major: int, capturing: bool = False) -> Target:
    """The target of compiled kernels on a GPU with `sm_count` SMs of this compute capability (also what
    the CPU tests plan for, to count compilations)."""
    return Target(interpreter=False, large_programs=False, pdl=capability_major >= 9, launch_bound=False,
                  arrival_counters=not capturing, resident_programs=resident_programs(sm_count))


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
                _fast_path.clear()
            _PLANS[key] = found
    return found


class _Pointer:
    """A workspace buffer as Triton's launcher sees a tensor: an address and a dtype."""

    __slots__ = ("address", "dtype")

    def __init__(self, address: int, dtype: torch.dtype):
        self.address, self.dtype = address, dtype

    def data_ptr(self) -> int:
        return self.address


def replay(op: str, arguments: dict, flags: tuple, planner):
    """(outputs, None) for an eager call whose key (_launch.call_key: the shapes, dtypes, strides,
    devices, numbers and flags) an earlier call of the same planning function ran with its arguments
    unchanged (numbers converted the same way): that plan on these arguments, without validation (the
    key was validated), conversions or planning. Otherwise (None, the call's key, None if it has none:
    traced or unhashable), and the caller validates and plans; so too while a dispatch mode is active
    or a CUDA graph is captured (another plan)."""
    global _TensorGuards
    if torch.compiler.is_compiling():  # traced: the custom op's path, which records no memo
        return None, None
    last = _LAST.get(op)
    if last is not None and last.planner is planner and last.flags == flags and last.matches(arguments):
        entry = last.entry
    else:
        call = call_key(op, arguments, flags)
        try:
            entry = _REPLAYS.get(call) if call is not None else None
        except TypeError:  # an unhashable number (e.g. a list of rates)
            return None, None
        if entry is None or entry.planner is not planner:
            return None, call
        if _TensorGuards is not None:
            try:
                _LAST[op] = _Match(entry, arguments, flags)
            except (TypeError, RuntimeError):  # not a signature this torch's guards take: keys only
                _LAST.clear()
                _TensorGuards = None
    if _fast_path.dispatch_modes() > 0 or _fast_path.stream_capturing():
        return None, call_key(op, arguments, flags)
    if entry.launches is not None and not _launch_hooks() and _fast_path.current_device() == entry.device_index:
        env = [value.data_ptr() if type(value) is torch.Tensor else value for value in entry.given(arguments)]
        misaligned = 0
        for slot in entry.tensor_slots:
            misaligned |= env[slot]
        if not misaligned & 15:
            return _launch_direct(entry, env), None
    return entry(arguments), None


class _Match:
    """An op's latest replayed call, and a check that a new call has its key that is cheaper than
    call_key: the numbers and flags compared in Python, the tensors' types in one comparison, their
    dispatch keys, dtypes, devices, shapes and strides (and requires_grad) in C++ (TensorGuards, as
    torch.compile's guards check them; it refuses a tensor given twice, which the key then finds).
    tests/test_plans.py checks that it agrees with call_key."""

    __slots__ = ("entry", "planner", "flags", "count", "numbers", "tensors_of", "types", "guards")

    def __init__(self, entry, arguments: dict, flags: tuple):
        self.entry, self.planner, self.flags, self.count = entry, entry.planner, flags, len(arguments)
        self.numbers = tuple((name, type(value), value) for name, value in arguments.items()
                             if not isinstance(value, torch.Tensor))
        names = [name for name, value in arguments.items() if isinstance(value, torch.Tensor)]
        self.tensors_of = _getter(names)
        tensors = self.tensors_of(arguments)
        self.types = tuple(map(type, tensors))
        self.guards = _TensorGuards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None)

    def matches(self, arguments: dict) -> bool:
        if len(arguments) != self.count:
            return False
        for name, kind, value in self.numbers:
            given = arguments[name]
            if type(given) is not kind or given != value:
                return False
        tensors = self.tensors_of(arguments)
        return tuple(map(type, tensors)) == self.types and self.guards.check(*tensors)


def _getter(keys: list):
    """A function of a dict or list: the tuple of its values at `keys`."""
    if len(keys) == 1:
        return lambda values, key=keys[0]: (values[key],)
    return itemgetter(*keys) if keys else (lambda values: ())


class _Replay:
    """A remembered eager call: its plan and where each plan input comes from (an argument, or a
    constant the key fixes). After the plan's first run on 16-byte aligned inputs, a replay on aligned
    inputs launches the compiled kernels with the pointers as integers (`_launch_direct`, from
    `replay`): the arguments' types, dtypes and devices are the key's, so only alignment can differ."""

    __slots__ = ("planner", "plan", "device", "device_index", "sources", "recipe", "launches", "given", "literals",
                 "tensor_slots", "templates")

    def __init__(self, planner, plan: Plan, device: torch.device, sources: tuple):
        self.planner, self.plan, self.device, self.sources = planner, plan, device, sources
        self.device_index = device.index
        self.recipe = _recipe(plan)
        # once linked (_link): _launch_direct's values are the inputs taken from the call's arguments
        # (`given`; tensors as addresses), the fresh buffers, counters and scratch buffers, then `literals`
        self.launches = None  # [(entry point, grid x, y, z, what precedes the arguments, arguments from env,
        #                         constexprs, whether the arguments go as one tuple)]
        self.given = None
        self.literals = ()  # the constant inputs (tensors as addresses), then the plan's integer arguments
        self.tensor_slots = ()  # which given inputs are tensors
        self.templates = ()  # per fresh buffer: (one element expanded to its shape, zeroed)

    def __call__(self, arguments: dict) -> tuple:
        """The plan on these arguments through run() (which links the replay after a first run)."""
        values = [arguments[source] if source is not None else constant for _, source, constant in self.sources]
        outputs = run(self.plan, self.device, {name: value for (name, _, _), value in zip(self.sources, values)})
        if self.launches is None:
            self._link(values)
        return outputs

    def _link(self, values: list) -> None:
        """The compiled kernels for aligned inputs, once a run has compiled them, and each launch's
        arguments as slots of _launch_direct's list of values."""
        facts = (self.plan, self.device.index, tuple((v.dtype, True) if isinstance(v, torch.Tensor) else type(v)
                                                     for v in values))
        compiled = _LAUNCHERS.get(facts)
        fresh = [name for name, _, _, _ in self.recipe.fresh]
        if compiled is None or not all(name in fresh for name in self.plan.outputs):
            return
        given = [(name, source, value) for (name, source, _), value in zip(self.sources, values) if source is not None]
        constants = [(name, value) for (name, source, value) in self.sources if source is None]
        if self.recipe.constants and _fast_path.stream_capturing():  # (a constant made now would not be kept)
            return
        constants += [(name, _constant(shape, dtype, value, self.device))
                      for name, shape, dtype, value in self.recipe.constants]
        slots = {name: i for i, (name, _, _) in enumerate(given)}
        for name in fresh + [name for name, _ in self.recipe.counters] + [name for name, _, _ in self.recipe.scratch]:
            slots[name] = len(slots)
        literals = []
        for name, value in constants:
            slots[name] = len(slots)
            if isinstance(value, torch.Tensor):  # kept alive by self.sources
                if value.data_ptr() % 16:
                    return
                value = value.data_ptr()
            literals.append(value)
        launches = []
        for step, (kernel, tail) in zip(self.plan.launches, compiled):
            positions = []
            for arg in (*step.args, *step.outputs):
                if isinstance(arg, str):
                    positions.append(slots[arg])
                else:
                    positions.append(len(slots) + len(literals) - len(constants))
                    literals.append(arg)
            x, y, z = tuple(step.grid) + (1,) * (3 - len(step.grid))
            found = _entry_point(kernel, len(positions) + len(tail))
            if found is None:  # through Triton's Python launcher
                launches.append((kernel.run, x, y, z, (kernel.function, kernel.packed_metadata, None, None, None),
                                 _getter(positions), tail, False))
            else:
                entry_point, between, packed = found
                launches.append((entry_point, x, y, z, (kernel.function, *between), _getter(positions), tail, packed))
        templates = []
        for _, shape, dtype, zeroed in self.recipe.fresh:
            template = torch.empty((), dtype=dtype, device=self.device).expand(shape)
            if not torch.empty_like(template).is_contiguous():  # not this torch's rule: replays take run()'s path
                return
            templates.append((template, zeroed))
        self.templates = tuple(templates)
        self.literals = tuple(literals)
        self.tensor_slots = tuple(i for i, (_, _, value) in enumerate(given) if isinstance(value, torch.Tensor))
        self.given = _getter([source for _, source, _ in given])
        self.launches = launches


def _launch_direct(entry: _Replay, env: list) -> tuple:
    """A replay's fast path: every launch of the plan on the current stream, pointers as integers (`env`
    starts with the given inputs': tensors as their addresses)."""
    recipe = entry.recipe
    stream = driver.active.get_current_stream(entry.device_index)
    outputs = []
    for template, zeroed in entry.templates:
        tensor = torch.zeros_like(template) if zeroed else torch.empty_like(template)
        outputs.append(tensor)
        env.append(tensor.data_ptr())
    if recipe.counters or recipe.scratch:
        place = (entry.device_index, stream, threading.get_ident())
        scratch = _SCRATCH.get(place)
        if scratch is None or scratch.nbytes < recipe.scratch_bytes or scratch.ncounters < recipe.counter_count:
            scratch = _scratch(entry.device, place, recipe)
        counters, base = scratch.counters_address, scratch.workspace_address
        env += [counters + 4 * offset for _, offset in recipe.counters]
        env += [base + offset for _, offset, _ in recipe.scratch]
    env += entry.literals
    for launch, x, y, z, between, arguments, tail, packed in entry.launches:
        if packed:
            launch(x, y, z, stream, *between, (*arguments(env), *tail))
        else:
            launch(x, y, z, stream, *between, *arguments(env), *tail)
    return tuple(outputs) if recipe.outputs_in_order else tuple([outputs[i] for i in recipe.output_positions])


def run(plan: Plan, device: torch.device, inputs: dict, remember: tuple = None, behind: bool = True) -> tuple:
    """The plan's outputs, computed from `inputs` (name -> tensor or number, on `device`). With
    `remember` = (validated call key, the user's arguments, planning function), an eager call whose
    tensors reached the plan unchanged is remembered for `replay`. A plan with a stand-in
    (Plan.while_compiling) runs it while its own kernels compile behind it (torch_backend/_compile_behind.py;
    `behind=False`: the plan itself, compiled here if need be)."""
    _triton_setup.wait()  # Triton's process set-up, begun at import, before our first use of Triton
    if plan.while_compiling is None or device.type != "cuda":
        return _run(plan, device, inputs, remember)
    index = device.index if device.index is not None else _fast_path.current_device()
    if _fast_path.stream_capturing():  # the plan itself, compiled once: by an eager call's compile behind, or here
        _compile_behind.wait_for(plan, index)
        return _run(plan, device, inputs, remember)
    if _compile_behind.compiled(plan, index):
        return _run(plan, device, inputs, remember)
    facts = tuple((str(v.dtype), v.data_ptr() % 16 == 0) if isinstance(v, torch.Tensor) else type(v).__name__
                  for v in inputs.values())
    chosen, after = _compile_behind.choose(plan, index, facts, torch.cuda.get_device_capability(index), behind)
    try:
        outputs = _run(chosen, device, inputs, remember if chosen is plan else None)  # (a stand-in's: not replayed)
    except BaseException:
        if after is not None and chosen is not plan:  # the compile behind starts all the same (its state waits for it)
            after(_compile_only(plan, index, inputs))
        raise
    if after is not None:  # the compile behind, or the marker of the plan just compiled here
        after(_compile_only(plan, index, inputs))
    return outputs


def _run(plan: Plan, device: torch.device, inputs: dict, remember: tuple) -> tuple:
    if device.type != "cuda" or not DIRECT_LAUNCHES or not plan.launches or _fast_path.stream_capturing():
        return _run_general(plan, device, inputs)
    if remember is not None and remember[0] is not None:
        _remember(*remember, plan, device, inputs)
    recipe = _recipe(plan)
    current = _fast_path.current_device()
    if device.index is not None and device.index != current:
        with torch.cuda.device(device):
            return _run_eager(plan, recipe, device, device.index, inputs)
    return _run_eager(plan, recipe, device, current, inputs)


def _compile_only(plan: Plan, index: int, inputs: dict):
    """A function that compiles the plan's kernels for these inputs (their dtypes and alignments; the buffers'
    as the executor aligns them) through Triton's public warmup, launching nothing and holding no tensor."""
    values = {name: _Pointer(value.data_ptr(), value.dtype) if isinstance(value, torch.Tensor) else value
              for name, value in inputs.items()}
    for buffer in plan.buffers:
        values.setdefault(buffer.name, _Pointer(1 << 20, _DTYPES[buffer.dtype]))
    steps = [([values[a] if isinstance(a, str) else a for a in step.args] + [values[o] for o in step.outputs])
             for step in plan.launches]

    def compile_plan():
        with torch.cuda.device(index):
            for step, args in zip(plan.launches, steps):
                options = dict(num_warps=step.num_warps, num_stages=step.num_stages,
                               enable_fp_fusion=step.enable_fp_fusion)
                if step.pdl:
                    options["launch_pdl"] = True
                step.kernel.warmup(*args, grid=step.grid, **dict(step.constexprs), **options)

    return compile_plan


def _recipe(plan: Plan) -> "_Recipe":
    recipe = _RECIPES.get(plan)
    if recipe is None:
        recipe = _Recipe(plan)
        with _LOCK:
            if len(_RECIPES) > 4096:
                _RECIPES.clear()
            _RECIPES[plan] = recipe
    return recipe


def _launch_hooks() -> bool:
    """Whether Triton launch hooks are set (a profiler): then launches go through _launch_all, which
    calls them. (Triton 3.9 keeps a chain of hooks that is empty when none is set.)"""
    hook = knobs.runtime.launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


class _Recipe:
    """What an eager GPU call of a plan needs, worked out once: the buffers made fresh per call (outputs),
    the arrival counters, the workspace layout of the scratch buffers."""

    def __init__(self, plan: Plan):
        self.fresh, self.counters, self.scratch, total, self.counter_count = [], [], [], 0, 0
        self.constants = []  # (name, shape, dtype, value): kept per device (_constant)
        for buffer in plan.buffers:
            dtype = _DTYPES[buffer.dtype]
            if buffer.value is not None:
                self.constants.append((buffer.name, buffer.shape, dtype, buffer.value))
            elif buffer.counters:  # (name, offset among the place's counters: every element of its shape)
                # each 16-byte aligned, as Triton specialises a pointer on it: packed end to end, a buffer after
                # one of B counters would be aligned at some batch sizes only, a compilation each way
                self.counter_count = -(-self.counter_count // 4) * 4
                self.counters.append((buffer.name, self.counter_count))
                self.counter_count += math.prod(buffer.shape)
            elif buffer.name in plan.outputs or buffer.zeroed:
                self.fresh.append((buffer.name, buffer.shape, dtype, buffer.zeroed))
            else:
                self.scratch.append((buffer.name, total, dtype))
                size = 4
                for extent in buffer.shape:
                    size *= extent
                total += -(-size // _ALIGN) * _ALIGN
        self.scratch_bytes = total
        fresh = [name for name, _, _, _ in self.fresh]
        self.output_positions = tuple(fresh.index(name) for name in plan.outputs if name in fresh)
        self.outputs_in_order = self.output_positions == tuple(range(len(fresh)))


def _run_eager(plan: Plan, recipe: _Recipe, device: torch.device, index: int, inputs: dict) -> tuple:
    stream = driver.active.get_current_stream(index)
    env = dict(inputs)
    for name, shape, dtype, zeroed in recipe.fresh:
        env[name] = (torch.zeros if zeroed else torch.empty)(shape, dtype=dtype, device=device)
    for name, shape, dtype, value in recipe.constants:
        env[name] = _constant(shape, dtype, value, device)
    if recipe.counters or recipe.scratch:
        scratch = _scratch(device, (index, stream, threading.get_ident()), recipe)  # held until the launches are enqueued
        for name, offset in recipe.counters:
            env[name] = _Pointer(scratch.counters_address + 4 * offset, torch.int32)
        for name, offset, dtype in recipe.scratch:
            env[name] = _Pointer(scratch.workspace_address + offset, dtype)
    _launch_all(plan, index, stream, inputs, env)
    return tuple(env[name] for name in plan.outputs)


_CONSTANTS = {}  # (shape, dtype, value, device) -> the constant buffer's tensor, never written


def _constant(shape: tuple, dtype, value: int, device: torch.device) -> torch.Tensor:
    """A plan's constant buffer (Buffer.value) on `device`, made once outside CUDA-graph captures (no launch a
    call after it)."""
    return kept_tensor(_CONSTANTS, (shape, dtype, value, device),
                       lambda: torch.full(shape, value, dtype=dtype, device=device), device)


def _run_general(plan: Plan, device: torch.device, inputs: dict) -> tuple:
    """run() on the CPU (the interpreter), while a CUDA graph is captured, or through Triton's launch
    path (DIRECT_LAUNCHES off): every buffer a tensor of its own, counters zeroed."""
    env = dict(inputs)
    for buffer in plan.buffers:
        if buffer.value is not None:
            env[buffer.name] = _constant(buffer.shape, _DTYPES[buffer.dtype], buffer.value, device)
            continue
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
    entry = _Replay(planner, plan, device, tuple(sources))  # before taking the lock, which _recipe takes
    with _LOCK:
        if len(_REPLAYS) > 4096:
            _REPLAYS.clear()
        _REPLAYS[call] = entry


class _Scratch:
    """A place's workspace (the scratch buffers of a call) and arrival counters, with their addresses."""

    __slots__ = ("workspace", "counters", "workspace_address", "counters_address", "nbytes", "ncounters")

    def __init__(self, workspace: torch.Tensor, counters: torch.Tensor):
        self.workspace, self.counters = workspace, counters
        self.workspace_address, self.counters_address = workspace.data_ptr(), counters.data_ptr()
        self.nbytes, self.ncounters = workspace.numel(), counters.numel()


def _scratch(device: torch.device, place: tuple, recipe: _Recipe) -> _Scratch:
    """The workspace and int32 arrival counters (zero between calls: the plans' kernels leave them at
    zero) that a call of `recipe` at `place` = (device index, stream, thread) uses, kept per place
    (see the module's docstring): stream order puts the next call there after this one. (During a
    capture, or in the interpreter, a call gets buffers of its own.) The caller holds the result until
    its launches are enqueued."""
    found = _SCRATCH.get(place)
    if found is None or found.nbytes < recipe.scratch_bytes or found.ncounters < recipe.counter_count:
        # a smaller workspace that calls still in the stream use is freed to torch's stream-ordered allocator
        workspace = found.workspace if found is not None and found.nbytes >= recipe.scratch_bytes else \
            torch.empty(max(recipe.scratch_bytes, 1 << 16), dtype=torch.uint8, device=device)
        counters = found.counters if found is not None and found.ncounters >= recipe.counter_count else \
            torch.zeros(max(recipe.counter_count, 1024), dtype=torch.int32, device=device)
        found = _Scratch(workspace, counters)
        with _LOCK:
            if len(_SCRATCH) > 256:  # threads or streams come and go: start over
                _SCRATCH.clear()
            _SCRATCH[place] = found
    return found


def _launch_all(plan: Plan, index: int, stream: int, inputs: dict, env: dict) -> None:
    """Every launch of the plan straight to its compiled kernel's launcher (the first run of a plan and
    facts goes through Triton, which compiles)."""
    steps = [([env[a] if isinstance(a, str) else a for a in step.args] + [env[o] for o in step.outputs])
             for step in plan.launches]
    facts = (plan, index, tuple((t.dtype, t.data_ptr() % 16 == 0) if isinstance(t, torch.Tensor) else type(t)
                                for t in inputs.values()))
    compiled = _LAUNCHERS.get(facts)
    if compiled is None:
        _compile_ahead(plan, steps)
        compiled = [_compile_and_launch(step, args) for step, args in zip(plan.launches, steps)]
        with _LOCK:
            _LAUNCHERS[facts] = compiled
        return
    hooks = _launch_hooks()
    enter_hook, exit_hook = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook) if hooks else (None, None)
    for step, args, (kernel, constexpr_tail) in zip(plan.launches, steps, compiled):
        grid = step.grid
        full = (*args, *constexpr_tail)
        metadata = kernel.launch_metadata(grid, stream, *full) if hooks else None
        kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream,
                   kernel.function, kernel.packed_metadata, metadata, enter_hook, exit_hook, *full)


def _launch_through_triton_all(plan: Plan, env: dict) -> None:
    steps = [[env[a] if isinstance(a, str) else a for a in step.args] + [env[o] for o in step.outputs]
             for step in plan.launches]
    _compile_ahead(plan, steps)
    for step, args in zip(plan.launches, steps):
        _launch_through_triton(step, args)


# threads compiling a plan's kernels at its first run (JSAMPLE_COMPILE_THREADS; 0 or 1: one after another, at the
# launches)
COMPILE_THREADS = compile_threads()
_COMPILED_AHEAD = set()  # (kernel, constexprs, options, device, argument facts) warmed by _compile_ahead


def _compile_ahead(plan: Plan, steps: list) -> None:
    """Compiles the plan's kernels side by side, before its launches (which then find them compiled): one
    Triton `warmup` a distinct kernel variant, in threads, on the caller's device. Only plans of two or
    more kernels not yet warmed here, outside CUDA-graph captures; a variant that fails to compile is left
    to its launch, which raises the error itself. Nothing here decides anything: the launches compile
    whatever is missing."""
    if COMPILE_THREADS < 2 or kernels.INTERPRETER or len(plan.launches) < 2 or _fast_path.stream_capturing():
        return  # (while a CUDA graph is captured, no thread of ours calls into CUDA: its launches compile)
    device = torch.cuda.current_device()
    pending = {}
    for step, args in zip(plan.launches, steps):
        facts = tuple((a.dtype, a.data_ptr() % 16 == 0) if hasattr(a, "data_ptr") else
                      (type(a), a == 1, a % 16 == 0) if isinstance(a, int) else type(a) for a in args)
        key = (step.kernel, step.constexprs, step.num_warps, step.num_stages, step.enable_fp_fusion, step.pdl,
               device, facts)
        if key not in _COMPILED_AHEAD:
            pending.setdefault(key, (step, args))
    if len(pending) < 2:
        return
    by_kernel = {}  # a kernel's variants one after another in one thread: its caches are made once
    for key, item in pending.items():
        by_kernel.setdefault(item[0].kernel, []).append((key, item))
    if len(by_kernel) < 2:
        return
    for kernel in by_kernel:  # the source hashes (over the shared helpers) once, on this thread
        getattr(kernel, "cache_key", None)

    def warm(variants):
        warmed = []
        for key, (step, args) in variants:
            options = dict(num_warps=step.num_warps, num_stages=step.num_stages,
                           enable_fp_fusion=step.enable_fp_fusion)
            if step.pdl:
                options["launch_pdl"] = True
            try:
                with torch.cuda.device(device):
                    compiled = step.kernel.warmup(*args, grid=step.grid, **dict(step.constexprs), **options)
                    compiled.run  # noqa: B018 (its module loaded and its launcher built here too: Triton does that
                    # on first use, and up to 3.6 builds a launcher with the C compiler, 0.2 s a kernel)
            except Exception:  # noqa: BLE001 (its launch compiles it again and raises)
                continue
            warmed.append(key)
        return warmed

    with ThreadPoolExecutor(min(COMPILE_THREADS, len(by_kernel))) as pool:
        warmed = [key for keys in pool.map(warm, by_kernel.values()) for key in keys]
    with _LOCK:
        if len(_COMPILED_AHEAD) > 4096:
            _COMPILED_AHEAD.clear()
        _COMPILED_AHEAD.update(warmed)


_ROUNDS_AHEAD = set()  # (rounds, device) whose kernels compile_rounds_ahead warmed


def compile_rounds_ahead(rounds: tuple, shards: int, device: torch.device, inputs: dict) -> None:
    """At the first run of a vocab-parallel op's rounds on a device, _compile_ahead over all of them at once
    (kernels.plan.merged_rounds: zero stand-ins for what the all-gathers and earlier rounds bring, which no
    kernel runs on here): the rounds run one after another between collectives, and would otherwise compile
    their kernels one round at a time."""
    key = (rounds, device)
    _triton_setup.wait()
    if (key in _ROUNDS_AHEAD or device.type != "cuda" or COMPILE_THREADS < 2 or kernels.INTERPRETER
            or _fast_path.stream_capturing()):
        return
    merged = merged_rounds(rounds, shards)
    env = dict(inputs)
    for buffer in merged.buffers:
        env.setdefault(buffer.name, torch.zeros(buffer.shape, dtype=_DTYPES[buffer.dtype], device=device))
    steps = [[env[a] if isinstance(a, str) else a for a in step.args] + [env[o] for o in step.outputs]
             for step in merged.launches]
    with torch.cuda.device(device):
        _compile_ahead(merged, steps)
    with _LOCK:
        _ROUNDS_AHEAD.add(key)


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
