"""jsample for PyTorch: the same Triton kernels and random stream as the JAX frontend `jsample`.

Importing this package never imports jax.
"""

from jsample._version import STREAM_VERSION, __version__
from torch_backend.gumbel import gumbel_sample

__all__ = ["STREAM_VERSION", "__version__", "gumbel_sample"]
