"""The torch frontend's fast path through other libraries' private internals, behind one fence.

What it takes that no public API gives:
* Triton's compiled launcher (`CompiledKernel.run`, a CudaLauncher): its C entry point and what its Python
  `__call__` passes it, read by a dry run on a copy of the launcher (`entry_point`), so that a replayed
  eager call launches each kernel with a few C calls instead of Triton's per-call argument binding;
* torch's C++ tensor guards (`torch._C._dynamo.guards.TensorGuards`, torch.compile's), to recognise
  an op's latest replayed call without building its key.

Both are used only where they were verified on a GPU: Triton VERIFIED_TRITON (the version check),
each launcher again by its own dry run (the self-check: anything per call but the grid, stream and
arguments keeps Triton's launch), and the guards by their first use (a signature they refuse turns
them off). One switch, `JSAMPLE_TORCH_LAUNCH`: "triton" takes Triton's public launch (`kernel[grid]
(...)`) and keys only, "direct" the fast path on any Triton; unset, the version check decides.
`path()` says which runs. tests/test_integration_gpu.py compares both paths' tokens on the GPU.
"""

import os
import threading

import triton

# Triton minor versions whose launcher this fast path ran with on a GPU (3.6: the image's; 3.9: issue 40's run)
VERIFIED_TRITON = ((3, 6), (3, 9))
_LOCK = threading.Lock()


def _choice() -> str:
    choice = os.environ.get("JSAMPLE_TORCH_LAUNCH", "")
    if choice not in ("", "direct", "triton"):
        raise ValueError(f"JSAMPLE_TORCH_LAUNCH must be 'direct' or 'triton', got {choice!r}.")
    return choice


def _triton_version() -> tuple:
    return tuple(int(part) for part in triton.__version__.split(".")[:2])


ENABLED = _choice() == "direct" or (_choice() == "" and _triton_version() in VERIFIED_TRITON)

TensorGuards = None
if ENABLED:
    try:  # torch's C++ check of tensors' layouts against a template (torch.compile's tensor guards)
        from torch._C._dynamo.guards import TensorGuards
    except ImportError:
        TensorGuards = None


# torch's C entry points for the per-call questions of the executor (the public functions add Python frames to
# every call): the fast path's, where they exist; the public functions otherwise. The dispatch-mode count has
# no public form: where torch lacks it, every call counts as traced (the custom op's path, always correct).
import torch  # noqa: E402

_C_NAMES = ("_cuda_isCurrentStreamCapturing", "_cuda_getDevice")
if ENABLED and all(callable(getattr(torch._C, name, None)) for name in _C_NAMES):
    stream_capturing, current_device = torch._C._cuda_isCurrentStreamCapturing, torch._C._cuda_getDevice
else:
    def stream_capturing() -> bool:
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()

    current_device = torch.cuda.current_device
dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
if not callable(dispatch_modes):
    def dispatch_modes() -> int:
        return 1


def path() -> str:
    """Which launch path eager torch calls take."""
    if not ENABLED:
        why = "JSAMPLE_TORCH_LAUNCH=triton" if _choice() == "triton" else \
            f"triton {triton.__version__} is not among the verified {VERIFIED_TRITON}"
        return f"triton (Triton's public launch: {why})"
    return f"direct (the compiled launchers' entry points, triton {triton.__version__}" + \
        ("" if _triton_version() in VERIFIED_TRITON else ", forced by JSAMPLE_TORCH_LAUNCH=direct") + ")"


def clear() -> None:
    _ENTRY_POINTS.clear()


_ENTRY_POINTS = {}  # (compiled kernel's launcher, argument count) -> (C entry point, what goes between, packed) or None


def entry_point(kernel, count: int):
    """(entry point, constants, packed) such that entry_point(x, y, z, stream, kernel.function,
    *constants, *arguments) (or with the arguments as one tuple when `packed`) is what Triton's Python
    launcher (`kernel.run`, a CudaLauncher) does for a launch without hooks; None where that cannot be
    shown, and replays then call the Python launcher.

    It is read from two dry runs, with different grids and streams: the launcher's own __call__ on a
    copy of it whose entry point records its arguments instead of launching. Each run must pass the
    grid, stream and function first, then only constants (the same in both runs: nothing that follows
    the grid or stream), then the `count` arguments (or a tuple of them) last; kernels that need scratch
    memory per launch (its address changes every call) or a sanitizer keep the Python launcher. So no
    Triton version's C signature is written here: a version whose launcher passes anything else per
    call is seen in the dry run and keeps Triton's path."""
    launcher = kernel.run
    key = (launcher, count)
    if key in _ENTRY_POINTS:
        return _ENTRY_POINTS[key]
    found = None
    entry_point = getattr(launcher, "launch", None)
    if (callable(entry_point) and hasattr(launcher, "__dict__") and getattr(launcher, "global_scratch_size", 1) == 0
            and getattr(launcher, "profile_scratch_size", 1) == 0 and not getattr(launcher, "gsan_enabled", False)):
        runs = [_dry_run(launcher, kernel, grid_and_stream, count) for grid_and_stream in ((3, 5, 7, 0), (2, 4, 6, 9))]
        if runs[0] is not None and runs[0] == runs[1]:
            found = (entry_point, *runs[0])
    with _LOCK:
        _ENTRY_POINTS[key] = found
    return found


def _dry_run(launcher, kernel, grid_and_stream: tuple, count: int):
    """(what the launcher passes between the function and the arguments, whether it passes the
    arguments as one tuple) in a launch of `count` stand-in arguments, run on a copy of it whose entry
    point only records; None if that launch passes anything else."""
    seen = []
    copy = object.__new__(type(launcher))
    copy.__dict__.update(launcher.__dict__)
    copy.launch = lambda *passed: seen.append(passed)
    arguments = tuple(object() for _ in range(count))
    try:
        type(launcher).__call__(copy, *grid_and_stream, kernel.function, kernel.packed_metadata, None, None, None,
                                *arguments)
    except Exception:  # a launcher this reading does not know
        return None
    if len(seen) != 1 or seen[0][:4] != grid_and_stream or seen[0][4] is not kernel.function:
        return None
    passed = seen[0]
    if len(passed) >= 5 + count and all(a is b for a, b in zip(passed[len(passed) - count:], arguments)):
        between, packed = passed[5:len(passed) - count], False
    elif type(passed[-1]) is tuple and len(passed[-1]) == count and all(a is b for a, b in zip(passed[-1], arguments)):
        between, packed = passed[5:-1], True
    else:
        return None
    if any(a is b for a in between for b in arguments):  # an argument passed twice, or out of place
        return None
    return tuple(between), packed
