"""Cold cost: compile time of a CUDA-graph-capture-style sweep over batch sizes, with and without `precompile`.

Each mode runs in a process of its own with the Triton cache directory it is given (empty for a cold
start), on one GPU, torch frontend:

    python benchmarks/bench_compile.py sweep [--precompile] [--checkout PATH] [--ops ...] [--out FILE.json]
    python benchmarks/bench_compile.py first-call [--checkout PATH]       # a second process's first call

`sweep` calls each op of the capture-style set (V = 151936 bf16: gumbel; top_k + top_p, top_p, min_p;
rejection K = 4 with and without draft logits; synthetic) at each of vLLM's capture sizes (1, 2, 4, 8,
16, ..., 512) in turn, timing each call to its end (synchronised) and counting Triton compilations with
`triton.knobs.runtime.jit_post_compile_hook`. With --precompile it first calls `precompile` and reports its
seconds; the sweep then shows what a later new batch size costs.
"""

import argparse
import json
import os
import sys
import time

CAPTURE_SIZES = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
V, K = 151936, 4
OPS = ("gumbel", "top_k+top_p", "top_p", "min_p", "rejection", "rejection+draft", "synthetic")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("sweep", "first-call"))
    parser.add_argument("--checkout", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--precompile", action="store_true")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--sizes", default=None, help="comma-separated batch sizes (default: vLLM's capture sizes)")
    parser.add_argument("--budget", type=float, default=1e9, help="stop the sweep after this many seconds")
    parser.add_argument("--out", default=None)
    parser.add_argument("--verbose", action="store_true", help="a line per compilation")
    args = parser.parse_args()
    args_ = args
    t_start = time.perf_counter()
    sys.path.insert(0, os.path.abspath(args.checkout))
    import torch
    import triton

    import torch_backend

    compiles = []
    try:
        def hook(*args, **kwargs):
            compiles.append(time.perf_counter())
            if args_.verbose:
                fn = kwargs.get("fn")
                print(f"  compiled {getattr(getattr(fn, 'fn', fn), '__name__', fn)} "
                      f"already_compiled={kwargs.get('already_compiled')} at {compiles[-1] - t_start:.2f} s", flush=True)
        triton.knobs.runtime.jit_post_compile_hook = hook
        hook = True
    except AttributeError:
        hook = False
    device = torch.device("cuda")
    ops = args.ops.split(",")

    def call(op, b):
        x = torch.randn(b, V, device=device).to(torch.bfloat16)
        seeds = torch.arange(b, device=device, dtype=torch.int64)
        positions = torch.arange(b, device=device, dtype=torch.int64)
        temperature = torch.full((b,), 0.8, device=device)
        if op == "gumbel":
            return torch_backend.gumbel_sample(x, seeds, positions, temperature)
        if op in ("top_k+top_p", "top_p", "min_p"):
            kw = {"top_k+top_p": dict(top_k=torch.full((b,), 50, device=device, dtype=torch.int64),
                                      top_p=torch.full((b,), 0.9, device=device)),
                  "top_p": dict(top_p=torch.full((b,), 0.9, device=device)),
                  "min_p": dict(min_p=torch.full((b,), 0.05, device=device))}[op]
            return torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, **kw)
        drafts = torch.randint(0, V, (b, K), device=device, dtype=torch.int32)
        counts = torch.full((b,), K, device=device, dtype=torch.int32)
        if op == "synthetic":
            return torch_backend.synthetic_rejection_sample(drafts[:, :1].expand(b, K + 1).contiguous(), drafts, counts,
                                                            seeds, positions, torch.full((b, K), 0.7, device=device))
        target = torch.randn(b, K + 1, V, device=device).to(torch.bfloat16)
        draft = target[:, :K].float() + 0.5 if op == "rejection+draft" else None
        return torch_backend.rejection_sample(target, drafts, counts, seeds, positions, temperature, draft_logits=draft)

    result = dict(mode=args.mode, checkout=os.path.abspath(args.checkout), gpu=torch.cuda.get_device_name(),
                  torch=torch.__version__, triton=triton.__version__, cache=os.environ.get("TRITON_CACHE_DIR"),
                  compile_hook=hook)
    torch.zeros(1, device=device).sum().item()  # the CUDA context, outside every timing
    if args.mode == "first-call":
        start = time.perf_counter()
        call("top_k+top_p", 8)
        torch.cuda.synchronize()
        result["first_call_s"] = time.perf_counter() - start
        result["compiles"] = len(compiles)
    else:
        start = time.perf_counter()
        if args.precompile:
            flag_sets = {"top_k+top_p": dict(top_k=True, top_p=True), "top_p": dict(top_p=True),
                         "min_p": dict(min_p=True)}
            groups = [("gumbel_sample", None), ("top_k_top_p_sample", [flag_sets[o] for o in ops if o in flag_sets]),
                      ("rejection_sample", [dict(draft_logits=o == "rejection+draft", method="probabilistic")
                                            for o in ops if o.startswith("rejection")]),
                      ("synthetic_rejection_sample", None)]
            wanted = {"gumbel_sample": "gumbel" in ops, "top_k_top_p_sample": any(o in flag_sets for o in ops),
                      "rejection_sample": any(o.startswith("rejection") for o in ops),
                      "synthetic_rejection_sample": "synthetic" in ops}
            reports = []
            for op, flags in groups:
                if wanted[op]:
                    report = torch_backend.precompile([V], ["bfloat16"], ops=[op], flags=flags, max_batch=512,
                                                      num_speculative_tokens=(K,))
                    reports.append(dict(op=op, calls=len(report.cases), kernels=report.kernels, s=report.seconds))
                    print(f"precompile {op}: {report}", flush=True)
            result["precompile"] = reports
            result["precompile_s"] = time.perf_counter() - start
            result["precompile_compiles"] = len(compiles)
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else CAPTURE_SIZES
        rows = []
        sweep_start = time.perf_counter()
        for b in sizes:
            for op in ops:
                before = len(compiles)
                t0 = time.perf_counter()
                call(op, b)
                torch.cuda.synchronize()
                rows.append(dict(B=b, op=op, s=time.perf_counter() - t0, compiles=len(compiles) - before))
                print(f"B={b:4d} {op:16s} {rows[-1]['s']:8.3f} s  {rows[-1]['compiles']} compiles", flush=True)
            if time.perf_counter() - sweep_start > args.budget:
                result["stopped_after_B"] = b
                break
        result["sweep"] = rows
        result["sweep_s"] = time.perf_counter() - sweep_start
        result["sweep_compiles"] = sum(r["compiles"] for r in rows)
        later = [r["s"] for r in rows if r["B"] > sizes[0]]
        result["slowest_later_call_s"] = max(later) if later else None
        result["total_s"] = time.perf_counter() - start
    print(json.dumps({k: v for k, v in result.items() if k != "sweep"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
