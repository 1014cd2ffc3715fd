"""Lab: what the pieces of an eager B = 1 call cost on this host now, and what the ways left to cut
them would save: calling the compiled launcher's C entry point instead of Triton's Python wrapper
around it, other ways of allocating the outputs (one allocation split into the outputs, empty_like),
the current-stream lookup, the launch-hook check. One process; each row is the median of 5 rounds of
2000 back-to-back calls with one synchronize (bench_eager.wall_us).

    python benchmarks/lab/explore_eager_launch_paths.py

It reads the replay memo's internals as they were at 5a936d1, where it ran (results/
explore_eager_launch_paths_5a936d1.txt); explore_eager_replay_steps.py times the replay path after.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_eager as be  # noqa: E402


def main():
    import torch
    from triton import knobs
    from triton.runtime import driver

    from torch_backend import _execute

    p = be.problems(1, 32000)
    calls = be.calls_of(p)
    us = lambda fn: be.wall_us(fn, 2000)  # noqa: E731
    rows = {}
    bare = be.bare_launch()
    rows["bare Triton launch"] = us(bare)
    ops = {"gumbel_sample": "gumbel_sample", "synthetic_rejection_sample K=4": "synthetic_rejection_sample",
           "rejection_sample K=4 draft logits": "rejection_sample"}
    for name, op in ops.items():
        call = calls[name]
        for _ in range(3):
            call()
        rows[f"{name}: whole call"] = us(call)
        last = _execute._LAST[op]
        entry = last.entry
        arguments = {k: v for k, v in zip(
            ["logits", "seeds", "positions", "temperature"] if op == "gumbel_sample" else
            ["target_tokens", "draft_tokens", "num_draft_tokens", "seeds", "positions", "conditional_rates"]
            if op.startswith("synthetic") else
            ["target_logits", "draft_tokens", "num_draft_tokens", "seeds", "positions", "temperature",
             "draft_logits"],
            [p["logits"], p["seeds"], p["positions"], p["temperature"]] if op == "gumbel_sample" else
            [p["target_tokens"], p["drafts"], p["num_drafts"], p["seeds"], p["positions"], p["rates"]]
            if op.startswith("synthetic") else
            [p["target"], p["drafts"], p["num_drafts"], p["seeds"], p["positions"], p["temperature"], p["draft"]])}
        rows[f"{name}: latest replay's match"] = us(lambda: last.matches(arguments, last.flags))
        values = [arguments[s] if s is not None else c for _, s, c in entry.sources]
        env0 = [v.data_ptr() if type(v) is torch.Tensor else v for v in values]
        rows[f"{name}: replay entry (allocate, launch)"] = us(lambda: entry(arguments))
        rows[f"{name}: _launch_direct"] = us(lambda: _execute._launch_direct(entry, list(env0)))
        # the launches alone, through the Python wrapper and straight to the C entry point
        stream = driver.active.get_current_stream(0)
        outputs = [torch.empty(shape, dtype=dtype, device="cuda") for _, shape, dtype, _ in entry.recipe.fresh]
        env = list(env0) + [t.data_ptr() for t in outputs]
        recipe = entry.recipe
        if recipe.counters or recipe.scratch:
            scratch = _execute._SCRATCH[(0, stream, __import__("threading").get_ident())]
            env += [scratch.counters_address + 4 * o for _, o in recipe.counters]
            env += [scratch.workspace_address + o for _, o, _ in recipe.scratch]
        env += entry.literals
        launches = entry.launches
        kernels = [launch for launch, *_ in launches]  # each a compiled kernel's launcher (CudaLauncher)

        def wrapped():
            for launch, x, y, z, function, metadata, argument_of, tail in launches:
                launch(x, y, z, stream, function, metadata, None, None, None, *argument_of(env), *tail)

        rows[f"{name}: launches through the Python wrapper"] = us(wrapped)
        raws = []
        for (launch, x, y, z, function, metadata, argument_of, tail) in launches:
            launcher = launch
            real = launcher.launch
            seen = []

            def recorder(*a, real=real, seen=seen):
                seen.append(a)
                return real(*a)

            launcher.launch = recorder
            try:
                launcher(x, y, z, stream, function, metadata, None, None, None, *argument_of(env), *tail)
            finally:
                launcher.launch = real
            raws.append((real, seen[0]))
        print(name, "raw launch arguments:", [type(a).__name__ for a in raws[0][1]], "scratch sizes",
              [(k.global_scratch_size, k.profile_scratch_size) for k in kernels], flush=True)

        def raw():
            for real, recorded in raws:
                real(*recorded)

        rows[f"{name}: launches straight to the C entry point"] = us(raw)
        torch.cuda.synchronize()
    device = p["logits"].device
    proto = torch.empty(5, dtype=torch.int32, device=device)
    rows["torch.empty((1, 5), int32, device=device)"] = us(lambda: torch.empty((1, 5), dtype=torch.int32, device=device))
    rows["torch.empty((1,), int32, device=device)"] = us(lambda: torch.empty((1,), dtype=torch.int32, device=device))
    rows["torch.empty_like(proto) (5,)"] = us(lambda: torch.empty_like(proto))
    rows["torch.empty(7).split([5, 2]) + view(1, 5)"] = us(
        lambda: (lambda a, b: (a.view(1, 5), b))(*torch.empty(7, dtype=torch.int32, device=device).split([5, 2])))
    rows["two torch.empty (synthetic's outputs)"] = us(
        lambda: (torch.empty((1, 5), dtype=torch.int32, device=device), torch.empty((1,), dtype=torch.int32,
                                                                                    device=device)))
    rows["torch.empty(7).as_strided x2"] = us(
        lambda: (lambda t: (t.as_strided((1, 5), (5, 1)), t.as_strided((1,), (1,), 5)))(
            torch.empty(7, dtype=torch.int32, device=device)))
    rows["driver.active.get_current_stream(0)"] = us(lambda: driver.active.get_current_stream(0))
    raw_stream = torch._C._cuda_getCurrentRawStream
    rows["torch._C._cuda_getCurrentRawStream(0)"] = us(lambda: raw_stream(0))
    rows["_launch_hooks()"] = us(_execute._launch_hooks)
    rows["knobs.runtime.launch_enter_hook"] = us(lambda: knobs.runtime.launch_enter_hook)
    rows["torch._C._cuda_getDevice()"] = us(torch._C._cuda_getDevice)
    rows["torch._C._len_torch_dispatch_stack() + capturing"] = us(
        lambda: torch._C._len_torch_dispatch_stack() > 0 or torch._C._cuda_isCurrentStreamCapturing())
    rows["torch.compiler.is_compiling()"] = us(torch.compiler.is_compiling)
    rows["empty lambda"] = us(lambda: None)
    for name, value in rows.items():
        print(f"{name:70s} {value:7.2f} us", flush=True)


if __name__ == "__main__":
    main()
