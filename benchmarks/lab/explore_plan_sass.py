"""Lab: a hash of the sm_90 SASS (triton's own ptxas and cuobjdump, no GPU) of every distinct launch of
top_k_top_p_sample's plans for a GPU target (B = 256: the launches' plan; B = 4: one launch), bf16 and
fp32 logits, three filter sets. Run before and after a refactor of the filtered kernels: equal lines,
the same machine code. Integer arguments are typed i32 (what matters is that both runs type them alike).

    TRITON_INTERPRET=0 python benchmarks/lab/explore_plan_sass.py > before.txt
"""

import hashlib
import os
import re
import subprocess
import sys

os.environ["TRITON_INTERPRET"] = "0"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)
import triton  # noqa: E402
from compiled_kernels import compile_for_sm90, launch_arg_types  # noqa: E402

from jsample.kernels import filtered  # noqa: E402
from jsample.kernels.plan import ArgSpec, Target  # noqa: E402

cu = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
for batch in (256, 4):
    for dtype in ("bfloat16", "float32"):
        for flags in ((True, True, False), (True, False, False), (False, True, True)):
            logits = ArgSpec.contiguous((batch, 151936), dtype)
            seeds = ArgSpec.contiguous((batch,), "int64")
            target = Target(interpreter=False, arrival_counters=True, resident_programs=132)
            plan = filtered.plan_top_k_top_p_sample.__wrapped__(logits, seeds, target, has_top_k=flags[0], has_top_p=flags[1],
                                                    has_min_p=flags[2], fp64=False)
            seen = set()
            for step in plan.launches:
                types = launch_arg_types(step, plan, dtype)
                key = (step.kernel.__name__, step.constexprs)
                if key in seen: continue
                seen.add(key)
                k = compile_for_sm90(step.kernel, types, dict(step.constexprs), step.num_warps)
                open("/tmp/p.cubin", "wb").write(k.asm["cubin"])
                sass = subprocess.run([cu, "-sass", "/tmp/p.cubin"], capture_output=True, text=True).stdout
                body = "\n".join(l for l in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", l))
                print(batch, dtype, flags, plan.variant, step.kernel.__name__, hashlib.sha256(body.encode()).hexdigest()[:12], flush=True)
