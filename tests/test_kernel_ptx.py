"""The row kernels' logits loads are vectorised in the PTX that jax-triton compiles (no GPU needed).

jax-triton, unlike torch's launcher, tells the compiler nothing about integer arguments; without
`gumbel.aligned(V, VOCAB_ALIGN)` every masked row load became one scalar 2-byte load per bf16
element (a memory-bound kernel then runs at a fraction of the read rate in JAX only).
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).with_name("ptx_loads.py")
ROOT = SCRIPT.parents[1]


def compiled_loads(*args):
    try:
        import triton.backends.nvidia  # noqa: F401
    except ImportError:
        pytest.skip("triton has no NVIDIA backend here")
    result = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "TRITON_INTERPRET": "0"}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def scalar_bf16_loads(loads):
    return loads.get("ld.global.b16", 0)


def test_row_loads_are_vectorised_without_integer_specialisation():
    for kernel, loads in compiled_loads().items():
        assert loads.get("ld.global.v4.b32", 0) >= 2, (kernel, loads)
        # at most the emit kernel's gather of the draft tokens' target logits (one per thread)
        assert scalar_bf16_loads(loads) <= 1, (kernel, loads)


def test_without_the_vocab_alignment_hint_the_loads_are_scalar():
    """The control: the check above can fail (VOCAB_ALIGN = 1 gives the compiler no alignment)."""
    loads = compiled_loads("1")
    assert all(scalar_bf16_loads(kernel_loads) >= 16 for kernel_loads in loads.values()), loads
