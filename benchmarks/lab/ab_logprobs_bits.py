"""Do two checkouts give the same logprobs, bit for bit? (A refactor of the logprobs kernels must not move a bit.)

    python3 benchmarks/lab/ab_logprobs_bits.py CHECKOUT_A CHECKOUT_B

Each checkout runs in a process of its own on the GPU (or the CPU interpreter): token_logprobs without filters
(num_top 0 and 5), with top_k + top_p, and gumbel_sample(return_logprobs=True) over a fixed grid (V = 32000 and
151936, float32 and bfloat16, B = 1 and 64, tokens uniform and sampled, a few non-finite logits); every output's
bytes are hashed; the script prints each case and whether the two checkouts agree.
"""

import json
import os
import subprocess
import sys

CHILD = r'''
import hashlib, json, os, sys
import numpy as np, torch
import torch_backend
device = "cuda" if torch.cuda.is_available() else "cpu"
out = {}
small = os.environ.get("AB_SMALL")  # a grid the CPU interpreter runs in seconds (trying the script)
for vocab in (1000,) if small else (32000, 151936):
    for dtype in ("float32", "bfloat16"):
        for batch in (1, 3) if small else (1, 64):
            rng = np.random.default_rng(vocab + batch)
            x = torch.from_numpy((rng.standard_normal((batch, vocab)) * 3).astype(np.float32))
            x[0, 5] = float("nan")
            x[-1, 7:900] = -float("inf")
            logits = x.to(getattr(torch, dtype)).to(device)
            tokens = torch.from_numpy(rng.integers(0, vocab, batch)).to(device)
            temperature = torch.from_numpy(rng.choice(np.float32([0.0, 0.7, 1.0, 1.6]), batch)).to(device)
            seeds = torch.from_numpy(rng.integers(0, 2**62, batch)).to(device)
            positions = torch.arange(batch, device=device)
            cases = {
                "token_logprobs": lambda: torch_backend.token_logprobs(logits, tokens, temperature),
                "token_logprobs num_top=5": lambda: torch_backend.token_logprobs(logits, tokens, temperature,
                                                                                 num_top=5),
                "token_logprobs top_k top_p": lambda: torch_backend.token_logprobs(logits, tokens, temperature,
                                                                                   top_k=50, top_p=0.9),
                "gumbel_sample return_logprobs": lambda: torch_backend.gumbel_sample(
                    logits, seeds, positions, temperature, return_logprobs=True),
            }
            for name, call in cases.items():
                result = call()
                flat = []
                for value in result:
                    flat.extend(value if isinstance(value, tuple) else (value,))
                digest = hashlib.sha256(b"".join(v.contiguous().cpu().numpy().tobytes() for v in flat)).hexdigest()
                out[f"V={vocab} {dtype} B={batch} {name}"] = digest[:16]
print("RESULT " + json.dumps(out))
'''


def run(checkout, child=CHILD):
    """The RESULT line's dict of `child` run in a process of its own on `checkout`'s code."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env,
                          cwd=os.path.abspath(checkout))
    line = [text for text in done.stdout.splitlines() if text.startswith("RESULT ")]
    if not line:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-4000:])
    return json.loads(line[0][len("RESULT "):])


def main():
    first, second = run(sys.argv[1]), run(sys.argv[2])
    same = 0
    for case, digest in first.items():
        equal = second.get(case) == digest
        same += equal
        print(f"{case:60s} {digest} {'equal' if equal else 'DIFFERENT ' + str(second.get(case))}")
    print(f"{same} of {len(first)} cases equal")


if __name__ == "__main__":
    main()
