"""Top-k / top-p / min-p sampling: the stream-0 Gumbel-max sample over the tokens the filters keep.

With s = x / T (FP32, as gumbel_sample) and e_k = exp(s_k - max s) = p_k / p_max, a row keeps
(temperature first, then the filters in Hugging Face's order, each on what the previous one kept):

* top-k (1 <= k < number of finite logits): the tokens whose logit is >= the k-th largest (ties at
  the boundary all kept);
* top-p (0 < p < 1): token k is kept iff the mass of the kept tokens with a strictly larger logit
  is < p times the mass of all kept tokens (so the boundary token, and tokens tied with it, stay);
  masses are sums of floor(e * 2**24), integers: a sum does not depend on its order, so neither
  the tiling nor the batch can change which tokens are kept (p <= 0 keeps the largest logit only).
  Tokens with e < 2**-24 weigh nothing: V of them shift the cumulative mass by < 1% of p_max at
  V = 151936, no more than FP32 sums of the probabilities would;
* min-p (0 < min_p): token k is kept iff e_k >= min_p.

Filter values outside their range are clamped (docs/STREAM.md, "Clarifications of version 1"):
top_k < 1 or >= the number of finite logits keeps all; top_p >= 1 or NaN keeps all, top_p <= 0
keeps only the tokens equal to the largest logit; min_p <= 0 or NaN keeps all, min_p >= 1 keeps only
the tokens equal to the largest logit (e = 1 exactly there).

The token is then `gumbel_sample` of the row with every other logit set to -inf, computed by the very
same code (block_noise, noisy_scores), so with no filter it is gumbel_sample's token bit for bit.
Greedy rows (T < 1e-5 or NaN, and rows whose scaled logits overflow: gumbel.py) are not filtered
(the largest logit is always kept, so nothing would change).

Every filter keeps the tokens whose logit is >= a threshold (e is non-decreasing in x), so each
threshold is found by searching an order-preserving integer key of the logits: 32 bits for float32,
the 16 significant bits of bfloat16 and 19 of float16 (key_shift). Launches, all shared by both
frontends (plan_top_k_top_p_sample lists them):

1. `filter_stats_kernel`, grid (B, num_blocks) in the sampling tiling: per block, the largest key of
   the finite logits, and gumbel_sample's block partials of the unfiltered row (stream 0).
2. `filter_row_kernel`, grid (B,): the row's statistics and unfiltered winner. The winner, when the
   filters keep it, is the token (the same scores, fewer candidates), so the row's status says
   whether it is (STATUS_DONE: also rows the filters do not apply to, and a winner at the largest
   logit, which every filter keeps), whether top-k and top-p decide it from the winner's sums
   (STATUS_CHECK: min-p keeps it), or whether the row is searched and its kept set sampled
   (STATUS_FILTER). With top-k, the k-th largest of the blocks' largest keys bounds its threshold
   from below: the search starts there, and a winner below it is dropped without sums.
3. With top-k or top-p, `filter_winner_sums_kernel`, a row's chunk a work item: for STATUS_CHECK rows,
   the count (and mass) of the keys above the winner's. With top-k, a row whose k is at most
   TOP_K_LIST (and at most its blocks with a finite logit) takes no sums: its chunks list the row's
   columns whose key is at or above top-k's bound instead (one atomic a tile).
4. `filter_decide_kernel`, grid (B,): every row's status, final from here on. A listed row's
   thresholds (top-k's, then top-p's) come from its list's keys (about k on language-model-like
   logits), and its winner is STATUS_DONE, or STATUS_SAMPLED, its token the Gumbel-max of the listed
   columns the filters keep (the noise of those columns only); a list that overflows leaves the row
   to the searches (STATUS_FILTER). A STATUS_CHECK row is decided from its winner's sums. Each
   STATUS_FILTER row's first search bracket is set, and the row is listed (an atomic counter) for the
   launches after it, which take only the listed rows' items.
5. `filter_compact_step_kernel` PHASE_TOP_K, then PHASE_TOP_P, search_steps launches each: each
   program first replays the row's state from the previous launch (state + partials: the bracket
   [lo, hi) of the threshold key), then evaluates `ways` pivots of it on its chunk (count, or mass,
   of the keys >= each pivot). Each launch narrows the bracket `ways`-fold, so search_steps launches
   pin it down (at large batches a search's first launch narrows it `ways / 2`-fold in keys, its
   other pivots splitting the bracket's values, which is where a bracket across binades has its
   logits: _pivots). A search the winner's sums bound starts above (or, top-k keeping it, at or
   below) the winner's key, and tiles whose largest key (the block statistics) is below the bracket
   are skipped unread: the same thresholds, sooner and with less reading. On 16-bit logits top-p's
   search starts with `filter_histogram_step_kernel`: the count of each of the bracket's top
   HISTOGRAM_BINS keys (a key is one value there, so count x mass is exact), from which
   `filter_histogram_bracket_kernel` (a program a listed row) takes the threshold, or, where it lies
   below those keys, the bracket left to the pivot launches. The bracket from the winner's sums spans a
   few hundred bfloat16 keys on language-model-like logits: one pass, where pivot launches took three.
6. `filtered_partial_kernel`, COMPACT_SAMPLE_BLOCKS blocks of a row a work item (SAMPLE_BLOCKS_PER_PROGRAM
   without a search): replays the final state and writes
   gumbel_sample's block partials of the row with the logits below the threshold (and, for min-p,
   e < min_p) masked, reusing the unfiltered partial of every block whose best column is kept or that
   keeps none; `filtered_reduce_kernel` reduces each row's filtered, or unfiltered, partials.

The search launches and the sampling launch run at most COMPACT_PROGRAMS (COMPACT_SAMPLE_PROGRAMS)
programs, which stride over the listed rows' items (item j: row active_rows[j // items a row], on
program j % P). Most rows' token is the unfiltered winner or comes from top-k's lists, so most of those
launches have few items or none: a program then reads a counter and stops (some 2 us a launch, against
5-7 us for a grid of every row's items that read their statuses). Without a search (min-p alone) the
sampling launch takes every row's items, and skips those of rows that are done (_program_items).

Where all B * num_chunks programs run at once (Target.resident_programs; in the interpreter, one
program a row), `filtered_one_launch_kernel` does all of this in one launch: the steps meet at a
barrier of the row's programs (an arrival counter) instead of at launch boundaries, and the last
program to arrive reduces the row; top-k's lists there are the row's programs' too (its step 1 in
place of the winner's sums), of at most SHORT_TOP_K_LIST slots, decided by searches over their keys
rather than sorts (a kernel about half as long to compile: issue 39's first call). Same integer sums,
same searches, same scores: the same token.

The chunking and the number of pivots follow the tiling, small batches or many rows (more chunks per
row for small batches, to fill the GPU; fewer pivots for large ones, whose launches are compute-bound),
never the batch size itself (no batch size costs a compilation: tests/test_compiles.py); the kept set
never depends on them: counts and fixed-point masses are integer sums, and the searches are exact.


The modules: `config` (tilings, constants), `keys` (keys, masses, the kept set), `search` (thresholds and
row state), `launches` (the launches' plan's kernels), `one_launch` (the one-launch kernel), `plan`
(plan_top_k_top_p_sample). This package re-exports their names.
"""

# every name of the modules, for `from jsample.kernels.filtered import X` and `filtered.X`
from jsample.kernels.filtered.config import (  # noqa: F401
    ALL_FINITE,
    COMPACT_PROGRAMS,
    COMPACT_SAMPLE_BLOCKS,
    COMPACT_SAMPLE_PROGRAMS,
    FilteredLaunchConfig,
    HISTOGRAM_BINS,
    HISTOGRAM_BIN_STRIDE,
    HISTOGRAM_BRACKET_WARPS,
    KEY_SHIFTS,
    LISTED_WAYS,
    MANY_ROWS_ELEMENTS,
    MASS_SCALE,
    MAX_CHUNKS,
    MAX_COLUMNS_PER_THREAD,
    ONE_LAUNCH_COLLECT_TILE,
    ONE_LAUNCH_MAX_CHUNK,
    PHASE_SAMPLE,
    PHASE_STATS,
    PHASE_TOP_K,
    PHASE_TOP_P,
    PHASE_WINNER,
    PREV_PHASE_DECIDED,
    SAMPLE_BLOCKS_PER_PROGRAM,
    SHORT_TOP_K_LIST,
    SMALL_BATCH_CHUNKS,
    SORTED_SLOTS,
    STATE_WORDS,
    STATUS_CHECK,
    STATUS_DONE,
    STATUS_FILTER,
    STATUS_SAMPLED,
    TOP_K_LIST,
    _ALL_FINITE,
    _CHECK,
    _DECIDED,
    _DONE,
    _FILTER,
    _GREEDY_BELOW,
    _MASS_SCALE,
    _SAMPLE,
    _SAMPLED,
    _STATE_WORDS,
    _TOP_K,
    _TOP_P,
    _WINNER,
    _with_ways,
    filtered_launch_config,
    filtered_one_launch_config,
)
from jsample.kernels.filtered.keys import (  # noqa: F401
    _exp_flushing_subnormals,
    _extreme_keys,
    _filtered_row,
    _finite_extremes,
    _fixed_point_mass,
    _kept_columns,
    _key,
    _key_value,
    _min_p,
    _relative_probability,
    _tile_logits,
    _tile_max_key,
    store_filtered_block,
)
from jsample.kernels.filtered.search import (  # noqa: F401
    _advance_state,
    _chunk_above,
    _chunk_histogram,
    _chunk_winner_sums,
    _collect_candidates,
    _histogram_bracket,
    _item_status,
    _keeps_winner,
    _kth_largest_block_key,
    _largest_reaching,
    _list_decision,
    _list_token,
    _listed,
    _load_state,
    _narrow,
    _pivots,
    _program_items,
    _row_state,
    _search_item,
    _start_search,
    _store_state,
    _top_k,
    _winner_bracket,
)
from jsample.kernels.filtered.launches import (  # noqa: F401
    _filtered_block_partial,
    _partial_item,
    _store_partial,
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
from jsample.kernels.filtered.one_launch import (  # noqa: F401
    _gather_partials,
    _row_barrier,
    _search_in_step,
    filtered_one_launch_kernel,
)
from jsample.kernels.filtered.plan import (  # noqa: F401
    plan_top_k_top_p_sample,
)
