"""Launching the kernels on NumPy arrays through the Triton interpreter (the JAX CPU path).

The interpreter's own launcher expects torch tensors; NumPy arrays already live in host memory,
so we hand it their addresses directly. This touches interpreter internals (pinned triton 3.6).
"""

import numpy as np
from triton.runtime.interpreter import GridExecutor


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
                           "chosen before triton is first imported: set TRITON_INTERPRET=1 at the start of the process.")
    wrapped = [_HostArray(a) if isinstance(a, np.ndarray) else a for a in args]
    _HostGridExecutor(kernel.rewrite(), kernel.arg_names, tuple(grid))(*wrapped, **kwargs)
