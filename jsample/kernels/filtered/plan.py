"""plan_top_k_top_p_sample: the one planning function of top_k_top_p_sample (the one-launch plan or the launches'
plan, their tilings and every launch).
"""

import dataclasses
import functools

import triton

from jsample.kernels.plan import ArgSpec, Buffer, Plan, Target, launch
from jsample.kernels.stream import seed_word_count
from jsample.kernels.filtered.config import (
    COMPACT_PROGRAMS,
    COMPACT_SAMPLE_BLOCKS,
    COMPACT_SAMPLE_PROGRAMS,
    HISTOGRAM_BINS,
    HISTOGRAM_BIN_STRIDE,
    HISTOGRAM_BRACKET_WARPS,
    LISTED_WAYS,
    MAX_CHUNKS,
    ONE_LAUNCH_COLLECT_TILE,
    PHASE_TOP_K,
    PHASE_TOP_P,
    PHASE_WINNER,
    PREV_PHASE_DECIDED,
    SAMPLE_BLOCKS_PER_PROGRAM,
    SHORT_TOP_K_LIST,
    STATE_WORDS,
    TOP_K_LIST,
    _with_ways,
    filtered_launch_config,
    filtered_one_launch_config,
)
from jsample.kernels.filtered.launches import (
    filter_compact_step_kernel,
    filter_decide_kernel,
    filter_histogram_bracket_kernel,
    filter_histogram_step_kernel,
    filter_row_kernel,
    filter_stats_kernel,
    filter_winner_sums_kernel,
    filtered_partial_kernel,
    filtered_reduce_kernel,
)
from jsample.kernels.filtered.one_launch import filtered_one_launch_kernel

@functools.lru_cache(maxsize=512)
def plan_top_k_top_p_sample(logits: ArgSpec, seeds: ArgSpec, target: Target, *, has_top_k: bool, has_top_p: bool,
                            has_min_p: bool, fp64: bool, row_valid: bool = False, return_logprobs: bool = False,
                            num_top: int = 0, top_k_in_list: bool = False) -> Plan:
    """The launches of `top_k_top_p_sample` on inputs `logits` [B, V] (rows `logits.strides[0]` apart,
    columns contiguous), `seeds`, `positions`, `temperature` [B] f32 and, where present, `top_k` [B]
    int32|int64, `top_p` and `min_p` [B] f32, `row_valid` (common.is_padding: a padding row, token -1, its logits
    unread); output `tokens` [B] i32. With `return_logprobs`, input `num_top` [1] i32 and the outputs
    `sampled` (the tokens) and token_logprobs' (logprobs.with_logprobs; `top_k_in_list` as plan_token_logprobs')."""
    if return_logprobs:
        from jsample.kernels.logprobs import with_logprobs

        sampling = plan_top_k_top_p_sample(logits, seeds, target, has_top_k=has_top_k, has_top_p=has_top_p,
                                           has_min_p=has_min_p, fp64=fp64, row_valid=row_valid)
        return with_logprobs(sampling, logits, target, has_top_k=has_top_k, has_top_p=has_top_p, has_min_p=has_min_p,
                             fp64=fp64, num_top=num_top, row_valid=row_valid, top_k_in_list=top_k_in_list)
    batch, vocab = logits.shape
    tokens = Buffer("tokens", (batch,), "int32")
    if batch == 0:
        return Plan((tokens,), (), ("tokens",), "empty")
    row_stride = logits.strides[0]
    config = filtered_launch_config(batch, vocab, row_stride, logits.dtype, fp64, fast_math=not target.interpreter,
                                    large_programs=target.large_programs)
    top_k_list = TOP_K_LIST if has_top_k else 0
    # top-p's search starts with a histogram of the bracket's top keys where keys are coarse (16-bit floats:
    # float32's top HISTOGRAM_BINS keys are a sliver of any bracket)
    histogram = has_top_p and config.key_shift > 0
    if (top_k_list or histogram) and config.ways < LISTED_WAYS:
        config = _with_ways(config, LISTED_WAYS)
    gumbel = config.gumbel
    unused = "positions"  # stands in for absent filters, never read ([B], where temperature may be a number)
    top_k, top_p, min_p, valid = (name if given else unused for name, given in
                                  (("top_k", has_top_k), ("top_p", has_top_p), ("min_p", has_min_p),
                                   ("row_valid", row_valid)))
    options = dict(num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion)
    one = filtered_one_launch_config(batch, vocab, row_stride, logits.dtype, fp64, target)
    if one is not None:
        max_steps = 2 + one.search_steps * (has_top_k + has_top_p)  # stats, the winner's sums, the searches
        words = 2 if fp64 else 1  # f64 partial scores are stored as two f32 words
        listing = top_k_list > 0
        one_list = min(top_k_list, SHORT_TOP_K_LIST)  # (filtered_one_launch_kernel's lists: short ones)
        # step 1 lists a chunk in tiles of up to 2048 columns (at small batches, one: a tile's load and
        # atomic are latency; chunk and tile are powers of two, the tile a multiple of threads * vec)
        collect_tile = max(min(one.chunk, ONE_LAUNCH_COLLECT_TILE), one.threads * one.vec)
        buffers = (Buffer("partials", (batch, 2 * max_steps * one.num_chunks * one.ways), "int32"),
                   Buffer("partial_score", (batch, one.gumbel.num_blocks * words), "float32"),
                   Buffer("partial_index", (batch, one.gumbel.num_blocks), "int32"),
                   # the rows' arrival counters, and with lists their list counts
                   Buffer("arrivals", ((1 + listing) * batch,), "int32", counters=True),
                   Buffer("block_stats", (batch, one.gumbel.num_blocks) if listing else (1,), "int32"),
                   Buffer("top_k_list", (batch, 2 * one_list) if listing else (1,), "int32"), tokens)
        launches = (launch(
            filtered_one_launch_kernel, (batch, one.num_chunks),
            ("logits", "seeds", "positions", "temperature", top_k, top_p, min_p, valid, vocab, row_stride,
             one.gumbel.num_blocks),
            ("partials", "partial_score", "partial_index", "arrivals", "block_stats", "top_k_list", "tokens"),
            HAS_ROW_VALID=row_valid, HAS_TOP_K=has_top_k, HAS_TOP_P=has_top_p, HAS_MIN_P=has_min_p,
            KEY_SHIFT=one.key_shift, FP64=fp64,
            CHUNK=one.chunk, BLOCK_V=one.gumbel.block_v, THREADS=one.threads, VEC=one.vec,
            ROW_ALIGN=one.gumbel.row_align, VOCAB_ALIGN=one.gumbel.vocab_align, FAST_MATH=one.gumbel.fast_math,
            WAYS=one.ways, MAX_STEPS=max_steps, MAX_CHUNKS=triton.next_power_of_2(one.num_chunks),
            REDUCE_BLOCK=one.gumbel.reduce_block, WIDE_SUMS=one.wide_sums, SEED_WORDS=seed_word_count(seeds.shape),
            LIST=one_list, COLLECT_VEC=collect_tile // one.threads,
            TILE_BLOCKS=max(1, collect_tile // one.gumbel.block_v),
            num_warps=one.num_warps, **options),)
        # its one kernel is the longest of jsample's to compile (2-3 s on an H200's host, issue 39): a first eager
        # call runs the launches' plan, whose dozen small kernels compile side by side in less, while it compiles
        stand_in = None
        if not target.interpreter:
            stand_in = plan_top_k_top_p_sample(logits, seeds, dataclasses.replace(target, resident_programs=0),
                                               has_top_k=has_top_k, has_top_p=has_top_p, has_min_p=has_min_p,
                                               fp64=fp64, row_valid=row_valid)
        return Plan(buffers, launches, ("tokens",), "one launch", while_compiling=stand_in)
    # int64 state and partials as pairs of int32 words (no jax_enable_x64 needed); the search
    # launches alternate between two of each (each reads the one before's)
    words = 2 if fp64 else 1  # f64 partial scores are stored as two f32 words
    buffers = [Buffer("block_stats", (batch, gumbel.num_blocks), "int32"),
               Buffer("unfiltered_score", (batch, gumbel.num_blocks * words), "float32"),
               Buffer("unfiltered_index", (batch, gumbel.num_blocks), "int32")]
    buffers += [Buffer(f"state_{i}", (batch, 2 * STATE_WORDS), "int32") for i in (0, 1, "decided")]
    buffers += [Buffer(f"partials_{i}", (batch, 2 * config.ways * config.num_chunks), "int32") for i in (0, 1)]
    buffers += [Buffer("partial_score", (batch, gumbel.num_blocks * words), "float32"),
                Buffer("partial_index", (batch, gumbel.num_blocks), "int32"), tokens,
                Buffer("top_k_list", (batch, max(1, 2 * top_k_list)), "int32"),
                Buffer("top_k_list_count", (batch,), "int32", counters=True),
                # the rows filter_decide_kernel leaves searching, for the launches after it
                Buffer("active_rows", (batch,), "int32"), Buffer("active_count", (1,), "int32", counters=True),
                # filter_histogram_step_kernel's key counts (filter_histogram_bracket_kernel leaves them zero)
                Buffer("histogram", (batch, HISTOGRAM_BINS * HISTOGRAM_BIN_STRIDE), "int32", counters=True)]
    seed_words = seed_word_count(seeds.shape)
    filters = dict(HAS_TOP_K=has_top_k, HAS_TOP_P=has_top_p)
    searches = dict(KEY_SHIFT=config.key_shift, FP64=fp64, THREADS=config.threads, VEC=config.vec,
                    ROW_ALIGN=gumbel.row_align, VOCAB_ALIGN=gumbel.vocab_align, WAYS=config.ways,
                    WIDE_SUMS=config.wide_sums, FAST_MATH=gumbel.fast_math, num_warps=config.num_warps, **options)
    unfiltered = ("unfiltered_score", "unfiltered_index")
    # the search tiles' blocks of block_stats (both powers of two: a tile lies in one block, or covers whole ones)
    tiles = dict(BLOCK_V=gumbel.block_v, TILE_BLOCKS=max(1, config.threads * config.vec // gumbel.block_v))
    search = has_top_k or has_top_p
    launches = [
        launch(filter_stats_kernel, (batch, gumbel.num_blocks),
               ("logits", "seeds", "positions", "temperature", valid, vocab, row_stride), ("block_stats",) + unfiltered,
               HAS_ROW_VALID=row_valid, KEY_SHIFT=config.key_shift, FP64=fp64, BLOCK_V=gumbel.block_v,
               ROW_ALIGN=gumbel.row_align,
               VOCAB_ALIGN=gumbel.vocab_align, FAST_MATH=gumbel.fast_math, SEED_WORDS=seed_words,
               num_warps=gumbel.num_warps, **options),
        launch(filter_row_kernel, (batch,),
               ("logits", "temperature", top_k, min_p, valid, "block_stats") + unfiltered
               + (vocab, row_stride, gumbel.num_blocks), ("state_0",), HAS_ROW_VALID=row_valid, SEARCH=search,
               HAS_TOP_K=has_top_k,
               HAS_MIN_P=has_min_p, KEY_SHIFT=config.key_shift, FP64=fp64,
               REDUCE_BLOCK=gumbel.reduce_block, num_warps=4, **options)]
    state, partials = "state_0", unused  # no sums without a search: the status is never STATUS_CHECK
    if search:
        launches.append(launch(
            filter_winner_sums_kernel, (batch * config.num_chunks,),
            ("logits", "temperature", top_k, "state_0", "block_stats", vocab, row_stride, config.num_chunks,
             config.chunk, gumbel.num_blocks), ("partials_0", "top_k_list", "top_k_list_count"), **filters, ITEMS=1,
            LIST=top_k_list, **searches, **tiles))
        partials = "partials_0"
        # every row's status, final from here on, and the list of the rows searched
        launches.append(launch(
            filter_decide_kernel, (batch,),
            ("seeds", "positions", "temperature", top_k, top_p, min_p, "state_0", "partials_0", "top_k_list",
             "top_k_list_count", config.num_chunks), ("state_decided", "top_k_list_count", "active_rows",
                                                      "active_count"),
            PHASE=PHASE_TOP_K if has_top_k else PHASE_TOP_P, **filters, HAS_MIN_P=has_min_p,
            KEY_SHIFT=config.key_shift, FP64=fp64,
            FAST_MATH=gumbel.fast_math, WAYS=config.ways, MAX_CHUNKS=MAX_CHUNKS, LIST=top_k_list,
            SHORT_LIST=min(max(1, top_k_list), SHORT_TOP_K_LIST), SEED_WORDS=seed_words, num_warps=4, **options))
        state = "state_decided"

    statuses = state  # the state whose statuses are final (the decide launch's, with searches)
    compact_programs = min(batch * config.num_chunks, COMPACT_PROGRAMS)
    compact = ("active_rows", "active_count", vocab, row_stride, config.num_chunks, config.chunk, gumbel.num_blocks)
    # the listed rows' items only: each search's pivot launches, top-p's after a histogram launch; a launch
    # after filter_decide_kernel or the histogram launch starts from their state (PREV_PHASE_DECIDED)
    prev_phase, prev_mixed, launched = PREV_PHASE_DECIDED, False, 0
    for phase in [PHASE_TOP_K] * has_top_k + [PHASE_TOP_P] * has_top_p:
        kinds = ["histogram"] * (phase == PHASE_TOP_P and histogram) + ["pivots"] * config.search_steps
        for j, kind in enumerate(kinds):
            launched += 1
            new_state, new_partials = "state_1" if state == "state_0" else "state_0", f"partials_{launched % 2}"
            args = ("logits", "temperature", top_k, top_p, state, partials, "block_stats") + compact
            if kind == "histogram":  # the counts, then the bracket from them (the listed rows' state)
                launches.append(launch(
                    filter_histogram_step_kernel, (compact_programs,), args, (new_state, new_partials, "histogram"),
                    PREV_PHASE=prev_phase, **filters, MAX_CHUNKS=MAX_CHUNKS, BINS=HISTOGRAM_BINS,
                    BIN_STRIDE=HISTOGRAM_BIN_STRIDE, NARROW_MIXED=prev_mixed, **searches, **tiles))
                state, partials = new_state, new_partials
                new_state = "state_1" if state == "state_0" else "state_0"
                launches.append(launch(
                    filter_histogram_bracket_kernel, (min(batch, COMPACT_PROGRAMS),),
                    ("temperature", top_p, state, partials, "histogram", "active_rows", "active_count",
                     config.num_chunks), (new_state, "histogram"), KEY_SHIFT=config.key_shift, FP64=fp64,
                    WAYS=config.ways, MAX_CHUNKS=MAX_CHUNKS, BINS=HISTOGRAM_BINS, BIN_STRIDE=HISTOGRAM_BIN_STRIDE,
                    FAST_MATH=gumbel.fast_math, num_warps=HISTOGRAM_BRACKET_WARPS,
                    **options))
                new_partials = partials  # (unread by the launch after: it starts from the bracket's state)
                prev_phase, prev_mixed = PREV_PHASE_DECIDED, False
            else:
                mixed = config.mixed_first_pivots and kinds[j - 1:j] != ["pivots"]  # a first pivot launch
                launches.append(launch(
                    filter_compact_step_kernel, (compact_programs,), args, (new_state, new_partials), PHASE=phase,
                    PREV_PHASE=prev_phase, **filters, MAX_CHUNKS=MAX_CHUNKS, MIXED_PIVOTS=mixed,
                    NARROW_MIXED=prev_mixed, **searches, **tiles))
                prev_phase, prev_mixed = phase, mixed
            state, partials = new_state, new_partials
    blocks_per_program = COMPACT_SAMPLE_BLOCKS if search else SAMPLE_BLOCKS_PER_PROGRAM
    sample_items = batch * triton.cdiv(gumbel.num_blocks, blocks_per_program)
    launches.append(launch(
        filtered_partial_kernel, (min(sample_items, COMPACT_SAMPLE_PROGRAMS) if search else sample_items,),
        ("logits", "seeds", "positions", "temperature", top_k, top_p, min_p, state, partials) + unfiltered
        + ("block_stats",) + (("active_rows", "active_count") if search else (unused, unused))
        + (vocab, row_stride, config.num_chunks, gumbel.num_blocks),
        ("partial_score", "partial_index"),
        PREV_PHASE=prev_phase if search else PHASE_WINNER, **filters, HAS_MIN_P=has_min_p,
        KEY_SHIFT=config.key_shift, FP64=fp64, BLOCK_V=gumbel.block_v, BLOCKS_PER_PROGRAM=blocks_per_program,
        ROW_ALIGN=gumbel.row_align, VOCAB_ALIGN=gumbel.vocab_align, FAST_MATH=gumbel.fast_math, WAYS=config.ways,
        MAX_CHUNKS=MAX_CHUNKS, SEED_WORDS=seed_words, ITEMS=1, NARROW_MIXED=prev_mixed, COMPACT=search,
        num_warps=gumbel.num_warps, **options))
    launches.append(launch(
        filtered_reduce_kernel, (batch,),
        (statuses,) + unfiltered + ("partial_score", "partial_index", "logits", vocab, row_stride, gumbel.num_blocks),
        ("tokens", "active_count"), FP64=fp64, REDUCE_BLOCK=gumbel.reduce_block, num_warps=1, **options))
    used = {name for step in launches for name in step.args + step.outputs}
    return Plan(tuple(b for b in buffers if b.name in used), tuple(launches), ("tokens",),
                f"{len(launches)} launches")
