"""Where the one-launch filtered kernel's compile goes (issue 39: a first call in 3 s): Triton's stages (its
compilation listener) and, with MLIR_ENABLE_TIMING=1, each MLIR pass, compiling for sm_90 on the CPU.

    MLIR_ENABLE_TIMING=1 python benchmarks/lab/explore_compile_stages.py [110|100|010|001]   (top_k, top_p, min_p)
"""

import os
import sys
import tempfile

os.environ["TRITON_INTERPRET"] = "0"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()  # empty: a real compile
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "tests"), HERE, os.path.join(HERE, "..", "..")]

import compiled_kernels as ck  # noqa: E402
from explore_compile_times import types  # noqa: E402
from triton import knobs  # noqa: E402

from jsample import kernels  # noqa: E402
from jsample.kernels.plan import ArgSpec  # noqa: E402
from torch_backend._execute import compiled_target  # noqa: E402


def listener(*, src, metadata, metadata_group, times, cache_hit):
    stages = ", ".join(f"{stage} {us / 1e6:.2f}" for stage, us in times.lowering_stages)
    print(f"make_ir {times.ir_initialization / 1e6:.2f} s; {stages} s")


def main():
    knobs.compilation.listener = listener
    top_k, top_p, min_p = (bool(int(c)) for c in (sys.argv[1] if len(sys.argv) > 1 else "110"))
    plan = kernels.plan_top_k_top_p_sample(ArgSpec.contiguous((1, 151936), "bfloat16"),
                                           ArgSpec.contiguous((1,), "int64"), compiled_target(132, 9),
                                           has_top_k=top_k, has_top_p=top_p, has_min_p=min_p, fp64=False)
    step = plan.launches[0]
    compiled = ck.compile_for_sm90(step.kernel, types(step, plan), dict(step.constexprs), step.num_warps)
    ttir = compiled.asm["ttir"]
    print(f"{step.kernel.fn.__name__}: ttir {ttir.count(chr(10))} lines, {ttir.count('tt.load')} loads, "
          f"{ttir.count('tt.store')} stores, {ttir.count('tt.reduce')} reductions")


if __name__ == "__main__":
    main()
