"""Host time to compile each launch of the logprobs plans for sm_90 (Triton's full pipeline and ptxas, no GPU): a
first call's compile (issue 39's 3 s), bf16, V = 151936, for the checkout given (its tests/ and package first on the
path).

    python benchmarks/lab/explore_logprobs_compile_times.py CHECKOUT
"""
import os, sys, time, tempfile
os.environ["TRITON_INTERPRET"] = "0"; os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
sys.path[:0] = [sys.argv[1] + "/tests", sys.argv[1]]
import compiled_kernels as ck
from jsample import kernels
from jsample.kernels import logprobs as lp
from jsample.kernels.plan import ArgSpec
from torch_backend._execute import compiled_target
t = compiled_target(132, 9)
L = ArgSpec.contiguous((4, 151936), "bfloat16")
plans = {"token_logprobs num_top=20": lp.plan_token_logprobs(L, t, has_top_k=False, has_top_p=False, has_min_p=False, fp64=False, num_top=20),
         "token_logprobs top_p": lp.plan_token_logprobs(L, t, has_top_k=False, has_top_p=True, has_min_p=False, fp64=False, num_top=0),
         "gumbel return_logprobs": kernels.plan_gumbel_sample(L, ArgSpec.contiguous((4,), "int64"), t, fp64=False, draft=False, return_logprobs=True)}
ins = {"logits": "*bf16", "tokens": "*i32", "temperature": "*fp32", "num_top": "*i32", "seeds": "*i64", "positions": "*i64", "top_k": "*i64", "top_p": "*fp32", "min_p": "*fp32"}
for name, plan in plans.items():
    total = 0
    for step in plan.launches:
        names = [n for n in step.kernel.arg_names if n not in dict(step.constexprs)]
        types = {n: (ins.get(v) or ck.POINTER_TYPES[plan.buffer(v).dtype]) if isinstance(v, str) else "i32" for n, v in zip(names, list(step.args) + list(step.outputs))}
        t0 = time.perf_counter(); ck.compile_for_sm90(step.kernel, types, dict(step.constexprs), step.num_warps); dt = time.perf_counter() - t0
        total += dt; print(f"  {name:28s} {step.kernel.fn.__name__:32s} {dt:.2f} s")
    print(f"{name:30s} total {total:.2f} s", flush=True)
