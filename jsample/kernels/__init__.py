"""Triton kernels shared by both frontends. Imports triton (and numpy) only.

On a machine with no GPU the kernels run through the Triton interpreter, which must be chosen
before `triton` is first imported. If nobody chose (``TRITON_INTERPRET`` unset), triton is not yet
imported and no GPU device node exists, we choose the interpreter here so that CPU tensors and the
JAX CPU path work out of the box.
"""

import glob
import os
import sys


def _gpu_device_present() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"))


if "TRITON_INTERPRET" not in os.environ and "triton" not in sys.modules and not _gpu_device_present():
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402

from jsample.kernels.gumbel import (  # noqa: E402
    GumbelLaunchConfig,
    argmax_reduce_kernel,
    gumbel_launch_config,
    gumbel_partial_kernel,
    interpreting,
)

INTERPRETER = interpreting()
if INTERPRETER:
    import warnings

    # The interpreter evaluates the kernels with NumPy, which warns where the GPU silently gives inf or
    # NaN (an overflowing exp of a hostile logit, a masked-out lane): the kernels handle those values,
    # so the warnings are noise in a user's output.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
from jsample.kernels.filtered import (  # noqa: E402
    FilteredLaunchConfig,
    filter_step_kernel,
    filtered_launch_config,
    filtered_partial_kernel,
    filtered_plan,
)
from jsample.kernels.rejection import (  # noqa: E402
    RejectionLaunchConfig,
    decide_in_emit,
    rejection_decide_emit_kernel,
    rejection_decide_kernel,
    rejection_emit_kernel,
    rejection_finish_kernel,
    rejection_launch_config,
    rejection_one_launch_kernel,
    rejection_stats_kernel,
    synthetic_rejection_kernel,
)
from jsample.kernels.stream import philox_words_kernel, uniforms_kernel  # noqa: E402

__all__ = [
    "INTERPRETER",
    "FilteredLaunchConfig",
    "GumbelLaunchConfig",
    "argmax_reduce_kernel",
    "filter_step_kernel",
    "filtered_launch_config",
    "filtered_partial_kernel",
    "filtered_plan",
    "gumbel_launch_config",
    "gumbel_partial_kernel",
    "philox_words_kernel",
    "RejectionLaunchConfig",
    "decide_in_emit",
    "rejection_decide_emit_kernel",
    "rejection_decide_kernel",
    "rejection_emit_kernel",
    "rejection_finish_kernel",
    "rejection_launch_config",
    "rejection_one_launch_kernel",
    "rejection_stats_kernel",
    "synthetic_rejection_kernel",
    "uniforms_kernel",
    "triton",
]
