"""jsample: seeded LLM token sampling with Triton kernels shared by JAX and PyTorch.

The JAX API (`jsample.gumbel_sample`, ...) is loaded on first use, so `import jsample.kernels`,
`import jsample.reference` and `import torch_backend` never import jax.
"""

import importlib

from jsample._version import STREAM_VERSION, __version__
from jsample.rates import (  # plain Python: no jax import
    acceptance_length_to_rates,
    resolve_synthetic_acceptance_rates,
    unconditional_to_conditional_rates,
)
from jsample.describe import describe
from jsample.ops import Logprobs
from jsample.seeds import seed_words

_JAX_API = {
    "gumbel_sample": "jsample._jax.gumbel",
    "rejection_sample": "jsample._jax.rejection",
    "synthetic_rejection_sample": "jsample._jax.rejection",
    "top_k_top_p_sample": "jsample._jax.filtered",
    "token_logprobs": "jsample._jax.logprobs",
    "seeds_from_key": "jsample._jax.seeds",
    "precompile": "jsample._jax.warmup",
}

__all__ = [
    "Logprobs",
    "STREAM_VERSION",
    "__version__",
    "acceptance_length_to_rates",
    "describe",
    "resolve_synthetic_acceptance_rates",
    "seed_words",
    "unconditional_to_conditional_rates",
    *_JAX_API,
]


def __getattr__(name):
    if name in _JAX_API:
        value = getattr(importlib.import_module(_JAX_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'jsample' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_JAX_API))
