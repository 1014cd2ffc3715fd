"""jsample for PyTorch: the same Triton kernels and random stream as the JAX frontend `jsample`.

Importing this package never imports jax.
"""

from jsample._version import STREAM_VERSION, __version__
from jsample.rates import (
    acceptance_length_to_rates,
    resolve_synthetic_acceptance_rates,
    unconditional_to_conditional_rates,
)
from jsample.seeds import seed_words
from torch_backend.filtered import top_k_top_p_sample
from torch_backend.gumbel import gumbel_sample
from torch_backend.logprobs import token_logprobs
from jsample.ops import Logprobs
from torch_backend.rejection import rejection_sample, synthetic_rejection_sample
from torch_backend.warmup import precompile
from torch_backend import _triton_setup
from jsample import kernels as _kernels

_triton_setup.start(_kernels.INTERPRETER)  # Triton's process set-up in the background (issue 39: the first call)

__all__ = [
    "Logprobs",
    "STREAM_VERSION",
    "__version__",
    "acceptance_length_to_rates",
    "gumbel_sample",
    "precompile",
    "rejection_sample",
    "resolve_synthetic_acceptance_rates",
    "seed_words",
    "synthetic_rejection_sample",
    "token_logprobs",
    "top_k_top_p_sample",
    "unconditional_to_conditional_rates",
]
