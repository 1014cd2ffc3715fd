"""token_logprobs on the GPU (issue 41): CUDA-graph device time against torch's log_softmax + gather
(+ topk) and against the read floor (torch's sum over the logits: one read), same run.

    python benchmarks/bench_logprobs.py [--out DIR]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import harness  # noqa: E402
import torch_backend  # noqa: E402


def graph_us(fn):
    return harness.time_graph_us(lambda i: fn())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    print(f"{torch.cuda.get_device_name()}; us (CUDA graph, median)")
    for batch, vocab in ((1, 151936), (64, 151936), (256, 151936)):
        for dtype in (torch.float32, torch.bfloat16):
            g = torch.Generator(device="cuda").manual_seed(0)
            x = (torch.randn(batch, vocab, device="cuda", generator=g) * 3).to(dtype)
            tokens = torch.randint(0, vocab, (batch,), device="cuda", generator=g)
            t = torch.full((batch,), 0.8, device="cuda")
            seeds = torch.arange(batch, device="cuda")
            cells = {
                "read floor (x.float().sum(-1))": lambda: x.float().sum(-1),
                "torch log_softmax+gather": lambda: torch.log_softmax(x.float(), -1).gather(1, tokens[:, None]),
                "torch log_softmax+gather+topk(20)": lambda: (torch.log_softmax(x.float(), -1).gather(1, tokens[:, None]),
                                                              torch.topk(x, 20, dim=-1)),
                "token_logprobs": lambda: torch_backend.token_logprobs(x, tokens, t),
                "token_logprobs num_top=20": lambda: torch_backend.token_logprobs(x, tokens, t, num_top=20),
                "token_logprobs top_k=50 top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_k=50,
                                                                                          top_p=0.9),
                "gumbel_sample": lambda: torch_backend.gumbel_sample(x, seeds, seeds, t),
            }
            for name, fn in cells.items():
                us = graph_us(fn)
                rows.append(dict(batch=batch, vocab=vocab, dtype=str(dtype).split(".")[-1], cell=name, us=us))
                print(f"B={batch:4d} V={vocab} {rows[-1]['dtype']:9s} {name:38s} {us:9.1f}", flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "logprobs.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
