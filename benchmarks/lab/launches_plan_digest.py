"""CPU digest of top_k_top_p_sample's launches' plan (the large-batch tiling forced: MANY_ROWS_ELEMENTS = 0,
Target large_programs=False, resident_programs=0) over token_digest.py's CPU grid, torch frontend, for the
checkout at CHECKOUT (its jsample and torch_backend; this tree's tests and benchmarks drive it). Run it on
the tree before a change to the launches' plan and on the tree after: every line must match.

    python benchmarks/lab/launches_plan_digest.py CHECKOUT > digest.txt
"""

import dataclasses
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(sys.argv[1]))
sys.path.insert(1, os.path.join(HERE, "..", "..", "tests"))
sys.path.insert(1, os.path.join(HERE, ".."))

import numpy as np  # noqa: E402


def main():
    from jsample.kernels import filtered
    from torch_backend import _execute

    filtered.MANY_ROWS_ELEMENTS = 0
    target = _execute.target
    _execute.target = lambda device: dataclasses.replace(target(device), large_programs=False, resident_programs=0)
    from conftest import run_torch
    import token_digest

    print("# jsample from", os.path.dirname(filtered.__file__))
    total = hashlib.sha256()
    cases = 0
    for op, name, args, kwargs in token_digest.grid("cpu"):
        if op != "top_k_top_p_sample" or "V=1 " in name:
            continue
        tokens = run_torch(op, *args, **kwargs)
        digest = hashlib.sha256(np.asarray(tokens).tobytes()).hexdigest()[:16]
        total.update(digest.encode())
        cases += 1
        print(digest, name, flush=True)
    print("digest", total.hexdigest()[:16], "over", cases, "cases")


if __name__ == "__main__":
    main()
