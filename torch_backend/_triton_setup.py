"""Triton's once-a-process set-up, begun in the background when torch_backend is imported on a GPU machine
(issue 39: a first call in seconds).

Before a process's first compile, Triton builds its CUDA driver utilities with the C compiler (0.9 s on an H200's
host with an empty cache; later processes load them from the cache) and hashes its own compiler, a 500 MB library,
for its cache keys (`triton_key`: 0.5 s in every process, a cache hit's lookup included). The two wait on each other
and then on nothing else: neither depends on the call. `start()` runs each on a thread of its own from import, so
they overlap each other and what the caller does before its first sampling call (CUDA's context, a model's load).
Neither touches CUDA (no cuInit: importing torch_backend still leaves a fork-safe parent), and the executor waits for
them before its first launch (`wait()`), so Triton never does the same work twice at once. A fork waits for them too
(os.register_at_fork): no child inherits a half-built module or a held lock.

Fence: both are Triton internals (`triton.backends.nvidia.driver.CudaUtils`, whose construction builds or loads
the utilities into Triton's cache; `triton.runtime.cache.triton_key`, memoised), used on the Triton versions in
VERIFIED_TRITON only. Elsewhere, or with JSAMPLE_WARM_TRITON=0, nothing runs ahead and Triton does both in the first
call, as it always does (the public path); JSAMPLE_WARM_TRITON=1 runs them on any version.
"""

import os
import threading

import triton

from torch_backend._fast_path import _triton_version

# Triton minor versions on which the set-up ahead ran on a GPU (the image's 3.6, and 3.9)
VERIFIED_TRITON = {(3, 6), (3, 9)}
_THREADS = []  # the set-up's threads until wait() has joined them
_STARTED = []  # start() has run (once a process)


def choice() -> str:
    """JSAMPLE_WARM_TRITON: "1" (on any Triton), "0" (never), or "" (the version check decides)."""
    value = os.environ.get("JSAMPLE_WARM_TRITON", "")
    if value not in ("", "0", "1"):
        raise ValueError(f"JSAMPLE_WARM_TRITON must be 0 or 1 (or unset), got {value!r}")
    return value


def steps() -> list:
    """The set-up's steps on this Triton (callables; empty where the fence keeps them out)."""
    wanted = choice()
    if wanted == "0" or (wanted == "" and _triton_version() not in VERIFIED_TRITON):
        return []
    found = []
    try:
        from triton.backends.nvidia.driver import CudaUtils

        found.append(CudaUtils)
    except ImportError:
        pass
    try:
        from triton.runtime.cache import triton_key

        found.append(triton_key)
    except ImportError:
        pass
    return found


def path() -> str:
    """What jsample.describe() reports: the set-up's steps begun at import, or none."""
    names = [step.__name__ for step in steps()]
    if not names:
        why = "JSAMPLE_WARM_TRITON=0" if choice() == "0" else f"not among the verified {sorted(VERIFIED_TRITON)}"
        return f"in the first call (Triton's own; triton {triton.__version__}: {why})"
    return f"begun at import on threads: {', '.join(names)} (triton {triton.__version__}; compiled kernels only)"


def _quietly(step) -> None:
    try:
        step()
    except Exception:  # noqa: BLE001 (a machine without the C compiler or CUDA's library: the first call does
        pass  # the step itself, and raises Triton's own error there)


def start(interpreter: bool) -> list:
    """Starts the set-up's steps on threads (compiled kernels only: the interpreter needs neither); returns
    their names."""
    if interpreter or _STARTED:
        return []
    _STARTED.append(True)
    for step in steps():
        thread = threading.Thread(target=_quietly, args=(step,), name=f"jsample-triton-setup-{step.__name__}",
                                  daemon=True)
        thread.start()
        _THREADS.append(thread)
    if _THREADS:
        os.register_at_fork(before=wait)
    return [thread.name for thread in _THREADS]


def wait() -> None:
    """Returns once the set-up's threads have finished (at once when none runs)."""
    join_all(_THREADS)


def join_all(threads: list) -> None:
    """Joins the threads of `threads`, removing each as it ends (several callers may join at once)."""
    while threads:
        thread = threads[0]
        if thread is threading.current_thread():  # (a thread that forked: never here, but never a deadlock)
            return
        thread.join()
        try:
            threads.remove(thread)
        except ValueError:  # another caller joined it first
            pass
