"""Issue 39 (JAX's first call): where does a jitted op's first lowering go? cProfile of `jax.jit(op).lower(...)` in a
fresh process (jax-triton compiles each Triton kernel where it lowers a call to it), after a trivial jitted
function has run (JAX's own start-up out of the way).

    TRITON_CACHE_DIR=$(mktemp -d) python3 benchmarks/lab/explore_jax_lowering_profile.py CASE [ROWS]

CASE as explore_jax_first_call_threads.py's (gumbel256, filtered1, ...): prints the lowering's seconds and the
functions with the most cumulative and own time. With JSAMPLE_WHO_IMPORTS_TORCH=1, also the stack from which
torch is first imported (an audit hook), if it is.
"""

import cProfile
import io
import os
import pstats
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from explore_jax_first_call_threads import make_case  # noqa: E402


def _print_torch_import(event, args):
    if event == "import" and args[0] == "torch" and "torch" not in sys.modules:
        print("torch imported from:")
        traceback.print_stack(limit=30, file=sys.stdout)


def main(case, rows):
    if os.environ.get("JSAMPLE_WHO_IMPORTS_TORCH") == "1":
        sys.addaudithook(_print_torch_import)
    jax.block_until_ready(jax.jit(lambda x: x * 2 + 1)(jnp.ones(8)))  # JAX's start-up, not ours
    fn, args = make_case(case)
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    lowered = fn.lower(*args)
    profile.disable()
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    np.asarray(compiled(*args))
    done = time.perf_counter()
    print(f"{case}: lower {lowered_at - start:.2f} s (profiled), compile {compiled_at - lowered_at:.2f} s, "
          f"first result {done - compiled_at:.2f} s")
    for key in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).strip_dirs().sort_stats(key).print_stats(rows)
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:6000])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 35)
