"""Two small-batch variants at B = 1, V = 151936, torch CUDA graph, against the plan as it was when
this ran (`4 warps`: rejection_decide_emit_kernel launched with 4 warps; now config.decide_num_warps):
rejection_decide_emit_kernel with 8 or 16 warps (does the decision's chain shorten with fewer request
rows per warp?), and the bonus row's Gumbel-max partials in the stats launch at every K
(config.bonus_in_stats, shipped for K <= 1 only: then requests that accept every draft leave the
emit step nothing to do). Checks that tokens do not change.

    python benchmarks/lab/explore_decide_emit_warps.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # benchmarks/: harness
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import harness  # noqa: E402
import dataclasses  # noqa: E402

import torch  # noqa: E402
from explore_small_batch_plans import problem  # noqa: E402

import torch_backend  # noqa: E402
from jsample import kernels  # noqa: E402

SHIPPED = kernels.rejection_decide_emit_kernel
SHIPPED_CONFIG = kernels.rejection_launch_config


class Warps:
    """The kernel, launched with `num_warps` warps whatever the frontend asks for."""

    def __init__(self, num_warps):
        self.num_warps = num_warps

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            kwargs["num_warps"] = self.num_warps
            return SHIPPED[grid](*args, **kwargs)
        return launch


def main():
    print(torch.cuda.get_device_name(), flush=True)
    for k in (1, 4, 8):
        args = problem(1, k, 151936)
        times, tokens = {}, {}
        variants = {"4 warps": (4, False), "8 warps": (8, False), "16 warps": (16, False),
                    "bonus in stats": (4, True)}
        for _ in range(3):
            for name, (warps, bonus) in variants.items():
                kernels.rejection_decide_emit_kernel = Warps(warps)
                kernels.rejection_launch_config = lambda *a, bonus=bonus: dataclasses.replace(
                    SHIPPED_CONFIG(*a), bonus_in_stats=SHIPPED_CONFIG(*a).bonus_in_stats or bonus)
                run = lambda i: torch_backend.rejection_sample(*args[:6], draft_logits=args[6])  # noqa: E731
                times.setdefault(name, []).append(harness.time_graph_us(run))
                tokens[name] = [t.cpu() for t in run(0)]
        kernels.rejection_decide_emit_kernel, kernels.rejection_launch_config = SHIPPED, SHIPPED_CONFIG
        same = all(all(torch.equal(a, b) for a, b in zip(t, tokens["4 warps"])) for t in tokens.values())
        print(f"B=1 K={k} " + "  ".join(f"{w}: " + " ".join(f"{t:6.2f}" for t in ts) for w, ts in times.items())
              + f"  accepted drafts: {int(tokens['4 warps'][1].sum()) - 1}  tokens equal: {same}", flush=True)


if __name__ == "__main__":
    main()
