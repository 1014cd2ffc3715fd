"""Lab: what an eager torch call's host time is made of on this host (B = 1, V = 32000), each piece
timed alone in one process (and each call's device time: calls queued behind a sleep kernel): a
bare Triton launch, the compiled gumbel kernel's launcher called
directly, output allocation (torch.empty, a view of a larger block), the call key, the current
stream, and the whole eager calls.

    python benchmarks/lab/explore_eager_host_costs.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_eager as be  # noqa: E402


def per_call_us(fn, calls=2000):
    return be.wall_us(fn, calls)


def device_us(fn, calls=200):
    """Device time per call of `calls` eager calls enqueued behind a long sleep kernel (so that the
    GPU runs them back to back whatever the host's speed): median of 5."""
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(40_000_000)  # ~20 ms: longer than enqueuing the calls
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        rounds.append(start.elapsed_time(end) * 1e3 / calls)
    return sorted(rounds)[2]


def arguments_of(p):
    """gumbel_sample's arguments (bench_eager's problem, tensor temperature), as its wrapper names them."""
    return dict(logits=p["logits"], seeds=p["seeds"], positions=p["positions"], temperature=p["temperature"])


def main():
    import torch
    from triton.runtime import driver

    import torch_backend as tb
    from torch_backend import _execute, _launch

    p = be.problems(1, 32000)
    calls = be.calls_of(p)
    rows = {"bare Triton launch": per_call_us(be.bare_launch())}
    call = calls["gumbel_sample"]
    for _ in range(3):  # remembered, linked to its compiled kernel, replayed
        call()
    key = _launch.call_key("gumbel_sample", arguments_of(p), (False, False))
    entry = _execute._REPLAYS.get(key)
    values = list(arguments_of(p).values())
    if entry is not None and entry.launches:
        rows["gumbel: _launch_direct (outputs, workspace, launches)"] = per_call_us(
            lambda: _execute._launch_direct(entry, [value.data_ptr() for value in values]))
    compiled = be.bare_launch()()  # Triton's launch returns the compiled kernel
    x = torch.zeros(1, device="cuda")
    stream = driver.active.get_current_stream(0)
    rows["trivial kernel's compiled launcher alone"] = per_call_us(
        lambda: compiled.run(1, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                             x.data_ptr()))
    block = torch.empty(4096, dtype=torch.int32, device="cuda")
    counter = iter(range(10**9))
    rows["torch.empty((1,), int32, cuda)"] = per_call_us(lambda: torch.empty((1,), dtype=torch.int32, device=p["logits"].device))
    rows["a view of a block (block[i:i+1])"] = per_call_us(lambda: block[(i := next(counter) % 4000):i + 1])
    arguments = arguments_of(p)
    rows["call key"] = per_call_us(lambda: _launch.call_key("gumbel_sample", arguments, (False, False)))
    rows["replay lookup by key"] = per_call_us(lambda: _execute._REPLAYS.get(key))
    last = _execute._LAST.get("gumbel_sample")
    if last is not None:
        rows["latest replay's match"] = per_call_us(lambda: last.matches(arguments))
    from jsample import kernels

    rows["gumbel: replay() whole"] = per_call_us(
        lambda: _execute.replay("gumbel_sample", arguments, (False, False), kernels.plan_gumbel_sample))
    rows["current stream"] = per_call_us(lambda: driver.active.get_current_stream(0))
    rows["torch.argmax"] = per_call_us(lambda: torch.argmax(p["logits"], -1))
    for name in ("gumbel_sample", "gumbel_sample (T a Python float)", "top_k_top_p_sample top_k=50",
                 "top_k_top_p_sample min_p=0.05", "rejection_sample K=4 draft logits", "synthetic_rejection_sample K=4"):
        rows[name] = per_call_us(calls[name], 1000)
        rows[name + ": device time"] = device_us(calls[name])
    rows["bare Triton launch: device time"] = device_us(be.bare_launch())
    bare = rows["bare Triton launch"]
    for name, us in rows.items():
        print(f"{name:45s} {us:7.2f} us  {us / bare:5.2f}x bare")
    print("torch", torch.__version__, "tb", tb.__file__)


if __name__ == "__main__":
    main()
