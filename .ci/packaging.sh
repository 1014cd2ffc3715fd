#!/usr/bin/env bash
# Packaging checks CI runs after the suite (each prints what it found):
# 1. a non-editable wheel, installed into a directory of its own and used from another directory;
# 2. a dry-run resolve from the public index (no local wheels, no local constraints) of the newest
#    torch's triton pin, jax, jax-triton 0.4 and jsample[jax], for Python 3.12 on Linux;
# 3. the jax-triton 0.4 launch path traced with the real jax-triton 0.4 (.ci/jax_triton_04.py), where a
#    Python >= 3.12 is found (jax-triton 0.4 needs it); otherwise it says so and skips; there too, the
#    sharding test's script with that JAX (the CPU path's FFI launches, tests/test_sharding.py) and the
#    JAX frontend's CPU token digest against the one recorded with both frontends.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
python -m pip wheel -q --no-deps -w "$work/wheel" .
wheel=$(ls "$work"/wheel/jsample-*.whl)
python -m pip install -q --no-deps --target "$work/site" "$wheel"
(cd "$work" && PYTHONPATH="$work/site" python - "$work/site" <<'PY'
import sys
import numpy as np, torch
import jsample, torch_backend
assert jsample.__file__.startswith(sys.argv[1]), jsample.__file__  # the wheel, not this checkout
logits = np.random.default_rng(0).standard_normal((3, 50)).astype(np.float32)
seeds, positions = np.arange(3, dtype=np.int32), np.arange(3, dtype=np.int32)
from_jax = np.asarray(jsample.gumbel_sample(logits, seeds, positions, 0.7))
from_torch = torch_backend.gumbel_sample(torch.from_numpy(logits), torch.from_numpy(seeds), torch.from_numpy(positions), 0.7)
assert (from_torch.numpy() == from_jax).all()
print("wheel installed outside the checkout: both frontends sample, identical:", from_jax.tolist())
PY
)
public=(env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null python -m pip install -q --dry-run
        --ignore-installed --ignore-requires-python --target "$work/never" --python-version 3.12 --only-binary=:all:
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --index-url https://pypi.org/simple)
"${public[@]}" --no-deps --report "$work/torch.json" "torch==2.15.*"
pin=$(python -c "import json, sys; m = json.load(open(sys.argv[1]))['install'][0]['metadata']; \
print(next(r.split(';')[0].replace(' ', '') for r in m['requires_dist'] if r.startswith('triton')))" "$work/torch.json")
"${public[@]}" --report "$work/all.json" "$pin" "jax==0.12.*" "jax-triton==0.4.*" "$wheel[jax]"
python -c "import json, sys; print('dry-run resolve (public index, Python 3.12, torch 2.15 needs $pin):', \
sorted(i['metadata']['name'] + ' ' + i['metadata']['version'] for i in json.load(open(sys.argv[1]))['install'] \
if i['metadata']['name'] in ('jsample', 'triton', 'jax', 'jaxlib', 'jax-triton', 'jax_triton')))" "$work/all.json"
python312=""
for candidate in "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python python3.13 python3.12; do
  if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then python312=$candidate; break; fi
done
if [ -n "$python312" ]; then
  "$python312" -m venv "$work/v312"
  "$work/v312/bin/pip" install -q "jax==0.12.*" "triton>=3.7,<3.10" "jax-triton==0.4.*" pytest "$wheel"
  (cd "$work" && TRITON_INTERPRET=0 "$work/v312/bin/python" "$OLDPWD/.ci/jax_triton_04.py")
  # the CPU path's FFI launches under the newest JAX: batch-sharded jit on 2 host devices, no collective
  (cd "$work" && JAX_PLATFORMS=cpu TRITON_INTERPRET=1 "$work/v312/bin/python" "$OLDPWD/tests/test_sharding.py" 2 \
    | tail -n 1 | sed 's/^/jax 0.12, wheel, batch-sharded jit on CPU devices: /')
  # vocab-parallel gumbel_sample under the newest JAX: shard_map on 2 host devices, the unsharded tokens
  (cd "$work" && JAX_PLATFORMS=cpu TRITON_INTERPRET=1 "$work/v312/bin/python" "$OLDPWD/tests/test_vocab_parallel.py" \
    | tail -n 1 | sed 's/^/jax 0.12, wheel, vocab-parallel gumbel_sample: /')
  # every op's tokens under the newest JAX (its frontend alone): the CPU digest recorded with both frontends
  (cd "$work" && JAX_PLATFORMS=cpu TRITON_INTERPRET=1 "$work/v312/bin/python" "$OLDPWD/benchmarks/token_digest.py" \
    --size cpu --frontend jax --compare "$OLDPWD/benchmarks/results/digest/token_digest_cpu_plans.json" \
    | tail -n 1 | sed 's/^/jax 0.12, wheel, token digest: /')
else
  echo "no Python >= 3.12 here: the jax-triton 0.4 trace check (.ci/jax_triton_04.py) is skipped"
fi
rm -rf "$work"
