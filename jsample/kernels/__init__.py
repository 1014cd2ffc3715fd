"""Triton kernels shared by both frontends, and one planning function per op. Imports triton (and numpy) only.

Compiled or interpreted: jsample runs its kernels through the Triton interpreter (NumPy, on the
CPU) when ``TRITON_INTERPRET=1`` is set, or when it is unset and the machine has no GPU device node;
compiled otherwise (``TRITON_INTERPRET=0`` forces compiled). The choice is made once, when this
package is first imported: Triton decides per kernel when the kernel is defined, so it does not
matter whether triton, torch or jax were imported before. `INTERPRETER` says what was chosen.
"""

import glob
import os
import sys


def _gpu_device_present() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"))


if "TRITON_INTERPRET" not in os.environ and not _gpu_device_present():
    os.environ["TRITON_INTERPRET"] = "1"  # read by Triton when each kernel below is defined


def _interpret_triton_library() -> None:
    """If triton was imported before the interpreter was chosen, its own @jit library functions
    (tl.max, tl.sum, tl.philox, ...) were defined compiled, and the interpreter cannot call them:
    define them again, interpreted. Only in a process that interprets, where no compiled kernel runs."""
    import importlib

    import triton.language as tl
    from triton.runtime.jit import JITFunction

    for module in (tl.standard, tl.random):
        if any(isinstance(value, JITFunction) for value in vars(module).values()):
            module = importlib.reload(module)  # its @jit functions are now interpreted, tensor methods too
            for name, value in vars(module).items():
                if isinstance(getattr(tl, name, None), JITFunction):
                    setattr(tl, name, value)


if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") and "triton" in sys.modules:
    _interpret_triton_library()

import triton  # noqa: E402

from jsample.kernels.common import interpreting  # noqa: E402
from jsample.kernels.gumbel import (  # noqa: E402
    GumbelLaunchConfig,
    argmax_reduce_kernel,
    gumbel_launch_config,
    gumbel_partial_kernel,
    plan_gumbel_sample,
)
from jsample.kernels.plan import ArgSpec, Buffer, Launch, Plan, Target  # noqa: E402

INTERPRETER = interpreting()
if INTERPRETER:
    import warnings

    # The interpreter evaluates the kernels with NumPy, which warns where the GPU silently gives inf or
    # NaN (an overflowing exp of a hostile logit, a masked-out lane): the kernels handle those values,
    # so the warnings are noise in a user's output.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
    from jsample.kernels.host import patch_language_once

    patch_language_once()
from jsample.kernels.filtered import (  # noqa: E402
    FilteredLaunchConfig,
    filter_stats_kernel,
    filter_compact_step_kernel,
    filter_histogram_bracket_kernel,
    filter_histogram_step_kernel,
    filter_row_kernel,
    filter_decide_kernel,
    filter_winner_sums_kernel,
    filtered_launch_config,
    filtered_partial_kernel,
    plan_top_k_top_p_sample,
)
from jsample.kernels.rejection import (  # noqa: E402
    REJECTION_VARIANTS,
    RejectionLaunchConfig,
    decide_in_emit,
    plan_rejection_sample,
    plan_synthetic_rejection_sample,
    rejection_decide_emit_kernel,
    rejection_decide_kernel,
    rejection_emit_kernel,
    rejection_finish_kernel,
    rejection_launch_config,
    rejection_one_launch_kernel,
    rejection_stats_kernel,
    synthetic_rejection_kernel,
)
from jsample.kernels.stream import (  # noqa: E402
    fp64_noise_bound_kernel,
    philox_words_kernel,
    scattered_uniforms_kernel,
    uniforms_kernel,
)

__all__ = [
    "INTERPRETER",
    "REJECTION_VARIANTS",
    "ArgSpec",
    "Buffer",
    "Launch",
    "Plan",
    "Target",
    "plan_gumbel_sample",
    "plan_rejection_sample",
    "plan_synthetic_rejection_sample",
    "plan_top_k_top_p_sample",
    "FilteredLaunchConfig",
    "GumbelLaunchConfig",
    "argmax_reduce_kernel",
    "filter_stats_kernel",
    "filter_compact_step_kernel",
    "filter_histogram_bracket_kernel",
    "filter_histogram_step_kernel",
    "filter_row_kernel",
    "filter_decide_kernel",
    "filter_winner_sums_kernel",
    "filtered_launch_config",
    "filtered_partial_kernel",
    "gumbel_launch_config",
    "gumbel_partial_kernel",
    "fp64_noise_bound_kernel",
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
    "scattered_uniforms_kernel",
    "uniforms_kernel",
    "triton",
]
