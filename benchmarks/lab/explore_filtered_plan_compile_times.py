"""Host time to compile one top_k_top_p_sample plan's kernels for sm_90 (no GPU), the best of REPS compiles each in an
empty cache (this host's noise is +-0.5 s): the first call's compile (issue 39).

    REPS=3 python benchmarks/lab/explore_filtered_plan_compile_times.py FLAGS DTYPE FP64 B [V]
    e.g. 110 bfloat16 0 1   (FLAGS: top_k, top_p, min_p as 0/1)
    STAND_IN=1: the plan's stand-in (Plan.while_compiling: the launches' plan a first torch call runs at B <= 2)
"""

import os
import sys
import tempfile
import time

os.environ["TRITON_INTERPRET"] = "0"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "tests"), HERE, os.path.join(HERE, "..", "..")]

import compiled_kernels as ck  # noqa: E402
from explore_compile_times import types  # noqa: E402
from triton import knobs  # noqa: E402

from jsample import kernels  # noqa: E402
from jsample.kernels.plan import ArgSpec  # noqa: E402
from torch_backend._execute import compiled_target  # noqa: E402

POINTER = {"bfloat16": "*bf16", "float32": "*fp32", "float16": "*fp16"}


def main():
    flags, dtype, fp64, batch = sys.argv[1], sys.argv[2], bool(int(sys.argv[3])), int(sys.argv[4])
    vocab = int(sys.argv[5]) if len(sys.argv) > 5 else 151936
    top_k, top_p, min_p = (bool(int(c)) for c in flags)
    plan = kernels.plan_top_k_top_p_sample(ArgSpec.contiguous((batch, vocab), dtype), ArgSpec.contiguous((batch,), "int64"),
                                           compiled_target(132, 9), has_top_k=top_k, has_top_p=top_p, has_min_p=min_p,
                                           fp64=fp64)
    if os.environ.get("STAND_IN") == "1":
        plan = plan.while_compiling
    total, seen = 0.0, set()
    for step in plan.launches:
        key = (step.kernel, step.constexprs, step.num_warps)
        if key in seen:
            continue
        seen.add(key)
        arg_types = dict(types(step, plan), logits_ptr=POINTER[dtype])
        best = float("inf")
        for _ in range(int(os.environ.get("REPS", "1"))):
            knobs.cache.dir = tempfile.mkdtemp()
            start = time.perf_counter()
            ck.compile_for_sm90(step.kernel, arg_types, dict(step.constexprs), step.num_warps)
            best = min(best, time.perf_counter() - start)
        total += best
        print(f"  {step.kernel.fn.__name__:34s} {best:5.2f} s", flush=True)
    print(f"{flags} {dtype} fp64={int(fp64)} B={batch}: {total:.2f} s")


if __name__ == "__main__":
    main()
