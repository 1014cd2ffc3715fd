"""`precompile` for PyTorch: compile, before the first real call, every kernel a range of batch sizes reaches."""

import time
from concurrent.futures import ThreadPoolExecutor

import torch

from jsample import kernels
from jsample.kernels.warmup import PrecompileReport, _plan, warmup_cases
from torch_backend import _execute as execute

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int32": torch.int32}


def precompile(vocab_sizes, dtypes=("bfloat16",), *, ops=None, flags=None, max_batch=512, num_speculative_tokens=(4,),
               capture=True, device=None, workers=8) -> PrecompileReport:
    """Compiles every kernel that calls of `ops` at batch sizes 1..max_batch can reach, in parallel.

    Since no batch size costs a compilation beyond (at most) two tilings per kernel, this makes a few
    calls per op, vocabulary, dtype and flag set: those whose plans bring a compiled kernel no smaller
    batch brought (jsample.kernels.warmup). Afterwards no call within the range compiles anything, so
    a CUDA-graph capture over batch sizes (vLLM's 1, 2, 4, 8, ..., 512) or a serving loop whose batch
    changes each step starts at once. Compiled kernels also land in Triton's cache directory
    (`TRITON_CACHE_DIR`, by default ~/.triton/cache), which a later process reuses.

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
            op's flags warms its calls with padding (num_valid given).
        max_batch: the largest batch size to cover.
        num_speculative_tokens: the K values of the rejection ops.
        capture: also the plans taken while a CUDA graph is captured.
        device: the CUDA device (None: the current one).
        workers: threads compiling at once.

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
        properties = torch.cuda.get_device_properties(device)
        capability = torch.cuda.get_device_capability(device)[0]
        targets = [execute.compiled_target(properties.multi_processor_count, capability)]
        if capture:
            targets.append(execute.compiled_target(properties.multi_processor_count, capability, True))
    else:
        targets = [execute.compiled_target(132, 9)] + ([execute.compiled_target(132, 9, True)] if capture else [])
    cases = warmup_cases(vocab_sizes, dtypes, ops, flags, max_batch, num_speculative_tokens, targets, "torch")
    if compiled:
        def run(case):
            with torch.cuda.device(device), torch.cuda.stream(torch.cuda.Stream(device)):
                for target in targets:
                    flags_ = dict(case.flags)
                    plan = _plan(case.op, case.batch, case.vocab, case.dtype, case.k, flags_, target)
                    execute._run_general(plan, device, _inputs(case, flags_, device))
                torch.cuda.current_stream(device).synchronize()

        # each kernel's source hash (the key of Triton's cache directory) computed here, once: computed by
        # several threads at once it came out differently in one of them, and the next process missed its cache
        for kernel in {step.kernel for case in cases for target in targets
                       for step in _plan(case.op, case.batch, case.vocab, case.dtype, case.k, dict(case.flags),
                                         target).launches}:
            kernel.cache_key  # noqa: B018
        with ThreadPoolExecutor(max(1, workers)) as pool:
            list(pool.map(run, cases))
        # Triton's in-process cache of a kernel is created by its first launch, unlocked: where two threads
        # launched a kernel first at once, one of them compiled into a cache that was replaced. Those
        # kernels are in Triton's cache directory now: one pass on this thread loads them (no compilation)
        for case in cases:
            run(case)
    keys = set().union(*(case.keys for case in cases)) if cases else set()
    return PrecompileReport(cases, len(keys), time.perf_counter() - start, compiled)


def _inputs(case, flags, device) -> dict:
    """Zero inputs of a call's plan (the values do not matter to the compiler; the dtypes do)."""
    b, v, k = case.batch, case.vocab, case.k
    i64 = dict(dtype=torch.int64, device=device)
    requests = dict(seeds=torch.zeros(b, **i64), positions=torch.zeros(b, **i64),
                    temperature=torch.ones(b, dtype=torch.float32, device=device))
    if flags.get("num_valid"):
        requests["row_valid"] = torch.ones(b, dtype=torch.int32, device=device)
    if case.op in ("gumbel_sample", "top_k_top_p_sample"):
        inputs = dict(requests, logits=torch.zeros(b, v, dtype=_DTYPES[case.dtype], device=device))
        for name, dtype in (("top_k", torch.int64), ("top_p", torch.float32), ("min_p", torch.float32)):
            if flags.get(name):
                inputs[name] = torch.zeros(b, dtype=dtype, device=device)
        return inputs
    drafts = dict(draft_tokens=torch.zeros(b, k, dtype=torch.int32, device=device),
                  num_draft_tokens=torch.zeros(b, dtype=torch.int32, device=device))
    if case.op == "rejection_sample":
        inputs = dict(requests, **drafts, target_logits=torch.zeros(b, k + 1, v, dtype=_DTYPES[case.dtype],
                                                                    device=device))
        if flags.get("draft_logits"):
            inputs["draft_logits"] = torch.zeros(b, k, v, dtype=torch.float32, device=device)
        return inputs
    return dict(drafts, **{name: requests[name] for name in ("seeds", "positions", "row_valid") if name in requests},
                target_tokens=torch.zeros(b, k + 1, dtype=torch.int32, device=device),
                conditional_rates=torch.zeros((b, k) if flags.get("batched_rates") else (k,), dtype=torch.float32,
                                             device=device))
