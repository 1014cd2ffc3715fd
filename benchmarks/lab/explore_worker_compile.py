"""Issue 39 (a first call in 3 s): can a plan's kernels compile in light worker processes (Python + Triton +
jsample.kernels, no torch, no CUDA) at its first run, instead of in threads of the caller (whose compilers' Python
holds the GIL)?

The caller reads each kernel variant's specialisation without compiling it (Triton's jit_cache_hook, which may
skip the compile, gets it serialised), the workers compile those with triton.compile for the same target into
Triton's cache directory, and the caller's launches then load them from there (a cache hit each).

    TRITON_CACHE_DIR=$(mktemp -d) python3 benchmarks/lab/explore_worker_compile.py driver
    TRITON_CACHE_DIR=$(mktemp -d) python3 benchmarks/lab/explore_worker_compile.py threads|workers COMBINATION B

Each in a fresh process with an empty cache, one GPU, V = 151936 bfloat16 (top_k_top_p_sample's filters: top_k,
top_p, min_p joined by +). Prints the call's seconds, the compiles in the caller and the cache hits, and a token
checksum (equal in both modes).
"""

import importlib
import json
import os
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)
V = 151936


def worker():
    """Compile the kernel variants given on stdin (module, attribute, specialisation data) for their targets."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import triton.language as tl

    for module, attribute, data, target in json.loads(sys.stdin.read()):
        kernel = getattr(importlib.import_module(module), attribute)
        spec = json.loads(data)
        tuples = lambda v: tuple(tuples(x) for x in v) if isinstance(v, list) else v  # noqa: E731

        def constant(value):
            if isinstance(value, str) and tl.dtype.is_dtype(value):
                return tl.dtype(value)
            if isinstance(value, dict) and "constexpr" in value:
                return tl.constexpr(tuples(value["constexpr"]))
            return tuples(value)

        constexprs = {tuple(k): constant(v) for k, v in zip(spec["constant_keys"], spec["constant_vals"])}
        attrs = dict(zip(map(tuple, spec["attrs_keys"]), spec["attrs_vals"]))
        signature = {k: tuples(v) for k, v in spec["signature"].items()}
        options = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["options"].items()}
        triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=GPUTarget(**target),
                       options=options)


def _where(kernel):
    """(module, attribute) naming a kernel object."""
    module = sys.modules[kernel.fn.__module__]
    for name, value in vars(module).items():
        if value is kernel:
            return module.__name__, name
    raise LookupError(kernel)


def compile_ahead_in_workers(plan, steps):
    import triton
    from triton import knobs

    from torch_backend import _execute as execute

    if len(plan.launches) < 2:
        return
    specs, seen = [], set()

    def hook(**kwargs):
        target = triton.runtime.driver.active.get_current_target()
        target = dict(backend=target.backend, arch=target.arch, warp_size=target.warp_size)
        specs.append((*_where(kwargs["fn"].jit_function), kwargs["compile"]["specialization_data"], target))
        return True  # not compiled here

    knobs.runtime.jit_cache_hook = hook
    try:
        for step, args in zip(plan.launches, steps):
            options = dict(num_warps=step.num_warps, num_stages=step.num_stages,
                           enable_fp_fusion=step.enable_fp_fusion)
            if step.pdl:
                options["launch_pdl"] = True
            marker = (step.kernel, step.constexprs, tuple(sorted(options.items())))
            if marker in seen:
                continue
            seen.add(marker)
            step.kernel.warmup(*args, grid=step.grid, **dict(step.constexprs), **options)
    finally:
        knobs.runtime.jit_cache_hook = None
    t = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(ROOT), os.environ.get("PYTHONPATH", "")]))
    workers = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                env=env, text=True) for _ in specs]
    for process, spec in zip(workers, specs):
        process.stdin.write(json.dumps([spec]))
        process.stdin.close()
    codes = [process.wait() for process in workers]
    print(f"  {len(specs)} workers: {time.perf_counter() - t:.2f} s, exit codes {codes}")
    del execute


def main():
    mode = sys.argv[1]
    start = time.perf_counter()
    import torch
    import triton

    import torch_backend
    from torch_backend import _execute as execute

    compiled, hits = [], []

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        (hits if cache_hit else compiled).append(getattr(getattr(src, "fn", None), "__name__", "?"))

    triton.knobs.compilation.listener = listener
    device = torch.device("cuda")
    print(f"imports {time.perf_counter() - start:.2f} s")
    if mode == "driver":
        t0 = time.perf_counter()
        triton.runtime.driver.active.get_current_target()
        print(f"driver: {time.perf_counter() - t0:.2f} s")
        return
    if mode == "workers":
        execute._compile_ahead = compile_ahead_in_workers
    batch = int(sys.argv[3])
    generator = torch.Generator(device=device).manual_seed(batch)
    logits = (torch.randn((batch, V), generator=generator, device=device) * 3).to(torch.bfloat16)
    seeds = torch.arange(batch, device=device, dtype=torch.int64)
    positions = torch.arange(batch, device=device, dtype=torch.int64)
    temperature = torch.full((batch,), 0.8, device=device)
    filters = {}
    wanted = sys.argv[2].split("+")
    if "top_k" in wanted:
        filters["top_k"] = torch.full((batch,), 50, device=device, dtype=torch.int64)
    if "top_p" in wanted:
        filters["top_p"] = torch.full((batch,), 0.9, device=device)
    if "min_p" in wanted:
        filters["min_p"] = torch.full((batch,), 0.05, device=device)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    tokens = torch_backend.top_k_top_p_sample(logits, seeds, positions, temperature, **filters)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    print(f"{mode} B = {batch} {sys.argv[2]}: {seconds:.2f} s; compiled here {len(compiled)}, cache hits {len(hits)}; "
          f"tokens sum {int(tokens.long().sum())}")


if __name__ == "__main__":
    worker() if sys.argv[1] == "--worker" else main()
