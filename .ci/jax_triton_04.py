"""The jax-triton 0.4 launch path, checked without a GPU: every op is traced (jax.make_jaxpr) through
the real jax-triton 0.4 `triton_call`, which binds the arguments, checks the outputs against the
kernel's signature and warns on deprecated keywords. Any warning fails. Lowering and running need a
CUDA jaxlib plugin and a GPU with triton >= 3.7, which CI does not have.

    TRITON_INTERPRET=0 python .ci/jax_triton_04.py   (Python >= 3.12, jax-triton 0.4, triton >= 3.7)
"""

import os
import stat
import tempfile
import warnings

warnings.simplefilter("error")
warnings.filterwarnings("ignore", category=ResourceWarning)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax_triton  # noqa: E402

import jsample  # noqa: E402
from jsample._jax import _launch  # noqa: E402

assert jax_triton.__version__.startswith("0.4"), jax_triton.__version__
_launch.on_gpu = lambda: True  # the GPU path, traced only
# XLA's ptxas as CUDA 13.0's (the H200 image's, which refused triton 3.9's PTX 9.4): the launches must ask
# Triton for PTX 9.0 (jsample/_jax/_ptx.py)
FAKE_PTXAS = os.path.join(tempfile.mkdtemp(), "ptxas")
with open(FAKE_PTXAS, "w") as f:
    f.write("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
os.chmod(FAKE_PTXAS, os.stat(FAKE_PTXAS).st_mode | stat.S_IEXEC)
os.environ["JSAMPLE_XLA_PTXAS"] = FAKE_PTXAS
from jsample._jax import _ptx  # noqa: E402

EXPECTED_PTX = 90 if (_ptx.triton_ptx_version() or 0) > 90 else None
B, K, V = 4, 2, 1000
x, s, t = jnp.zeros((B, V), jnp.float32), jnp.zeros(B, jnp.int32), jnp.ones(B, jnp.float32)
CASES = {
    "gumbel_sample": lambda: jsample.gumbel_sample(x, s, s, t),
    "gumbel_sample fp64": lambda: jsample.gumbel_sample(x, s, s, t, fp64=True),
    "top_k_top_p_sample": lambda: jsample.top_k_top_p_sample(x, s, s, t, top_k=s + 5, top_p=t * 0.9, min_p=0.1),
    "rejection_sample K=1 (one launch: zeroed counters)": lambda: jsample.rejection_sample(
        jnp.zeros((B, 2, V)), jnp.zeros((B, 1), jnp.int32), s, s, s, t),
    "rejection_sample K=2, draft logits": lambda: jsample.rejection_sample(
        jnp.zeros((B, K + 1, V)), jnp.zeros((B, K), jnp.int32), s, s, s, t, draft_logits=jnp.zeros((B, K, V))),
    "synthetic_rejection_sample": lambda: jsample.synthetic_rejection_sample(
        jnp.zeros((B, K + 1), jnp.int32), jnp.zeros((B, K), jnp.int32), s, s, s, jnp.ones(K)),
}


def triton_calls(jaxpr):
    """The triton_kernel_call equations of a jaxpr, also inside nested jaxprs (custom_vmap, pjit)."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "triton_kernel_call":
            yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from triton_calls(inner)


print("jax", jax.__version__, "jax-triton", jax_triton.__version__)
for name, call in CASES.items():
    jaxpr = jax.make_jaxpr(call)()
    launches = list(triton_calls(jaxpr.jaxpr))
    assert launches, f"{name}: no triton_kernel_call"
    for eqn in launches:  # FMA contraction off, as the NumPy reference and torch's launches
        assert eqn.params["backend_options"]["enable_fp_fusion"] is False, (name, eqn.params["backend_options"])
        assert eqn.params["backend_options"].get("ptx_version") == EXPECTED_PTX, (name, eqn.params["backend_options"])
    print(f"{name}: {len(launches)} launches traced, enable_fp_fusion=False, ptx_version={EXPECTED_PTX} "
          f"(triton's own: {_ptx.triton_ptx_version()})")
print("jax-triton 0.4 path: OK")
