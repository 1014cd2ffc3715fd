"""The Triton interpreter's side of things: launching the kernels on NumPy arrays (the JAX CPU path),
and making its device-function calls cheap for every interpreted launch (`patch_language_once`).

The interpreter's own launcher expects torch tensors; NumPy arrays already live in host memory,
so we hand it their addresses directly. Both touch interpreter internals (triton 3.6 to 3.9).
"""

import queue
import threading

import numpy as np
import triton.language as tl
from triton.runtime import interpreter
from triton.runtime.interpreter import GridExecutor


class _CleanThread:
    """One worker thread, started when this module is imported (on the importing thread, whose
    floating-point state a new thread inherits), that runs every host launch in turn. A host launch
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
                           "chosen when jsample is first imported: set TRITON_INTERPRET=1 before that (or run on a machine without a GPU).")
    wrapped = [_HostArray(a) if isinstance(a, np.ndarray) else a for a in args]
    _WORKER.run(lambda: _HostGridExecutor(kernel.rewrite(), kernel.arg_names, tuple(grid))(*wrapped, **kwargs))


def patch_language_once() -> None:
    """Make the interpreter's device-function calls cheap. Triton's interpreter patches the language
    (triton.language's builtins, walked with inspect.getmembers) on every call of a @jit function,
    and each kernel calls dozens of them per program: half of a rejection_sample call's CPU time
    went there. A call whose language modules are already patched (inside a running kernel: the
    kernel's launch patched them) now skips it; a launch still patches, and restores, as before.
    Nothing else changes. Versions without this internal are left alone."""
    patch_lang = getattr(interpreter, "_patch_lang", None)
    scope_type = getattr(interpreter, "_LangPatchScope", None)
    if patch_lang is None or scope_type is None or getattr(patch_lang, "jsample_patched", False):
        return

    def patch_lang_once(fn):
        languages = [value for value in fn.__globals__.values() if value is tl or value is tl.core]
        if languages and all(not tl.core.is_builtin(language.load) for language in languages):
            return scope_type()  # already patched: nothing to do, nothing to restore
        return patch_lang(fn)

    patch_lang_once.jsample_patched = True
    interpreter._patch_lang = patch_lang_once
