"""A digest of every op's tokens over a fixed grid of inputs, both frontends (they must agree).

Run before and after a refactor or a speed change: the digest must not move, except for the inputs
the stream contract says change (docs/STREAM.md, "Clarifications of version 1"), which the grid
avoids (temperatures are 0 or >= 0.05, logits are moderate, filter values are in range).

    python benchmarks/token_digest.py [--size cpu|gpu] [--out FILE] [--compare BASELINE.json] [--only TEXT]
                                      [--frontend both|jax] [--torch-calls N]

`--frontend jax` runs the JAX frontend alone (no torch needed: another JAX's tokens against a digest
recorded with both frontends, as .ci/packaging.sh does with the newest JAX).

The CPU digest comes from the Triton interpreter, the GPU digest from compiled kernels (FAST_MATH
logs): each is compared with itself, not with the other.
"""

import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import numpy as np  # noqa: E402


def grid(size: str):
    """(op, case name, args, kwargs): NumPy inputs from fixed seeds."""
    import ml_dtypes

    batch, vocabs = {"cpu": (6, (1, 37, 5000)), "gpu": (64, (1, 37, 32000, 151936))}[size]
    for vocab in vocabs:
        rng = np.random.default_rng(vocab)
        seeds = rng.integers(-(2**62), 2**62, size=batch)
        positions = rng.integers(0, 2**40, size=batch)
        temperature = rng.choice(np.float32([0.0, 0.05, 0.7, 1.0, 2.5]), size=batch)
        for dtype in ("float32", "bfloat16"):
            logits = (rng.standard_normal((batch, vocab)) * 3).astype(getattr(ml_dtypes, dtype, dtype))
            for fp64 in (False, True):
                name = f"V={vocab} {dtype} fp64={fp64}"
                yield "gumbel_sample", name, (logits, seeds, positions, temperature), dict(fp64=fp64)
                yield "gumbel_sample", name + " draft T=0.8", (logits, seeds, positions, 0.8), dict(fp64=fp64, draft=True)
                filters = [dict(top_k=5), dict(top_p=0.9), dict(min_p=0.05), dict(top_k=50, top_p=0.8, min_p=0.01),
                           dict(top_k=rng.integers(0, 2 * vocab + 1, size=batch).astype(np.int32),
                                top_p=rng.uniform(0.05, 1.0, size=batch).astype(np.float32))]
                for i, f in enumerate(filters):
                    yield "top_k_top_p_sample", f"{name} filters#{i}", (logits, seeds, positions, temperature), \
                        dict(f, fp64=fp64)
        for k in (0, 1, 4):
            target = (rng.standard_normal((batch, k + 1, vocab)) * 3).astype(np.float32)
            draft_logits = (target[:, :k] + rng.standard_normal((batch, k, vocab)).astype(np.float32))
            drafts = rng.integers(0, vocab, size=(batch, k)).astype(np.int32)
            if k:  # the target's argmax as the draft sometimes, so that drafts get accepted
                drafts[::2] = target[::2, :k].argmax(axis=-1)
            n = rng.integers(0, k + 1, size=batch).astype(np.int32)
            for fp64 in (False, True):
                name = f"V={vocab} K={k} fp64={fp64}"
                args = (target, drafts, n, seeds, positions, temperature)
                yield "rejection_sample", name + " one-hot", args, dict(fp64=fp64)
                yield "rejection_sample", name + " draft logits", args, dict(draft_logits=draft_logits, fp64=fp64)
                yield "rejection_sample", name + " strict", args, dict(method="strict", fp64=fp64)
                rates = rng.uniform(0, 1, size=(batch, k)).astype(np.float32)
                yield "synthetic_rejection_sample", name, \
                    (target.argmax(-1).astype(np.int32), drafts, n, seeds, positions, rates), dict(fp64=fp64)


def jax_alone(op, *args, **kwargs):
    """The JAX frontend's outputs of one case as NumPy arrays (eager calls, x64 on as in the tests)."""
    import jsample.kernels  # noqa: F401  (chooses the Triton interpreter on CPU-only machines first)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jsample

    out = getattr(jsample, op)(*args, **kwargs)
    return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=("cpu", "gpu"), default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--compare", default=None, help="a digest JSON recorded before: every case must match")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this text")
    parser.add_argument("--frontend", choices=("both", "jax"), default="both",
                        help="both (asserts torch == JAX) or the JAX frontend alone, without torch")
    parser.add_argument("--torch-calls", type=int, default=1,
                        help="call the torch op this many times a case and assert equal outputs (3 reaches an "
                             "eager call's replay by its key, then its direct replay)")
    args = parser.parse_args()
    if args.frontend == "jax":
        size, run = args.size or "cpu", jax_alone
    else:
        from conftest import SIZE, both_frontends, run_torch  # noqa: E402  (chooses the interpreter on CPU machines)

        size, run = args.size or SIZE, both_frontends
    digests, total = {}, hashlib.sha256()
    for op, name, op_args, kwargs in grid(size):
        if args.only not in f"{op} {name}":
            continue
        out = run(op, *op_args, **kwargs)  # both frontends: asserts torch == JAX
        for _ in range(args.torch_calls - 1):
            again = run_torch(op, *op_args, **kwargs)
            for first, later in zip(out if isinstance(out, tuple) else (out,),
                                    again if isinstance(again, tuple) else (again,)):
                np.testing.assert_array_equal(later, first, err_msg=f"{op} {name}: a repeated torch call differs")
        data = b"".join(np.ascontiguousarray(o).tobytes() for o in (out if isinstance(out, tuple) else (out,)))
        digest = hashlib.sha256(data).hexdigest()[:16]
        digests[f"{op} {name}"] = digest
        total.update(f"{op} {name} {digest}\n".encode())
        print(f"{digest}  {op} {name}", flush=True)
    result = {"size": size, "cases": len(digests), "digest": total.hexdigest()[:16], "per_case": digests}
    print(f"digest {result['digest']} over {len(digests)} cases ({size})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            baseline = json.load(f)["per_case"]
        baseline = {case: digest for case, digest in baseline.items() if args.only in case}
        changed = sorted(case for case in baseline if digests.get(case) != baseline[case])
        print(f"compared with {args.compare}: {len(baseline) - len(changed)} of {len(baseline)} cases equal"
              + "".join(f"\n  differs: {case}" for case in changed))
        sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()
