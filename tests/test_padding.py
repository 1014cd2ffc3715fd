"""num_valid: rows at or past it are padding (issue 39). Their outputs are the documented fill (token -1;
rejection: every token -1 and num_sampled 0), their logits are not read, and the valid rows' outputs equal
the unpadded call's, bit for bit, in both frontends, whatever form num_valid takes (an int, a scalar array
of either integer dtype, traced under jax.jit)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import make_requests, run_jax, run_torch

import jsample
import torch_backend
from jsample.kernels.plan import ArgSpec
from jsample.kernels import plan_gumbel_sample, plan_rejection_sample, plan_top_k_top_p_sample
from jsample._jax import _execute as jax_execute
from jsample.kernels.plan import PADDED_ROW_SLOTS

BATCH, VOCAB, K = 5, 300, 2


def _cases():
    rng = np.random.default_rng(39)
    logits = (rng.standard_normal((BATCH, VOCAB)) * 3).astype(np.float32)
    logits[:, ::7] = -np.inf
    seeds, positions = make_requests(rng, BATCH, wide_seeds=False)
    temperature = np.float32([0.0, 0.5, 1.0, 1.5, 0.8])
    target = (rng.standard_normal((BATCH, K + 1, VOCAB)) * 3).astype(np.float32)
    drafts = rng.integers(0, VOCAB, size=(BATCH, K)).astype(np.int32)
    drafts[::2] = target[::2, :K].argmax(-1)
    counts = np.int32([2, 1, 2, 0, 2])
    draft_logits = target[:, :K] + rng.standard_normal((BATCH, K, VOCAB)).astype(np.float32)
    return {
        "gumbel_sample": ((logits, seeds, positions, temperature), {}),
        "top_k_top_p_sample": ((logits, seeds, positions, temperature), dict(top_k=11, top_p=0.8, min_p=0.01)),
        "top_k_top_p_sample min_p": ((logits, seeds, positions, temperature), dict(min_p=0.05)),
        "rejection_sample": ((target, drafts, counts, seeds, positions, temperature), {}),
        "rejection_sample draft logits": ((target, drafts, counts, seeds, positions, temperature),
                                          dict(draft_logits=draft_logits)),
        "synthetic_rejection_sample": ((target.argmax(-1).astype(np.int32), drafts, counts, seeds, positions,
                                        np.float32([0.7, 0.4])), {}),
    }


CASES = _cases()


def _outputs(out):
    return tuple(np.asarray(o) for o in (out if isinstance(out, tuple) else (out,)))


def _flat(out):
    """An op's outputs as NumPy arrays, a Logprobs among them flattened into its fields."""
    return tuple(np.asarray(o) for item in (out if isinstance(out, tuple) else (out,))
                 for o in (item if isinstance(item, tuple) else (item,)))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("num_valid", [0, 1, 3, BATCH])
def test_padding_rows_give_the_fill_and_valid_rows_are_unchanged(case, num_valid):
    op = case.split()[0]
    args, kwargs = CASES[case]
    full = _outputs(run_torch(op, *args, **kwargs))
    for given in (num_valid, np.int32(num_valid), np.array([num_valid], np.int64)):
        for run in (run_torch, run_jax):
            out = _outputs(run(op, *args, **kwargs, num_valid=given))
            for padded, unpadded in zip(out, full):
                np.testing.assert_array_equal(padded[:num_valid], unpadded[:num_valid], err_msg=f"{run.__name__}")
            np.testing.assert_array_equal(out[0][num_valid:], -1)
            if len(out) == 2:  # rejection: num_sampled
                np.testing.assert_array_equal(out[1][num_valid:], 0)


def test_nan_logits_in_padding_rows_leave_the_valid_rows_alone():
    """NaN logits in the padding rows: the valid rows' tokens stay the unpadded call's and the padding rows give
    -1. (That their logits are not read is not visible in the tokens; test_every_launch_of_a_padded_plan_checks_the_rows
    checks that every launch that reads logits takes the row flags, and each such kernel returns on a padding row.)"""
    args, kwargs = CASES["top_k_top_p_sample"]
    logits = args[0].copy()
    logits[3:] = np.nan
    out = run_torch("top_k_top_p_sample", logits, *args[1:], **kwargs, num_valid=3)
    np.testing.assert_array_equal(out[:3], run_torch("top_k_top_p_sample", *args, **kwargs)[:3])
    np.testing.assert_array_equal(out[3:], -1)


def test_num_valid_is_traced_under_jit():
    args, kwargs = CASES["gumbel_sample"]
    traces = []

    def fn(x, n):
        traces.append(1)
        return jsample.gumbel_sample(x, *map(jnp.asarray, args[1:]), num_valid=n)

    jitted = jax.jit(fn)
    full = np.asarray(jitted(args[0], BATCH))
    for n in (0, 2, 4):
        out = np.asarray(jitted(args[0], n))
        np.testing.assert_array_equal(out[:n], full[:n])
        np.testing.assert_array_equal(out[n:], -1)
    assert len(traces) == 1


@pytest.mark.parametrize("given, error, message", [
    (-1, ValueError, "gumbel_sample: num_valid must be in [0, B] = [0, 5], got -1."),
    (6, ValueError, "gumbel_sample: num_valid must be in [0, B] = [0, 5], got 6."),
    (2.0, TypeError, "gumbel_sample: num_valid must be None, an int or an int32 / int64 scalar array, got float."),
    (np.int32([1, 2]), ValueError,
     "gumbel_sample: num_valid must be a scalar array of shape () or [1], got shape (2,)."),
    (np.array(2.0, np.float32), TypeError, "gumbel_sample: num_valid must have dtype int32 or int64, got float32."),
])
def test_num_valid_errors_are_the_same_in_both_frontends(given, error, message):
    args, _ = CASES["gumbel_sample"]
    for run in (run_torch, run_jax):
        with pytest.raises(error) as raised:
            run("gumbel_sample", *args, num_valid=given)
        assert str(raised.value) == message


def test_every_launch_of_a_padded_plan_checks_the_rows():
    """With row_valid, every launch that could read logits or write an output takes the row flags."""
    from torch_backend import _execute as torch_execute

    target = torch_execute.compiled_target(132, 9)
    seeds = ArgSpec.contiguous((64,), "int64")
    plans = [plan_gumbel_sample(ArgSpec.contiguous((b, 32000), "bfloat16"), seeds, t, fp64=False, draft=False,
                                row_valid=True) for b in (1, 64) for t in (target, jax_execute.compiled_target(132))]
    plans += [plan_top_k_top_p_sample(ArgSpec.contiguous((b, 151936), "bfloat16"), ArgSpec.contiguous((b,), "int64"),
                                      target, has_top_k=True, has_top_p=True, has_min_p=False, fp64=False,
                                      row_valid=True) for b in (1, 16, 256)]
    plans += [plan_rejection_sample(ArgSpec.contiguous((b, rows, 32000), "bfloat16"), None,
                                    ArgSpec.contiguous((b,), "int64"), t, strict=False, fp64=False, row_valid=True)
              for b in (1, 256) for rows in (2, 5) for t in (target, jax_execute.compiled_target(132))]
    checked = {"gumbel_partial_kernel", "gumbel_one_launch_kernel", "argmax_reduce_kernel", "filter_stats_kernel",
               "filter_row_kernel", "filtered_one_launch_kernel", "rejection_stats_kernel", "rejection_decide_kernel",
               "rejection_decide_emit_kernel", "rejection_finish_kernel", "rejection_one_launch_kernel"}
    seen = set()
    for plan in plans:
        for step in plan.launches:
            name = step.kernel.fn.__name__ if hasattr(step.kernel, "fn") else step.kernel.__name__
            if name in checked:
                seen.add(name)
                assert dict(step.constexprs)["HAS_ROW_VALID"] and "row_valid" in step.args, name
    assert seen == checked


def test_padded_plans_do_not_grow_with_the_padding():
    """A padded plan's many-program launches (gumbel's partials, rejection's stats, the fused logprobs' single read
    and rank counts) run on at most PADDED_ROW_SLOTS row slots: from B = 64 to B = 1024 they do not grow, so
    padding rows cost their flags, not programs (benchmarks/lab/explore_padding_grids.py)."""
    from torch_backend import _execute as torch_execute

    target = torch_execute.compiled_target(132, 9)

    def plans(b):
        seeds = ArgSpec.contiguous((b,), "int64")
        yield plan_gumbel_sample(ArgSpec.contiguous((b, 151936), "bfloat16"), seeds, target, fp64=False, draft=False,
                                 row_valid=True)
        yield plan_gumbel_sample(ArgSpec.contiguous((b, 151936), "float32"), seeds, target, fp64=True, draft=False,
                                 row_valid=True)
        for rows in (2, 5):
            yield plan_rejection_sample(ArgSpec.contiguous((b, rows, 151936), "bfloat16"), None, seeds, target,
                                        strict=False, fp64=False, row_valid=True)
        yield plan_gumbel_sample(ArgSpec.contiguous((b, 151936), "bfloat16"), seeds, target, fp64=False, draft=False,
                                 row_valid=True, return_logprobs=True)

    slotted_kernels = ("gumbel_partial_kernel", "rejection_stats_kernel", "gumbel_logprobs_partial_kernel",
                       "rank_count_kernel")
    for small, large in zip(plans(64), plans(1024)):
        assert [step.kernel for step in small.launches] == [step.kernel for step in large.launches]
        slotted = 0
        for a, b in zip(small.launches, large.launches):
            if a.kernel.fn.__name__ in slotted_kernels:
                assert a.grid == b.grid and a.grid[0] == PADDED_ROW_SLOTS, (a.kernel, a.grid, b.grid)
                assert dict(a.constexprs)["ROW_SLOTS"] and "num_rows" in a.args
                slotted += 1
        assert slotted == (2 if small.variant.startswith("single read") else 1), small.variant
        assert large.buffer("num_rows").value == 1024


@pytest.mark.parametrize("case", ["gumbel_sample", "top_k_top_p_sample", "top_k_top_p_sample min_p", "rejection_sample",
                                  "rejection_sample draft logits"])
@pytest.mark.parametrize("tiling", ["launches", "one launch"])
def test_padding_in_the_gpu_tilings(case, tiling, force_target):
    """The GPU's plans through the interpreter (large_programs off): the launches' plan, and the one-launch plans
    (gumbel's and filtered's one launch with arrival counters; JAX's one-launch rejection at K <= 1)."""
    op = case.split()[0]
    args, kwargs = CASES[case]
    if op == "rejection_sample":  # K = 1: the one-launch variant where JAX's target is launch-bound
        args = (args[0][:, :2], args[1][:, :1], np.minimum(args[2], 1)) + args[3:]
        kwargs = {k: v[:, :1] for k, v in kwargs.items()}
    if tiling == "launches":
        force_target(large_programs=False, resident_programs=0, arrival_counters=False)
    else:
        force_target(large_programs=False, resident_programs=BATCH, arrival_counters=True)
    full = _outputs(run_torch(op, *args, **kwargs))
    for run in (run_torch, run_jax):
        out = _outputs(run(op, *args, **kwargs, num_valid=np.int32(3)))
        for padded, unpadded in zip(out, full):
            np.testing.assert_array_equal(padded[:3], unpadded[:3])
        np.testing.assert_array_equal(out[0][3:], -1)


@pytest.mark.parametrize("case", ["gumbel_sample", "gumbel_sample fp64", "gumbel_sample fp64 intervals",
                                  "rejection_sample", "rejection_sample draft logits"])
@pytest.mark.parametrize("tiling", ["gpu", "interpreter"])
def test_padding_flags_that_are_not_a_prefix(case, tiling, force_target, request):
    """jax.vmap over num_valid flattens 3 instances of 19 requests into one call whose padding rows are
    not a suffix (each instance's own); the valid rows equal each instance's unpadded call, the others
    the fill, in the GPU's tiling and the interpreter's. The GPU's padded plans run their row kernels on
    32 row slots (padded_row_slots): the 57 flattened rows wrap around them."""
    if tiling == "gpu":
        force_target(large_programs=False, resident_programs=0, arrival_counters=False)
    if case.endswith("intervals"):
        request.getfixturevalue("fp64_intervals_everywhere")
    if tiling == "gpu" and case.startswith("rejection"):  # the four launches (their stats and emit on row slots)
        request.getfixturevalue("rejection_in_four_launches")
    op = case.split()[0]
    rng = np.random.default_rng(57)
    n, batch, vocab, k = 3, 19, 300, 2
    seeds, positions = make_requests(rng, n * batch, wide_seeds=False)
    seeds, positions = seeds.reshape(n, batch), positions.reshape(n, batch)
    temperature = rng.choice(np.float32([0.0, 0.5, 1.0, 1.5]), (n, batch)).astype(np.float32)
    kwargs = dict(fp64=True) if "fp64" in case else {}
    if op == "gumbel_sample":
        logits = (rng.standard_normal((n, batch, vocab)) * 3).astype(np.float32)
        args = [logits, seeds, positions, temperature]
    else:
        target = (rng.standard_normal((n, batch, k + 1, vocab)) * 3).astype(np.float32)
        drafts = rng.integers(0, vocab, (n, batch, k)).astype(np.int32)
        drafts[:, ::2] = target[:, ::2, :k].argmax(-1)
        counts = rng.integers(0, k + 1, (n, batch)).astype(np.int32)
        args = [target, drafts, counts, seeds, positions, temperature]
        if case.endswith("draft logits"):
            kwargs = dict(draft_logits=target[:, :, :k] + rng.standard_normal((n, batch, k, vocab)).astype(np.float32))
    num_valid = np.int32([5, 0, batch])  # (the last rows valid: the slots' last laps do work)
    fn = getattr(jsample, op)
    extra = {name: jnp.asarray(value) for name, value in kwargs.items() if isinstance(value, np.ndarray)}
    flags = {name: value for name, value in kwargs.items() if not isinstance(value, np.ndarray)}
    padded = jax.vmap(lambda *a: fn(*a[:len(args)], num_valid=a[-1], **dict(zip(extra, a[len(args):-1])), **flags))(
        *map(jnp.asarray, args), *extra.values(), jnp.asarray(num_valid))
    padded = _outputs(padded)
    for i in range(n):
        instance = [a[i] for a in args]
        own = {name: value[i] if isinstance(value, np.ndarray) else value for name, value in kwargs.items()}
        full = _outputs(run_torch(op, *instance, **own))
        torch_padded = _outputs(run_torch(op, *instance, **own, num_valid=int(num_valid[i])))
        for got in (tuple(o[i] for o in padded), torch_padded):
            for value, want in zip(got, full):
                np.testing.assert_array_equal(value[:num_valid[i]], want[:num_valid[i]])
            np.testing.assert_array_equal(got[0][num_valid[i]:], -1)
            if op == "rejection_sample":
                np.testing.assert_array_equal(got[1][num_valid[i]:], 0)


@pytest.mark.parametrize("logprobs", [False, True], ids=["tokens", "return_logprobs"])
@pytest.mark.parametrize("op", ["gumbel_sample", "rejection_sample"])
def test_padded_row_slots_in_both_forms_of_num_valid(op, logprobs, force_target, rejection_in_four_launches):
    """40 requests on the GPU's padded plans (32 row slots: the last 8 rows are each slot's second lap), num_valid
    as torch's count (a tensor of either dtype, an int: rows_to_visit ends the laps at it) and as JAX's row flags:
    the valid rows equal the unpadded call's, the others the fill (with return_logprobs, the single read's
    statistics on row slots too: logprobs_stats_kernel over the K + 1 rows of each request, and
    gumbel_logprobs_partial_kernel)."""
    force_target(large_programs=False, resident_programs=0, arrival_counters=False)
    rng = np.random.default_rng(40)
    batch, vocab, k = 40, 300, 2
    seeds, positions = make_requests(rng, batch, wide_seeds=False)
    temperature = rng.choice(np.float32([0.0, 0.5, 1.0, 1.5]), batch).astype(np.float32)
    if op == "gumbel_sample":
        args = ((rng.standard_normal((batch, vocab)) * 3).astype(np.float32), seeds, positions, temperature)
    else:
        target = (rng.standard_normal((batch, k + 1, vocab)) * 3).astype(np.float32)
        drafts = rng.integers(0, vocab, (batch, k)).astype(np.int32)
        drafts[::2] = target[::2, :k].argmax(-1)
        counts = rng.integers(0, k + 1, batch).astype(np.int32)
        last = [2, 34, 39]  # each num_valid's last valid request accepts all its drafts: its bonus row is emitted
        temperature[last], drafts[last], counts[last] = 0.0, target[last, :k].argmax(-1), k
        args = (target, drafts, counts, seeds, positions, temperature)
    extra = dict(return_logprobs=True) if logprobs else {}
    full = _flat(run_torch(op, *args, **extra))
    other = (-args[0],) + args[1:]  # run first: its scratch values are not the call's (a row left out shows)
    for num_valid in (35, 3, 40, 0):
        for given in (num_valid, np.array(num_valid, np.int32), np.array([num_valid], np.int64)):
            for run in (run_torch, run_jax):
                run(op, *other, **extra)
                out = _flat(run(op, *args, num_valid=given, **extra))
                for padded, unpadded in zip(out, full):
                    np.testing.assert_array_equal(padded[:num_valid], unpadded[:num_valid])
                np.testing.assert_array_equal(out[0][num_valid:], -1)
