"""Lab: eager torch calls of bench_eager's problems, wall us per call, for alternated A/Bs of two
checkouts (run it once per checkout, e.g. PYTHONPATH=.ab/base:. then PYTHONPATH=.; two rounds a process).

    python benchmarks/lab/ab_eager_calls.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_eager as be  # noqa: E402


def main():
    import torch_backend

    print(torch_backend.__file__)
    p1, p256 = be.problems(1, 32000), be.problems(256, 151936)
    bare = be.bare_launch()
    c1, c256 = be.calls_of(p1), be.calls_of(p256)
    for _ in range(2):
        print("bare", round(be.wall_us(bare, 200), 1))
        for name in ("gumbel_sample", "top_k_top_p_sample top_k=50", "top_k_top_p_sample min_p=0.05",
                     "rejection_sample K=4 draft logits", "synthetic_rejection_sample K=4"):
            print(name, "B=1", round(be.wall_us(c1[name], 200), 1))
        print("gumbel B=256", round(be.wall_us(c256["gumbel_sample"], 50), 1))
        print("synthetic B=256", round(be.wall_us(c256["synthetic_rejection_sample K=4"], 50), 1))


if __name__ == "__main__":
    main()
