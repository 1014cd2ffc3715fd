"""torch_backend.rejection_sample at small batches under its three launch plans, as CUDA graphs:
`four launches` (stats, decide, emit, finish), `three launches` (every emit program decides its
request: kernels.decide_in_emit) and `three, PDL` (the same chained by programmatic dependent
launch: what torch runs on Hopper). Each size also times harness.read_once over the same logits
(the target's floor: bench_rejection's read_once_us) and checks that the plans give the same tokens.
Alternates the plans three times per size, whatever the shipped rule (DECIDE_IN_EMIT_MAX_PROGRAMS)
would choose there, to show where the rule's threshold belongs.

    python benchmarks/lab/explore_small_batch_plans.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # benchmarks/: harness
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import harness  # noqa: E402
import torch  # noqa: E402

import torch_backend  # noqa: E402
from jsample import kernels  # noqa: E402
from torch_backend import rejection as torch_rejection  # noqa: E402

SHIPPED_PLAN, SHIPPED_PDL = kernels.decide_in_emit, torch_rejection._dependent_launches
PLANS = {
    "four launches": (lambda batch, config: False, lambda device, config: False),
    "three launches": (lambda batch, config: True, lambda device, config: False),
    "three, PDL": (lambda batch, config: True, SHIPPED_PDL),
}


def problem(batch, k, vocab):
    gen = torch.Generator(device="cuda").manual_seed(batch * 100 + k)
    target = torch.randn(batch, k + 1, vocab, device="cuda", generator=gen).to(torch.bfloat16)
    draft = target[:, :k].float() + torch.randn(batch, k, vocab, device="cuda", generator=gen)
    draft_tokens = torch.randint(0, vocab, (batch, k), device="cuda", generator=gen, dtype=torch.int32)
    return (target, draft_tokens, torch.full((batch,), k, dtype=torch.int32, device="cuda"),
            torch.arange(batch, device="cuda", dtype=torch.int64), torch.zeros(batch, dtype=torch.int64, device="cuda"),
            torch.full((batch,), 0.8, device="cuda"), draft)


def main():
    print(torch.cuda.get_device_name(), "git", open("GIT_SHA").read().strip() if os.path.exists("GIT_SHA") else "?",
          flush=True)
    sizes = [(1, 1, 151936), (1, 4, 151936), (1, 8, 151936), (2, 1, 151936), (2, 8, 151936), (4, 4, 151936),
             (8, 1, 151936), (8, 8, 151936), (16, 4, 151936), (32, 1, 151936), (32, 8, 151936), (64, 4, 151936),
             (8, 4, 32000), (16, 4, 32000), (64, 8, 32000), (256, 4, 32000)]
    for batch, k, vocab in sizes:
        args = problem(batch, k, vocab)
        config = kernels.rejection_launch_config(vocab, k, (0,), False)
        read_us = harness.time_graph_us(lambda i, run=harness.read_once((args[0], args[6])): run())
        times = {name: [] for name in PLANS}
        tokens = {}
        for _ in range(3):
            for name, (plan, pdl) in PLANS.items():
                kernels.decide_in_emit, torch_rejection._dependent_launches = plan, pdl
                run = lambda i: torch_backend.rejection_sample(*args[:6], draft_logits=args[6])  # noqa: E731
                times[name].append(harness.time_graph_us(run))
                tokens[name] = [t.cpu() for t in run(0)]
        kernels.decide_in_emit, torch_rejection._dependent_launches = SHIPPED_PLAN, SHIPPED_PDL
        same = all(all(torch.equal(a, b) for a, b in zip(t, tokens["four launches"])) for t in tokens.values())
        shipped = "three" if SHIPPED_PLAN(batch, config) else "four"
        print(f"B={batch:3d} K={k} V={vocab:6d} programs={batch * config.num_blocks:5d} (rule: {shipped})  "
              f"read once {read_us:6.2f} us  " + "  ".join(
                  f"{name}: " + " ".join(f"{t:6.2f}" for t in ts) + f" (x{min(ts) / read_us:.2f})"
                  for name, ts in times.items()) + f"  tokens equal: {same}", flush=True)


if __name__ == "__main__":
    main()
