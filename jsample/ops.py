"""Each public op declared once, for both frontends: its docstring (one template, rendered per frontend:
`{{torch text || jax text}}` keeps one side) and its outputs' shapes. torch_backend and jsample (JAX)
read them; tests/test_docstrings.py checks that every frontend's op carries its rendered text."""

import re
from typing import Any, NamedTuple

FRONTENDS = ("torch", "jax")

_ALTERNATIVES = re.compile(r"\{\{\n(.*?)\|\|\n(.*?)\}\}\n", re.DOTALL)
DOCSTRINGS = {}

DOCSTRINGS["gumbel_sample"] = """Seeded Gumbel-max sampling: token_b = argmax_k (logits[b, k] / T_b + g(u_bk)).

    `u_bk` is the stream-0 (or, with `draft=True`, stream-1) uniform of column k for
    (seeds[b], positions[b]) as defined in STREAM.md (version 1); g(u) = -log(-log1p(-u)).
    T_b < 1e-5 is greedy: argmax_k logits[b, k]; so is a row in which some finite logits[b, k] / T_b
    overflows float32 (docs/STREAM.md, "Clarifications of version 1"). Ties go to the lowest
    column; -inf, +inf and NaN logits are never chosen; a row with no finite logit gives -1.

    Determinism: a row's token depends only on its logits row, seed, position, temperature and the
{{
    `fp64`/`draft` flags: not on the batch, row order, row stride, vocabulary padding, device
    count, CUDA graphs or torch.compile, and it equals `jsample.gumbel_sample`'s token bit for bit.
||
    `fp64`/`draft` flags: not on the batch, row order, vocabulary padding, jit or sharding, and it
    equals `torch_backend.gumbel_sample`'s token bit for bit. Changing seed, position or
    temperature values never recompiles. In a jitted decode loop at small batches, the XLA flags of
    the README ("Small batches in a jitted JAX loop") let XLA capture its launches into a CUDA graph.
}}

    Args:
{{
        logits: [B, V] float32, bfloat16 or float16 (CUDA, or CPU through the Triton interpreter).
            Rows may be strided; a non-unit column stride is copied to contiguous first.
        seeds: [B] int32, uint32 or int64 (the element's value is the 64-bit seed), or [B, 2] uint32
            or int32 (low, high) words of 64-bit seeds (`seed_words`). Any strides.
||
        logits: [B, V] float32, bfloat16 or float16.
        seeds: [B] int32, uint32 or int64 (the value is the 64-bit seed), or [B, 2] uint32 or int32
            (low, high) words of 64-bit seeds (`jsample.seed_words`). With jax_enable_x64 off, JAX
            narrows an int64 array to int32 before the op sees it: eagerly a NumPy int64 array is
            refused, but under jax.jit it arrives narrowed (the seed's high bits lost), so pass words.
}}
        positions: [B] int32 or int64, the position of the token being drawn (>= 0, unchecked).
{{
        temperature: a number in [0, 3.4e38] (below 1e-5 is greedy), or a [B] or scalar tensor of
            any float dtype, read as float32. Tensor values are not checked (that would read the
            device): below 1e-5, negative and NaN are greedy, +inf samples uniformly.
        fp64: FP64 uniforms, noise and scores instead of FP32.
||
        temperature: a number in [0, 3.4e38] (below 1e-5 is greedy), or a [B] or scalar array of any
            float dtype, read as float32. Array values, and Python numbers traced by jax.jit (they
            are arrays then), are not checked: below 1e-5, negative and NaN are greedy, +inf
            samples uniformly, as in torch for a tensor of the same value.
        fp64: FP64 uniforms, noise and scores instead of FP32 (works with jax_enable_x64 off).
}}
        draft: draw from stream 1 (draft-token sampling) instead of stream 0.
        num_valid: None, or the number of valid rows: an int in [0, B] or an int32 / int64 scalar array
            (unchecked: e.g. a CUDA graph's or a jitted bucket's live count); rows at or past it are
            padding: their token is -1 and their logits are not read. The valid rows' tokens do not change.
        return_logprobs: also return the tokens' `Logprobs` (`token_logprobs` of the same logits,
            temperature and tokens, exactly; kept == scaled here, no filters). In FP32 with num_top = 0
            they come from the sampling pass's own read of the logits (block statistics), else from
            token_logprobs' kernel after it. Padding rows: NaN, rank 0.
        num_top: with return_logprobs, the count of top logprobs a row (0 to 64).
{{
        vocab_group: None, or a torch.distributed process group over which the vocabulary is split:
            `logits` is then this rank's [B, V_r] shard, rank r holding the r-th contiguous columns
            (sizes may differ; every shard but the first starts at a multiple of 4 columns). Only a
            summary of 6 int32 words a row crosses the group (one all-gather); every rank returns the
            unsharded call's tokens, bit for bit. The shard sizes are asked of the group at the first
            call of each size. With num_valid, padding rows read nothing on any rank. With
            return_logprobs, then the tokens' vocab-parallel `token_logprobs` (two more all-gathers of
            per-row records): the unsharded call's Logprobs, top lists included.
||
        vocab_axis: None, or the name of a mesh axis over which the vocabulary is split (inside
            shard_map): `logits` is then this device's [B, V / n] shard, the shards in axis order, equal
            sizes (a multiple of 4 columns with more than one shard). Seeds, positions and temperature
            are replicated over the axis, and so is the result: the unsharded call's tokens, bit for bit;
            only a summary of 6 int32 words a row is all-gathered. With num_valid, padding rows read
            nothing on any device. With return_logprobs, then the tokens' vocab-parallel `token_logprobs`
            (two more all-gathers): the unsharded call's Logprobs. Under plain jax.jit, logits placed
            with a NamedSharding split along the vocabulary (equal shards, a multiple of 4 columns each)
            take the same plan without vocab_axis; any other split is gathered first.
}}

    Returns:
{{
        [B] int32 token ids on the logits' device; with return_logprobs, (tokens, Logprobs).
||
        [B] int32 token ids; with return_logprobs, (tokens, Logprobs).
}}

    Example:
{{
        >>> import torch, torch_backend
        >>> logits = torch.tensor([[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]])
        >>> seeds, positions = torch.tensor([7, 7]), torch.tensor([0, 1])
        >>> tokens = torch_backend.gumbel_sample(logits, seeds, positions, torch.tensor([1.0, 0.0]))
        >>> tokens.dtype, tokens.shape, int(tokens[1])  # row 1 is greedy (T = 0): its argmax
        (torch.int32, torch.Size([2]), 0)
||
        >>> import jax.numpy as jnp, jsample
        >>> logits = jnp.array([[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]], jnp.float32)
        >>> seeds, positions = jnp.array([7, 7]), jnp.array([0, 1])
        >>> tokens = jsample.gumbel_sample(logits, seeds, positions, jnp.array([1.0, 0.0], jnp.float32))
        >>> str(tokens.dtype), tokens.shape, int(tokens[1])  # row 1 is greedy (T = 0): its argmax
        ('int32', (2,), 0)
}}
    """

DOCSTRINGS["top_k_top_p_sample"] = """Seeded top-k / top-p / min-p sampling: gumbel_sample over the tokens the filters keep.

    With p = softmax(logits[b] / T_b) the filters apply in this order, each to what the one before
    kept: top-k keeps the logits >= the k-th largest (ties kept); top-p keeps a token iff the kept
    mass of the tokens with a larger logit is < top_p of the kept mass (masses in fixed point,
    2**-24 of the largest token's); min-p keeps a token iff p >= min_p * max p. The token is
    `gumbel_sample`'s (stream 0) on the row with every other logit at -inf, so without filters it
    is gumbel_sample's token bit for bit. Greedy rows (as `gumbel_sample`'s) are the argmax, unfiltered.

    Determinism: a row's token depends only on its logits row, seed, position, temperature, filter
{{
    values and `fp64`: not on the batch or row order (the kept set is found with integer sums),
    and it equals `jsample.top_k_top_p_sample`'s token bit for bit.
||
    values and `fp64`: not on the batch, row order or jit (the kept set is found with integer sums),
    and it equals `torch_backend.top_k_top_p_sample`'s token bit for bit. Changing filter values
    never recompiles; passing a filter or None is a different program.
}}

    Args:
        logits, seeds, positions, temperature, fp64, num_valid: as `gumbel_sample`.
{{
        top_k: None, an int in [0, 2**31), or a [B] or scalar tensor of any integer dtype (read as
||
        top_k: None, an int in [0, 2**31), or a [B] or scalar array of any integer dtype (read as
}}
            int64); 0 (or >= V) keeps every token.
{{
        top_p: None, a number in (0, 1], or a [B] or scalar tensor of any float dtype (read as
||
        top_p: None, a number in (0, 1], or a [B] or scalar array of any float dtype (read as
}}
            float32); 1 keeps every token.
{{
        min_p: None, a number in [0, 1], or a [B] or scalar tensor of any float dtype (read as
||
        min_p: None, a number in [0, 1], or a [B] or scalar array of any float dtype (read as
}}
            float32); 0 keeps every token.
{{
        Tensor values are not checked; out-of-range ones are clamped (docs/STREAM.md): top_k < 1 or
||
        Array values are not checked; out-of-range ones are clamped (docs/STREAM.md): top_k < 1 or
}}
        > V keeps all; top_p >= 1 or NaN keeps all, <= 0 keeps only the largest logit; min_p <= 0
        or NaN keeps all, >= 1 keeps only the largest logit.
        return_logprobs: also return the tokens' `Logprobs` (`token_logprobs` of the same logits,
            temperature, filters and tokens, exactly: `kept` is the log-probability under the distribution
            the token was drawn from, `log_kept_mass` the filters' kept mass; token_logprobs' kernel runs
            after the sampling launches, reading the rows again). Padding rows: NaN, rank 0.
        num_top: with return_logprobs, the count of top logprobs a row (0 to 64).
{{
        vocab_group: None, or a torch.distributed process group over which the vocabulary is split, as
            `gumbel_sample`'s: every rank returns the unsharded call's tokens, bit for bit (the same kept
            set). With top_k a Python int from 1 to 256: one all-gather, of each shard's list of its keys
            above its own k-th largest (2 * next_pow2(max(top_k, 16)) + 8 int32 words a row). Otherwise the
            thresholds' searches run over the shards: one all-gather of the shards' row statistics (6 int32
            words a row), then one of their integer counts or masses at 16 pivots (32 words a row) per
            search round: 4 rounds a search for bfloat16 logits, 5 for float16, 8 for float32 (min-p alone:
            none), then one of the 6-word summaries. With return_logprobs, then the tokens' vocab-parallel
            `token_logprobs` with the same filters (the unsharded call's Logprobs, bit for bit): two more
            all-gathers (the sampling rounds' last one hands over the kept set).
||
        vocab_axis: None, or the name of a mesh axis over which the vocabulary is split (inside
            shard_map), as `gumbel_sample`'s: the unsharded call's tokens, bit for bit (the same kept
            set). With top_k a Python int from 1 to 256: one all-gather, of each shard's list of its keys
            above its own k-th largest (2 * next_pow2(max(top_k, 16)) + 8 int32 words a row). Otherwise the
            thresholds' searches run over the shards: one all-gather of the shards' row statistics (6 int32
            words a row), then one of their integer counts or masses at 16 pivots (32 words a row) per
            search round: 4 rounds a search for bfloat16 logits, 5 for float16, 8 for float32 (min-p alone:
            none), then one of the 6-word summaries. With return_logprobs, then the tokens' vocab-parallel
            `token_logprobs` with the same filters (the unsharded call's Logprobs, bit for bit): two more
            all-gathers (the sampling rounds' last one hands over the kept set).
            Under plain jax.jit, logits sharded along the vocabulary take it as gumbel_sample's do.
}}

    Returns:
{{
        [B] int32 token ids on the logits' device; with return_logprobs, (tokens, Logprobs).
||
        [B] int32 token ids; with return_logprobs, (tokens, Logprobs).
}}

    Example:
{{
        >>> import torch, torch_backend
        >>> logits = torch.tensor([[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]])
        >>> seeds, positions = torch.tensor([7, 7]), torch.tensor([0, 1])
        >>> torch_backend.top_k_top_p_sample(logits, seeds, positions, 1.0, top_k=1).tolist()  # the largest logit
||
        >>> import jax.numpy as jnp, jsample
        >>> logits = jnp.array([[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]], jnp.float32)
        >>> seeds, positions = jnp.array([7, 7]), jnp.array([0, 1])
        >>> jsample.top_k_top_p_sample(logits, seeds, positions, 1.0, top_k=1).tolist()  # the largest logit
}}
        [1, 0]
{{
        >>> tokens = torch_backend.top_k_top_p_sample(logits, seeds, positions, 0.8, top_k=2, top_p=0.9, min_p=0.05)
||
        >>> tokens = jsample.top_k_top_p_sample(logits, seeds, positions, 0.8, top_k=2, top_p=0.9, min_p=0.05)
}}
    """

DOCSTRINGS["rejection_sample"] = """Speculative-decoding verification: accept a prefix of the drafts, then emit one target token.

    Row j of request b (j = 0..K) is drawn at position positions[b] + j (STREAM.md, "Rejection
    sampling"). With p = softmax(target_logits[b, j] / T_b) and q = softmax(draft_logits[b, j] / T_b)
    (q one-hot on the draft when `draft_logits` is None):

    * method="probabilistic": draft d_j is accepted iff u_j < p(d_j) / q(d_j), u_j the stream-2
      uniform of row j. At the first rejected row a the emitted token is
      argmax_k (log r_k + g_k), r = max(p - q, 0) (p without d_a for one-hot drafts; p itself if r
      is all zero), g the stream-0 Gumbel noise of row a. So the emitted tokens are distributed as the
      target model's (the speculative-sampling theorem) when the drafts were sampled from q.
    * method="strict": d_j is accepted iff it equals the stream-0 Gumbel-max sample of row j; at the
      first rejection that sample is emitted.
    * Rows of a request with T_b < 1e-5, and rows whose scaled logits overflow float32 (the target's,
      or for a decision row the draft's: docs/STREAM.md), are greedy under either method: accept iff d_j == argmax_k
      target_logits[b, j, k]; emit that argmax at the first rejection.
    * All n_b drafts accepted: the bonus token is the stream-0 Gumbel-max sample of row n_b, equal to
      `gumbel_sample(target_logits[:, n_b], seeds, positions + n_b, temperature)`.

    Determinism: a request's outputs depend only on its own rows, seed, position, temperature, n_b,
{{
    method and `fp64`: not on the batch, row order, strides or CUDA graphs; they equal
    `jsample.rejection_sample`'s bit for bit. No host synchronisation; every decision is made by the
    shared Triton kernels.
||
    method and `fp64`: not on the batch, row order or jit; they equal `torch_backend.rejection_sample`'s
    bit for bit. Changing seeds, positions, temperatures or n_b never recompiles.
}}

    Args:
{{
        target_logits: [B, K+1, V] float32, bfloat16 or float16; columns are made contiguous.
        draft_tokens: [B, K] int32 or int64 (read as such, never narrowed). Entries at j >= n_b are
            ignored; a draft outside [0, V) is always rejected.
||
        target_logits: [B, K+1, V] float32, bfloat16 or float16.
        draft_tokens: [B, K] int32 or int64 (read as such, never narrowed; 64-bit arrays need
            jax_enable_x64). Entries at j >= n_b are ignored; a draft outside [0, V) is always rejected.
}}
        num_draft_tokens: [B] int32 or int64, n_b in [0, K] (unchecked; values outside are clamped).
        seeds: as `gumbel_sample`: [B] int32, uint32 or int64, or [B, 2] (low, high) 32-bit words.
        positions: [B] int32 or int64, the position of row 0 (>= 0, unchecked).
{{
        temperature: as `gumbel_sample`: a number in [0, 3.4e38], or a [B] or scalar tensor of any float
||
        temperature: as `gumbel_sample`: a number in [0, 3.4e38], or a [B] or scalar array of any float
}}
            dtype (values unchecked: below 1e-5, negative and NaN are greedy).
        draft_logits: [B, K, V] float32, or None for one-hot drafts. Ignored by method="strict".
        method: "probabilistic" or "strict".
{{
        fp64: FP64 softmax, ratios, uniforms and scores instead of FP32.
||
        fp64: FP64 softmax, ratios, uniforms and scores instead of FP32 (works with jax_enable_x64 off).
}}
        num_valid: None, or the number of valid requests: an int in [0, B] or an int32 / int64 scalar
            array (unchecked); requests at or past it are padding: every token -1, num_sampled 0, their
            logits not read. The valid requests' outputs do not change.
        return_logprobs: also return the `Logprobs` of every token under its target row
            (`target_logits[b, j]` at the request's temperature, no filters: kept == scaled,
            log_kept_mass 0), fields [B, K+1] (top ones [B, K+1, num_top]); a -1 token (past
            num_sampled, or a padding request) gives NaN and rank 0. The launch runs after the sampling
            launches and reads the target rows again.
        num_top: with return_logprobs, the count of top logprobs a target row (0 to 64).
{{
        vocab_group: None, or a torch.distributed process group over which the vocabulary is split:
            `target_logits` (and `draft_logits`) are then this rank's [B, K+1, V_r] ([B, K, V_r]) shards,
            rank r holding the r-th contiguous columns (sizes may differ; every shard but the first starts
            at a multiple of 4 columns); draft tokens are global columns. Three or four all-gathers of
            per-request records (the owners' block partials of the normalisers, the shards' bests), none
            of a row's vocabulary: every rank returns the unsharded call's tokens, bit for bit. With
            num_valid, padding requests read nothing on any rank. With return_logprobs, then the emitted
            tokens' vocab-parallel `token_logprobs` (two more all-gathers).
||
        vocab_axis: None, or the name of a mesh axis over which the vocabulary is split (inside
            shard_map): `target_logits` (and `draft_logits`) are then this device's [B, K+1, V / n]
            ([B, K, V / n]) shards, the shards in axis order, equal sizes (a multiple of 4 columns with
            more than one shard); draft tokens are global columns. Three or four all-gathers of per-request
            records, none of a row's vocabulary: the unsharded call's tokens, bit for bit, on every device.
            With return_logprobs, then the emitted tokens' vocab-parallel `token_logprobs`. Under plain
            jax.jit, target (and draft) logits placed with a NamedSharding split along the vocabulary
            (equal shards, a multiple of 4 columns each) take the same plan; any other split is gathered
            first.
}}

    Returns:
        tokens: [B, K+1] int32 — the accepted drafts, the emitted token, then -1 (the emitted token is
            -1 when its row has no finite logit).
        num_sampled: [B] int32, accepted drafts + 1.
        With return_logprobs, (tokens, num_sampled, Logprobs).

    Example:
{{
        >>> import torch, torch_backend
        >>> target = torch.zeros(1, 3, 4)  # B = 1, K = 2, V = 4
        >>> target[0, :, 2] = 5.0  # every row prefers token 2
        >>> tokens, num_sampled = torch_backend.rejection_sample(
        ...     target, torch.tensor([[2, 2]]), torch.tensor([2]), torch.tensor([0]), torch.tensor([0]), 0.0)
||
        >>> import jax.numpy as jnp, jsample
        >>> target = jnp.zeros((1, 3, 4), jnp.float32).at[0, :, 2].set(5.0)  # B = 1, K = 2, V = 4: every row prefers token 2
        >>> tokens, num_sampled = jsample.rejection_sample(
        ...     target, jnp.array([[2, 2]]), jnp.array([2]), jnp.array([0]), jnp.array([0]), 0.0)
}}
        >>> tokens.tolist(), num_sampled.tolist()  # greedy: both drafts accepted, then the bonus token
        ([[2, 2, 2]], [3])
    """

DOCSTRINGS["synthetic_rejection_sample"] = """Rejection with prescribed acceptance rates (benchmarking a serving stack at a chosen acceptance).

    Draft j of request b is accepted iff u_j < conditional_rates[(b,) j], u_j the stream-2 uniform
    (call 0) at position positions[b] + j (STREAM.md). At the first rejected row a (a = n_b when all
    are accepted) the emitted token is target_tokens[b, a]. So P(a_b > j) = prod_{i <= j} c_i, the
    unconditional rate of position j (see `jsample.rates`).

{{
    Determinism: as `rejection_sample`; equal to `jsample.synthetic_rejection_sample` bit for bit.
    Changing the rate values never recompiles (they are read on the device).
||
    Determinism: as `rejection_sample`; equal to `torch_backend.synthetic_rejection_sample` bit for
    bit. The rates are a device array: changing their values never recompiles.
}}

    Args:
        target_tokens: [B, K+1] int32 or int64 (torch.argmax's), the target's sampled token of each row (e.g.
            gumbel_sample's); read as int64: a value beyond int32 is no token id and emits -1.
        draft_tokens: [B, K] int32 or int64 (read as such: an int64 draft beyond the int32 range is
{{
            never accepted; entries at j >= n_b ignored).
||
            never accepted; entries at j >= n_b ignored). 64-bit arrays need jax_enable_x64.
}}
        num_draft_tokens: [B] int32 or int64, n_b in [0, K] (unchecked; clamped).
        seeds: as `gumbel_sample`: [B] int32, uint32 or int64, or [B, 2] (low, high) 32-bit words.
        positions: [B] int32 or int64, the position of row 0.
        conditional_rates: float32 [K] (one schedule) or [B, K] (one per request), values in [0, 1]
{{
            (unchecked: reading them would synchronise); a float64 tensor is rounded to float32, and a
            list of numbers (`jsample.unconditional_to_conditional_rates` gives one) is copied to
            the device as float32 at each call.
||
            (unchecked); float64 arrays and lists of numbers (`jsample.unconditional_to_conditional_rates`
            gives one) are rounded to float32.
}}
        fp64: FP64 uniforms (compared with the rates widened to FP64).
        num_valid: None, or the number of valid requests: an int in [0, B] or an int32 / int64 scalar
            array (unchecked); requests at or past it are padding: every token -1, num_sampled 0, their
            logits not read. The valid requests' outputs do not change.

    Returns:
        tokens [B, K+1] int32 (accepted drafts, the emitted token, then -1) and num_sampled [B] int32.

    Example:
{{
        >>> import jsample, torch, torch_backend
||
        >>> import jax.numpy as jnp, jsample
}}
        >>> rates = jsample.unconditional_to_conditional_rates([1.0, 0.0])  # draft 0 always accepted, draft 1 never
{{
        >>> tokens, num_sampled = torch_backend.synthetic_rejection_sample(
        ...     torch.tensor([[10, 11, 12]], dtype=torch.int32), torch.tensor([[5, 6]]), torch.tensor([2]),
        ...     torch.tensor([0]), torch.tensor([0]), rates)
||
        >>> tokens, num_sampled = jsample.synthetic_rejection_sample(
        ...     jnp.array([[10, 11, 12]], jnp.int32), jnp.array([[5, 6]]), jnp.array([2]), jnp.array([0]), jnp.array([0]),
        ...     rates)
}}
        >>> tokens.tolist(), num_sampled.tolist()  # draft 5, then the target's token of row 1
        ([[5, 11, -1]], [2])
    """


DOCSTRINGS["token_logprobs"] = """Log-probabilities of given tokens (e.g. sampled ones), and the mass the filters keep.

    For each row b: with x = logits[b] read as float32, T = temperature[b] (T = 1 where the row is
    greedy) and the filters read and clamped exactly as `top_k_top_p_sample` reads them, the numbers of
    docs/LOGPROBS.md: `raw` = log_softmax(x)[t], `scaled` = log_softmax(x / T)[t], `kept` = log of t's
    probability in the distribution `top_k_top_p_sample` draws from (-inf outside its kept set; its
    exact kept set: the same fixed-point masses), `log_kept_mass` = log of the softmax(x / T) mass of
    the kept set (kept == scaled - log_kept_mass for kept tokens), `rank` = 1 + the count of larger
    logits, and the `num_top` largest raw logprobs (`top_ids`, `top_logprobs`: largest first, the
    lowest column first among equal logits, only finite logits; -1 and -inf past the row's finite
    ones). A token of -1 (a row without a finite logit) gives NaN logprobs and rank 0.

    For exact RL replay: `kept` of a token `top_k_top_p_sample` drew with the same inputs is finite, and
    `exp(kept)` over the kept set sums to 1. Equal in both frontends bit for bit. Without filters and with
    num_top = 0 it reads the logits once (block statistics); else it reads the row a few times over
    (top-k / top-p thresholds by bisection, one pass per top token).

    Args:
        logits: [B, V] float32, bfloat16 or float16 (float64 is read as float32).
        tokens: [B] int32 or int64: -1 or in [0, V), checked where the host holds the values
{{
            (NumPy, lists, CPU tensors); a CUDA tensor's out-of-range token gives NaN logprobs, rank 0.
||
            (NumPy arrays, lists); a device array's out-of-range token gives NaN logprobs, rank 0.
}}
        temperature: as `gumbel_sample`'s (a number, or a [B] or scalar array of any float dtype).
        top_k, top_p, min_p: as `top_k_top_p_sample`'s (None: no such filter).
        num_top: 0 to 64 (every count runs the same compiled kernel).
        fp64: the samplers' fp64 flag (it decides top-p's fixed-point masses and min-p's comparison).
{{
        vocab_group: None, or a torch.distributed process group over which the vocabulary is split, as
            `gumbel_sample`'s (`logits` this rank's [B, V_r] shard, `tokens` global columns in [0, V)):
            every rank returns the unsharded call's Logprobs, bit for bit, top lists included, from two
            all-gathers of per-row records (the single read's block statistics, then the rank counts and
            each rank's top list), no logits. With filters, their kept set first, as `top_k_top_p_sample`
            finds it (a Python-int top_k: the lists' one all-gather; else the search rounds), and each rank's
            kept mass against the row's largest logit.
||
        vocab_axis: None, or the name of a mesh axis over which the vocabulary is split (inside
            shard_map), as `gumbel_sample`'s (`tokens` global columns): every device returns the unsharded
            call's Logprobs, bit for bit, top lists included, from two all-gathers of per-row records (with
            filters, their kept set first, as `top_k_top_p_sample` finds it). Under plain jax.jit, logits with a NamedSharding
            split along the vocabulary (equal shards, a multiple of 4 columns each) take the same plan.
}}

    Returns:
        Logprobs(raw, scaled, kept, log_kept_mass, rank, top_ids, top_logprobs): [B] float32 (rank [B]
        int32), top_ids [B, num_top] int32, top_logprobs [B, num_top] float32.

    Example:
{{
        >>> import torch, torch_backend
        >>> logits = torch.tensor([[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]])
        >>> lp = torch_backend.token_logprobs(logits, torch.tensor([1, 0]), 1.0, top_k=1, num_top=2)
        >>> lp.kept.tolist(), lp.rank.tolist(), lp.top_ids.tolist()  # top_k=1 keeps the largest logit only
        ([0.0, 0.0], [1, 1], [[1, 2], [0, 1]])
||
        >>> import jax.numpy as jnp, jsample
        >>> logits = jnp.array([[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]], jnp.float32)
        >>> lp = jsample.token_logprobs(logits, jnp.array([1, 0]), 1.0, top_k=1, num_top=2)
        >>> lp.kept.tolist(), lp.rank.tolist(), lp.top_ids.tolist()  # top_k=1 keeps the largest logit only
        ([0.0, 0.0], [1, 1], [[1, 2], [0, 1]])
}}
    """


class Logprobs(NamedTuple):
    """What `token_logprobs` returns (docs/LOGPROBS.md), arrays of the frontend's kind."""
    raw: Any
    scaled: Any
    kept: Any
    log_kept_mass: Any
    rank: Any
    top_ids: Any
    top_logprobs: Any


def docstring(op: str, frontend: str) -> str:
    """`op`'s docstring as `frontend` ("torch" or "jax") shows it."""
    side = FRONTENDS.index(frontend) + 1
    return _ALTERNATIVES.sub(lambda match: match.group(side), DOCSTRINGS[op])


# The per-row arrays both frontends make of top_k_top_p_sample's and token_logprobs' filters (a number, or an
# array of any integer / float dtype): (name, dtype name), in the planning functions' order.
FILTER_DTYPES = (("top_k", "int64"), ("top_p", "float32"), ("min_p", "float32"))


def logprobs_plan_flags(num_top, top_k_in_list: bool = False) -> dict:
    """The planning functions' keywords for a sampler's return_logprobs (`num_top` not None) or not (None);
    `top_k_in_list`: kernels.top_k_within_list of the call's top_k (top_k_top_p_sample's)."""
    if num_top is None:
        return {}
    return dict(return_logprobs=True, num_top=num_top, **({"top_k_in_list": True} if top_k_in_list else {}))


def logprobs_shapes(batch: int, rows: int, num_top: int) -> tuple:
    """((shape, dtype name), ...) of rejection_sample's Logprobs: [B, K + 1] (top ones [B, K + 1, num_top])."""
    return (((batch, rows), "float32"),) * 4 + (((batch, rows), "int32"), ((batch, rows, num_top), "int32"),
                                               ((batch, rows, num_top), "float32"))


def output_shapes(op: str, batch: int, rows: int = 1) -> tuple:
    """((shape, dtype name), ...) of `op`'s outputs for `batch` requests (`rows` = K + 1 for rejection)."""
    if op in ("gumbel_sample", "top_k_top_p_sample"):
        return (((batch,), "int32"),)
    if op == "token_logprobs":  # rows = num_top here
        return (((batch,), "float32"),) * 4 + (((batch,), "int32"), ((batch, rows), "int32"),
                                               ((batch, rows), "float32"))
    return (((batch, rows), "int32"), ((batch,), "int32"))  # tokens [B, K + 1], num_sampled [B]
