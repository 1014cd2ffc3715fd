"""What `precompile` compiles, shared by both frontends: the calls whose launches cover every compiled
kernel a range of batch sizes can reach.

A plan is a value, so the compile keys of every batch size are read without compiling
(jsample.kernels.compiles). `warmup_cases` walks the requested ops, vocabularies, dtypes and flag sets,
and for each keeps the batch sizes that bring a compile key no smaller batch brought: calling the op
once at each of those sizes compiles everything B = 1..max_batch needs (two tilings at most per
kernel, tests/test_compiles.py). The frontends make the calls (torch) or lower them (JAX).
"""

import itertools
from dataclasses import dataclass, field

from jsample.kernels.compiles import compile_key
from jsample.kernels.plan import ArgSpec

OPS = ("gumbel_sample", "top_k_top_p_sample", "rejection_sample", "synthetic_rejection_sample", "token_logprobs")
# the filter sets top_k_top_p_sample is warmed with unless told: every combination of the three filters
FILTER_SETS = tuple(dict(zip(("top_k", "top_p", "min_p"), given))
                    for given in itertools.product((False, True), repeat=3) if any(given))
# rejection_sample's: one-hot drafts and draft logits, probabilistic; strict
REJECTION_SETS = (dict(draft_logits=False, method="probabilistic"), dict(draft_logits=True, method="probabilistic"),
                  dict(draft_logits=False, method="strict"))


@dataclass(frozen=True)
class WarmupCase:
    """One call `precompile` makes: `op` at `batch` rows of `vocab` columns (`k` drafts), these flags."""

    op: str
    batch: int
    vocab: int
    dtype: str
    k: int = 0
    flags: tuple = ()  # (name, value) pairs: the op's keyword flags (filters given, method, fp64, ...)
    keys: frozenset = field(default=frozenset(), compare=False)  # the compile keys this call brings


def _plan(op, batch, vocab, dtype, k, flags, target):
    from jsample import kernels

    seeds = ArgSpec.contiguous((batch,), "int64")
    if flags.get("vocab_shards") and op != "synthetic_rejection_sample":  # (it reads no logits: its one plan)
        return _vocab_parallel_plan(op, batch, vocab, dtype, flags, target, k)
    if op == "gumbel_sample":
        return kernels.plan_gumbel_sample(ArgSpec.contiguous((batch, vocab), dtype), seeds, target,
                                          fp64=flags.get("fp64", False), draft=flags.get("draft", False),
                                          row_valid=flags.get("num_valid", False), **_logprobs(flags))
    if op == "top_k_top_p_sample":
        return kernels.plan_top_k_top_p_sample(
            ArgSpec.contiguous((batch, vocab), dtype), seeds, target, has_top_k=bool(flags.get("top_k", False)),
            has_top_p=flags.get("top_p", False), has_min_p=flags.get("min_p", False), fp64=flags.get("fp64", False),
            row_valid=flags.get("num_valid", False), **_logprobs(flags))
    if op == "token_logprobs":
        return kernels.plan_token_logprobs(
            ArgSpec.contiguous((batch, vocab), dtype), target, has_top_k=bool(flags.get("top_k", False)),
            has_top_p=flags.get("top_p", False), has_min_p=flags.get("min_p", False), fp64=flags.get("fp64", False),
            num_top=flags.get("num_top", 0), top_k_in_list=kernels.top_k_within_list(flags.get("top_k")))
    if op == "rejection_sample":
        draft = ArgSpec.contiguous((batch, k, vocab), "float32") if flags.get("draft_logits") else None
        return kernels.plan_rejection_sample(ArgSpec.contiguous((batch, k + 1, vocab), dtype), draft, seeds, target,
                                             strict=flags.get("method") == "strict", fp64=flags.get("fp64", False),
                                             row_valid=flags.get("num_valid", False), **_logprobs(flags))
    if op == "synthetic_rejection_sample":
        return kernels.plan_synthetic_rejection_sample(
            ArgSpec.contiguous((batch, k + 1), "int32"),
            ArgSpec.contiguous((batch, k) if flags.get("batched_rates") else (k,), "float32"), seeds, target,
            fp64=flags.get("fp64", False), row_valid=flags.get("num_valid", False))
    raise ValueError(f"precompile: ops must be among {OPS}, got {op!r}")


def _vocab_parallel_plan(op, batch, vocab, dtype, flags, target, k=0):
    """A vocab-parallel call's rounds (gumbel_sample's: a shard's summary and the combine, with return_logprobs
    token_logprobs' rounds after them; top_k_top_p_sample's: its searches or its lists too; token_logprobs': its
    statistics, counts and merge; rejection_sample's: its heads, stats, decision and finish) as one plan
    (plan.merged_rounds: what the all-gathers and earlier rounds would give is a zero stand-in, on which no search
    runs): every compile key of the calls of each device of an even split (start columns i * V / vocab_shards)."""
    from jsample import kernels
    from jsample.kernels.plan import merged_rounds

    shards = flags["vocab_shards"]
    width = shard_width(vocab, shards)
    logits, seeds = ArgSpec.contiguous((batch, width), dtype), ArgSpec.contiguous((batch,), "int64")
    starts = tuple(i * width for i in range(shards))
    if op == "rejection_sample":
        if flags.get("return_logprobs"):
            raise ValueError("precompile: rejection_sample with vocab_shards takes no return_logprobs (its logprobs "
                             "are vocab-parallel token_logprobs': warm token_logprobs with vocab_shards and num_top)")
        draft = ArgSpec.contiguous((batch, k, width), "float32") if flags.get("draft_logits") else None
        sharded = kernels.plan_rejection_sample_shard(
            ArgSpec.contiguous((batch, k + 1, width), dtype), draft, seeds, target,
            strict=flags.get("method") == "strict", fp64=flags.get("fp64", False), vocab=vocab, starts=starts,
            start_align=kernels.start_alignment(starts), row_valid=flags.get("num_valid", False))
        return merged_rounds(sharded.rounds, shards)
    common = dict(fp64=flags.get("fp64", False), shards=shards, row_valid=flags.get("num_valid", False),
                  start_align=kernels.start_alignment(starts))
    logprobs = ()
    list_capacity = kernels.shard_list_capacity(flags.get("top_k"))  # (an int, as a call's Python int: the lists)
    if op == "token_logprobs" or flags.get("return_logprobs"):
        filters = dict(has_top_k=bool(flags.get("top_k", False)), has_top_p=flags.get("top_p", False),
                       has_min_p=flags.get("min_p", False)) if op != "gumbel_sample" else {}
        if op == "top_k_top_p_sample" or list_capacity:
            filters["threshold_given"] = True  # (the sampling rounds' last one, or the lists', give the kept set)
        logprobs = kernels.plan_token_logprobs_shard(logits, target, vocab=width * shards, starts=starts,
                                                     start_align=common["start_align"],
                                                     num_top=flags.get("num_top", 0), fp64=common["fp64"],
                                                     row_valid=op != "token_logprobs" and common["row_valid"],
                                                     **filters).rounds
        if op == "token_logprobs" and not list_capacity:
            return merged_rounds(logprobs, shards)
    if op in ("top_k_top_p_sample", "token_logprobs"):
        # (a "top_k" given as an int, as a call's Python int: the shards' lists; token_logprobs' take no min-p)
        sharded = kernels.plan_top_k_top_p_shard(logits, seeds, target, has_top_k=bool(flags.get("top_k", False)),
                                                 has_top_p=flags.get("top_p", False),
                                                 has_min_p=flags.get("min_p", False) and op != "token_logprobs",
                                                 list_capacity=list_capacity,
                                                 store_threshold=bool(logprobs), **common)
    else:
        sharded = kernels.plan_gumbel_sample_shard(logits, seeds, target, draft=flags.get("draft", False), **common)
    return merged_rounds(sharded.rounds + logprobs, shards)


def shard_width(vocab: int, shards) -> int:
    """The columns of a shard of an even vocab-parallel split (precompile's `vocab_shards` flag)."""
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 2:
        raise ValueError(f"precompile: vocab_shards must be an int >= 2, got {shards!r}.")
    if vocab % shards or (vocab // shards) % 4:
        raise ValueError(f"precompile: vocab_shards = {shards} must split V = {vocab} into shards of a multiple of 4 "
                         f"columns, got {vocab / shards:g}.")
    return vocab // shards


def _logprobs(flags) -> dict:
    """The samplers' return_logprobs flag as plan arguments (num_top 0, the single read where it applies, or 1:
    every count from 1 runs the same kernel, the count read on the device; a "top_k" given as an int in [1, 64],
    as a call's Python int: the logprobs' list alone)."""
    if not flags.get("return_logprobs"):
        return {}
    from jsample import kernels
    from jsample.ops import logprobs_plan_flags

    return logprobs_plan_flags(flags.get("num_top", 0), kernels.top_k_within_list(flags.get("top_k")))


def _with_num_tops(op, flags) -> list:
    """A logprobs flag set without num_top stands for both kernels' calls: num_top 0 (the single read, without
    filters) and 1 (every larger count alike)."""
    if (op == "token_logprobs" or flags.get("return_logprobs")) and "num_top" not in flags:
        return [dict(flags, num_top=0), dict(flags, num_top=1)]
    return [flags]


def input_specs(case: WarmupCase, wide: str = "int64", row_count: bool = False) -> dict:
    """{input name: (shape, dtype name)} of a case's call, as a typical call passes them: seeds, positions and
    top_k `wide` [B], temperature, top_p and min_p float32 [B], draft tokens and counts int32, the padding rows'
    `row_valid` (common.is_padding) as [B] uint8 flags (JAX) or, with `row_count`, an int64 count [1] (torch: an
    int or torch.tensor(n)); the values do not matter to the compiler, the dtypes do. Each frontend makes its
    arrays from them."""
    b, v, k, flags = case.batch, case.vocab, case.k, dict(case.flags)
    requests = dict(seeds=((b,), wide), positions=((b,), wide))
    if flags.get("num_valid"):
        requests["row_valid"] = ((1,), "int64") if row_count else ((b,), "uint8")
    if case.op == "synthetic_rejection_sample":
        return dict(requests, draft_tokens=((b, k), "int32"), num_draft_tokens=((b,), "int32"),
                    target_tokens=((b, k + 1), "int32"),
                    conditional_rates=((b, k) if flags.get("batched_rates") else (k,), "float32"))
    requests["temperature"] = ((b,), "float32")
    if case.op == "rejection_sample":
        width = v
        if flags.get("vocab_shards"):  # this device's columns, its start column, every shard's
            width = shard_width(v, flags["vocab_shards"])
            requests.update(vocab_start=((1,), "int32"), shard_starts=((flags["vocab_shards"] + 1,), "int32"))
        specs = dict(requests, draft_tokens=((b, k), "int32"), num_draft_tokens=((b,), "int32"),
                     target_logits=((b, k + 1, width), case.dtype))
        if flags.get("draft_logits"):
            specs["draft_logits"] = ((b, k, width), "float32")
        if flags.get("return_logprobs"):
            specs["num_top"] = ((1,), "int32")
        return specs
    specs = dict(requests, logits=((b, v), case.dtype))
    if flags.get("vocab_shards"):  # this device's columns, and its start column
        specs.update(logits=((b, shard_width(v, flags["vocab_shards"])), case.dtype), vocab_start=((1,), "int32"))
    if case.op == "token_logprobs":
        specs = dict(logits=specs["logits"], tokens=((b,), wide), temperature=((b,), "float32"),
                     **{name: specs[name] for name in ("vocab_start",) if name in specs})
    if case.op == "token_logprobs" or flags.get("return_logprobs"):
        specs["num_top"] = ((1,), "int32")
    for name, dtype in (("top_k", wide), ("top_p", "float32"), ("min_p", "float32")):
        if flags.get(name):
            specs[name] = ((b,), dtype)
    return specs


def _flag_sets(op, flags):
    if flags is not None:
        return [dict(f) for f in flags]
    return {"gumbel_sample": [{}], "top_k_top_p_sample": [dict(f) for f in FILTER_SETS],
            "token_logprobs": [{}] + [dict(f) for f in FILTER_SETS],
            "rejection_sample": [dict(f) for f in REJECTION_SETS],
            "synthetic_rejection_sample": [{}, dict(batched_rates=True)]}[op]


def warmup_cases(vocab_sizes, dtypes, ops, flags, max_batch, num_speculative_tokens, targets, frontend) -> list:
    """The calls that compile every kernel the ops can reach for B = 1..max_batch on `targets`.

    Args:
        vocab_sizes, dtypes: the logits' widths and dtype names ("bfloat16", ...).
        ops: op names (None: all five).
        flags: None (every filter combination; rejection's one-hot, draft-logit and strict methods), or a list
            of dicts of the op's flags, applied to each op in `ops` (e.g. [{"top_k": True, "top_p": True}]).
        max_batch: the largest batch size to cover.
        num_speculative_tokens: the K values of the rejection ops.
        targets: the executor's Targets (e.g. eager and CUDA-graph capture in torch).
        frontend: "torch" or "jax" (jsample.kernels.compiles).
    """
    ops = OPS if ops is None else tuple(ops)
    if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
        raise ValueError(f"precompile: max_batch must be a positive int, got {max_batch!r}.")
    cases, seen = [], set()
    for op in ops:
        if op not in OPS:
            raise ValueError(f"precompile: ops must be among {OPS}, got {op!r}.")
        rejection = op in ("rejection_sample", "synthetic_rejection_sample")
        vocabs = (0,) if op == "synthetic_rejection_sample" else tuple(vocab_sizes)
        op_dtypes = ("int32",) if op == "synthetic_rejection_sample" else tuple(dtypes)
        flag_sets = [expanded for given in _flag_sets(op, flags) for expanded in _with_num_tops(op, given)]
        for vocab, dtype, k, op_flags in itertools.product(vocabs, op_dtypes,
                                                           tuple(num_speculative_tokens) if rejection else (0,),
                                                           flag_sets):
            for batch in range(1, max_batch + 1):
                keys = frozenset(compile_key(step, frontend) for target in targets
                                 for step in _plan(op, batch, vocab, dtype, k, op_flags, target).launches)
                if not keys <= seen:
                    seen |= keys
                    cases.append(WarmupCase(op, batch, vocab, dtype, k, tuple(sorted(op_flags.items())), keys))
    return cases


@dataclass
class PrecompileReport:
    """What `precompile` did: the calls it made, the distinct compiled kernels they cover, and how long it took."""

    cases: list
    kernels: int  # distinct compile keys covered
    seconds: float
    compiled: bool  # False in the Triton interpreter, where nothing is compiled

    def __repr__(self):
        return (f"PrecompileReport({len(self.cases)} calls, {self.kernels} compiled kernels, {self.seconds:.1f} s"
                + ("" if self.compiled else ", interpreter: nothing compiled") + ")")
