"""Benchmark rejection_sample (speculative-decoding verification) on a GPU.

Providers: torch_backend, jsample (jax.jit), a plain PyTorch implementation of the same algorithm
(softmax, ratio, residual, multinomial) and FlashInfer's chain_speculative_sampling when importable.
Reports microseconds and the time as a fraction of reading the target + draft logits once at the
read bandwidth measured in the same run (a plain torch.sum over a large buffer).

    python benchmarks/bench_rejection.py --out benchmarks/results/rejection.md

Writes a markdown table to --out and the same rows as JSON next to it (.json), with versions and the
git SHA. Imports on a CPU machine; running needs CUDA.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout without installing

BATCHES = (1, 64, 256)
DRAFTS = (1, 4, 8)
VOCAB = 151936


def plain_torch_rejection(target_logits, draft_logits, draft_tokens, temperature, generator=None):
    """The algorithm in plain PyTorch: softmax, ratio, first rejection, residual multinomial, bonus."""
    import torch

    batch, rows, vocab = target_logits.shape
    k = rows - 1
    t = temperature.view(batch, 1, 1)
    target_probs = torch.softmax(target_logits.float() / t, dim=-1)
    draft_probs = torch.softmax(draft_logits / t, dim=-1)
    index = draft_tokens.long().unsqueeze(-1)
    ratio = (target_probs[:, :k].gather(-1, index) / draft_probs.gather(-1, index)).squeeze(-1)
    uniform = torch.rand(batch, k, device=target_logits.device, generator=generator)
    accepted = (uniform < ratio).int().cumprod(dim=1).sum(dim=1)  # [B]: accepted prefix length
    rows_b = torch.arange(batch, device=target_logits.device)
    emit = accepted.clamp(max=k)
    residual = (target_probs[:, :k] - draft_probs).clamp_min(0)
    residual = torch.cat([residual, target_probs[:, k:]], dim=1)[rows_b, emit]  # bonus row: p itself
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, target_probs[rows_b, emit])
    emitted = torch.multinomial(residual, 1, generator=generator).squeeze(-1).int()
    tokens = torch.full((batch, rows), -1, dtype=torch.int32, device=target_logits.device)
    keep = torch.arange(rows, device=target_logits.device)[None, :k] < accepted[:, None]
    tokens[:, :k] = torch.where(keep, draft_tokens, tokens[:, :k])
    tokens[rows_b, emit] = emitted
    return tokens, accepted.int() + 1


def read_bandwidth_gbs(torch, nbytes=2 << 30):
    """HBM read rate (GB/s) of torch.sum over a buffer of `nbytes`, measured with do_bench."""
    from triton.testing import do_bench

    buffer = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    ms = do_bench(lambda: buffer.sum(), warmup=25, rep=200)
    return nbytes / (ms * 1e-3) / 1e9


def time_jax(fn, *args, calls=100):
    out = fn(*args)
    for leaf in out:
        leaf.block_until_ready()
    for _ in range(10):
        out = fn(*args)
    out[0].block_until_ready()
    start = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    out[0].block_until_ready()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="markdown output path (a .json twin is written too)")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import torch
    import triton
    from triton.testing import do_bench

    import jsample
    import torch_backend

    jax.config.update("jax_enable_x64", True)  # int64 seeds and positions
    if not torch.cuda.is_available():
        raise SystemExit("bench_rejection: needs a CUDA GPU")
    try:
        import flashinfer.sampling as flashinfer_sampling
    except Exception:  # noqa: BLE001  (not installed, or built for another CUDA)
        flashinfer_sampling = None

    bandwidth = read_bandwidth_gbs(torch)
    rows_out = []
    torch_dtype = getattr(torch, args.dtype)
    for batch in BATCHES:
        for k in DRAFTS:
            gen = torch.Generator(device="cuda").manual_seed(batch * 100 + k)
            target = (torch.randn(batch, k + 1, VOCAB, device="cuda", generator=gen) * 3).to(torch_dtype)
            draft = target[:, :k].float() + torch.randn(batch, k, VOCAB, device="cuda", generator=gen)
            draft_tokens = torch.randint(0, VOCAB, (batch, k), device="cuda", generator=gen, dtype=torch.int32)
            num_drafts = torch.full((batch,), k, dtype=torch.int32, device="cuda")
            seeds = torch.randint(0, 2**62, (batch,), device="cuda", generator=gen)
            positions = torch.randint(0, 2**20, (batch,), device="cuda", generator=gen)
            temperature = torch.full((batch,), 0.8, device="cuda")
            logit_bytes = target.numel() * target.element_size() + draft.numel() * draft.element_size()
            read_us = logit_bytes / (bandwidth * 1e9) * 1e6

            def ours():
                return torch_backend.rejection_sample(target, draft_tokens, num_drafts, seeds, positions, temperature,
                                                      draft_logits=draft)

            # correctness before timing: torch == JAX bit for bit
            jax_args = [jnp.asarray(np.asarray(x.float().cpu() if x.dtype == torch.bfloat16 else x.cpu()))
                        for x in (target, draft_tokens, num_drafts, seeds, positions, temperature, draft)]
            jax_args[0] = jax_args[0].astype(jnp.dtype(args.dtype))
            jitted = jax.jit(lambda t, d, n, s, p, temp, dl: jsample.rejection_sample(t, d, n, s, p, temp,
                                                                                        draft_logits=dl))
            expected = ours()
            got = jitted(*jax_args)
            same = (np.array_equal(expected[0].cpu().numpy(), np.asarray(got[0]))
                    and np.array_equal(expected[1].cpu().numpy(), np.asarray(got[1])))
            timings = {
                "torch_backend": do_bench(ours, warmup=25, rep=200) * 1e3,
                "jsample (jit)": time_jax(jitted, *jax_args),
                "plain torch": do_bench(lambda: plain_torch_rejection(target, draft, draft_tokens, temperature),
                                        warmup=25, rep=200) * 1e3,
            }
            if flashinfer_sampling is not None and hasattr(flashinfer_sampling, "chain_speculative_sampling"):
                target_probs = torch.softmax(target.float() / 0.8, dim=-1)
                draft_probs = torch.softmax(draft / 0.8, dim=-1)
                try:
                    timings["flashinfer chain_speculative_sampling (probs given)"] = do_bench(
                        lambda: flashinfer_sampling.chain_speculative_sampling(draft_probs, draft_tokens, target_probs),
                        warmup=25, rep=200) * 1e3
                except Exception as error:  # noqa: BLE001  (API drift between FlashInfer versions)
                    print(f"flashinfer skipped: {error}")
            for provider, us in timings.items():
                rows_out.append(dict(batch=batch, k=k, vocab=VOCAB, dtype=args.dtype, provider=provider,
                                     us=round(us, 2), read_once_us=round(read_us, 2),
                                     fraction_of_read=round(read_us / us, 3), torch_equals_jax=same))
                print(rows_out[-1], flush=True)

    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        sha = "unknown"
    meta = dict(git_sha=sha, torch=torch.__version__, jax=jax.__version__, triton=triton.__version__,
                jsample=jsample.__version__, device=torch.cuda.get_device_name(), read_gbs=round(bandwidth, 1))
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# rejection_sample, V = {VOCAB}, {args.dtype} target logits, float32 draft logits", "",
             ", ".join(f"{k}: {v}" for k, v in meta.items()), "",
             "| B | K | provider | us | read-once us | read-once / us | torch == JAX |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['batch']} | {r['k']} | {r['provider']} | {r['us']} | {r['read_once_us']} | "
              f"{r['fraction_of_read']} | {r['torch_equals_jax']} |" for r in rows_out]
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(dict(meta=meta, rows=rows_out), indent=1))


if __name__ == "__main__":
    main()
