"""Which rows of token_logprobs with filters does a change move, and by how much? (The multi-pass kernel's rows
taking their normalisers from the single read's block statistics moves their raw / scaled / kept by rounding.)

    python3 benchmarks/lab/ab_filtered_logprobs_rows.py CHECKOUT_A CHECKOUT_B

Each checkout runs in a process of its own on the GPU (or the CPU interpreter): token_logprobs with filters over
rows the list decides (top-k 50, top-p 0.9 on N(0, 9) logits) and rows the multi-pass kernel does (top-p 0.99 on
nearly flat rows, k = 300), V = 32000 and 151936, float32 and bfloat16, B = 64; and the same call without filters.
Prints, per case and field, how many rows are bit-equal between the checkouts and the largest difference
elsewhere, and, per checkout, whether raw / scaled / rank equal the unfiltered call's (bit for bit).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ab_logprobs_bits import run  # noqa: E402

CHILD = r'''
import json, os
import numpy as np, torch
import torch_backend
device = "cuda" if torch.cuda.is_available() else "cpu"
out = {}
small = os.environ.get("AB_SMALL")
for vocab in (1000,) if small else (32000, 151936):
    for dtype in ("float32", "bfloat16"):
        batch = 8 if small else 64
        rng = np.random.default_rng(vocab)
        x = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
        flat = np.arange(batch) % 2 == 1
        x[flat] *= 0.02  # nearly flat rows: top-p 0.99 keeps most of them (the multi-pass kernel)
        logits = torch.from_numpy(x).to(getattr(torch, dtype)).to(device)
        tokens = torch.from_numpy(rng.integers(0, vocab, batch)).to(device)
        temperature = torch.from_numpy(rng.choice(np.float32([0.7, 1.0, 1.6]), batch)).to(device)
        top_k = torch.from_numpy(np.where(flat, 300, 50)).to(device)
        top_p = torch.from_numpy(np.where(flat, 0.99, 0.9).astype(np.float32)).to(device)
        filtered = torch_backend.token_logprobs(logits, tokens, temperature, top_k=top_k, top_p=top_p, num_top=3)
        plain = torch_backend.token_logprobs(logits, tokens, temperature, num_top=3)
        case = f"V={vocab} {dtype} B={batch}"
        out[case] = {name: getattr(filtered, name).cpu().numpy().tolist() for name in filtered._fields}
        out[case]["same_as_unfiltered"] = {name: bool(torch.equal(getattr(filtered, name), getattr(plain, name)))
                                           for name in ("raw", "scaled", "rank", "top_ids", "top_logprobs")}
print("RESULT " + json.dumps(out))
'''


def main():
    import numpy as np

    first, second = run(sys.argv[1], CHILD), run(sys.argv[2], CHILD)
    for case, fields in first.items():
        other = second[case]
        for name in ("raw", "scaled", "kept", "log_kept_mass", "rank", "top_ids", "top_logprobs"):
            a, b = np.asarray(fields[name], np.float64), np.asarray(other[name], np.float64)
            rows = a.reshape(len(a), -1)
            equal = np.array([np.array_equal(r, s, equal_nan=True) for r, s in zip(rows, b.reshape(len(b), -1))])
            finite = np.isfinite(a) & np.isfinite(b)
            largest = float(np.abs(a - b)[finite].max()) if finite.any() else 0.0
            print(f"{case:28s} {name:14s} rows bit-equal {equal.sum():3d} of {len(equal)}; largest difference "
                  f"{largest:.3g}")
        print(f"{case:28s} equal to the unfiltered call: A {fields['same_as_unfiltered']}  B "
              f"{other['same_as_unfiltered']}")


if __name__ == "__main__":
    main()
