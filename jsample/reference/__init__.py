"""NumPy reference of the random stream and of every op. Imports numpy only."""

from jsample.reference.filtered import top_k_top_p_sample_reference
from jsample.reference.gumbel import gumbel_sample_reference, gumbel_scores_reference
from jsample.reference.logprobs import token_logprobs_reference
from jsample.reference.rejection import rejection_sample_reference, synthetic_rejection_sample_reference
from jsample.reference.stream import gumbel_noise, philox4x32, stream_uniforms, uniforms_f32, uniforms_f64

__all__ = [
    "gumbel_noise",
    "gumbel_sample_reference",
    "gumbel_scores_reference",
    "philox4x32",
    "rejection_sample_reference",
    "stream_uniforms",
    "synthetic_rejection_sample_reference",
    "token_logprobs_reference",
    "top_k_top_p_sample_reference",
    "uniforms_f32",
    "uniforms_f64",
]
