"""First call of vocab-parallel top_k_top_p_sample (torch, a process group of one rank on one GPU: the same rounds
and kernels as every rank of a split runs) with an empty Triton cache: seconds to the call's end, with the rounds'
kernels compiled ahead side by side (compile_rounds_ahead) or one round at a time (JSAMPLE_COMPILE_THREADS=0).

    for t in 0 16; do TRITON_CACHE_DIR=$(mktemp -d) JSAMPLE_COMPILE_THREADS=$t \\
        python3 benchmarks/lab/explore_vocab_parallel_first_call.py; done
"""

import os
import time

import torch
import torch.distributed as dist


def main():
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29677"))
    dist.init_process_group("nccl", rank=0, world_size=1)
    import torch_backend

    device = torch.device("cuda")
    batch, vocab = 64, 131072
    logits = torch.randn((batch, vocab), device=device).to(torch.bfloat16)
    seeds, positions = torch.arange(batch, device=device), torch.arange(batch, device=device)
    temperature = torch.full((batch,), 0.8, device=device)
    torch.cuda.synchronize()
    start = time.perf_counter()
    tokens = torch_backend.top_k_top_p_sample(logits, seeds, positions, temperature, top_k=50, top_p=0.9,
                                              vocab_group=dist.group.WORLD)
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    want = torch_backend.top_k_top_p_sample(logits, seeds, positions, temperature, top_k=50, top_p=0.9)
    print(f"threads {os.environ.get('JSAMPLE_COMPILE_THREADS', 'default')}: first vocab-parallel call {first:.2f} s, "
          f"tokens equal the one-GPU op: {bool(torch.equal(tokens, want))}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
