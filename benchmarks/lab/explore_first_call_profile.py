"""Issue 39 (3 s a first call): what a torch first call spends besides compiling its kernels. One first call in a
fresh process with an empty Triton cache, under cProfile, with Triton's compilation listener recording each kernel's
stages (and when it finished, from the call's start).

    TRITON_CACHE_DIR=$(mktemp -d) python3 benchmarks/lab/explore_first_call_profile.py CASE [ROWS]

CASE: top_k_top_p1, top_p1, top_k1, min_p1, gumbel1, gumbel256, rejection4 (the op and its batch; V = 151936
bfloat16, top_k 50 as a [B] tensor, top_p 0.9, min_p 0.05, temperature 0.8, rejection K = 4 with draft logits).
The inputs are made on the GPU right after the imports (CUDA's context included), then the call: no time
between import and the first call but that. Prints the call's seconds, the compiles, and the functions with the
most cumulative and own time (ROWS of each; ROWS = 0: no profiler, the call's own seconds).
"""

import cProfile
import io
import os
import pstats
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

V = 151936


def make_call(case):
    import torch

    import torch_backend

    kind, batch = case.rstrip("0123456789"), int(case[len(case.rstrip("0123456789")):])
    device = torch.device("cuda")
    generator = torch.Generator(device=device).manual_seed(batch)
    seeds = torch.arange(batch, device=device, dtype=torch.int64)
    temperature = torch.full((batch,), 0.8, device=device)
    if kind == "rejection":
        k = 4
        target = (torch.randn((batch, k + 1, V), generator=generator, device=device) * 3).to(torch.bfloat16)
        draft = torch.randn((batch, k, V), generator=generator, device=device) * 3
        drafts = draft.argmax(-1)
        counts = torch.full((batch,), k, device=device, dtype=torch.int64)
        return lambda: torch_backend.rejection_sample(target, drafts, counts, seeds, seeds, temperature,
                                                      draft_logits=draft)
    logits = (torch.randn((batch, V), generator=generator, device=device) * 3).to(torch.bfloat16)
    if kind == "gumbel":
        return lambda: torch_backend.gumbel_sample(logits, seeds, seeds, temperature)
    filters = {"top_k": torch.full((batch,), 50, device=device, dtype=torch.int64),
               "top_p": torch.full((batch,), 0.9, device=device), "min_p": torch.full((batch,), 0.05, device=device)}
    wanted = kind.split("_and_") if "_and_" in kind else {"top_k_top_p": ["top_k", "top_p"]}.get(kind, [kind])
    chosen = {name: filters[name] for name in wanted}
    return lambda: torch_backend.top_k_top_p_sample(logits, seeds, seeds, temperature, **chosen)


def main(case, rows):
    start = time.perf_counter()
    import torch
    from triton import knobs

    import torch_backend  # noqa: F401 (its import, timed with torch's: Triton's set-up starts there)

    imported = time.perf_counter()
    events = []
    t0 = [0.0]

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        name = getattr(getattr(src, "fn", None), "__name__", "?")
        stages = " ".join(f"{stage} {us / 1e6:.2f}" for stage, us in times.lowering_stages)
        events.append((time.perf_counter() - t0[0], threading.current_thread().name, name,
                       times.ir_initialization / 1e6, stages, cache_hit))

    knobs.compilation.listener = listener
    call = make_call(case)
    torch.cuda.synchronize()
    setup = time.perf_counter()
    profile = cProfile.Profile()
    t0[0] = time.perf_counter()
    if rows:
        profile.enable()
    call()
    torch.cuda.synchronize()
    profile.disable()
    seconds = time.perf_counter() - t0[0]
    t1 = time.perf_counter()
    call()
    torch.cuda.synchronize()
    second = time.perf_counter() - t1
    print(f"{case}: imports {imported - start:.2f} s, inputs {setup - imported:.2f} s; first call {seconds:.2f} s"
          f"{' (profiled)' if rows else ''}; second {second * 1e3:.1f} ms; process to the first token "
          f"{t1 - start:.2f} s")
    for at, thread, name, make_ir, stages, hit in events:
        print(f"  {at:6.2f} s  {thread:26s} {name:34s} make_ir {make_ir:.2f} {stages}{'  (cache hit)' if hit else ''}")
    for key in ("cumulative", "tottime") if rows else ():
        text = io.StringIO()
        pstats.Stats(profile, stream=text).strip_dirs().sort_stats(key).print_stats(rows)
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:7000])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
