"""Compile once: no batch size costs a compilation (issue 39).

The plans are values, so the compiled kernels a sweep of shapes needs are read on the CPU
(jsample.kernels.compiles). Over B = 1..1024 at the vocabularies users meet, every dtype and flag set of
every op, on the compiled targets of both frontends (an H200's 132 SMs, and a smaller and a larger GPU),
each kernel is compiled in at most two tilings: the union of its compile keys over the sweep is the
union of at most two plans' keys (a plan may launch a kernel several times with different
constexprs: the steps of a search).
"""

import itertools

import pytest

from jsample import kernels
from jsample._jax import _execute as jax_execute
from jsample.kernels.compiles import compile_key, count_compilations, integer_class, with_stand_ins
from jsample.kernels.plan import ArgSpec
from jsample.kernels.warmup import _vocab_parallel_plan, input_specs, warmup_cases
from torch_backend import _execute as torch_execute

BATCHES = range(1, 1025)
VOCABS = (32000, 128256, 151936, 262144)
DTYPES = ("float32", "bfloat16", "float16")
MAX_TILINGS = 2


def targets(sm_count, op):
    """The compiled targets of each frontend (torch's while a CUDA graph is captured too: only gumbel_sample's
    plans read Target.arrival_counters)."""
    torch_targets = [torch_execute.compiled_target(sm_count, 9)]
    if op == "gumbel_sample":
        torch_targets.append(torch_execute.compiled_target(sm_count, 9, True))
    return {"torch": torch_targets, "jax": [jax_execute.compiled_target(sm_count)]}


def _plans(op, target, vocab, dtype, flags, batches=BATCHES):
    for b in batches:
        seeds = ArgSpec.contiguous((b,), "int64")
        if op == "gumbel_sample":
            yield kernels.plan_gumbel_sample(ArgSpec.contiguous((b, vocab), dtype), seeds, target, **flags)
        elif op == "token_logprobs":
            yield kernels.plan_token_logprobs(ArgSpec.contiguous((b, vocab), dtype), target, **flags)
        elif op == "vocab_parallel_gumbel":  # a shard of half the vocabulary, then the combine of two shards
            yield kernels.plan_gumbel_shard(ArgSpec.contiguous((b, vocab // 2), dtype), seeds, target, **flags)
            yield kernels.plan_shard_combine(target, batch=b, shards=2)
        elif op == "vocab_parallel_top_k_top_p":  # a call's rounds on a shard of half the vocabulary, as one plan
            yield _vocab_parallel_plan("top_k_top_p_sample", b, vocab, dtype, dict(flags, vocab_shards=2), target)
        elif op == "vocab_parallel_logprobs":  # token_logprobs', or gumbel_sample's with return_logprobs
            yield _vocab_parallel_plan(flags["op"], b, vocab, dtype, dict(flags, vocab_shards=2), target)
        elif op == "vocab_parallel_rejection":  # a call's rounds on a shard of half the vocabulary, as one plan
            yield _vocab_parallel_plan("rejection_sample", b, vocab, dtype, dict(flags, vocab_shards=2), target,
                                       flags["k"])
        elif op == "top_k_top_p_sample":
            yield kernels.plan_top_k_top_p_sample(ArgSpec.contiguous((b, vocab), dtype), seeds, target, **flags)
        elif op == "rejection_sample":
            k, draft = flags["k"], flags["draft"]
            yield kernels.plan_rejection_sample(
                ArgSpec.contiguous((b, k + 1, vocab), dtype),
                ArgSpec.contiguous((b, k, vocab), "float32") if draft else None, seeds, target,
                strict=flags["strict"], fp64=flags["fp64"], row_valid=flags.get("row_valid", False))
        else:
            k = flags["k"]
            yield kernels.plan_synthetic_rejection_sample(
                ArgSpec.contiguous((b, k + 1), "int32"), ArgSpec.contiguous((k,), "float32"), seeds, target,
                fp64=flags["fp64"], row_valid=flags.get("row_valid", False))


def _flag_sets(op):
    for fp64 in (False, True):
        if op == "gumbel_sample":
            yield dict(fp64=fp64, draft=False)
            yield dict(fp64=fp64, draft=False, row_valid=True)
            for num_top in (0, 5):  # the single read (FP32), and the sampling plan then token_logprobs' kernel
                yield dict(fp64=fp64, draft=False, return_logprobs=True, num_top=num_top)
                yield dict(fp64=fp64, draft=False, return_logprobs=True, num_top=num_top, row_valid=True)
        elif op == "vocab_parallel_gumbel":
            yield dict(fp64=fp64, draft=False, start_align=16)
            yield dict(fp64=fp64, draft=False, start_align=16, row_valid=True)
        elif op == "vocab_parallel_logprobs":
            yield dict(op="gumbel_sample", fp64=fp64, return_logprobs=True, num_valid=fp64, num_top=5 * fp64)
            yield dict(op="token_logprobs", num_top=7 * fp64)
            yield dict(op="token_logprobs", top_k=True, top_p=True, min_p=fp64, fp64=fp64)  # the searches first
            yield dict(op="token_logprobs", top_k=50, top_p=fp64, fp64=fp64)  # (a Python int: the lists first)
            yield dict(op="top_k_top_p_sample", top_k=50, top_p=True, return_logprobs=True, num_valid=fp64,
                       num_top=3 * fp64)
        elif op == "vocab_parallel_rejection":
            yield dict(k=4, draft_logits=True, method="probabilistic", fp64=fp64)
            yield dict(k=1, draft_logits=False, method="strict" if fp64 else "probabilistic", fp64=fp64,
                       num_valid=True)
        elif op == "vocab_parallel_rejection":
            yield dict(k=4, draft_logits=True, method="probabilistic", fp64=fp64)
            yield dict(k=1, draft_logits=False, method="strict" if fp64 else "probabilistic", fp64=fp64,
                       num_valid=True)
        elif op == "vocab_parallel_top_k_top_p":
            for k, p, m in ((True, True, False), (True, True, True), (False, True, False), (False, False, True),
                            (50, True, False), (256, False, True)):  # (an int: a Python int's lists)
                yield dict(top_k=k, top_p=p, min_p=m, fp64=fp64, num_valid=m)
        elif op == "token_logprobs":
            for num_top, filters in ((0, ()), (0, ("has_top_k", "has_top_p")), (7, ())):
                yield dict(has_top_k="has_top_k" in filters, has_top_p="has_top_p" in filters, has_min_p=False,
                           fp64=fp64, num_top=num_top, row_valid=num_top == 7)
            yield dict(has_top_k=True, has_top_p=True, has_min_p=fp64, fp64=fp64, num_top=3, top_k_in_list=True)
        elif op == "top_k_top_p_sample":
            for k, p, m in itertools.product((False, True), repeat=3):
                yield dict(has_top_k=k, has_top_p=p, has_min_p=m, fp64=fp64)
            yield dict(has_top_k=True, has_top_p=True, has_min_p=True, fp64=fp64, row_valid=True)
        elif op == "rejection_sample":
            for k, draft, strict in itertools.product((1, 4), (False, True), (False, True)):
                yield dict(k=k, draft=draft, strict=strict, fp64=fp64)
                if not draft:
                    yield dict(k=k, draft=draft, strict=strict, fp64=fp64, row_valid=True)
        else:
            for k in (1, 4):
                yield dict(k=k, fp64=fp64)
                yield dict(k=k, fp64=fp64, row_valid=True)


def tilings(plans, frontend):
    """{kernel: the distinct sets of compile keys one plan asks of it}, over `plans`."""
    found = {}
    for plan in with_stand_ins(plans, frontend):
        per_plan = {}
        for step in plan.launches:
            per_plan.setdefault(step.kernel, set()).add(compile_key(step, frontend))
        for kernel, keys in per_plan.items():
            found.setdefault(kernel.__name__ if hasattr(kernel, "__name__") else kernel.fn.__name__, set()).add(
                frozenset(keys))
    return found


OPS = ("gumbel_sample", "top_k_top_p_sample", "rejection_sample", "synthetic_rejection_sample", "token_logprobs",
       "vocab_parallel_gumbel", "vocab_parallel_top_k_top_p", "vocab_parallel_logprobs", "vocab_parallel_rejection")


@pytest.mark.slow
@pytest.mark.parametrize("frontend", ["torch", "jax"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("vocab", VOCABS)
def test_no_batch_size_costs_a_compilation(op, vocab, frontend):
    if op == "synthetic_rejection_sample" and vocab != VOCABS[0]:
        pytest.skip("no vocabulary")
    if op == "vocab_parallel_rejection" and vocab not in (151936, 262144):
        pytest.skip("the two kinds of split: a shard's edge cutting a block (151936), or not (262144)")
    failures = []
    for sm_count in (132, 78, 148):
        for target, dtype, flags in itertools.product(targets(sm_count, op)[frontend], DTYPES, _flag_sets(op)):
            if op == "synthetic_rejection_sample" and dtype != DTYPES[0]:
                continue
            if sm_count != 132 and (dtype == "float16" or flags.get("fp64")):
                continue  # the smaller and larger GPUs: the common dtypes, enough to move every boundary
            for kernel, sets in tilings(_plans(op, target, vocab, dtype, flags), frontend).items():
                if len(sets) > MAX_TILINGS:
                    failures.append(f"{kernel}: {len(sets)} tilings at {dtype} {flags} on {sm_count} SMs")
    assert not failures, "\n".join(failures[:10])


def test_the_counter_counts_batch_dependent_integers():
    # a kernel given the batch as an integer argument: JAX bakes each value in, Triton specialises it
    step = kernels.Launch(kernels.argmax_reduce_kernel, (7,), ("partial_score", "partial_index", "logits", 7, 16, 1),
                          ("tokens",), (("FP64", False), ("REDUCE_BLOCK", 1)), 1)
    other = kernels.Launch(kernels.argmax_reduce_kernel, (9,), ("partial_score", "partial_index", "logits", 9, 16, 1),
                           ("tokens",), (("FP64", False), ("REDUCE_BLOCK", 1)), 1)
    assert compile_key(step, "jax") != compile_key(other, "jax")
    assert compile_key(step, "torch") == compile_key(other, "torch")
    assert [integer_class(v) for v in (1, 7, 32, 2**40)] == ["1", "i32", "i32/16", "i64/16"]
    counted = count_compilations([kernels.Plan((), (step,), ()), kernels.Plan((), (other,), ())], "jax")
    assert len(counted["argmax_reduce_kernel"]) == 2


def test_the_sweep_would_catch_a_batch_in_a_constexpr():
    # the check itself has teeth: the plans before issue 39 passed the batch to the kernels
    step = lambda b: kernels.Launch(kernels.argmax_reduce_kernel, (b,), ("partial_score", b), ("tokens",),
                                    (("REDUCE_BLOCK", kernels.triton.next_power_of_2(b)),), 1)
    plans = [kernels.Plan((), (step(b),), ()) for b in (1, 3, 5, 9)]
    assert len(tilings(plans, "torch")["argmax_reduce_kernel"]) == 4


def test_precompile_covers_every_batch_size_with_few_calls():
    """The calls precompile makes bring every compile key that any batch size up to max_batch needs, in at most
    two calls per kernel tiling (here: per op, dtype and flag set), on both frontends' targets."""
    import jsample
    import torch_backend
    from jsample.kernels.warmup import _plan

    for frontend, report in (("torch", torch_backend.precompile([32000, 151936], ["bfloat16"], max_batch=300)),
                             ("jax", jsample.precompile([151936], ["float32"], max_batch=300))):
        assert report.compiled == (not kernels.INTERPRETER)  # the interpreter: the calls are listed, not made
        covered = set().union(*(case.keys for case in report.cases))
        assert report.kernels == len(covered)
        groups = {}
        for case in report.cases:
            groups.setdefault((case.op, case.vocab, case.dtype, case.k, case.flags), []).append(case.batch)
        assert max(len(batches) for batches in groups.values()) <= 2 * MAX_TILINGS
        targets_ = targets(132, "gumbel_sample")[frontend]
        for (op, vocab, dtype, k, flags), _ in groups.items():
            for b in (1, 2, 3, 7, 16, 17, 63, 64, 100, 150, 255, 300):
                for target in targets_:
                    keys = {compile_key(s, frontend) for s in _plan(op, b, vocab, dtype, k, dict(flags), target).launches}
                    assert keys <= covered, (frontend, op, vocab, dtype, flags, b)


def test_precompile_warms_the_plan_of_a_python_int_top_k():
    """A "top_k" flag given as an int in [1, 64] warms the logprobs plan a call with that Python int gets (the list
    alone: no search); True, or an int past the list, the plan of a per-row top_k tensor (the searches)."""
    from jsample.kernels.warmup import _plan

    target = torch_execute.compiled_target(132, 9)
    for op, extra in (("token_logprobs", {}), ("top_k_top_p_sample", dict(return_logprobs=True))):
        for top_k, searched in ((50, False), (64, False), (True, True), (65, True)):
            plan = _plan(op, 8, 151936, "bfloat16", 0, dict(extra, top_k=top_k, top_p=True), target)
            names = {step.kernel.fn.__name__ for step in plan.launches}
            assert "filtered_list_reduce_kernel" in names
            assert ("shard_filter_search_kernel" in names) == ("filtered_finish_kernel" in names) == searched, \
                (op, top_k, names)


def test_precompile_refuses_unknown_ops_and_batches():
    import torch_backend

    with pytest.raises(ValueError, match="precompile: ops must be among"):
        torch_backend.precompile([32000], ops=["gumbel"])
    with pytest.raises(ValueError, match="precompile: max_batch must be a positive int, got 0"):
        torch_backend.precompile([32000], max_batch=0)


def test_torch_buffers_are_16_byte_aligned_at_every_batch_size():
    """Triton specialises a pointer on its 16-byte alignment: a scratch or counter buffer whose alignment followed
    the batch (counters packed end to end after one of B elements) would be a compilation each way."""
    target = torch_execute.compiled_target(132, 9)
    for b in range(1, 70):
        for has_top_k, has_top_p in ((True, True), (False, True), (True, False)):
            plan = kernels.plan_top_k_top_p_sample(ArgSpec.contiguous((b, 151936), "bfloat16"),
                                                   ArgSpec.contiguous((b,), "int64"), target, has_top_k=has_top_k,
                                                   has_top_p=has_top_p, has_min_p=False, fp64=False)
            recipe = torch_execute._Recipe(plan)
            assert all(4 * offset % 16 == 0 for _, offset in recipe.counters), (b, recipe.counters)
            assert all(offset % 16 == 0 for _, offset, _ in recipe.scratch), b


def test_precompile_workers_make_the_calls(tmp_path):
    """The machinery GPU runs use, run here through the interpreter (JSAMPLE_PRECOMPILE_INTERPRETED): the worker
    processes make their shares of the calls, then this process makes them all; a failing worker is reported."""
    import subprocess
    import sys

    code = ("import torch, torch_backend\n"
            "r = torch_backend.precompile([64], ['float32'], ops=['gumbel_sample', 'synthetic_rejection_sample'],"
            " max_batch=3, device='cpu', workers=2)\n"
            "print(len(r.cases), r.kernels)\n")
    env = {**__import__("os").environ, "JSAMPLE_PRECOMPILE_INTERPRETED": "1", "JSAMPLE_INTERPRET": "1"}  # GPU too
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0 and "worker process failed" not in result.stderr, result.stderr[-3000:]
    calls, kernels_ = map(int, result.stdout.split())
    assert calls >= 2 and kernels_ >= 2


def test_precompile_makes_the_inputs_of_every_case():
    """Both frontends can make every input a warm-up case names (a num_valid call's uint8 row flags were missing
    from torch's dtypes: precompile with {"num_valid": True} failed on a GPU, where the calls are made)."""
    import torch

    from jsample._jax import warmup as jax_warmup
    from torch_backend import warmup as torch_warmup

    cases = []
    for op in ("gumbel_sample", "top_k_top_p_sample", "rejection_sample", "synthetic_rejection_sample",
               "token_logprobs"):
        for flags in ({}, {"num_valid": True}, {"return_logprobs": True, "num_valid": True},
                      {"vocab_shards": 2, "num_valid": True}):
            if flags.get("vocab_shards") and op not in ("gumbel_sample", "token_logprobs", "rejection_sample"):
                continue
            if op == "token_logprobs" and flags.get("num_valid"):
                flags = {"vocab_shards": 2} if flags.get("vocab_shards") else {}
            cases.extend(warmup_cases([1024], ["bfloat16"], [op], [flags], 2, (2,),
                                      [torch_execute.compiled_target(132, 9)], "torch"))
    assert any(dtype == "uint8" for case in cases for _, dtype in input_specs(case).values())
    assert any(spec == ((1,), "int64") for case in cases for spec in input_specs(case, row_count=True).values())
    for case in cases:
        made = torch_warmup._inputs(case, torch.device("cpu"))
        assert {name: (tuple(t.shape), str(t.dtype).replace("torch.", "")) for name, t in made.items()} == {
            name: (tuple(shape), dtype) for name, (shape, dtype) in input_specs(case, row_count=True).items()}, case
        assert set(jax_warmup._input_shapes(case)) == set(made), case


def test_precompile_covers_vocab_parallel_calls():
    """flags [{"vocab_shards": N}]: precompile's calls bring every compile key of the shard and combine plans that
    each rank of an even split runs, at every batch size, on both frontends' targets; a split into shards whose
    width is not a multiple of 4 columns is refused."""
    import jsample
    import torch_backend

    def both_frontends(op, dtype, flags):
        """(frontend, its report) of precompile([151936], [dtype], ops=[op], flags=[flags], max_batch=300)."""
        for frontend, module in (("torch", torch_backend), ("jax", jsample)):
            yield frontend, module.precompile([151936], [dtype], ops=[op], flags=[flags], max_batch=300)

    for frontend, vocab, shards, flags, report in (
            ("torch", 151936, 2, {"num_valid": True},
             torch_backend.precompile([151936], ["bfloat16"], ops=["gumbel_sample"],
                                      flags=[{"vocab_shards": 2, "num_valid": True}], max_batch=300)),
            ("jax", 262144, 4, {"fp64": True}, jsample.precompile([262144], ["float32"], ops=["gumbel_sample"],
                                                                 flags=[{"vocab_shards": 4, "fp64": True}],
                                                                 max_batch=300))):
        covered = set().union(*(case.keys for case in report.cases))
        assert 1 <= len(report.cases) <= 2 * MAX_TILINGS, report.cases
        width, dtype = vocab // shards, report.cases[0].dtype
        for b in (1, 2, 3, 7, 16, 17, 63, 64, 100, 150, 255, 300):
            for target in targets(132, "gumbel_sample")[frontend]:
                align = kernels.start_alignment([i * width for i in range(shards)])
                shard = kernels.plan_gumbel_shard(ArgSpec.contiguous((b, width), dtype),
                                                  ArgSpec.contiguous((b,), "int64"), target,
                                                  fp64=flags.get("fp64", False), draft=False, start_align=align,
                                                  row_valid=flags.get("num_valid", False))
                combine = kernels.plan_shard_combine(target, batch=b, shards=shards)
                keys = {compile_key(s, frontend) for s in shard.launches + combine.launches}
                assert keys <= covered, (frontend, b)
    # vocab-parallel top_k_top_p_sample: every round's kernels of every batch size (per-row top_k: the searches;
    # a Python int: the lists)
    for filters, list_capacity in (({"top_k": True, "top_p": True, "num_valid": True}, 0),
                                   ({"top_k": 50, "top_p": True, "num_valid": True}, 64)):
        for frontend, report in both_frontends("top_k_top_p_sample", "bfloat16", dict(filters, vocab_shards=2)):
            covered = set().union(*(case.keys for case in report.cases))
            assert 1 <= len(report.cases) <= MAX_TILINGS, report.cases
            for b in (1, 2, 3, 17, 64, 255, 300):
                for target in targets(132, "top_k_top_p_sample")[frontend]:
                    sharded = kernels.plan_top_k_top_p_shard(
                        ArgSpec.contiguous((b, 75968), "bfloat16"), ArgSpec.contiguous((b,), "int64"), target,
                        has_top_k=True, has_top_p=True, has_min_p=False, fp64=False, shards=2, start_align=16,
                        row_valid=True, list_capacity=list_capacity)
                    keys = {compile_key(s, frontend) for plan in sharded.rounds for s in plan.launches}
                    assert len(keys) >= (4 if list_capacity else 7) and keys <= covered, (frontend, b)
    # vocab-parallel token_logprobs (with filters: the kept set's searches first), and the samplers'
    # return_logprobs (their tokens' token_logprobs after them)
    for op, flags, filters in (("token_logprobs", {}, {}), ("gumbel_sample", {"return_logprobs": True}, {}),
                               ("token_logprobs", {"top_k": True, "top_p": True}, dict(has_top_k=True, has_top_p=True)),
                               ("token_logprobs", {"top_k": 50, "top_p": True},  # (a Python int: the lists)
                                dict(has_top_k=True, has_top_p=True, threshold_given=True)),
                               ("top_k_top_p_sample", {"top_k": 50, "min_p": True, "return_logprobs": True,
                                                       "num_valid": True},
                                dict(has_top_k=True, has_min_p=True, row_valid=True, threshold_given=True))):
        for frontend, report in both_frontends(op, "float16", dict(flags, vocab_shards=2)):
            covered = set().union(*(case.keys for case in report.cases))
            for b in (1, 2, 3, 17, 64, 255, 300):
                for target in targets(132, op)[frontend]:
                    for num_top in (0, 1, 9):  # (every count from 1 runs the same kernels)
                        sharded = kernels.plan_token_logprobs_shard(ArgSpec.contiguous((b, 75968), "float16"), target,
                                                                    vocab=151936, starts=(0, 75968), start_align=16,
                                                                    num_top=num_top, **filters)
                        keys = {compile_key(s, frontend) for plan in sharded.rounds for s in plan.launches}
                        assert keys <= covered, (frontend, op, b, num_top)
                        if filters and not filters.get("threshold_given"):  # (+ stats, bound, searches, threshold)
                            assert len(keys) >= 3 + (num_top > 0) + 4, (frontend, op, b, num_top)
                        else:
                            assert len(keys) == 3 + (num_top > 0), (frontend, op, b, num_top)
    # vocab-parallel rejection_sample: every round's kernels (the heads, the copies of the cut blocks, ...)
    for flags in ({"draft_logits": True, "method": "probabilistic", "num_valid": True}, {"method": "strict"}):
        for frontend, report in both_frontends("rejection_sample", "bfloat16", dict(flags, vocab_shards=2)):
            covered = set().union(*(case.keys for case in report.cases))
            for b in (1, 2, 3, 17, 64, 255, 300):
                for target in targets(132, "rejection_sample")[frontend]:
                    sharded = kernels.plan_rejection_sample_shard(
                        ArgSpec.contiguous((b, 5, 75968), "bfloat16"),
                        ArgSpec.contiguous((b, 4, 75968), "float32") if flags.get("draft_logits") else None,
                        ArgSpec.contiguous((b,), "int64"), target, strict=flags["method"] == "strict", fp64=False,
                        vocab=151936, starts=(0, 75968), start_align=16, row_valid=flags.get("num_valid", False))
                    keys = {compile_key(s, frontend) for plan in sharded.rounds for s in plan.launches}
                    assert keys <= covered and len(keys) >= 7, (frontend, flags, b)
    with pytest.raises(ValueError, match="precompile: vocab_shards = 3 must split V = 151936 into shards of a"):
        torch_backend.precompile([151936], ops=["gumbel_sample"], flags=[{"vocab_shards": 3}], max_batch=4)
    with pytest.raises(ValueError, match="precompile: rejection_sample with vocab_shards takes no return_logprobs"):
        torch_backend.precompile([151936], ops=["rejection_sample"],
                                 flags=[{"vocab_shards": 2, "return_logprobs": True}], max_batch=4)


def test_torch_compile_ahead_warms_each_variant_once_side_by_side(monkeypatch):
    """The torch executor's first run of a plan (_compile_ahead, GPU only: here with stand-in kernels and CUDA
    calls): one Triton warmup per distinct kernel variant, a kernel's variants one after another on one thread and
    different kernels on different threads, the launch's grid, constexprs and options passed; a variant whose
    warmup fails is left to its launch (and tried again next time), the others are not warmed again; plans of one
    kernel, and runs while a CUDA graph is captured, warm nothing."""
    import contextlib
    import threading
    import time

    import torch

    from jsample.kernels.plan import Plan, launch
    from torch_backend import _execute

    class Kernel:  # a JITFunction's warmup and its compiled kernel's launcher
        def __init__(self, name, fail=False):
            self.name, self.fail, self.calls, self.params = name, fail, [], ()

        def warmup(self, *args, grid, **kwargs):
            self.calls.append((args, grid, kwargs, threading.get_ident()))
            time.sleep(0.05)  # long enough for the pool to hand the other kernels to other threads
            if self.fail:
                raise RuntimeError("does not compile")
            return type("Compiled", (), {"run": None})()

    monkeypatch.setattr(_execute.kernels, "INTERPRETER", False)
    monkeypatch.setattr(_execute, "COMPILE_THREADS", 4)
    monkeypatch.setattr(_execute._fast_path, "stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(_execute, "_COMPILED_AHEAD", set())
    a, b, c, bad = Kernel("a"), Kernel("b"), Kernel("c"), Kernel("bad", fail=True)
    steps = (launch(a, (4, 2), ("x", 7), ("y",), num_warps=4, STEP=0), launch(b, (4,), ("y",), ("z",), num_warps=1),
             launch(a, (4, 2), ("x", 7), ("y",), num_warps=4, STEP=1), launch(a, (4, 2), ("x", 7), ("y",), num_warps=4,
                                                                             STEP=0),
             launch(c, (1,), ("z",), ("w",), num_warps=2, pdl=True), launch(bad, (1,), ("w",), ("v",), num_warps=1))
    plan = Plan((), steps, (), "stand-in")
    x, y, z, w, v = (torch.zeros(4) for _ in range(5))
    args = [[x, 7, y], [y, z], [x, 7, y], [x, 7, y], [z, w], [w, v]]
    _execute._compile_ahead(plan, args)
    assert [call[2]["STEP"] for call in a.calls] == [0, 1]  # two variants of a (STEP 0 twice in the plan: once)
    assert a.calls[0][:2] == ((x, 7, y), (4, 2)) and a.calls[0][2]["num_warps"] == 4
    assert c.calls[0][2]["launch_pdl"] is True and c.calls[0][2]["num_warps"] == 2 and len(b.calls) == 1
    assert len({call[3] for call in a.calls}) == 1  # a's variants on one thread
    threads = {a.calls[0][3], b.calls[0][3], c.calls[0][3], bad.calls[0][3]}
    assert len(threads) >= 2 and threading.get_ident() not in threads
    _execute._compile_ahead(plan, args)  # warmed: none again (the failed one, alone, is left to its launch)
    assert (len(a.calls), len(b.calls), len(c.calls), len(bad.calls)) == (2, 1, 1, 1)
    monkeypatch.setattr(_execute, "_COMPILED_AHEAD", set())
    _execute._compile_ahead(Plan((), steps[:1] + steps[2:4], (), "one kernel"), [args[0]] * 3)
    monkeypatch.setattr(_execute._fast_path, "stream_capturing", lambda: True)
    _execute._compile_ahead(plan, args)
    assert (len(a.calls), len(b.calls), len(c.calls), len(bad.calls)) == (2, 1, 1, 1)


def test_torch_vocab_parallel_first_call_compiles_every_round_ahead(monkeypatch):
    """compile_rounds_ahead (GPU only: here _compile_ahead recorded, on CPU tensors): at a vocab-parallel
    top_k_top_p_sample's first run on a device, one _compile_ahead over every launch of every round, each launch
    given tensors of the dtypes and shapes its real run gets (the all-gathers' [shards, ...] stand-ins, the earlier
    rounds' outputs), the inputs themselves where they are inputs; once per rounds and device, nothing while a
    CUDA graph is captured."""
    import torch

    from torch_backend import _execute

    calls = []
    monkeypatch.setattr(_execute.kernels, "INTERPRETER", False)
    monkeypatch.setattr(_execute, "COMPILE_THREADS", 4)
    monkeypatch.setattr(_execute._fast_path, "stream_capturing", lambda: False)
    monkeypatch.setattr(_execute, "_ROUNDS_AHEAD", set())
    monkeypatch.setattr(_execute, "_compile_ahead", lambda plan, steps: calls.append((plan, steps)))
    monkeypatch.setattr(torch.cuda, "device", lambda device: __import__("contextlib").nullcontext())
    monkeypatch.setattr(torch, "zeros", lambda shape, dtype, device: torch.empty(shape, dtype=dtype))
    batch, width, shards = 3, 4096, 2
    target = torch_execute.compiled_target(132, 9)
    sharded = kernels.plan_top_k_top_p_shard(ArgSpec.contiguous((batch, width), "bfloat16"),
                                             ArgSpec.contiguous((batch,), "int64"), target, has_top_k=True,
                                             has_top_p=True, has_min_p=False, fp64=False, shards=shards, start_align=16)
    inputs = dict(logits=torch.empty((batch, width), dtype=torch.bfloat16), seeds=torch.empty(batch, dtype=torch.int64),
                  positions=torch.empty(batch, dtype=torch.int64), temperature=torch.empty(batch),
                  top_k=torch.empty(batch, dtype=torch.int64), top_p=torch.empty(batch),
                  vocab_start=torch.empty(1, dtype=torch.int32))
    cuda = type("Device", (), {"type": "cuda"})()
    for _ in range(2):
        _execute.compile_rounds_ahead(sharded.rounds, shards, cuda, inputs)
    assert len(calls) == 1
    merged, steps = calls[0]
    assert list(merged.launches) == [step for plan in sharded.rounds for step in plan.launches]
    sizes = {"gathered_" + plan.outputs[0]: (shards,) + plan.buffer(plan.outputs[0]).shape
             for plan in sharded.rounds[:-1]}
    sizes.update({name + "_in": plan.buffer(name).shape for plan in sharded.rounds[:-1] for name in plan.outputs[1:]})
    for step, args in zip(merged.launches, steps):
        for name, value in zip(list(step.args) + list(step.outputs), args):
            if name in inputs:
                assert value is inputs[name]
            elif isinstance(name, str):
                assert tuple(value.shape) == sizes.get(name, merged.buffer(name).shape), (step.kernel, name)
            else:
                assert value == name
    monkeypatch.setattr(_execute, "_ROUNDS_AHEAD", set())
    monkeypatch.setattr(_execute._fast_path, "stream_capturing", lambda: True)
    _execute.compile_rounds_ahead(sharded.rounds, shards, cuda, inputs)
    assert len(calls) == 1


def test_jax_lower_ahead_lowers_each_distinct_launch_once_side_by_side(monkeypatch):
    """JAX's first trace of a plan on a GPU (_execute._lower_ahead; here with a stand-in launch and GPU check):
    each distinct launch lowered alone first, on worker threads, with the launch's own arguments (shapes, dtypes,
    integers), outputs and options, then the plan's launches on the tracing thread; a second trace lowers none
    ahead, nor does a new batch size, and neither do COMPILE_THREADS < 2 nor the CPU."""
    import threading
    from collections import Counter

    import jax
    import jax.numpy as jnp

    from jsample import kernels
    from jsample._jax import _execute, _launch
    from jsample.kernels.plan import ArgSpec

    calls = []

    def stand_in(kernel, *args, grid, out_shapes, **options):
        calls.append((threading.get_ident(), kernel, tuple(grid), tuple(
            a if isinstance(a, int) else (tuple(a.shape), jnp.dtype(a.dtype).name) for a in args),
            tuple((tuple(s.shape), jnp.dtype(s.dtype).name) for s in out_shapes), tuple(sorted(options.items()))))
        return [jnp.zeros(s.shape, s.dtype) for s in out_shapes]

    monkeypatch.setattr(_execute, "launch", stand_in)
    monkeypatch.setattr(_execute, "_LOWERED_AHEAD", set())
    batch, vocab = 64, 151936
    plan = kernels.plan_top_k_top_p_sample(ArgSpec.contiguous((batch, vocab), "bfloat16"),
                                           ArgSpec.contiguous((batch,), "int32"), _execute.compiled_target(132),
                                           has_top_k=True, has_top_p=True, has_min_p=False, fp64=False)
    assert len({step.kernel for step in plan.launches}) >= 5
    inputs = dict(logits=jax.ShapeDtypeStruct((batch, vocab), jnp.bfloat16),
                  **{name: jax.ShapeDtypeStruct((batch,), dtype) for name, dtype in (
                      ("seeds", jnp.int32), ("positions", jnp.int32), ("temperature", jnp.float32),
                      ("top_k", jnp.int32), ("top_p", jnp.float32))})
    main = threading.get_ident()

    def trace():
        calls.clear()
        jax.jit(lambda arrays: _execute.run(plan, arrays)).lower(inputs)
        return [c for c in calls if c[0] != main], [c for c in calls if c[0] == main]

    monkeypatch.setattr(_launch, "on_gpu", lambda: False)  # the CPU: none ahead
    ahead, own = trace()
    assert not ahead and len(own) == len(plan.launches)
    monkeypatch.setattr(_launch, "on_gpu", lambda: True)
    monkeypatch.setattr(_execute, "COMPILE_THREADS", 1)
    ahead, own = trace()
    assert not ahead and len(own) == len(plan.launches)
    monkeypatch.setattr(_execute, "COMPILE_THREADS", 4)
    ahead, own = trace()
    assert len(own) == len(plan.launches)
    assert Counter(c[1:] for c in ahead) == Counter(set(c[1:] for c in own))  # each distinct launch once, the same
    assert len({c[0] for c in ahead}) >= 2  # side by side
    ahead, own = trace()
    assert not ahead and len(own) == len(plan.launches)  # lowered ahead once a process
    # a new batch size: the same kernels, dtypes and integers (jax-triton's compile keys), nothing lowered ahead
    plan = kernels.plan_top_k_top_p_sample(ArgSpec.contiguous((batch + 1, vocab), "bfloat16"),
                                           ArgSpec.contiguous((batch + 1,), "int32"), _execute.compiled_target(132),
                                           has_top_k=True, has_top_p=True, has_min_p=False, fp64=False)
    inputs = {name: jax.ShapeDtypeStruct((batch + 1,) + spec.shape[1:], spec.dtype) for name, spec in inputs.items()}
    ahead, own = trace()
    assert not ahead and len(own) == len(plan.launches)
