"""`precompile` for PyTorch: compile, before the first real call, every kernel a range of batch sizes reaches."""

import json
import os
import subprocess
import sys
import time

import torch

from jsample import kernels
from jsample.kernels.warmup import PrecompileReport, WarmupCase, _plan, input_specs, warmup_cases
from torch_backend import _execute as execute

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int32": torch.int32,
           "int64": torch.int64, "uint8": torch.uint8}  # (uint8: the row flags of a num_valid call)


def precompile(vocab_sizes, dtypes=("bfloat16",), *, ops=None, flags=None, max_batch=512, num_speculative_tokens=(4,),
               capture=True, device=None, workers=8) -> PrecompileReport:
    """Compiles every kernel that calls of `ops` at batch sizes 1..max_batch can reach, in parallel.

    Since no batch size costs a compilation beyond (at most) two tilings per kernel, this makes a few
    calls per op, vocabulary, dtype and flag set: those whose plans bring a compiled kernel no smaller
    batch brought (jsample.kernels.warmup). Afterwards no call within the range compiles anything, so
    a CUDA-graph capture over batch sizes (vLLM's 1, 2, 4, 8, ..., 512) or a serving loop whose batch
    changes each step starts at once.

    The compilations run in `workers` processes of their own, each making its share of the calls one
    after another; they fill Triton's cache directory (`TRITON_CACHE_DIR`, by default
    ~/.triton/cache), from which this process then loads every kernel (and later processes too). The
    calls take the paths real calls take: eager calls through the executor's eager path, and with
    `capture` the plans a CUDA-graph capture takes through its capture path.

    The calls use the argument types of a typical call: seeds and positions int64 [B], temperature
    float32 [B], top_k int64 [B], top_p and min_p float32 [B], draft tokens and counts int32. A call with
    other types (a Python-number temperature, int32 seeds) compiles its own variant on first use.

    Args:
        vocab_sizes: the logits' widths V.
        dtypes: the logits' dtypes (names: "bfloat16", "float16", "float32"; or torch dtypes).
        ops: op names among gumbel_sample, top_k_top_p_sample, rejection_sample and
            synthetic_rejection_sample (None: all four).
        flags: None (every filter combination; rejection's one-hot, draft-logit and strict methods), or a
            list of dicts of op flags, e.g. [{"top_k": True, "top_p": True}, {"min_p": True, "fp64": True}]
            (top_k_top_p_sample), [{"draft_logits": True, "method": "probabilistic"}] (rejection_sample),
            [{"batched_rates": True}] (synthetic_rejection_sample with [B, K] rates); "num_valid": True in any
            op's flags warms its calls with padding (num_valid given); {"vocab_shards": N} (gumbel_sample,
            top_k_top_p_sample, token_logprobs, rejection_sample) warms vocab-parallel calls over N shards of
            each vocabulary, split evenly (every round's kernels, as every rank runs them; with "top_k": an
            int, the calls whose top_k is that Python int, which take the shards' lists).
        max_batch: the largest batch size to cover.
        num_speculative_tokens: the K values of the rejection ops.
        capture: also the plans taken while a CUDA graph is captured.
        device: the CUDA device (None: the current one).
        workers: processes compiling at once (0: none, every call made here, one after another).

    Returns:
        A PrecompileReport: the calls made (op, batch, V, dtype, K, flags), how many distinct compiled
        kernels they cover, and the seconds it took. In the Triton interpreter nothing is compiled (and
        no call is made): the report lists the calls a GPU would make.
    """
    start = time.perf_counter()
    dtypes = tuple(str(d).removeprefix("torch.") for d in dtypes)
    device = torch.device("cuda" if device is None else device)
    compiled = device.type == "cuda" and not kernels.INTERPRETER
    if compiled:
        index = device.index if device.index is not None else torch.cuda.current_device()
        device = torch.device("cuda", index)
    targets = _targets(device if compiled else None, capture)
    cases = warmup_cases(vocab_sizes, dtypes, ops, flags, max_batch, num_speculative_tokens, targets, "torch")
    if compiled or os.environ.get("JSAMPLE_PRECOMPILE_INTERPRETED") == "1":  # (a test runs the calls interpreted)
        if workers > 0 and len(cases) > 1:
            _compile_in_workers(cases, device, capture, min(workers, len(cases)))
        for case in cases:  # here: from the cache directory where the workers compiled
            _call(case, device, capture)
    keys = set().union(*(case.keys for case in cases)) if cases else set()
    return PrecompileReport(cases, len(keys), time.perf_counter() - start, compiled)


def _targets(device, capture: bool) -> list:
    """The executor's compiled targets on `device` (None: an H200's, for the listing the interpreter makes; a CPU
    device: the interpreter's own target)."""
    if device is not None and device.type != "cuda":
        return [execute.target(device)]
    if device is None:
        sm_count, major = 132, 9
    else:
        sm_count = torch.cuda.get_device_properties(device).multi_processor_count
        major = torch.cuda.get_device_capability(device)[0]
    return [execute.compiled_target(sm_count, major, capturing)
            for capturing in ((False, True) if capture else (False,))]


def _call(case: WarmupCase, device, capture: bool) -> None:
    """The case's calls, as real calls run them: the eager plan through the executor's eager path, the capture
    plan through its capture path."""
    flags = dict(case.flags)
    for target in _targets(device, capture):
        plan = _plan(case.op, case.batch, case.vocab, case.dtype, case.k, flags, target)
        inputs = _inputs(case, device)
        if target.arrival_counters:
            execute.run(plan, device, inputs, behind=False)  # (the plan itself, not a stand-in while it compiles)
        else:
            execute._run_general(plan, device, inputs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _compile_in_workers(cases, device, capture: bool, workers: int) -> None:
    """The cases' calls in `workers` processes (each one call after another), which fill Triton's cache
    directory: each compiles in a process of its own (no GIL shared, no compiler state shared between threads)."""
    shards = [cases[i::workers] for i in range(workers)]
    code = "import sys; from torch_backend.warmup import _worker; _worker(sys.stdin.read())"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                    env.get("PYTHONPATH", "")] if p)
    processes = []
    for shard in shards:
        payload = json.dumps(dict(device=str(device), capture=capture,
                                  cases=[[c.op, c.batch, c.vocab, c.dtype, c.k, list(map(list, c.flags))]
                                         for c in shard]))
        process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=env, text=True)
        process.stdin.write(payload)
        process.stdin.close()
        processes.append(process)
    failures = []
    for process in processes:
        stderr = process.stderr.read()
        if process.wait() != 0:
            failures.append(stderr[-2000:])
    if failures:  # the calls here compile what a worker could not; say why it failed
        import warnings

        warnings.warn("precompile: a worker process failed, its calls compile here instead:\n" + failures[0],
                      RuntimeWarning, stacklevel=3)


def _worker(payload: str) -> None:
    task = json.loads(payload)
    device = torch.device(task["device"])
    for op, batch, vocab, dtype, k, flags in task["cases"]:
        _call(WarmupCase(op, batch, vocab, dtype, k, tuple(tuple(f) for f in flags)), device, task["capture"])


def _inputs(case, device) -> dict:
    """Zero tensors of a call's inputs (jsample.kernels.warmup.input_specs)."""
    return {name: torch.zeros(shape, dtype=_DTYPES[dtype], device=device)
            for name, (shape, dtype) in input_specs(case, row_count=True).items()}
