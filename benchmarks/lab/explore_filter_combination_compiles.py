"""Issue 39: how long does top_k_top_p_sample take to compile in all its filter combinations, for one dtype and V?

    TRITON_CACHE_DIR=$(mktemp -d) python3 benchmarks/lab/explore_filter_combination_compiles.py calls
    TRITON_CACHE_DIR=$(mktemp -d) python3 benchmarks/lab/explore_filter_combination_compiles.py precompile
    TRITON_CACHE_DIR=$(mktemp -d) python3 benchmarks/lab/explore_filter_combination_compiles.py one top_k+top_p 4

Each mode in a fresh process with an empty Triton cache, torch frontend, one GPU, V = 151936 bfloat16:
`calls`: the first call of each of the seven filter combinations (top_k, top_p, min_p and their pairs and
triple) at B = 4, one after another, each timed to its end; `precompile`: precompile of the op (every combination,
max_batch 512: every batch size's kernels), then the same calls at B = 4 and B = 300 (they should compile
nothing); `one COMBINATION B`: that combination's first call alone at batch B (a first call with nothing
compiled before it). Compilations are counted with triton.knobs.runtime.jit_post_compile_hook.
"""

import itertools
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

V = 151936


def main():
    mode = sys.argv[1]
    start = time.perf_counter()
    import torch
    import triton

    import torch_backend

    compiles = []
    triton.knobs.runtime.jit_post_compile_hook = lambda *args, **kwargs: compiles.append(1)
    device = torch.device("cuda")
    print(f"imports {time.perf_counter() - start:.2f} s")
    combos = [given for given in itertools.product((False, True), repeat=3) if any(given)]
    if mode == "precompile":
        t0 = time.perf_counter()
        report = torch_backend.precompile([V], ["bfloat16"], ops=["top_k_top_p_sample"], max_batch=512)
        print(f"precompile: {time.perf_counter() - t0:.2f} s, {report}")
    batches = {"calls": (4,), "precompile": (4, 300), "one": (int(sys.argv[-1]),)}[mode]
    if mode == "one":
        wanted = set(sys.argv[2].split("+"))
        combos = [given for given in combos if {n for n, g in zip(("top_k", "top_p", "min_p"), given) if g} == wanted]
    total = 0.0
    for batch in batches:
        generator = torch.Generator(device=device).manual_seed(batch)
        logits = (torch.randn((batch, V), generator=generator, device=device) * 3).to(torch.bfloat16)
        seeds = torch.arange(batch, device=device, dtype=torch.int64)
        positions = torch.arange(batch, device=device, dtype=torch.int64)
        temperature = torch.full((batch,), 0.8, device=device)
        for k, p, m in combos:
            filters = {}
            if k:
                filters["top_k"] = torch.full((batch,), 50, device=device, dtype=torch.int64)
            if p:
                filters["top_p"] = torch.full((batch,), 0.9, device=device)
            if m:
                filters["min_p"] = torch.full((batch,), 0.05, device=device)
            before = len(compiles)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            torch_backend.top_k_top_p_sample(logits, seeds, positions, temperature, **filters)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            total += seconds
            print(f"B = {batch} {'+'.join(sorted(filters))}: {seconds:.2f} s, {len(compiles) - before} compilations")
    print(f"{mode}: the calls {total:.2f} s in all; process {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
