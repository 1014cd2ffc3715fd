"""torch_backend.rejection_sample as a CUDA graph, with and without the programmatic dependent launch
chain (torch_backend/rejection.py): none, the shipped rule (the emit launch joins the chain only while
its programs fit on the GPU together) and the emit launch always in it. Alternates the variants three
times per size, and checks that all three give the same tokens.

    python benchmarks/explore_pdl.py > benchmarks/results/explore_pdl.txt
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import harness  # noqa: E402
import torch  # noqa: E402

import torch_backend  # noqa: E402
import torch_backend.rejection  # noqa: E402

SHIPPED = torch_backend.rejection._dependent_launches
VARIANTS = {
    "no chain": lambda device, programs: (False, False),
    "shipped": SHIPPED,
    "emit always chained": lambda device, programs: (SHIPPED(device, programs)[0],) * 2,
}


def main():
    vocab = 151936
    print(f"{torch.cuda.get_device_name()}  git {open('GIT_SHA').read().strip() if os.path.exists('GIT_SHA') else '?'}")
    for batch, k in [(1, 1), (1, 8), (8, 1), (64, 1), (64, 8), (256, 1), (256, 8)]:
        nbytes = batch * (k + 1) * vocab * 2 + batch * k * vocab * 4
        rotate = harness.copies_needed(nbytes)
        gen = torch.Generator(device="cuda").manual_seed(batch * 100 + k)
        targets = [(torch.randn(batch, k + 1, vocab, device="cuda", generator=gen) * 3).to(torch.bfloat16)
                   for _ in range(rotate)]
        drafts = [t[:, :k].float() + torch.randn(batch, k, vocab, device="cuda", generator=gen) for t in targets]
        draft_tokens = torch.randint(0, vocab, (batch, k), device="cuda", generator=gen, dtype=torch.int32)
        num_drafts = torch.full((batch,), k, dtype=torch.int32, device="cuda")
        seeds = torch.randint(0, 2**62, (batch,), device="cuda", generator=gen)
        positions = torch.randint(0, 2**20, (batch,), device="cuda", generator=gen)
        temperature = torch.full((batch,), 0.8, device="cuda")
        times, outputs = {name: [] for name in VARIANTS}, {}
        for _ in range(3):
            for name, variant in VARIANTS.items():
                torch_backend.rejection._dependent_launches = variant
                graphs = []
                for i in range(rotate):
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        out = torch_backend.rejection_sample(targets[i], draft_tokens, num_drafts, seeds, positions,
                                                             temperature, draft_logits=drafts[i])
                    graphs.append(graph)
                    if i == 0:
                        first = out
                graphs[0].replay()
                outputs[name] = [t.clone() for t in first]
                times[name].append(harness.time_torch_us(lambda i: graphs[i].replay(), rotate))
                torch_backend.rejection._dependent_launches = SHIPPED
        same = all(torch.equal(a, b) for name in VARIANTS for a, b in zip(outputs[name], outputs["no chain"]))
        print(f"B={batch:3d} K={k}  " + "  ".join(
            f"{name}: {' '.join(f'{t:6.1f}' for t in ts)} us" for name, ts in times.items())
              + f"  tokens equal: {same}", flush=True)


if __name__ == "__main__":
    main()
