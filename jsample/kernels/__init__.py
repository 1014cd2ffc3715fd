"""Triton kernels shared by both frontends, and one planning function per op. Imports triton (and numpy) only.

Compiled or interpreted: jsample runs its own kernels through the Triton interpreter (NumPy, on the
CPU) when ``JSAMPLE_INTERPRET=1`` is set; compiled when it is ``0``; without it, ``TRITON_INTERPRET``
decides, and without either the interpreter is chosen when the machine has no GPU device node. The
choice is made once, when this package is first imported, and it concerns jsample's kernels only:
importing jsample sets no environment variable and reloads or patches nothing (`jsample.kernels.host`
says how interpreted launches get what they need). `INTERPRETER` says what was chosen.
"""

import triton

from jsample.kernels.host import INTERPRETER
from jsample.kernels.gumbel import (
    GumbelLaunchConfig,
    argmax_reduce_kernel,
    gumbel_launch_config,
    gumbel_partial_kernel,
    plan_gumbel_sample,
)
from jsample.kernels.plan import ArgSpec, Buffer, Launch, Plan, Target
from jsample.kernels.filtered import (
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
from jsample.kernels.logprobs import plan_token_logprobs, top_k_within_list
from jsample.validation import MAX_NUM_TOP
from jsample.kernels.rejection import (
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
from jsample.kernels.plan import ShardedPlan
from jsample.kernels.vocab_parallel_filtered import plan_top_k_top_p_shard, shard_list_capacity
from jsample.kernels.vocab_parallel_logprobs import plan_token_logprobs_shard
from jsample.kernels.vocab_parallel_rejection import plan_rejection_sample_shard
from jsample.kernels.vocab_parallel import (
    SUMMARY_WORDS,
    plan_gumbel_sample_shard,
    plan_gumbel_shard,
    plan_shard_combine,
    start_alignment,
)
from jsample.kernels.stream import (
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
    "plan_token_logprobs",
    "top_k_within_list",
    "plan_gumbel_shard",
    "plan_gumbel_sample_shard",
    "plan_top_k_top_p_shard",
    "shard_list_capacity",
    "ShardedPlan",
    "plan_shard_combine",
    "start_alignment",
    "SUMMARY_WORDS",
    "MAX_NUM_TOP",
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
