"""Host time to compile each launch of a plan for sm_90 (Triton's full pipeline and ptxas, no GPU needed):
which kernels make a first call slow (issue 39's target: 3 s a first call on the H200's host).

    python benchmarks/lab/explore_compile_times.py
"""

import os
import sys
import tempfile
import time

os.environ["TRITON_INTERPRET"] = "0"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()  # empty: every compile is a real one
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))

import compiled_kernels as ck  # noqa: E402

from jsample import kernels  # noqa: E402
from jsample.kernels.plan import ArgSpec  # noqa: E402
from torch_backend._execute import compiled_target  # noqa: E402

INPUTS = {"logits": "*bf16", "seeds": "*i64", "positions": "*i64", "temperature": "*fp32", "top_k": "*i64",
          "top_p": "*fp32", "min_p": "*fp32", "row_valid": "*i32", "target_logits": "*bf16", "draft_logits": "*fp32",
          "draft_tokens": "*i32", "num_draft_tokens": "*i32"}


def types(step, plan):
    names = [n for n in step.kernel.arg_names if n not in dict(step.constexprs)]
    return {name: (INPUTS.get(value) or ck.POINTER_TYPES[plan.buffer(value).dtype]) if isinstance(value, str) else "i32"
            for name, value in zip(names, list(step.args) + list(step.outputs))}


def main():
    target = compiled_target(132, 9)
    seeds = lambda b: ArgSpec.contiguous((b,), "int64")  # noqa: E731
    plans = {
        "gumbel B=1": kernels.plan_gumbel_sample(ArgSpec.contiguous((1, 151936), "bfloat16"), seeds(1), target,
                                                 fp64=False, draft=False),
        "top_k+top_p B=1 (one launch)": kernels.plan_top_k_top_p_sample(
            ArgSpec.contiguous((1, 151936), "bfloat16"), seeds(1), target, has_top_k=True, has_top_p=True,
            has_min_p=False, fp64=False),
        "top_p B=1 (one launch)": kernels.plan_top_k_top_p_sample(
            ArgSpec.contiguous((1, 151936), "bfloat16"), seeds(1), target, has_top_k=False, has_top_p=True,
            has_min_p=False, fp64=False),
        "top_k B=1 (one launch)": kernels.plan_top_k_top_p_sample(
            ArgSpec.contiguous((1, 151936), "bfloat16"), seeds(1), target, has_top_k=True, has_top_p=False,
            has_min_p=False, fp64=False),
        "min_p B=1 (one launch)": kernels.plan_top_k_top_p_sample(
            ArgSpec.contiguous((1, 151936), "bfloat16"), seeds(1), target, has_top_k=False, has_top_p=False,
            has_min_p=True, fp64=False),
        "top_k+top_p B=256 (launches)": kernels.plan_top_k_top_p_sample(
            ArgSpec.contiguous((256, 151936), "bfloat16"), seeds(256), target, has_top_k=True, has_top_p=True,
            has_min_p=False, fp64=False),
        "rejection K=4 B=1": kernels.plan_rejection_sample(ArgSpec.contiguous((1, 5, 151936), "bfloat16"), None,
                                                           seeds(1), target, strict=False, fp64=False),
    }
    seen = set()
    for name, plan in plans.items():
        total = 0.0
        for step in plan.launches:
            key = (step.kernel, step.constexprs, step.num_warps)
            if key in seen:
                continue
            seen.add(key)
            start = time.perf_counter()
            ck.compile_for_sm90(step.kernel, types(step, plan), dict(step.constexprs), step.num_warps)
            seconds = time.perf_counter() - start
            total += seconds
            print(f"{name:32s} {step.kernel.fn.__name__:36s} {seconds:6.2f} s", flush=True)
        print(f"{name:32s} {'(new kernels in all)':36s} {total:6.2f} s", flush=True)


if __name__ == "__main__":
    main()
