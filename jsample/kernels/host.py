"""Compiled or interpreted, and the Triton interpreter's side of things.

jsample chooses, once, whether *its own* kernels are compiled or run by the Triton interpreter
(NumPy, on the CPU): `JSAMPLE_INTERPRET=1` / `0` says so explicitly; without it, `TRITON_INTERPRET`
is honoured (read, never written); without either, the interpreter is chosen where the machine has
no GPU device node. `jit` defines each kernel accordingly. Nothing else in the process changes:
no environment variable is set, no triton module is reloaded or patched at import, and a user's own
`@triton.jit` kernels are what Triton alone makes of them.

The interpreter needs two things for the duration of an interpreted launch of a jsample kernel
(`interpreter_session`, entered by every such launch and left before it returns, under one lock):
- triton.language's own @jit functions (tl.max, tl.sum, tl.philox, ...) in interpreted form: if
  triton was imported without TRITON_INTERPRET they were defined compiled, and the interpreter
  cannot call them. Their interpreted stand-ins are swapped in, and the originals put back after.
- cheap device-function calls: Triton's interpreter re-patches the language on every call of a @jit
  function, dozens per program (half of a rejection_sample call's CPU time); inside a running kernel
  that is skipped (`_patch_lang_once`), which also gives a scalar's index Triton 3.9's form (Triton
  3.6's fails under NumPy >= 2.4).
NumPy's warnings (an overflowing exp of a hostile logit, an all-NaN masked-out lane: values the
kernels handle) are silenced for the launch only (np.errstate, and the interpreter module's
RuntimeWarnings in a warnings.catch_warnings block, restored when the launch returns).

`launch_on_host` launches on NumPy arrays (the JAX CPU path): the interpreter's own launcher
expects torch tensors; NumPy arrays already live in host memory, so we hand it their addresses.
These touch interpreter internals (triton 3.6 to 3.9); a version without them is left alone.
"""

import contextlib
import glob
import os
import queue
import threading
import warnings

import numpy as np
import triton
import triton.language as tl
from triton.runtime import interpreter
from triton.runtime.interpreter import GridExecutor, InterpretedFunction
from triton.runtime.jit import JITFunction


def _gpu_device_present() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"))


def _choose_interpreter() -> bool:
    for name in ("JSAMPLE_INTERPRET", "TRITON_INTERPRET"):
        value = os.environ.get(name, "")
        if value != "":
            return value != "0"
    return not _gpu_device_present()


INTERPRETER = _choose_interpreter()
_LOCK = threading.RLock()
_STAND_INS = {}  # id of a compiled library function -> its interpreted stand-in (made once)
_SESSION = threading.local()


def _library_swaps():
    """(module, name, interpreted stand-in) for each of triton.language's own @jit functions that
    was defined compiled (none where triton itself was imported interpreting)."""
    if not _STAND_INS:
        try:  # imported by the interpreter's first launch; it asserts that these functions are compiled ones
            import triton.experimental.gluon  # noqa: F401
        except ImportError:
            pass
    swaps = []
    for module in (tl, tl.standard, tl.random):
        for name, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                if id(value) not in _STAND_INS:
                    _STAND_INS[id(value)] = (value, InterpretedFunction(value.fn))
                swaps.append((module, name, _STAND_INS[id(value)][1]))
    return swaps


def _patch_lang_once(fn, _original=getattr(interpreter, "_patch_lang", None)):
    languages = [value for value in fn.__globals__.values() if value is tl or value is tl.core]
    if languages and all(not tl.core.is_builtin(language.load) for language in languages):
        return interpreter._LangPatchScope()  # already patched: nothing to do, nothing to restore
    scope = _original(fn)
    # a scalar's index as Triton 3.9's interpreter takes it: Triton 3.6's int() of the value's 1-element array is an
    # error from NumPy 2.4 on (every tl.range over a loaded or program-id bound failed); restored with the scope
    scope.set_attr(tl.core.tensor, "__index__", _index_of_scalar)
    return scope


def _index_of_scalar(self):
    return int(self.handle.data.squeeze())


@contextlib.contextmanager
def interpreter_session():
    """What an interpreted launch of a jsample kernel needs, for its duration only (see above)."""
    if getattr(_SESSION, "depth", 0):
        yield
        return
    with _LOCK:
        changed = []
        try:
            for module, name, value in _library_swaps():
                changed.append((module, name, getattr(module, name)))
                setattr(module, name, value)
            if getattr(interpreter, "_patch_lang", None) is not None and hasattr(interpreter, "_LangPatchScope"):
                changed.append((interpreter, "_patch_lang", interpreter._patch_lang))
                interpreter._patch_lang = _patch_lang_once
            _SESSION.depth = 1
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
                yield
        finally:
            _SESSION.depth = 0
            for module, name, value in reversed(changed):
                setattr(module, name, value)


class _JsampleInterpretedFunction(InterpretedFunction):
    """An interpreted jsample kernel: every launch runs inside `interpreter_session`."""

    def run(self, *args, **kwargs):
        with interpreter_session():
            return super().run(*args, **kwargs)


def jit(fn, *, noinline: bool = False):
    """@triton.jit for jsample's kernels and device functions, following jsample's own choice; jit(fn,
    noinline=True): a device function compiled as a function of its own (its hoisted values do not stay live in the
    caller's loop around the call)."""
    if INTERPRETER:
        return _JsampleInterpretedFunction(fn)
    if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
        return JITFunction(fn, noinline=noinline)  # TRITON_INTERPRET=1 with JSAMPLE_INTERPRET=0: compiled all the same
    return triton.jit(fn, noinline=noinline)


class _CleanThread:
    """One worker thread, started on the user's thread (whose floating-point state a new thread
    inherits) when the JAX frontend first traces a CPU launch, that runs every host launch in turn. A host launch
    runs on one of XLA's threads, which set the CPU to treat subnormal floats as zero: there
    1e-45 > 0 is false, and subnormal logits would sample differently than in torch."""

    def __init__(self):
        self._tasks = queue.Queue()
        threading.Thread(target=self._serve, name="jsample-host-launch", daemon=True).start()

    def _serve(self):
        while True:
            task, done = self._tasks.get()
            try:
                done.put((task(), None))
            except BaseException as error:  # re-raised on the caller's thread
                done.put((None, error))

    def run(self, task):
        done = queue.Queue(maxsize=1)
        self._tasks.put((task, done))
        result, error = done.get()
        if error is not None:
            raise error
        return result


_WORKER = None


def start_worker() -> None:
    """Start the host-launch thread (once), from the calling thread: call it from the user's thread
    (the JAX frontend does, when it traces a CPU launch), never from one of XLA's."""
    global _WORKER
    with _LOCK:
        if _WORKER is None:
            _WORKER = _CleanThread()


class _HostArray:
    """What the interpreter needs of an array argument: its address and its dtype."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.dtype = array.dtype

    def data_ptr(self) -> int:
        return self.array.ctypes.data


class _HostGridExecutor(GridExecutor):
    def _init_args_hst(self, args_dev, kwargs):  # already on the host: nothing to copy
        return list(args_dev), dict(kwargs)

    def _restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        pass


def launch_on_host(kernel, grid, *args, **kwargs) -> None:
    """kernel[grid](*args, **kwargs) with NumPy arrays (C-contiguous; outputs written in place)."""
    if not hasattr(kernel, "rewrite"):
        raise RuntimeError("jsample: the CPU path runs the kernels through the Triton interpreter, which must be "
                           "chosen when jsample is first imported: set JSAMPLE_INTERPRET=1 before that (or run on a machine without a GPU).")
    wrapped = [_HostArray(a) if isinstance(a, np.ndarray) else a for a in args]

    def task():
        with interpreter_session():
            _HostGridExecutor(kernel.rewrite(), kernel.arg_names, tuple(grid))(*wrapped, **kwargs)

    start_worker()  # (started already, on the tracing thread: see start_worker)
    _WORKER.run(task)
