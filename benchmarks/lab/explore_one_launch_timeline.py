"""Lab: where the time of top_k_top_p_sample's one-launch plan (B = 1) goes, on a GPU.

Copies the checkout to a temporary directory and patches filtered_one_launch_kernel there (the shipped
code is untouched): at each step boundary every program writes %globaltimer (ns) and %clock to slots
after the row's token (the tokens buffer lengthened by the patch). The stamps of one call then show
the launch's ramp, each program's step-0 pass, the barriers' waits, the list and sums steps, and
the last program's reduction. Tokens must equal the unpatched checkout's (checked).

    python benchmarks/lab/explore_one_launch_timeline.py [--checkout .] [--draws 64] [--reps 5]
"""

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STAMPS = 14  # slots a program: (globaltimer, clock) pairs

# (name, anchor in filtered_one_launch_kernel's source, where: "after" or "before" the anchor's line)
POINTS = [
    ("start", "    ways = tl.arange(0, WAYS)\n", "after"),
    ("step0 done", "    chunk_max, chunk_min = _extreme_keys(largest, smallest, chunk_count, KEY_SHIFT)\n", "before"),
    ("barrier0 passed", "    _row_barrier(arrivals, num_chunks)\n", "after"),
    ("winner reduced", "    step = b * 0 + 1  # barriers passed", "before"),
    ("winner key", "        key_w = _key(x_w, KEY_SHIFT)\n", "after"),
    ("list bound", "                # step 1: the keys >= bound, listed; then every program sorts the same list\n",
     "after"),
    ("listed", "                _row_barrier(arrivals, 2 * num_chunks)\n                step = 2\n"
               "                listed_count", "before"),
    ("barrier1 passed (list)", "                step = 2\n                listed_count", "before"),
    ("list decided", "                    settled = listed\n", "after"),
    ("sums done", "                tl.store(partials + (num_chunks + c) * WAYS + ways, sums)\n", "after"),
    ("barrier1 passed (sums)", "                sums = tl.sum(_gather_partials(partials, 1, num_chunks", "before"),
    ("sums decided", "                mass_all = tl.sum(tl.where(lanes == 3, sums, 0), axis=0)\n", "after"),
    ("final arrival", "    tl.debug_barrier()  # every thread's stores before the one release\n    if tl.atomic_add", "before"),
    ("token stored", "        tl.store(tokens_ptr + b, token)\n", "after"),
]

STAMP_FN = '''

@triton.jit
def _probe_stamp(tokens_ptr, B, c, slot: tl.constexpr):
    t = tl.inline_asm_elementwise("mov.u32 $0, %globaltimer_lo;", "=r,r", [c], dtype=tl.int32, is_pure=False, pack=1)
    k = tl.inline_asm_elementwise("mov.u32 $0, %clock;", "=r,r", [c], dtype=tl.int32, is_pure=False, pack=1)
    base = tokens_ptr + B + c * (2 * 14) + 2 * slot
    tl.store(base, t)
    tl.store(base + 1, k)

'''


def patch(checkout: str, dry: bool = False) -> str:
    root = tempfile.mkdtemp(prefix="timeline_")
    for package in ("jsample", "torch_backend"):
        shutil.copytree(os.path.join(checkout, package), os.path.join(root, package))
    path = os.path.join(root, "jsample", "kernels", "filtered", "one_launch.py")  # (filtered.py before the split)
    if not os.path.exists(path):
        path = os.path.join(root, "jsample", "kernels", "filtered.py")
    source = open(path).read()
    head, rest = source.split("def filtered_one_launch_kernel(", 1)
    kernel, tail = rest.split("\n@triton.jit", 1)
    for slot, (name, anchor, where) in enumerate(POINTS):
        assert kernel.count(anchor) == 1, (name, kernel.count(anchor))
        at = kernel.index(anchor)
        line_start = kernel.rindex("\n", 0, at) + 1
        line = kernel[line_start:kernel.index("\n", at)]
        stamp = " " * (len(line) - len(line.lstrip(" "))) + f"_probe_stamp(tokens_ptr, tl.num_programs(0), c, {slot})\n"
        if where == "after":  # (such anchors end their line)
            kernel = kernel[:at + len(anchor)] + stamp + kernel[at + len(anchor):]
        else:
            kernel = kernel[:line_start] + stamp + kernel[line_start:]
    # every program clears its slots first (slots of steps it skips stay 0)
    clear = ("    for _probe_slot in tl.static_range(2 * 14):\n"
             "        tl.store(tokens_ptr + tl.num_programs(0) + tl.program_id(1) * (2 * 14) + _probe_slot, 0)\n")
    body_start = kernel.index("    V = aligned(V, VOCAB_ALIGN)\n")
    kernel = kernel[:body_start] + clear + kernel[body_start:]
    stamp_fn = STAMP_FN
    if dry:  # the interpreter has no inline PTX: the slot numbers stand in for the stamps
        stamp_fn = stamp_fn.replace('tl.inline_asm_elementwise("mov.u32 $0, %globaltimer_lo;", "=r,r", [c], dtype=tl.int32, is_pure=False, pack=1)', "c * 0 + 1000 * slot + 7").replace(
            'tl.inline_asm_elementwise("mov.u32 $0, %clock;", "=r,r", [c], dtype=tl.int32, is_pure=False, pack=1)', "c * 0 + slot")
    head = head[:head.rindex("@triton.jit")]  # the kernel's decorator goes after the stamp function
    source = head + stamp_fn + "@triton.jit\ndef filtered_one_launch_kernel(" + kernel + "\n@triton.jit" + tail
    plan_anchor = 'Buffer("top_k_list", (batch, 2 * top_k_list) if listing else (1,), "int32"), tokens)'
    assert source.count(plan_anchor) == 1
    source = source.replace(plan_anchor, plan_anchor[:-len("tokens)")] + 'Buffer("tokens", (batch + one.num_chunks * 2 * 14,), "int32"))')
    open(path, "w").write(source)
    return root


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkout", default=".")
    parser.add_argument("--draws", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--families", default="flat,typical,peaked")
    args = parser.parse_args()
    checkout = os.path.abspath(args.checkout)
    root = patch(checkout)
    sys.path.insert(0, os.path.dirname(HERE))
    import numpy as np
    import torch

    import logit_families

    def run_in(path):
        for name in [m for m in sys.modules if m.split(".")[0] in ("jsample", "torch_backend")]:
            del sys.modules[name]
        sys.path.insert(0, path)
        import torch_backend
        sys.path.remove(path)
        return torch_backend

    filters = {"top_k": dict(top_k=50), "top_p": dict(top_p=0.9), "min_p": dict(min_p=0.05),
               "top_k+top_p": dict(top_k=50, top_p=0.9)}
    V = 151936
    seeds = torch.tensor([17], device="cuda", dtype=torch.int64)
    positions = torch.tensor([2**32], device="cuda", dtype=torch.int64)
    temperature = torch.full((1,), 0.8, device="cuda")
    for family in args.families.split(","):
        gen = torch.Generator(device="cuda").manual_seed(1)
        xs = [logit_families.make_logits(family, 1, V, gen).to(torch.bfloat16) for _ in range(args.draws)]
        for fname, f in filters.items():
            plain = run_in(checkout)
            expected = [plain.top_k_top_p_sample(x, seeds, positions, temperature, **f).cpu() for x in xs]
            probed = run_in(root)
            rows = []
            for rep in range(args.reps):
                for i, x in enumerate(xs):
                    out = probed.top_k_top_p_sample(x, seeds, positions, temperature, **f)
                    torch.cuda.synchronize()
                    out = out.cpu().numpy()
                    if rep == 0 and out[0] != expected[i][0]:
                        raise SystemExit(f"{family} {fname} draw {i}: the probed token differs")
                    stamps = out[1:].reshape(-1, STAMPS, 2).astype(np.int64)
                    rows.append(stamps)
            # per call: times (ns) relative to the first program's start; 0 = not reached
            summary = {}
            paths = {"list": 0, "sums": 0, "neither": 0}
            for stamps in rows:
                t = stamps[:, :, 0] & 0xFFFFFFFF
                reached = (stamps[:, :, 0] != 0) | (stamps[:, :, 1] != 0)
                t0 = t[:, 0].min()
                rel = np.where(reached, (t - t0) % 2**32, -1)
                paths["list" if reached[:, 6].any() else "sums" if reached[:, 9].any() else "neither"] += 1
                for slot, (name, _, _) in enumerate(POINTS):
                    got = rel[:, slot][rel[:, slot] >= 0]
                    if got.size:
                        summary.setdefault(name, []).append((np.median(got), got.max(), got.min()))
            print(f"\n{family} B=1 {fname}: {len(rows)} calls ({args.draws} draws x {args.reps}), "
                  f"{stamps.shape[0]} programs; paths {paths}")
            print(f"  {'point':26s} {'calls':>5s} {'median prog us':>14s} {'last prog us':>12s} {'first prog us':>13s}")
            for name, values in summary.items():
                v = np.array(values)
                print(f"  {name:26s} {len(v):5d} {np.median(v[:, 0]) / 1e3:14.2f} {np.median(v[:, 1]) / 1e3:12.2f} "
                      f"{np.median(v[:, 2]) / 1e3:13.2f}", flush=True)
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
