"""Issue 39 x 41: the first call of token_logprobs with filters (and top_k_top_p_sample's return_logprobs) in a
fresh process with an empty Triton cache, per checkout: wall seconds to the call's end (synchronised) and the
Triton compilations it made (triton.knobs.runtime.jit_post_compile_hook). V = 151936 bf16, B = 4 (or
LOGPROBS_FIRST_BATCH), T = 1.

    [LOGPROBS_FIRST_BATCH=1] python benchmarks/lab/explore_logprobs_first_call.py CHECKOUT [MORE_CHECKOUTS]  (a GPU)
"""

import subprocess
import sys
import tempfile

CALLS = {
    "token_logprobs(top_p=0.9)": "torch_backend.token_logprobs(x, tokens, t, top_p=0.9)",
    "token_logprobs(top_k=50, top_p=0.9)": "torch_backend.token_logprobs(x, tokens, t, top_k=50, top_p=0.9)",
    "token_logprobs(top_k=[B] tensor of 50, top_p=0.9)":
        "torch_backend.token_logprobs(x, tokens, t, top_k=torch.full((B,), 50, device='cuda'), top_p=0.9)",
    "top_k_top_p_sample(top_p=0.9, return_logprobs=True)":
        "torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9, return_logprobs=True)",
}

CODE = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
B = int(os.environ.get("LOGPROBS_FIRST_BATCH", "4"))
import torch, triton
compiles = []
triton.knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiles.append(1)
import torch_backend
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn((B, 151936), device="cuda", generator=g).to(torch.bfloat16) * 3
seeds = torch.arange(B, device="cuda", dtype=torch.int64)
t = torch.ones((B,), device="cuda")
tokens = torch.zeros((B,), device="cuda", dtype=torch.int32)
torch.cuda.synchronize()
start = time.perf_counter()
out = THE_CALL
torch.cuda.synchronize()
print(f"{time.perf_counter() - start:.2f} {len(compiles)}")
"""


def main():
    for checkout in sys.argv[1:]:
        for name, call in CALLS.items():
            with tempfile.TemporaryDirectory() as cache:
                result = subprocess.run([sys.executable, "-c", CODE.replace("THE_CALL", call), checkout],
                                        capture_output=True, text=True, env={**__import__("os").environ,
                                                                             "TRITON_CACHE_DIR": cache})
            if result.returncode:
                print(checkout, name, "failed:", result.stderr[-1500:])
                continue
            seconds, count = result.stdout.split()[-2:]
            print(f"{checkout:12s} {name:55s} {seconds:>6s} s, {count:>3s} compilations", flush=True)


if __name__ == "__main__":
    main()
