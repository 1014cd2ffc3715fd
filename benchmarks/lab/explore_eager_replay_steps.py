"""Lab: an eager replay (B = 1, V = 32000) step by step: the whole call, execute.replay, the latest
replay's match, _launch_direct (outputs and launches) and the outputs' allocation alone, each timed
against a bare Triton launch in alternation (bench_eager.against_bare: 7 rounds of 200 calls each,
the median ratio), since this host's speed drifts by 10-40% between rounds measured one after another.

    python benchmarks/lab/explore_eager_replay_steps.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_eager as be  # noqa: E402


def main():
    import torch

    from torch_backend import _execute

    p = be.problems(1, 32000)
    calls = be.calls_of(p)
    bare = be.bare_launch()
    cases = {"gumbel_sample": ("gumbel_sample", dict(logits=p["logits"], seeds=p["seeds"], positions=p["positions"],
                                                     temperature=p["temperature"]), (False, False)),
             "synthetic_rejection_sample K=4": ("synthetic_rejection_sample", dict(
                 target_tokens=p["target_tokens"], draft_tokens=p["drafts"], num_draft_tokens=p["num_drafts"],
                 seeds=p["seeds"], positions=p["positions"], conditional_rates=p["rates"]), (False,)),
             "rejection_sample K=4 draft logits": ("rejection_sample", dict(
                 target_logits=p["target"], draft_tokens=p["drafts"], num_draft_tokens=p["num_drafts"],
                 seeds=p["seeds"], positions=p["positions"], temperature=p["temperature"],
                 draft_logits=p["draft"]), ("probabilistic", False))}
    for name, (op, arguments, flags) in cases.items():
        call = calls[name]
        for _ in range(3):
            call()
        last = _execute._LAST[op]
        entry = last.entry
        env = [v.data_ptr() if type(v) is torch.Tensor else v for v in entry.given(arguments)]
        steps = {"whole call": call,
                 "execute.replay": lambda: _execute.replay(op, arguments, flags, entry.planner),
                 "the latest replay's match": lambda: last.matches(arguments),
                 "_launch_direct": lambda: _execute._launch_direct(entry, list(env)),
                 "the outputs (empty_like)": lambda: [torch.empty_like(t) for t, _ in entry.templates]}
        for step, fn in steps.items():
            ratio, us, bare_us = be.against_bare(fn, bare, 200)
            print(f"{name + ': ' + step:65s} {ratio:5.2f}x bare  {us:6.2f} us (bare {bare_us:5.2f} us)", flush=True)


if __name__ == "__main__":
    main()
