"""Facts of the row kernels as compiled for an H100/H200 (sm_90), checked without a GPU.

1. Loads: jax-triton, unlike torch's launcher, tells the compiler nothing about integer arguments;
   without `gumbel.aligned(V, VOCAB_ALIGN)` every masked row load became one scalar 2-byte load per
   bf16 element (a memory-bound kernel then runs at a fraction of the read rate in JAX only).
2. Instructions: sampling is bound by instruction issue, not bytes (Philox-10 and two logs per
   column), so the SASS instructions per vocabulary column are the kernels' speed budget. FAST_MATH's
   PTX (mul.wide Philox, ftz logs and exp, FMA series) and the two-step block argmax took
   gumbel_partial_kernel from 66.5 to 50 and the emit kernel from 122.5 to 82 (benchmarks/results:
   gumbel_sample 117 -> 87 us at B = 256, V = 151936 on an H200).
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).with_name("compiled_kernels.py")
ROOT = SCRIPT.parents[1]


def compiled_facts(*args):
    try:
        import triton.backends.nvidia  # noqa: F401
    except ImportError:
        pytest.skip("triton has no NVIDIA backend here")
    result = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "TRITON_INTERPRET": "0"}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def scalar_bf16_loads(loads):
    return loads.get("ld.global.b16", 0)


# SASS instructions per column, with slack for compiler versions; CI's triton gives 62.0 and 126.5.
# Static counts: every branch is counted, the emit kernel's residual branch and the masks that only
# blocks holding a NaN or +inf logit run (gumbel.noisy_scores; about 10 a column, so a finite block
# runs about 41.5 in gumbel_partial_kernel, and gumbel_sample at B = 256, V = 151936 on an H200 went
# 83.4 -> 77.6 us when that fallback replaced the masks every block ran), the overflow check of
# STREAM.md's clarifications (gumbel.overflow_from_magnitude: its |x| rides on the score's max, and
# its masks run only in blocks whose largest |x| / T overflows), and in the emit kernel the exact
# residual that rows whose log-normalisers differ by more than 2e38 take (the FAST_MATH one would
# overflow there: about 40 static, never run by ordinary rows).
INSTRUCTION_BUDGET = {"gumbel_partial_kernel": 64, "rejection_emit_kernel": 129}


@pytest.fixture(scope="module")
def shipped():
    return compiled_facts()


def test_row_loads_are_vectorised_without_integer_specialisation(shipped):
    for kernel, facts in shipped.items():
        loads = facts["loads"]
        assert loads.get("ld.global.v4.b32", 0) >= 2, (kernel, loads)
        # at most the emit kernel's gather of the draft tokens' target logits (one per thread)
        assert scalar_bf16_loads(loads) <= 1, (kernel, loads)


def test_without_the_vocab_alignment_hint_the_loads_are_scalar():
    """The control: the check above can fail (VOCAB_ALIGN = 1 gives the compiler no alignment)."""
    facts = compiled_facts("1")
    assert all(scalar_bf16_loads(kernel_facts["loads"]) >= 16 for kernel_facts in facts.values()), facts


def test_sampling_kernels_stay_within_their_instruction_budget(shipped):
    for kernel, budget in INSTRUCTION_BUDGET.items():
        assert shipped[kernel]["sass_per_column"] <= budget, (kernel, shipped[kernel])


def test_without_fast_math_the_budget_is_exceeded():
    """The control: the interpreter's code path (tl.philox-style multiplies, accurate logs) is far over it."""
    facts = compiled_facts("--exact-math")
    for kernel, budget in INSTRUCTION_BUDGET.items():
        assert facts[kernel]["sass_per_column"] > 1.3 * budget, (kernel, facts[kernel])


def test_both_rejection_plans_reduce_the_normalisers_alike():
    """The small-batch plan decides in rejection_decide_emit_kernel, the other in
    rejection_decide_kernel (kernels.decide_in_emit). Floating-point sums follow the layout of the
    tensors they reduce; with the same layout in both, the normalisers, and so every acceptance,
    agree bit for bit (the GPU test compares tokens, which rarely sit at a decision's edge)."""
    for k, (decide, decide_emit) in compiled_facts("--decide-layouts").items():
        assert decide and decide == decide_emit, (k, decide, decide_emit)


# What each PDL-chained launch may touch before its griddepcontrol.wait: the op's own inputs, which no
# launch of the chain writes (reading them early overlaps the previous launch: kernels.rejection).
OP_INPUTS = {"target_logits_ptr", "draft_logits_ptr", "draft_tokens_ptr", "num_draft_tokens_ptr", "seeds_ptr",
             "positions_ptr", "temperature_ptr"}
PREVIOUS_LAUNCH_OUTPUTS = {
    "rejection_decide_emit_kernel": {"stats_ptr", "row_score_ptr", "row_index_ptr"},
    "rejection_finish_kernel": {"emit_row_ptr", "emit_mode_ptr", "emit_score_ptr", "emit_index_ptr"},
}


def test_chained_launches_touch_only_the_op_inputs_before_their_wait():
    """Under PDL a launch starts while the previous one runs; griddepcontrol.wait is what makes the
    previous launch's writes visible. A load of its outputs above the wait would read stale memory
    now and then (a race no token test can be sure to catch), so every global access above the wait
    in the compiled PTX must derive from the op's inputs alone. rejection_one_launch_kernel (JAX)
    waits with an acquiring load of the stats programs' arrival count instead: above it nothing
    loads the partials."""
    report = compiled_facts("--pdl-order")
    control = report.pop("early_read_kernel (control)")
    assert "stats_ptr" in control["loads before wait"], control  # the check can fail
    one_launch = report.pop("rejection_one_launch_kernel K=1")
    assert len(report) == 4, report
    for name, sides in report.items():
        loads_before = {arg for arg in sides["loads before wait"] if arg.endswith("_ptr")}
        assert loads_before and loads_before <= OP_INPUTS, (name, sides)
        assert not sides["stores before wait"], (name, sides)
        assert PREVIOUS_LAUNCH_OUTPUTS[name.split()[0]] <= set(sides["after wait"]), (name, sides)
    loads_before = {arg for arg in one_launch["loads before wait"] if arg.endswith("_ptr")}
    assert loads_before <= OP_INPUTS | {"counters_ptr"}, one_launch
    assert {"stats_ptr", "row_score_ptr", "row_index_ptr", "emit_score_ptr"} <= set(one_launch["after wait"]), one_launch
