"""A plan whose kernels take seconds to compile, compiled behind its stand-in (issue 39: a first call in seconds).

top_k_top_p_sample's one-launch plan (batches of one or two rows) is one kernel that takes 2-3 s to compile on an
H200's host, the longest of jsample's; its launches' plan, a dozen small kernels that compile side by side, gives the
same tokens (every row's token is the same in any plan: the batch invariance the tests check). Such a plan names its
stand-in (`Plan.while_compiling`), and an eager call chooses here which of the two runs (`choose`):

* the plan itself, where its kernels are compiled: in this process (here or by a call that compiled them in the
  foreground), or by an earlier process, which left a marker in Triton's cache directory after compiling them
  (`<TRITON_CACHE_DIR>/jsample-compiled/<key>`: the kernels' source hashes, constexprs, options, argument facts, the
  GPU's capability and Triton's version; a cache cleared with its directory takes the markers with it, and a marker
  whose kernel is gone only means a compile in the foreground, as without markers);
* otherwise the stand-in, and once its launches are enqueued, a thread compiles the plan's kernels (Triton's public
  `warmup`, on pointers with the call's dtypes and alignments: no memory touched, no CUDA module loaded there) and
  leaves the marker; calls run the stand-in until the thread is done, then the plan (whose first run loads what the
  thread compiled, from Triton's in-process cache).

So the first call costs the stand-in's compile, not the plan's; later calls reach the plan's speed seconds later; a
later process with the same cache runs the plan from its first call. Nothing here decides a token. Only eager calls
outside CUDA-graph captures choose (a capture records the plan itself: it waits for a compile behind it that an eager
call began, and compiles in the foreground what none did), and
`precompile` compiles the plans themselves (`behind=False`), leaving their markers. JSAMPLE_COMPILE_BEHIND=0 turns
it off (every call runs its plan, compiling it in the foreground). A fork waits for the threads (os.register_at_fork):
no child inherits a half-done compile's locks.
"""

import hashlib
import os
import threading

import triton

from torch_backend._triton_setup import join_all

_LOCK = threading.Lock()
_STATES = {}  # (plan, device index) -> _Compiling, or True: the plan's kernels are compiled (or their marker found)
_COMPILING = {}  # (plan's launches, device index) -> _Compiling: found by plans of the same launches (a capture's)
_THREADS = []  # compile threads not yet joined by wait()
_FORK_HOOK = []


def enabled() -> bool:
    """JSAMPLE_COMPILE_BEHIND: "0" off; "1" or unset on."""
    value = os.environ.get("JSAMPLE_COMPILE_BEHIND", "")
    if value not in ("", "0", "1"):
        raise ValueError(f"JSAMPLE_COMPILE_BEHIND must be 0 or 1 (or unset), got {value!r}")
    return value != "0"


class _Compiling:
    __slots__ = ("done",)

    def __init__(self):
        self.done = threading.Event()


def marker_key(plan, facts: tuple, capability: tuple) -> str:
    """The name of the marker that says the plan's kernels were compiled with these argument facts (per input, in
    the call's order: a tensor's dtype and 16-byte alignment, a number's type) on a GPU of this capability: a hash
    of what Triton's own cache key holds that the plan, the facts and the device fix (None where a kernel has no
    source hash: no marker then)."""
    parts = [triton.__version__, capability, facts]
    for step in plan.launches:
        source = getattr(step.kernel, "cache_key", None)
        if not isinstance(source, str):
            return None
        name = getattr(getattr(step.kernel, "fn", step.kernel), "__name__", "")
        parts.append((name, source, step.args, step.constexprs, step.num_warps, step.num_stages, step.enable_fp_fusion,
                      step.pdl))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def marker_path(key: str) -> str:
    """Where the marker of `key` lives: in Triton's cache directory (None where it cannot be found)."""
    try:
        from triton import knobs

        directory = knobs.cache.dir
    except (ImportError, AttributeError):
        directory = os.environ.get("TRITON_CACHE_DIR")
    if not directory:
        return None
    return os.path.join(directory, "jsample-compiled", key)


def _leave_marker(path: str) -> None:
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w"):
            pass
    except OSError:  # a read-only cache: later processes take the stand-in first, as this one did
        pass


def compiled(plan, device_index: int) -> bool:
    """Whether calls of `plan` on this device run the plan itself from now on (its kernels compiled)."""
    state = _STATES.get((plan, device_index))
    if state is True:
        return True
    if state is not None and state.done.is_set():
        _STATES[(plan, device_index)] = True
        return True
    return False


def choose(plan, device_index: int, facts: tuple, capability: tuple, behind: bool = True):
    """(the plan to run now, what to call once its launches are enqueued or None) for an eager call of `plan`
    (see the module's docstring); `facts` as marker_key's. `behind=False`: the plan itself, leaving its marker."""
    if compiled(plan, device_index):
        return plan, None
    if _STATES.get((plan, device_index)) is not None:
        return plan.while_compiling, None
    key = marker_key(plan, facts, capability)
    path = marker_path(key) if key is not None else None
    with _LOCK:
        state = _STATES.get((plan, device_index))
        if state is None:
            if not behind or not enabled() or (path is not None and os.path.exists(path)):
                _STATES[(plan, device_index)] = True
                return plan, (lambda compile_plan: _leave_marker(path)) if path is not None else None
            state = _STATES[(plan, device_index)] = _COMPILING[(plan.launches, device_index)] = _Compiling()
            return plan.while_compiling, lambda compile_plan: _start(compile_plan, state, path)
    return choose(plan, device_index, facts, capability, behind)


def _start(compile_plan, state: _Compiling, path: str) -> None:
    """Runs `compile_plan()` (the plan's kernels compiled, nothing launched) on a thread, then leaves the marker and
    marks the state done (also when compiling failed: the plan's own first run then compiles in the foreground and
    raises Triton's error there)."""

    def work():
        try:
            compile_plan()
            _leave_marker(path)
        except Exception:  # noqa: BLE001 (see above)
            pass
        finally:
            state.done.set()

    thread = threading.Thread(target=work, name="jsample-compile-behind", daemon=True)
    with _LOCK:
        _THREADS.append(thread)
        if not _FORK_HOOK:
            _FORK_HOOK.append(True)
            os.register_at_fork(before=wait)
    thread.start()


def wait_for(plan, device_index: int) -> None:
    """Returns once a compile behind a plan of the same launches on this device, if one was begun, has ended: a
    CUDA-graph capture records the plan itself, and then loads what that compile made instead of compiling it too."""
    state = _COMPILING.get((plan.launches, device_index))
    if state is not None:
        state.done.wait()


def wait() -> None:
    """Returns once every compile begun here has finished (tests, benchmarks, a fork)."""
    join_all(_THREADS)


def states() -> list:
    """[(plan variant, device index, "compiled" or "compiling")] for each plan seen here: what its calls run."""
    return [(plan.variant, index, "compiled" if state is True or state.done.is_set() else "compiling")
            for (plan, index), state in list(_STATES.items())]


def forget() -> None:
    """Forgets every plan's state (tests: the next call chooses again)."""
    wait()
    with _LOCK:
        _STATES.clear()
        _COMPILING.clear()
