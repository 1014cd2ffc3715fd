"""Shared benchmark harness: timing for torch and JAX, the measured read rate, result files.

Torch providers are timed with CUDA events (`triton.testing.do_bench`, median); JAX providers with
warm-up, N calls and one `block_until_ready`. Small inputs are rotated among several copies so
that repeated calls do not measure the L2 cache.
"""

import functools
import json
import os
import platform
import subprocess
import sys
import time

L2_FLUSH_BYTES = 256 * 2**20  # rotate inputs until the set is several times the H200's 60 MB L2


def copies_needed(nbytes: int) -> int:
    return max(1, min(64, -(-L2_FLUSH_BYTES // max(nbytes, 1))))


def time_torch_us(fn, rotate: int = 1, return_mode: str = "median") -> float:
    """Median (or `return_mode`: "mean") microseconds of fn(i) (i cycles over `rotate` input sets),
    CUDA events."""
    import triton

    state = {"i": 0}

    def call():
        state["i"] = (state["i"] + 1) % rotate
        fn(state["i"])

    return triton.testing.do_bench(call, warmup=25, rep=100, return_mode=return_mode) * 1e3


def time_graph_us(fn, rotate: int = 1, return_mode: str = "median") -> float:
    """time_torch_us of replaying fn(i) captured as a CUDA graph, one graph per input set (fn runs once
    eagerly first, so that compilation stays out of the capture). The capture ignores other threads:
    in the default ("global") mode a CUDA call of one of XLA's or the profiler's threads invalidated
    a capture of jsample's launches once in a benchmark run (cudaErrorStreamCaptureInvalidated)."""
    import torch

    graphs = []
    for i in range(rotate):
        fn(i)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            fn(i)
        graphs.append(graph)
    return time_torch_us(lambda i: graphs[i].replay(), rotate, return_mode)


def time_jax_us(fn, rotate: int = 1, calls: int = 100) -> float:
    """Mean microseconds per call over `calls` calls after warm-up, one block_until_ready at the end."""
    import jax

    for i in range(3):
        jax.block_until_ready(fn(i % rotate))
    best = float("inf")
    for _ in range(3):  # best of three runs of `calls` calls
        start = time.perf_counter()
        out = None
        for i in range(calls):
            out = fn(i % rotate)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def measured_read_rate_gbs() -> float:
    """HBM read rate (GB/s) of a plain reduction over a 4 GiB buffer (bytes read / time)."""
    import torch

    x = torch.randn(2**30, device="cuda")
    us = time_torch_us(lambda i: torch.amax(x))
    return x.numel() * 4 / (us * 1e-6) / 1e9


@functools.cache
def _chunk_max_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def chunk_max_kernel(a_ptr, b_ptr, a_chunks, a_numel, b_numel, out_ptr, CHUNK: tl.constexpr):
        pid = tl.program_id(0)
        cols = tl.arange(0, CHUNK)
        if pid < a_chunks:
            offsets = pid.to(tl.int64) * CHUNK + cols
            x = tl.load(a_ptr + offsets, mask=offsets < a_numel, other=float("-inf")).to(tl.float32)
        else:
            offsets = (pid - a_chunks).to(tl.int64) * CHUNK + cols
            x = tl.load(b_ptr + offsets, mask=offsets < b_numel, other=float("-inf")).to(tl.float32)
        tl.store(out_ptr + pid, tl.max(x, axis=0))

    return chunk_max_kernel


def read_once(tensors, chunk: int = 4096, num_warps: int = 4):
    """A function that reads every element of two contiguous CUDA tensors once, in one launch of
    chunk-element programs spread over the whole GPU whatever the shapes: the measured floor of a
    one-pass op over them (each program writes the max of its chunk, 1/chunk of the bytes read)."""
    import torch

    kernel = _chunk_max_kernel()
    a, b = tensors
    a_chunks, b_chunks = -(-a.numel() // chunk), -(-b.numel() // chunk)
    out = torch.empty(a_chunks + b_chunks, dtype=torch.float32, device=a.device)

    def run():
        kernel[(a_chunks + b_chunks,)](a, b, a_chunks, a.numel(), b.numel(), out, CHUNK=chunk, num_warps=num_warps)
        return out

    return run


# (chunk, num_warps) of the readers fastest_read_once_us tries: explore_read_floor.txt found the
# fastest among these at every cell of bench_rejection's grid (a persistent grid-stride reader lost)
READERS = ((2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 8), (16384, 8))


def fastest_read_once_us(tensor_pairs) -> tuple:
    """(microseconds, reader) of the fastest of READERS over the same input copies (read_once,
    time_graph_us rotating over `tensor_pairs`): a measured floor is only as tight as its reader."""
    best = (float("inf"), "")
    for chunk, warps in READERS:
        runs = [read_once(pair, chunk=chunk, num_warps=warps) for pair in tensor_pairs]
        us = time_graph_us(lambda i: runs[i](), len(runs))
        best = min(best, (us, f"{chunk} x {warps} warps"))
    return best


def flashinfer_sampling():
    """FlashInfer's sampling module, or None when it cannot be imported (not installed, or built for
    another CUDA): the benchmarks then leave it out."""
    try:
        import flashinfer.sampling
    except Exception:  # noqa: BLE001
        return None
    print(f"flashinfer {flashinfer.__version__}", flush=True)
    return flashinfer.sampling


def environment(git_sha: str) -> dict:
    import torch
    import triton

    env = {"git_sha": git_sha, "python": platform.python_version(), "torch": torch.__version__,
           "triton": triton.__version__, "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
    try:
        import jax
        import jax_triton

        env.update(jax=jax.__version__, jax_triton=jax_triton.__version__)
    except ImportError:
        pass
    module = sys.modules.get("flashinfer")
    env["flashinfer"] = module.__version__ if module else "not imported"
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return env


def write_results(out_dir: str, name: str, env: dict, rows: list, columns: list, notes: str = "") -> None:
    """Writes <name>.json (everything) and <name>.md (a table) under out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump({"environment": env, "rows": rows}, f, indent=1)
    lines = [f"# {name}", "", "```", json.dumps(env, indent=1), "```", "", notes, "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c, "")) for c in columns) + " |")
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)
