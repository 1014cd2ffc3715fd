"""Padded rows cost nothing (issue 39): device time (CUDA-graph replay, median) of a batch of 256 with
num_valid = 16 against a batch of 16, per op, tokens of the valid rows asserted equal first; with --jax, the
same in JAX (jax.jit of 20 calls one after another: the time a call, dispatch amortised); --slots N: padded
plans on N row slots (jsample.kernels.plan.PADDED_ROW_SLOTS); --only NAME_PART: the ops whose name holds it.

    python benchmarks/lab/bench_padding.py [--jax] [--slots N] [--only NAME_PART]
"""

import sys
import time

import numpy as np
import torch
import triton

import torch_backend

V, K = 151936, 4


def graph_us(fn):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=25, rep=200, return_mode="median") * 1e3


def padding_ops():
    """{op name: call(b, num_valid)} over the first b of 256 requests (V = 151936 bf16, K = 4), and the
    num_valid = 16 device scalar."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(256, V, device="cuda", generator=g) * 3).to(torch.bfloat16)
    target = (torch.randn(256, K + 1, V, device="cuda", generator=g) * 3).to(torch.bfloat16)
    drafts = target[:, :K].float().argmax(-1).to(torch.int32)
    counts = torch.full((256,), K, device="cuda", dtype=torch.int32)
    seeds = torch.arange(256, device="cuda", dtype=torch.int64) * 7919
    positions = torch.arange(256, device="cuda", dtype=torch.int64)
    temperature = torch.full((256,), 0.8, device="cuda")
    top_k = torch.full((256,), 50, device="cuda", dtype=torch.int64)
    top_p = torch.full((256,), 0.9, device="cuda")
    ops = {
        "gumbel_sample": lambda b, nv: torch_backend.gumbel_sample(x[:b], seeds[:b], positions[:b], temperature[:b],
                                                                    num_valid=nv),
        "top_k_top_p_sample": lambda b, nv: torch_backend.top_k_top_p_sample(
            x[:b], seeds[:b], positions[:b], temperature[:b], top_k=top_k[:b], top_p=top_p[:b], num_valid=nv),
        "rejection_sample K=4": lambda b, nv: torch_backend.rejection_sample(
            target[:b], drafts[:b], counts[:b], seeds[:b], positions[:b], temperature[:b], num_valid=nv)[0],
        "gumbel return_logprobs": lambda b, nv: torch_backend.gumbel_sample(
            x[:b], seeds[:b], positions[:b], temperature[:b], num_valid=nv, return_logprobs=True)[0],
        "rejection logprobs K=4": lambda b, nv: torch_backend.rejection_sample(
            target[:b], drafts[:b], counts[:b], seeds[:b], positions[:b], temperature[:b], num_valid=nv,
            return_logprobs=True)[0],
    }
    return ops, torch.tensor(16, device="cuda")


def main():
    ops, n = padding_ops()
    print(f"{torch.cuda.get_device_name()}, V = {V} bf16; us (CUDA graph, median)")
    full = torch.tensor(256, device="cuda")
    print(f"{'op':22s} {'B=16':>8s} {'B=256':>8s} {'B=256, num_valid=16':>20s} {'ratio to B=16':>14s}"
          f" {'B=256, num_valid=256':>21s} {'ratio to B=256':>15s} {'B=16, num_valid=16':>17s}")
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    for name, op in ops.items():
        if only not in name:
            continue
        small, padded = op(16, None), op(256, n)
        assert torch.equal(padded[:16], small) and bool((padded[16:] == -1).all()), name
        assert torch.equal(op(256, full), op(256, None)), name
        us16, us256, us_padded = graph_us(lambda: op(16, None)), graph_us(lambda: op(256, None)), graph_us(lambda: op(256, n))
        us_full = graph_us(lambda: op(256, full))
        us16_padded = graph_us(lambda: op(16, n))
        print(f"{name:22s} {us16:8.1f} {us256:8.1f} {us_padded:20.1f} {us_padded / us16:14.2f} {us_full:21.1f}"
              f" {us_full / us256:15.2f} {us16_padded:17.1f}")


def jax_section(calls=20):
    import jax
    import jax.numpy as jnp

    import jsample

    rng = np.random.default_rng(0)
    arrays = dict(
        x=jnp.asarray((rng.standard_normal((256, V)) * 3).astype(np.float32)).astype(jnp.bfloat16),
        target=jnp.asarray((rng.standard_normal((256, K + 1, V)) * 3).astype(np.float32)).astype(jnp.bfloat16),
        counts=jnp.full((256,), K, jnp.int32), seeds=jnp.arange(256, dtype=jnp.int32) * 7919,
        positions=jnp.arange(256, dtype=jnp.int32), temperature=jnp.full((256,), 0.8, jnp.float32),
        top_k=jnp.full((256,), 50, jnp.int32), top_p=jnp.full((256,), 0.9, jnp.float32))
    arrays["drafts"] = jnp.argmax(arrays["target"][:, :K].astype(jnp.float32), -1).astype(jnp.int32)
    ops = {
        "gumbel_sample": lambda a, b, nv, p: jsample.gumbel_sample(a["x"][:b], a["seeds"][:b], p[:b],
                                                                    a["temperature"][:b], num_valid=nv),
        "top_k_top_p_sample": lambda a, b, nv, p: jsample.top_k_top_p_sample(
            a["x"][:b], a["seeds"][:b], p[:b], a["temperature"][:b], top_k=a["top_k"][:b], top_p=a["top_p"][:b],
            num_valid=nv),
        "rejection_sample K=4": lambda a, b, nv, p: jsample.rejection_sample(
            a["target"][:b], a["drafts"][:b], a["counts"][:b], a["seeds"][:b], p[:b], a["temperature"][:b],
            num_valid=nv)[0],
    }

    def us(op, b, nv):
        def loop(a, n):  # unrolled: no while loop's per-step host round trip
            return sum(jnp.sum(op(a, b, n, a["positions"] + i)) for i in range(calls))

        loop = jax.jit(loop)
        loop(arrays, nv).block_until_ready()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            loop(arrays, nv).block_until_ready()
            times.append((time.perf_counter() - start) / calls * 1e6)
        return sorted(times)[2]

    print(f"\nJAX {jax.__version__}, V = {V} bf16; us a call (jit of {calls} calls, median of 5)")
    print(f"{'op':22s} {'B=16':>8s} {'B=256':>8s} {'B=256, num_valid=16':>20s} {'ratio to B=16':>14s}")
    for name, op in ops.items():
        small = op(arrays, 16, None, arrays["positions"])
        padded = op(arrays, 256, jnp.int32(16), arrays["positions"])
        assert bool((padded[:16] == small).all()) and bool((padded[16:] == -1).all()), name
        us16, us256, us_padded = us(op, 16, None), us(op, 256, None), us(op, 256, jnp.int32(16))
        print(f"{name:22s} {us16:8.1f} {us256:8.1f} {us_padded:20.1f} {us_padded / us16:14.2f}", flush=True)


if __name__ == "__main__":
    if "--slots" in sys.argv:
        from jsample.kernels import plan

        plan.PADDED_ROW_SLOTS = int(sys.argv[sys.argv.index("--slots") + 1])
        print(f"PADDED_ROW_SLOTS = {plan.PADDED_ROW_SLOTS}")
    main()
    if "--jax" in sys.argv:
        jax_section()
