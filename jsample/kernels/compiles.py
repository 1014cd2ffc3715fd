"""What each launch of a plan costs in compilations: the key a compiled kernel is cached under.

A plan is a value, so which compiled kernels a sweep of shapes needs can be read on the CPU, without
compiling anything. A kernel is compiled once per distinct key:

* torch (Triton's own launcher): the kernel, its constexprs, warps, stages and compiler options, and
  Triton's specialisation of each integer argument (== 1, a multiple of 16, 32 or 64 bits) except
  those the kernel lists in `do_not_specialize`; pointer alignment is fixed by the executors;
* JAX (jax-triton): the same, but every Python integer argument is baked into the program by value
  (jax-triton ignores `do_not_specialize`), so an integer that follows the batch is a compilation per
  batch size.

The plans keep every batch-dependent number out of those keys: B comes from the grid, and counts
that follow B are grid sizes or device values (tests/test_compiles.py sweeps B = 1..1024).
"""

import os
from collections import defaultdict

FRONTENDS = ("torch", "jax")


def compile_threads() -> int:
    """Threads a frontend compiles a plan's kernels with, side by side, at the plan's first run
    (JSAMPLE_COMPILE_THREADS; default 16 or the host's cores; 0 or 1: one after another, as they are reached)."""
    value = os.environ.get("JSAMPLE_COMPILE_THREADS", "")
    if not value:
        return min(16, os.cpu_count() or 1)
    if not value.isdigit():
        raise ValueError(f"JSAMPLE_COMPILE_THREADS must be a number of threads (0 or more), got {value!r}")
    return int(value)


def _kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", kernel)
    return getattr(fn, "__name__", repr(kernel))


def _not_specialized(kernel) -> set:
    """Indices of the kernel's arguments it asks Triton not to specialise."""
    names = [p.name for p in getattr(kernel, "params", ())]
    found = set()
    for item in getattr(kernel, "do_not_specialize", ()) or ():
        found.add(names.index(item) if isinstance(item, str) and item in names else item)
    return found


def integer_class(value: int) -> str:
    """Triton's specialisation of an integer argument."""
    if value == 1:
        return "1"
    width = "i32" if -2**31 <= value < 2**31 else "i64"
    return width + ("/16" if value % 16 == 0 else "")


def compile_key(step, frontend: str) -> tuple:
    """The key under which `frontend` ("torch" or "jax") caches the compiled kernel of launch `step`."""
    if frontend not in FRONTENDS:
        raise ValueError(f"compile_key: frontend must be one of {FRONTENDS}, got {frontend!r}")
    skipped = _not_specialized(step.kernel) if frontend == "torch" else set()
    integers = []
    for i, arg in enumerate(step.args):
        if isinstance(arg, bool) or not isinstance(arg, int):
            continue
        if frontend == "jax":
            integers.append((i, arg))
        elif i in skipped:
            integers.append((i, "i32" if -2**31 <= arg < 2**31 else "i64"))
        else:
            integers.append((i, integer_class(arg)))
    return (_kernel_name(step.kernel), tuple(integers), tuple(step.constexprs), step.num_warps, step.num_stages,
            step.enable_fp_fusion, step.pdl)


def with_stand_ins(plans, frontend: str):
    """The plans and, in torch's, their stand-ins (Plan.while_compiling: a first eager call runs and compiles those)."""
    for plan in plans:
        yield plan
        if frontend == "torch" and plan.while_compiling is not None:
            yield plan.while_compiling


def count_compilations(plans, frontend: str) -> dict:
    """{kernel name: the set of distinct compile keys} over the launches of `plans` (with_stand_ins')."""
    keys = defaultdict(set)
    for plan in with_stand_ins(plans, frontend):
        for step in plan.launches:
            keys[_kernel_name(step.kernel)].add(compile_key(step, frontend))
    return dict(keys)

