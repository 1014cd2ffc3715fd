"""Benchmark rejection_sample (speculative-decoding verification) on a GPU.

Providers, side by side in one run: torch_backend.rejection_sample (eager, and CUDA-graph replay),
jsample.rejection_sample (jitted), a plain PyTorch implementation of the same algorithm (softmax,
ratio, residual, multinomial) and FlashInfer's chain_speculative_sampling when it can be imported.
Reports microseconds and two readings of "the time needed to read the target and draft logits once",
each divided by the provider's time (1 = at the floor; the issue's target is >= 0.5, "within 2x"):
`read_floor_fraction`, from their bytes at the HBM read rate measured in the same run, and
`read_once_fraction`, from the measured time of one launch that reads them once (CUDA graph; the
fastest of harness.READERS), which includes what any kernel pays to start: at B = 1 the bytes take
0.3-1.7 us, a launch several.

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/bench_rejection.py --out benchmarks/results \
        --git-sha $(git rev-parse HEAD)
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import harness  # noqa: E402


def plain_torch_rejection(target_logits, draft_logits, draft_tokens, temperature):
    """The algorithm in plain PyTorch: softmax, ratio, first rejection, residual multinomial, bonus."""
    import torch

    batch, rows, vocab = target_logits.shape
    k = rows - 1
    t = temperature.view(batch, 1, 1)
    target_probs = torch.softmax(target_logits.float() / t, dim=-1)
    draft_probs = torch.softmax(draft_logits / t, dim=-1)
    index = draft_tokens.long().unsqueeze(-1)
    ratio = (target_probs[:, :k].gather(-1, index) / draft_probs.gather(-1, index)).squeeze(-1)
    uniform = torch.rand(batch, k, device=target_logits.device)
    accepted = (uniform < ratio).int().cumprod(dim=1).sum(dim=1)  # [B]: accepted prefix length
    rows_b = torch.arange(batch, device=target_logits.device)
    residual = (target_probs[:, :k] - draft_probs).clamp_min(0)
    residual = torch.cat([residual, target_probs[:, k:]], dim=1)[rows_b, accepted]  # bonus row: p itself
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, target_probs[rows_b, accepted])
    emitted = torch.multinomial(residual, 1).squeeze(-1).int()
    tokens = torch.full((batch, rows), -1, dtype=torch.int32, device=target_logits.device)
    keep = torch.arange(k, device=target_logits.device)[None, :] < accepted[:, None]
    tokens[:, :k] = torch.where(keep, draft_tokens, tokens[:, :k])
    tokens[rows_b, accepted] = emitted
    return tokens, accepted.int() + 1


def kernel_times_us(fn, rotate, calls=20):
    """Mean device microseconds per call of each GPU kernel fn launches (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn(0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(i % rotate)
        torch.cuda.synchronize()
    times = {}
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if total > 0:
            times[event.key] = total / calls
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--drafts", default="1,4,8")
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--git-sha", default="unknown")
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import torch

    import jsample
    import torch_backend

    jax.config.update("jax_enable_x64", True)  # int64 seeds and positions
    flashinfer_sampling = harness.flashinfer_sampling()
    read_rate = harness.measured_read_rate_gbs()
    print(f"measured read rate: {read_rate:.0f} GB/s", flush=True)
    vocab, dtype = args.vocab, getattr(torch, args.dtype)
    rows = []
    for batch in map(int, args.batches.split(",")):
        for k in map(int, args.drafts.split(",")):
            nbytes = batch * (k + 1) * vocab * dtype.itemsize + batch * k * vocab * 4
            rotate = harness.copies_needed(nbytes)
            gen = torch.Generator(device="cuda").manual_seed(batch * 100 + k)
            targets = [(torch.randn(batch, k + 1, vocab, device="cuda", generator=gen) * 3).to(dtype)
                       for _ in range(rotate)]
            drafts = [t[:, :k].float() + torch.randn(batch, k, vocab, device="cuda", generator=gen) for t in targets]
            draft_tokens = torch.randint(0, vocab, (batch, k), device="cuda", generator=gen, dtype=torch.int32)
            num_drafts = torch.full((batch,), k, dtype=torch.int32, device="cuda")
            seeds = torch.randint(0, 2**62, (batch,), device="cuda", generator=gen)
            positions = torch.randint(0, 2**20, (batch,), device="cuda", generator=gen)
            temperature = torch.full((batch,), 0.8, device="cuda")
            jtargets, jdrafts = [jnp.from_dlpack(t) for t in targets], [jnp.from_dlpack(d) for d in drafts]
            jrest = [jnp.from_dlpack(t) for t in (draft_tokens, num_drafts, seeds, positions, temperature)]
            read_floor_us = nbytes / (read_rate * 1e9) * 1e6

            def ours(i):
                return torch_backend.rejection_sample(targets[i], draft_tokens, num_drafts, seeds, positions,
                                                      temperature, draft_logits=drafts[i])

            jitted = jax.jit(lambda t, d, n, s, p, temp, dl: jsample.rejection_sample(t, d, n, s, p, temp,
                                                                                        draft_logits=dl))
            # correctness before timing: torch == JAX bit for bit
            expected, got = ours(0), jitted(jtargets[0], *jrest, jdrafts[0])
            for e, g in zip(expected, got):
                if not torch.equal(e.cpu(), torch.from_numpy(jax.device_get(g).copy())):
                    raise SystemExit(f"torch and JAX differ at B={batch} K={k}")
            # the workload's acceptance: the time depends on how many requests resample a residual
            mean_accepted = (expected[1].double().mean().item() - 1.0)
            all_accepted = (expected[1] == k + 1).double().mean().item()

            # a measured floor next to the computed one: one launch that reads the same logits once,
            # replayed the same way (torch's own reductions took 20 us at B = 1, more than jsample)
            read_once_us, reader = harness.fastest_read_once_us([(targets[i], drafts[i]) for i in range(rotate)])

            def record(provider, us, acceptance=(mean_accepted, all_accepted)):
                rows.append(dict(B=batch, K=k, V=vocab, provider=provider, us=us, read_floor_us=read_floor_us,
                                 read_floor_fraction=read_floor_us / us, read_once_us=read_once_us,
                                 read_once_fraction=read_once_us / us, mean_accepted=acceptance[0],
                                 all_accepted=acceptance[1]))
                print(f"B={batch:4d} K={k} {provider:44s} {us:9.1f} us  floor {read_floor_us:7.1f} us  "
                      f"{read_floor_us / us:5.3f}  read once {read_once_us:7.1f} us  {read_once_us / us:5.3f}",
                      flush=True)

            record(f"read target and draft logits once (one launch, CUDA graph; {reader})", read_once_us)

            record("torch_backend.rejection_sample", harness.time_torch_us(ours, rotate))
            for kernel, us in kernel_times_us(ours, rotate).items():  # where the time goes
                record(f"  kernel {kernel}", us)
            record("torch_backend (CUDA graph)", harness.time_graph_us(ours, rotate))
            # the slowest workload: (almost) every request rejects draft 0 and resamples a residual; the
            # drafts are the tokens the draft model most overrates, p(d) / q(d) ~ 0.01
            worst_tokens = (drafts[0] - targets[0][:, :k].float()).argmax(dim=-1).int()
            worst = torch_backend.rejection_sample(targets[0], worst_tokens, num_drafts, seeds, positions, temperature,
                                                   draft_logits=drafts[0])[1]
            record("torch_backend (CUDA graph), draft 0 rejected", harness.time_graph_us(
                lambda i: torch_backend.rejection_sample(targets[i], worst_tokens, num_drafts, seeds, positions,
                                                         temperature, draft_logits=drafts[i]), rotate),
                   ((worst.double().mean() - 1).item(), (worst == k + 1).double().mean().item()))
            record("jsample.rejection_sample (jit)", harness.time_jax_us(
                lambda i: jitted(jtargets[i], *jrest, jdrafts[i]), rotate))
            # inside a larger jitted program (a decode step), Python's dispatch is paid once for it: many
            # calls in one program, on the rotated copies (distinct seeds, so XLA cannot merge two calls)
            calls = max(rotate, 16)
            seed_sets = [jrest[2] + c for c in range(calls)]

            @jax.jit
            def many_calls(ts, ds, seed_sets, rest):
                return [jsample.rejection_sample(ts[c % rotate], rest[0], rest[1], seed_sets[c], rest[3], rest[4],
                                                 draft_logits=ds[c % rotate])[0] for c in range(calls)]

            record(f"jsample, {calls} calls in one jitted program (per call)", harness.time_jax_us(
                lambda i: many_calls(jtargets, jdrafts, seed_sets, jrest), calls=10) / calls)
            record("plain torch (softmax, ratio, multinomial)", harness.time_torch_us(
                lambda i: plain_torch_rejection(targets[i], drafts[i], draft_tokens, temperature), rotate))
            if flashinfer_sampling is not None:
                def probabilities(i):  # (target, draft)
                    return (torch.softmax(targets[i].float() / temperature.view(-1, 1, 1), dim=-1),
                            torch.softmax(drafts[i] / temperature.view(-1, 1, 1), dim=-1))

                # FlashInfer takes probabilities: the softmaxes are timed with it, as a user must run them
                def flashinfer(i):
                    target_probs, draft_probs = probabilities(i)
                    return flashinfer_sampling.chain_speculative_sampling(draft_probs, draft_tokens, target_probs)

                # and its kernel alone, given the probabilities (what it costs next to a fused softmax)
                probs = [probabilities(i) for i in range(rotate)]

                def flashinfer_given_probs(i):
                    return flashinfer_sampling.chain_speculative_sampling(probs[i][1], draft_tokens, probs[i][0])

                try:
                    record("flashinfer chain_speculative_sampling", harness.time_torch_us(flashinfer, rotate))
                    record("  flashinfer, probabilities given", harness.time_torch_us(flashinfer_given_probs, rotate))
                    record("flashinfer (CUDA graph)", harness.time_graph_us(flashinfer, rotate))
                    record("  flashinfer (CUDA graph), probabilities given",
                           harness.time_graph_us(flashinfer_given_probs, rotate))
                except Exception as error:  # noqa: BLE001  (API drift between FlashInfer versions)
                    print(f"flashinfer skipped: {error}", flush=True)
                del probs
            del targets, drafts, jtargets, jdrafts
            torch.cuda.empty_cache()
    env = harness.environment(args.git_sha)
    env["read_rate_GBps"] = read_rate
    harness.write_results(
        args.out, "rejection", env, rows,
        ["B", "K", "V", "provider", "us", "read_floor_us", "read_floor_fraction", "read_once_us", "read_once_fraction",
         "mean_accepted", "all_accepted"],
        notes=f"{args.dtype} target logits [B, K+1, V], float32 draft logits [B, K, V], temperature 0.8, all K "
              "drafts given (uniformly random draft tokens; draft logits = target logits + N(0, 1)). "
              "`mean_accepted`: accepted drafts per request, `all_accepted`: the fraction of requests that accept "
              "every draft (they emit the bonus token, the others resample a residual). `us`: median (torch, CUDA "
              "events) or best mean of 100 calls (JAX, including dispatch; the row `N calls in one jitted program` "
              "divides one program's time by its N calls, as a decode step's jit would see the op). `read_floor_us`: target + draft logit "
              "bytes / measured read rate. `read_once_us` measures that time instead: the fastest of six one-launch "
              "Triton readers of the same logits (harness.fastest_read_once_us: 2048- to 16384-element programs, "
              "4 or 8 warps), replayed as a CUDA graph like jsample's rows (its own row is `read target and draft "
              "logits once`, naming the reader); at small B its launch, not the bytes, sets it. The fractions are floor / us. FlashInfer's chain_speculative_sampling takes "
              "probabilities: its first rows time the two softmaxes with it, as a user must run them; "
              "`probabilities given` times its kernel alone, which reads a row's V probabilities only where it "
              "resamples or draws the bonus token (normalised probabilities need no pass over the other rows), so "
              "it can beat the logits' read floor while the softmaxes cannot. Command: "
              "`XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/bench_rejection.py --out "
              "benchmarks/results --git-sha <sha>`.")


if __name__ == "__main__":
    main()
