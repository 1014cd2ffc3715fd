"""`gumbel_sample` for PyTorch: validate, allocate, launch the shared Triton kernels."""

import torch

from jsample import kernels
from jsample.kernels.stream import seed_word_count
from jsample.validation import check_gumbel_sample
from torch_backend._launch import check_devices, check_runnable, dense, spec, temperature_array


def gumbel_sample(logits, seeds, positions, temperature, *, fp64=False, draft=False) -> torch.Tensor:
    """Seeded Gumbel-max sampling: token_b = argmax_k (logits[b, k] / T_b + g(u_bk)).

    `u_bk` is the stream-0 (or, with `draft=True`, stream-1) uniform of column k for
    (seeds[b], positions[b]) as defined in STREAM.md (version 1); g(u) = -log(-log1p(-u)).
    T_b < 1e-5 is greedy: argmax_k logits[b, k]; so is a row in which some finite logits[b, k] / T_b
    overflows float32 (docs/STREAM.md, "Clarifications of version 1"). Ties go to the lowest
    column; -inf, +inf and NaN logits are never chosen; a row with no finite logit gives -1.

    Determinism: a row's token depends only on its logits row, seed, position, temperature and the
    `fp64`/`draft` flags: not on the batch, row order, row stride, vocabulary padding, device
    count, CUDA graphs or torch.compile, and it equals `jsample.gumbel_sample`'s token bit for bit.

    Args:
        logits: [B, V] float32, bfloat16 or float16 (CUDA, or CPU through the Triton interpreter).
            Rows may be strided; a non-unit column stride is copied to contiguous first.
        seeds: [B] int32, uint32 or int64 (the element's value is the 64-bit seed), or [B, 2] uint32
            or int32 (low, high) words of 64-bit seeds (`seed_words`). Any strides.
        positions: [B] int32 or int64, the position of the token being drawn (>= 0, unchecked).
        temperature: a number in [0, 3.4e38] (below 1e-5 is greedy), or a [B] or scalar tensor of
            any float dtype, read as float32. Tensor values are not checked (that would read the
            device): below 1e-5, negative and NaN are greedy, +inf samples uniformly.
        fp64: FP64 uniforms, noise and scores instead of FP32.
        draft: draw from stream 1 (draft-token sampling) instead of stream 0.

    Returns:
        [B] int32 token ids on the logits' device.
    """
    op = "gumbel_sample"
    check_gumbel_sample(op, spec(logits), spec(seeds), spec(positions), spec(temperature), fp64, draft)
    check_devices(op, logits, seeds=seeds, positions=positions, temperature=temperature)
    check_runnable(op, logits.device)
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    return _gumbel_sample_op(logits, dense(seeds), dense(positions),
                             temperature_array(temperature, logits.shape[0], logits.device), fp64, draft)


# A custom op, so torch.compile sees one opaque call (no graph break, shape known from the fake).
@torch.library.custom_op("jsample::gumbel_sample", mutates_args=())
def _gumbel_sample_op(logits: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor,
                      temperature: torch.Tensor, fp64: bool, draft: bool) -> torch.Tensor:
    batch, vocab = logits.shape
    tokens = torch.empty(batch, dtype=torch.int32, device=logits.device)
    if batch == 0:
        return tokens
    config = kernels.gumbel_launch_config(vocab, logits.stride(0), fp64)
    words = 2 if fp64 else 1  # f64 partial scores are stored as two f32 words
    partial_score = torch.empty(batch, config.num_blocks * words, dtype=torch.float32, device=logits.device)
    partial_index = torch.empty(batch, config.num_blocks, dtype=torch.int32, device=logits.device)
    kernels.gumbel_partial_kernel[(batch, config.num_blocks)](
        logits, seeds, positions, temperature, vocab, logits.stride(0), partial_score, partial_index,
        STREAM=1 if draft else 0, FP64=fp64, BLOCK_V=config.block_v, ROW_ALIGN=config.row_align,
        VOCAB_ALIGN=config.vocab_align, FAST_MATH=config.fast_math, SEED_WORDS=seed_word_count(seeds.shape),
        num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion)
    kernels.argmax_reduce_kernel[(batch,)](
        partial_score, partial_index, logits, vocab, logits.stride(0), config.num_blocks, tokens,
        FP64=fp64, REDUCE_BLOCK=config.reduce_block,
        num_warps=1, num_stages=1, enable_fp_fusion=config.enable_fp_fusion)
    return tokens


@_gumbel_sample_op.register_fake
def _(logits, seeds, positions, temperature, fp64, draft):
    return logits.new_empty(logits.shape[0], dtype=torch.int32)
