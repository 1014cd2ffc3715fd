"""Merge token-digest parts (token_digest.py --only ... --out PART.json, run in parallel) into one digest,
and compare it with another digest: every case of either must be in both, with the same digest.

    python benchmarks/merge_digests.py --out MERGED.json PART.json ... [--compare BASELINE.json]
"""

import argparse
import hashlib
import json
import sys


def merge(paths):
    per_case, size = {}, None
    for path in paths:
        with open(path) as f:
            part = json.load(f)
        size = size or part["size"]
        per_case.update(part["per_case"])
    total = hashlib.sha256()
    for case in sorted(per_case):
        total.update(f"{case} {per_case[case]}\n".encode())
    return {"size": size, "cases": len(per_case), "digest": total.hexdigest()[:16], "per_case": per_case}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("parts", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--compare", default=None)
    args = parser.parse_args()
    merged = merge(args.parts)
    with open(args.out, "w") as f:
        json.dump(merged, f, indent=1, sort_keys=True)
    print(f"{args.out}: digest {merged['digest']} over {merged['cases']} cases ({merged['size']})")
    if args.compare:
        with open(args.compare) as f:
            baseline = json.load(f)["per_case"]
        cases = sorted(set(baseline) | set(merged["per_case"]))
        changed = [case for case in cases if baseline.get(case) != merged["per_case"].get(case)]
        print(f"compared with {args.compare}: {len(cases) - len(changed)} of {len(cases)} cases equal"
              + "".join(f"\n  differs or missing: {case}" for case in changed))
        sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()
