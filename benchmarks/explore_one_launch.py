"""rejection_one_launch_kernel (JAX, small batches, K <= 1) against torch's PDL chain of three launches:
tokens over many seeds and shapes must be equal, and a jitted call repeated must give the same tokens
every time (a race between the ticket phases would show as a difference).

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/explore_one_launch.py
"""

import numpy as np


def main():
    import jax
    import torch

    import jsample
    import torch_backend

    jax.config.update("jax_enable_x64", True)
    checked = 0
    methods = (dict(draft_logits=True), dict(), dict(method="strict"))
    jitted = [jax.jit(lambda *a: jsample.rejection_sample(*a[:6], draft_logits=a[6])),
              jax.jit(lambda *a: jsample.rejection_sample(*a)),
              jax.jit(lambda *a: jsample.rejection_sample(*a, method="strict"))]
    for vocab in (151936, 32000, 1000):
        for batch in (1, 2, 4):
            for k in (0, 1):
                for seed in range(12):
                    rng = np.random.default_rng(seed + 100 * batch + 1000 * k)
                    target = (rng.standard_normal((batch, k + 1, vocab)) * 3).astype(np.float32)
                    draft = (target[:, :k] + rng.standard_normal((batch, k, vocab))).astype(np.float32)
                    drafts = rng.integers(0, vocab, (batch, k)).astype(np.int32)
                    if k:
                        target[::2, 0, drafts[::2, 0]] += 20.0  # accepted drafts as well as rejections
                    num_drafts = rng.integers(0, k + 1, batch).astype(np.int32)
                    seeds = rng.integers(0, 2**62, batch).astype(np.int64)
                    positions = rng.integers(0, 2**20, batch).astype(np.int64)
                    temperature = np.where(rng.random(batch) < 0.25, 0.0, 0.5 + rng.random(batch)).astype(np.float32)
                    for method, jitted_method in zip(methods, jitted):
                        args = (target, drafts, num_drafts, seeds, positions, temperature)
                        kwargs = dict(method, draft_logits=draft) if "draft_logits" in method else method
                        torch_out = torch_backend.rejection_sample(
                            *[torch.from_numpy(a).cuda() for a in args],
                            **{n: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v
                               for n, v in kwargs.items()})
                        jax_args = args + ((draft,) if "draft_logits" in method else ())
                        for repeat in range(3 if seed < 4 else 1):
                            jax_out = jitted_method(*jax_args)
                            for t, j in zip(torch_out, jax_out):
                                if not np.array_equal(t.cpu().numpy(), np.asarray(j)):
                                    raise SystemExit(f"differ: V={vocab} B={batch} K={k} seed={seed} {sorted(kwargs)} "
                                                     f"repeat {repeat}: {t.cpu().numpy()} vs {np.asarray(j)}")
                        checked += 1
    print(f"torch (PDL chain) == JAX (one launch): {checked} cases equal", flush=True)


if __name__ == "__main__":
    main()
