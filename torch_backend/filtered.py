"""`top_k_top_p_sample` for PyTorch: validate, allocate, launch the shared Triton kernels."""

from typing import Optional

import torch

from jsample import kernels
from jsample.kernels.stream import seed_word_count
from jsample.validation import check_top_k_top_p_sample
from torch_backend._launch import check_devices, check_runnable, dense, per_row, spec, temperature_array


def top_k_top_p_sample(logits, seeds, positions, temperature, *, top_k=None, top_p=None, min_p=None,
                       fp64=False) -> torch.Tensor:
    """Seeded top-k / top-p / min-p sampling: gumbel_sample over the tokens the filters keep.

    With p = softmax(logits[b] / T_b) the filters apply in this order, each to what the one before
    kept: top-k keeps the logits >= the k-th largest (ties kept); top-p keeps a token iff the kept
    mass of the tokens with a larger logit is < top_p of the kept mass (masses in fixed point,
    2**-24 of the largest token's); min-p keeps a token iff p >= min_p * max p. The token is
    `gumbel_sample`'s (stream 0) on the row with every other logit at -inf, so without filters it
    is gumbel_sample's token bit for bit. Greedy rows (as `gumbel_sample`'s) are the argmax, unfiltered.

    Determinism: a row's token depends only on its logits row, seed, position, temperature, filter
    values and `fp64`: not on the batch or row order (the kept set is found with integer sums),
    and it equals `jsample.top_k_top_p_sample`'s token bit for bit.

    Args:
        logits, seeds, positions, temperature, fp64: as `gumbel_sample`.
        top_k: None, an int in [0, 2**31), or a [B] or scalar tensor of any integer dtype (read as
            int64); 0 (or >= V) keeps every token.
        top_p: None, a number in (0, 1], or a [B] or scalar tensor of any float dtype (read as
            float32); 1 keeps every token.
        min_p: None, a number in [0, 1], or a [B] or scalar tensor of any float dtype (read as
            float32); 0 keeps every token.
        Tensor values are not checked; out-of-range ones are clamped (docs/STREAM.md): top_k < 1 or
        > V keeps all; top_p >= 1 or NaN keeps all, <= 0 keeps only the largest logit; min_p <= 0
        or NaN keeps all, >= 1 keeps only the largest logit.

    Returns:
        [B] int32 token ids on the logits' device.
    """
    op = "top_k_top_p_sample"
    check_top_k_top_p_sample(op, spec(logits), spec(seeds), spec(positions), spec(temperature), spec(top_k),
                             spec(top_p), spec(min_p), fp64)
    check_devices(op, logits, seeds=seeds, positions=positions, temperature=temperature, top_k=top_k, top_p=top_p,
                  min_p=min_p)
    check_runnable(op, logits.device)
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    batch, device = logits.shape[0], logits.device
    top_k, top_p, min_p = (None if value is None else per_row(value, batch, dtype, device)
                           for value, dtype in ((top_k, torch.int64), (top_p, torch.float32), (min_p, torch.float32)))
    return _top_k_top_p_sample_op(logits, dense(seeds), dense(positions), temperature_array(temperature, batch, device),
                                  top_k, top_p, min_p, fp64)


@torch.library.custom_op("jsample::top_k_top_p_sample", mutates_args=())
def _top_k_top_p_sample_op(logits: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor,
                           temperature: torch.Tensor, top_k: Optional[torch.Tensor], top_p: Optional[torch.Tensor],
                           min_p: Optional[torch.Tensor], fp64: bool) -> torch.Tensor:
    batch, vocab = logits.shape
    tokens = torch.empty(batch, dtype=torch.int32, device=logits.device)
    if batch == 0:
        return tokens
    config = kernels.filtered_launch_config(batch, vocab, logits.stride(0), str(logits.dtype).removeprefix("torch."),
                                            fp64)
    plan = kernels.filtered_plan(config, top_k is not None, top_p is not None)
    has_min_p = min_p is not None
    unused = temperature  # stands for the filters a call does not have: never read
    top_k, top_p, min_p = (unused if v is None else v for v in (top_k, top_p, min_p))
    gumbel = config.gumbel
    options = dict(num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion)
    # int64 state and partials as pairs of int32 words (the JAX frontend's layout, x64 or not)
    state = torch.empty(batch, 2 * kernels.filtered.STATE_WORDS, dtype=torch.int32, device=logits.device)
    partials = torch.empty(batch, 2 * config.ways * config.num_chunks, dtype=torch.int32,
                           device=logits.device)
    for step in plan[:-1]:
        new_state, new_partials = torch.empty_like(state), torch.empty_like(partials)
        kernels.filter_step_kernel[(batch, config.num_chunks)](
            logits, temperature, top_k, top_p, state, partials, vocab, logits.stride(0), config.num_chunks,
            config.chunk, new_state, new_partials,
            PHASE=step.phase, PREV_PHASE=step.prev_phase, CAPTURE_NORMALIZER=step.capture_normalizer,
            KEY_SHIFT=config.key_shift, FP64=fp64, THREADS=32 * config.num_warps, VEC=config.vec,
            ROW_ALIGN=gumbel.row_align, VOCAB_ALIGN=gumbel.vocab_align,
            WAYS=config.ways, MAX_CHUNKS=kernels.filtered.MAX_CHUNKS, WIDE_SUMS=config.wide_sums,
            num_warps=config.num_warps, **options)
        state, partials = new_state, new_partials
    words = 2 if fp64 else 1  # f64 partial scores are stored as two f32 words
    partial_score = torch.empty(batch, gumbel.num_blocks * words, dtype=torch.float32, device=logits.device)
    partial_index = torch.empty(batch, gumbel.num_blocks, dtype=torch.int32, device=logits.device)
    sample = plan[-1]
    kernels.filtered_partial_kernel[(batch, gumbel.num_blocks)](
        logits, seeds, positions, temperature, top_k, top_p, min_p, state, partials, vocab, logits.stride(0),
        config.num_chunks, partial_score, partial_index,
        PREV_PHASE=sample.prev_phase, CAPTURE_NORMALIZER=sample.capture_normalizer, HAS_MIN_P=has_min_p,
        KEY_SHIFT=config.key_shift, FP64=fp64, BLOCK_V=gumbel.block_v, ROW_ALIGN=gumbel.row_align,
        VOCAB_ALIGN=gumbel.vocab_align, FAST_MATH=gumbel.fast_math, WAYS=config.ways,
        MAX_CHUNKS=kernels.filtered.MAX_CHUNKS, SEED_WORDS=seed_word_count(seeds.shape), num_warps=gumbel.num_warps, **options)
    kernels.argmax_reduce_kernel[(batch,)](
        partial_score, partial_index, logits, vocab, logits.stride(0), gumbel.num_blocks, tokens, FP64=fp64, REDUCE_BLOCK=gumbel.reduce_block,
        num_warps=1, **options)
    return tokens


@_top_k_top_p_sample_op.register_fake
def _(logits, seeds, positions, temperature, top_k, top_p, min_p, fp64):
    return logits.new_empty(logits.shape[0], dtype=torch.int32)
