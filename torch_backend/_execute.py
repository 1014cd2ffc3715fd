"""The torch executor: runs any launch plan (jsample.kernels.plan) on torch tensors.

It allocates the plan's buffers on the caller's device (torch's caching allocator, stream-aware),
binds names to tensors and launches every kernel on the caller's current CUDA stream. Nothing is
shared between calls but read-only caches, so threads and streams may call at once.

Eager calls are cheap: after a plan's first run, each launch goes straight to the compiled kernel's
launcher, cached per plan, device and the facts Triton specialises a compiled kernel on that a plan
does not fix (each input's dtype and 16-byte alignment; integer arguments are part of the plan),
instead of through Triton's per-call argument binding. Profiling hooks (Triton's launch hooks) and
the interpreter take Triton's own launch path.
"""

import threading
import weakref

import torch
from triton import knobs
from triton.runtime import driver

from jsample import kernels
from jsample.kernels.plan import ArgSpec, Plan, Target

_DTYPES = {"int32": torch.int32, "float32": torch.float32}
_TARGETS = {}
_COMPILED = weakref.WeakKeyDictionary()  # plan -> {(device index, input facts): [compiled kernel per launch]}
_COMPILED_LOCK = threading.Lock()


def arg_spec(tensor: torch.Tensor) -> ArgSpec:
    return ArgSpec(tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), tuple(tensor.stride()))


def target(device: torch.device) -> Target:
    """What the plans may use on this device: programmatic dependent launch on compiled Hopper or newer."""
    key = (device.type, device.index)
    found = _TARGETS.get(key)
    if found is None:
        pdl = (device.type == "cuda" and not kernels.INTERPRETER
               and torch.cuda.get_device_capability(device)[0] >= 9)
        found = _TARGETS[key] = Target(interpreter=kernels.INTERPRETER, pdl=pdl, launch_bound=False)
    return found


def run(plan: Plan, device: torch.device, inputs: dict) -> tuple:
    """The plan's outputs, computed from `inputs` (name -> tensor, on `device`)."""
    env = dict(inputs)
    for buffer in plan.buffers:
        env[buffer.name] = (torch.zeros if buffer.zeroed else torch.empty)(
            buffer.shape, dtype=_DTYPES[buffer.dtype], device=device)
    if plan.launches:
        if device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                _launch_all(plan, device, inputs, env)
        else:
            _launch_all(plan, device, inputs, env)
    return tuple(env[name] for name in plan.outputs)


def _launch_all(plan: Plan, device: torch.device, inputs: dict, env: dict) -> None:
    steps = [([env[a] if isinstance(a, str) else a for a in step.args] + [env[o] for o in step.outputs])
             for step in plan.launches]
    if device.type != "cuda" or knobs.runtime.launch_enter_hook is not None:
        for step, args in zip(plan.launches, steps):
            _launch_through_triton(step, args)
        return
    # what Triton specialises on that the plan does not fix: each input's dtype and 16-byte alignment
    facts = (device.index, tuple((t.dtype, t.data_ptr() % 16 == 0) for t in inputs.values()))
    by_facts = _COMPILED.get(plan)
    compiled = by_facts.get(facts) if by_facts is not None else None
    if compiled is None:
        compiled = [_compile_and_launch(step, args) for step, args in zip(plan.launches, steps)]
        with _COMPILED_LOCK:
            _COMPILED.setdefault(plan, {})[facts] = compiled
        return
    stream = driver.active.get_current_stream(device.index)
    for step, args, (kernel, constexpr_tail) in zip(plan.launches, steps, compiled):
        grid = step.grid
        kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream,
                   kernel.function, kernel.packed_metadata, None, None, None, *args, *constexpr_tail)


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
