"""A/B in one process on a GPU: gumbel_sample's one-launch plan (small batches, torch) against the
two-launch plan, CUDA-graph device time, alternated; tokens must be equal.

    python benchmarks/lab/ab_gumbel_one_launch.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import harness  # noqa: E402


def main():
    import torch

    import torch_backend
    from jsample.kernels.plan import Target
    from torch_backend import _execute

    shipped = _execute.target  # captured calls: two launches since 7161e52's result
    one_launch = lambda device: Target(interpreter=False, pdl=True, arrival_counters=True)  # noqa: E731
    two_launches = lambda device: Target(interpreter=False, pdl=True, arrival_counters=False)  # noqa: E731
    print(f"{'case':40s} {'one launch us':>14s} {'two launches us':>16s} {'one / two':>10s} {'shipped / two':>14s}")
    for vocab in (32000, 151936):
        for batch in (1, 4, 8):
            for dtype in (torch.float32, torch.bfloat16):
                logits = (torch.randn(batch, vocab, device="cuda") * 3).to(dtype)
                seeds = torch.arange(batch, device="cuda") * 7919
                positions = torch.arange(batch, device="cuda")
                temperature = torch.full((batch,), 0.7, device="cuda")
                call = lambda i: torch_backend.gumbel_sample(logits, seeds + i, positions, temperature)  # noqa: E731
                times = {"one": [], "two": [], "shipped": []}
                tokens = {}
                for _ in range(3):
                    for name, target in (("one", one_launch), ("two", two_launches), ("shipped", shipped)):
                        _execute.target = target
                        times[name].append(harness.time_graph_us(call))
                        tokens[name] = [call(i) for i in range(8)]
                _execute.target = shipped
                assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(tokens["one"], tokens["two"], tokens["shipped"]))
                one, two, ours = min(times["one"]), min(times["two"]), min(times["shipped"])
                print(f"B={batch:<3d} V={vocab:<7d} {str(dtype)[6:]:9s}{'':12s} {one:14.2f} {two:16.2f} {one / two:10.3f}"
                      f" {ours / two:14.3f}", flush=True)


if __name__ == "__main__":
    main()
