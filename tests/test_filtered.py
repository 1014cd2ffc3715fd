"""top_k_top_p_sample: kept sets and tokens vs the NumPy reference, torch == JAX, tiling and batch
invariance, the link to gumbel_sample, the filtered distribution, errors."""

import dataclasses
import functools

import ml_dtypes
import numpy as np
import pytest
from conftest import ON_GPU, SCORE_MARGIN, SIZE, both_frontends, make_requests, set_filtered
from distribution_checks import P_VALUE, chi_square_pvalue, softmax

import triton.language as tl

from jsample import kernels
from jsample.kernels.filtered.search import _largest_reaching
from jsample.kernels.host import jit
from jsample.reference import gumbel_scores_reference, top_k_top_p_sample_reference
from jsample.reference.filtered import kept_tokens

OP = "top_k_top_p_sample"
BATCH, VOCAB = {"cpu": (8, 2500), "gpu": (64, 151936)}[SIZE]
AMBIGUITY = 1e-5  # relative change of the top-p and min-p limits that GPU exp rounding stays well within


def _filters(rng, batch, vocab):
    """Per-row filter values covering the edges: disabled (0, 1, >= V, NaN), keep-only-the-top, typical."""
    top_k = rng.choice(np.int32([0, 1, 2, 5, 40, 300, vocab, vocab + 5, -3]), size=batch).astype(np.int32)
    top_p = rng.choice(np.float32([0.05, 0.3, 0.6, 0.9, 0.99, 1.0, 0.0, -1.0, np.nan]), size=batch).astype(np.float32)
    min_p = rng.choice(np.float32([0.0, 0.001, 0.05, 0.3, 1.0]), size=batch).astype(np.float32)
    return top_k, top_p, min_p


def _problem(rng, batch, vocab, dtype="float32"):
    logits = (rng.standard_normal((batch, vocab)) * rng.uniform(0.5, 4.0, (batch, 1))).astype(np.float32)
    logits[0, : vocab // 3] = logits[0, vocab // 3]  # a long run of ties
    logits[1, ::7] = -np.inf
    logits[1, 3] = np.nan
    logits[2 % batch] = np.round(logits[2 % batch])  # many ties at every value
    logits = logits.astype(getattr(ml_dtypes, dtype, dtype))
    seeds, positions = make_requests(rng, batch)
    temperature = rng.choice(np.float32([0.0, 0.5, 0.8, 1.0, 1.7]), size=batch)
    temperature[1:3] = 0.9
    return logits, seeds, positions, temperature


def _kept_bracket(logits_row, temperature, top_k, top_p, min_p, fp64):
    """The smallest and largest kept sets that a relative change of AMBIGUITY in the top-p and min-p
    limits gives (the GPU's exp is not NumPy's, so its e values may differ by a few ulps). The sets are
    nested, and the GPU's kept set lies between them."""
    def kept(scale):
        return kept_tokens(logits_row, temperature, top_k, top_p, min_p, fp64, top_p_scale=scale,
                           min_p_scale=2.0 - scale)
    return kept(1 - AMBIGUITY), kept(1 + AMBIGUITY)


def assert_tokens_match_reference(tokens, logits, seeds, positions, temperature, top_k, top_p, min_p, fp64=False):
    expected = top_k_top_p_sample_reference(logits, seeds, positions, temperature, top_k=top_k, top_p=top_p,
                                            min_p=min_p, fp64=fp64)
    if not ON_GPU:  # the interpreter evaluates exp and the noise with NumPy: exact
        np.testing.assert_array_equal(tokens, expected)
        return
    # On a GPU every row is checked: exactly where its kept set is unambiguous and its best two scores
    # do not nearly tie; otherwise the token must be in the largest kept set and score at least the
    # best score of the smallest one (the argmax over any set between the two), within SCORE_MARGIN.
    exact = np.zeros(len(logits), bool)
    for b in range(len(logits)):
        small, large = _kept_bracket(logits[b], temperature[b], int(top_k[b]), top_p[b], min_p[b], fp64)
        scores = gumbel_scores_reference(np.where(large, logits[b], -np.inf)[None], seeds[b:b + 1],
                                         positions[b:b + 1], temperature[b:b + 1], fp64=fp64)[0]
        top_two = np.sort(scores[large])[-2:]
        margin = SCORE_MARGIN[fp64] * max(1.0, abs(float(top_two[-1])))
        near_tie = temperature[b] > 0 and len(top_two) == 2 and top_two[1] - top_two[0] < margin
        exact[b] = np.array_equal(small, large) and not near_tie
        if exact[b]:
            assert tokens[b] == expected[b], (b, tokens[b], expected[b])
        else:
            assert large[tokens[b]], (b, tokens[b], "outside the largest kept set")
            assert scores[tokens[b]] >= scores[small].max() - margin, (b, tokens[b], expected[b])
    assert exact.mean() > 0.75, f"{(~exact).sum()} rows checked by bracket only: the exact check lost its teeth"


@pytest.mark.parametrize("dtype,fp64", [("float32", False), ("bfloat16", False), ("float16", False),
                                        ("float32", True)], ids=["f32", "bf16", "f16", "f32-fp64"])
def test_filtered_tokens_match_reference_torch_equals_jax(dtype, fp64):
    rng = np.random.default_rng(3)
    logits, seeds, positions, temperature = _problem(rng, BATCH, VOCAB, dtype)
    top_k, top_p, min_p = _filters(rng, BATCH, VOCAB)
    tokens = both_frontends(OP, logits, seeds, positions, temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                            fp64=fp64)
    assert tokens.dtype == np.int32 and tokens.shape == (BATCH,)
    assert_tokens_match_reference(tokens, logits.astype(np.float32), seeds, positions, temperature, top_k, top_p,
                                  min_p, fp64)


@pytest.mark.parametrize("which", ["top_k", "top_p", "min_p"])
def test_filtered_each_filter_alone_matches_reference(which):
    rng = np.random.default_rng(4)
    logits, seeds, positions, temperature = _problem(rng, BATCH, VOCAB, "bfloat16")
    values = dict(zip(("top_k", "top_p", "min_p"), _filters(rng, BATCH, VOCAB)))
    tokens = both_frontends(OP, logits, seeds, positions, temperature, **{which: values[which]})
    disabled = {"top_k": np.zeros(BATCH, np.int32), "top_p": np.ones(BATCH, np.float32),
                "min_p": np.zeros(BATCH, np.float32)}
    filters = [values[name] if name == which else disabled[name] for name in ("top_k", "top_p", "min_p")]
    assert_tokens_match_reference(tokens, logits.astype(np.float32), seeds, positions, temperature, *filters)


def test_filtered_scalar_filters_equal_per_row_and_zero_dim_arrays():
    rng = np.random.default_rng(5)
    logits, seeds, positions, temperature = _problem(rng, 6, 1000)
    scalar = both_frontends(OP, logits, seeds, positions, temperature, top_k=30, top_p=0.7, min_p=0.01)
    arrays = both_frontends(OP, logits, seeds, positions, temperature, top_k=np.full(6, 30, np.int32),
                            top_p=np.full(6, 0.7, np.float32), min_p=np.full(6, 0.01, np.float32))
    zero_dim = both_frontends(OP, logits, seeds, positions, temperature, top_k=np.array(30, np.int32),
                              top_p=np.array(0.7, np.float32), min_p=np.array(0.01, np.float32))
    np.testing.assert_array_equal(scalar, arrays)
    np.testing.assert_array_equal(zero_dim, arrays)


def test_filtered_without_filters_is_gumbel_sample_bit_for_bit():
    """Disabled filters run every launch (the searches settle at once) and change nothing."""
    rng = np.random.default_rng(6)
    logits, seeds, positions, temperature = _problem(rng, BATCH, VOCAB, "bfloat16")
    expected = both_frontends("gumbel_sample", logits, seeds, positions, temperature)
    for fp64 in (False, True):
        expected = both_frontends("gumbel_sample", logits, seeds, positions, temperature, fp64=fp64)
        tokens = both_frontends(OP, logits, seeds, positions, temperature, top_k=0, top_p=1.0, min_p=0.0, fp64=fp64)
        np.testing.assert_array_equal(tokens, expected)
        np.testing.assert_array_equal(both_frontends(OP, logits, seeds, positions, temperature, fp64=fp64), expected)


def test_filtered_top_one_is_the_argmax():
    """top_k = 1, top_p <= 0 and min_p = 1 keep only the largest logit (a unique one here) at any T."""
    rng = np.random.default_rng(7)
    logits = rng.permuted(np.tile(np.arange(VOCAB, dtype=np.float32) / 100, (6, 1)), axis=1)
    seeds, positions = make_requests(rng, 6)
    temperature = np.float32([0.0, 0.3, 1.0, 2.0, 10.0, 100.0])
    argmax = logits.argmax(axis=1)
    for filters in ({"top_k": 1}, {"top_p": np.full(6, -1.0, np.float32)}, {"min_p": 1.0}):
        np.testing.assert_array_equal(both_frontends(OP, logits, seeds, positions, temperature, **filters), argmax)


def test_filtered_tokens_do_not_depend_on_the_tiling(monkeypatch, force_target):
    """The search launches split rows into a batch-dependent number of chunks, and use a
    batch-dependent number of pivots (the interpreter: one chunk a row, in large tiles): counts and
    fixed-point masses are integer sums and the searches exact, so the kept set, hence the token,
    cannot change with either."""
    from jsample.kernels import filtered

    rng = np.random.default_rng(8)
    logits, seeds, positions, temperature = _problem(rng, 6, VOCAB, "float32")
    top_k, top_p, min_p = np.int32([50, 0, 7, 1000, 3, 0]), np.float32([0.9, 0.5, 1.0, 0.95, 0.2, 0.99]), 0.001
    shipped_config, shipped_plan = filtered.filtered_launch_config, filtered.plan_top_k_top_p_sample.__wrapped__
    results, tilings = [], set()
    # (chunks, ways): None, None is the interpreter's shipped tiling, "many rows" the GPU's shipped
    # large-batch tiling (two warps, 8 pivots, the sampling launch in 512-column blocks)
    for chunks, ways in ((None, None), (1, 16), (3, 4), (7, 8), (7, 64), ("many rows", None)):
        def config(*args, chunks=chunks, ways=ways, **options):
            c = shipped_config(*args, **options)
            if chunks is None or chunks == "many rows":
                return c
            tile = c.threads * c.vec
            chunk = -(-VOCAB // (chunks * tile)) * tile  # columns per chunk, a multiple of the tile
            return dataclasses.replace(c, num_chunks=-(-VOCAB // chunk), chunk=chunk, ways=ways,
                                       search_steps=-(-(32 - c.key_shift) // (ways.bit_length() - 1)))

        set_filtered(monkeypatch, "filtered_launch_config", config)
        set_filtered(monkeypatch, "MANY_ROWS_ELEMENTS", 0 if chunks == "many rows" else 2**22)
        # a planning function of its own per tiling: neither its cache nor the executors' memo holds an older plan
        monkeypatch.setattr(kernels, "plan_top_k_top_p_sample", functools.partial(shipped_plan))
        if chunks is not None:
            force_target(large_programs=False, resident_programs=0)  # the launches' plan
        results.append(both_frontends(OP, logits, seeds, positions, temperature, top_k=top_k, top_p=top_p,
                                      min_p=min_p))
        plan = kernels.plan_top_k_top_p_sample(kernels.ArgSpec.contiguous(logits.shape, "float32"),
                                               kernels.ArgSpec.contiguous(seeds.shape, "int64"),
                                               kernels.Target(interpreter=True, large_programs=chunks is None),
                                               has_top_k=True, has_top_p=True, has_min_p=True, fp64=False)
        tilings.add(tuple((step.grid, step.constexprs) for step in plan.launches))
        if chunks == "many rows":
            search = next(step for step in plan.launches if step.kernel is filtered.filter_compact_step_kernel)
            sample = next(step for step in plan.launches if step.kernel is filtered.filtered_partial_kernel)
            decide = next(step for step in plan.launches if step.kernel is filtered.filter_decide_kernel)
            # with top-k's candidate lists, 16 pivots (the lists leave the searches few rows); 8 without top-k
            assert dict(search.constexprs)["WAYS"] == filtered.LISTED_WAYS == 16 and search.num_warps == 2
            assert dict(sample.constexprs)["BLOCK_V"] == 512 and sample.num_warps == 1
            # the decide launch (grid (B,)) lists the rows that search on; every search launch and the
            # sampling launch take those rows' items only, on COMPACT_PROGRAMS (COMPACT_SAMPLE_PROGRAMS) programs at most
            assert decide.grid == (logits.shape[0],) and decide.outputs == ("state_decided", "top_k_list_count", "active_rows",
                                                                  "active_count")
            def searches_of(plan):
                return [step for step in plan.launches if step.kernel.__name__.startswith("filter_")
                        and ("step" in step.kernel.__name__ or "bracket" in step.kernel.__name__)]

            def prev_phases(pivots):
                return [dict(step.constexprs)["PREV_PHASE"] for step in pivots]

            # float32: top-k's pivot launches, then top-p's (no histogram: float32's top keys are a sliver of
            # any bracket), the first after filter_decide_kernel's state
            searches = searches_of(plan)
            steps = len(searches) // 2  # two searches (top-k, top-p) of search_steps launches each
            assert [step.kernel for step in searches] == [filtered.filter_compact_step_kernel] * (2 * steps)
            assert prev_phases(searches) == [filtered.PREV_PHASE_DECIDED] + [filtered.PHASE_TOP_K] * steps + [
                filtered.PHASE_TOP_P] * (steps - 1)
            assert "state_decided" in search.args and search.outputs[0] != "state_decided"
            items = BATCH * dict(search.constexprs)["MAX_CHUNKS"]  # (an upper bound of the items)
            assert all(step.grid[0] <= min(items, filtered.COMPACT_PROGRAMS) for step in searches)
            assert dict(sample.constexprs)["COMPACT"] is True and sample.grid[0] <= filtered.COMPACT_SAMPLE_PROGRAMS
            # 16 ways leave float32's 8 steps no room for mixed first pivots (8 ways would: the next test)
            mixed = [(dict(step.constexprs)["MIXED_PIVOTS"], dict(step.constexprs)["NARROW_MIXED"])
                     for step in searches]
            assert steps == 8 and mixed == [(False, False)] * steps * 2, mixed
            assert dict(sample.constexprs)["NARROW_MIXED"] is False
            # bfloat16: top-p's search starts with a histogram launch and the bracket launch after it, whose
            # state its pivot launches start from
            plan = kernels.plan_top_k_top_p_sample(kernels.ArgSpec.contiguous(logits.shape, "bfloat16"),
                                                   kernels.ArgSpec.contiguous(seeds.shape, "int64"),
                                                   kernels.Target(interpreter=True), has_top_k=True,
                                                   has_top_p=True, has_min_p=True, fp64=False)
            searches = searches_of(plan)
            steps = (len(searches) - 2) // 2
            assert [step.kernel for step in searches] == [filtered.filter_compact_step_kernel] * steps + [
                filtered.filter_histogram_step_kernel, filtered.filter_histogram_bracket_kernel] + [
                filtered.filter_compact_step_kernel] * steps
            histogram, bracket = searches[steps:steps + 2]
            assert histogram.outputs[2:] == ("histogram",) and bracket.outputs[1:] == ("histogram",)
            assert bracket.args[2] == histogram.outputs[0] and bracket.outputs[0] != histogram.outputs[0]
            assert dict(histogram.constexprs)["BINS"] == dict(bracket.constexprs)["BINS"] == filtered.HISTOGRAM_BINS
            assert plan.buffer("histogram").counters
            pivots = [step for step in searches if step.kernel is filtered.filter_compact_step_kernel]
            assert prev_phases(pivots) == [filtered.PREV_PHASE_DECIDED] + [filtered.PHASE_TOP_K] * (steps - 1) + [
                filtered.PREV_PHASE_DECIDED] + [filtered.PHASE_TOP_P] * (steps - 1)
            assert pivots[steps].args[4] == bracket.outputs[0]
    assert len(tilings) == 6  # every run had a tiling of its own
    for tokens in results[1:]:
        np.testing.assert_array_equal(tokens, results[0])


def _launches_plan(monkeypatch, force_target, config_change=lambda config: config, **constants):
    """Both frontends plan top_k_top_p_sample with the launches' plan in the GPU's large-batch tiling
    (through the interpreter), its config passed through `config_change` and filtered's `constants` set."""
    from jsample.kernels import filtered

    shipped = getattr(filtered.filtered_launch_config, "shipped", filtered.filtered_launch_config)  # (not a change's)

    def config(*args, **options):
        return config_change(shipped(*args, **options))

    config.shipped = shipped
    set_filtered(monkeypatch, "filtered_launch_config", config)
    set_filtered(monkeypatch, "MANY_ROWS_ELEMENTS", 0)
    for name, value in constants.items():
        set_filtered(monkeypatch, name, value)
    # a planning function of its own: neither its cache nor the executors' memo holds an older plan
    monkeypatch.setattr(kernels, "plan_top_k_top_p_sample", functools.partial(filtered.plan_top_k_top_p_sample.__wrapped__))
    force_target(large_programs=False, resident_programs=0)


def test_filtered_top_p_histogram_settles_the_brackets_it_covers(monkeypatch, force_target):
    """Top-p's histogram launch counts the top HISTOGRAM_BINS keys of each searched row's bracket; the
    bracket launch after it settles the threshold where they hold it. In a plan without pivot launches
    after it, every searched row's bracket is settled (hi = lo + 1) with 1024 bins, which cover these
    brackets of a few hundred bfloat16 keys, at the very threshold key the pivot launches find (1 bin, the
    shipped pivot launches), and the tokens are the reference's; with 2 bins, rows are left unsettled
    (the pivot launches' work)."""
    import torch

    from jsample.kernels import filtered
    from torch_backend import _execute as torch_execute

    rng = np.random.default_rng(21)
    batch = 8
    # (V = 2500 on a GPU too: fewer ties at the thresholds, which the GPU's tolerant reference check skips)
    logits = (rng.standard_normal((batch, 2500)) * 3).astype(ml_dtypes.bfloat16)
    seeds, positions = make_requests(rng, batch)
    temperature = np.full(batch, 0.8, np.float32)
    top_p = np.float32([0.9, 0.5, 0.3, 0.3, 0.7, 0.4, 0.2, 0.6])
    no_pivot_launch = lambda config: dataclasses.replace(config, ways=16, search_steps=0,  # noqa: E731
                                                         mixed_first_pivots=False)
    device = torch.device("cuda" if ON_GPU else "cpu")
    inputs = {name: torch.from_numpy(value).to(device) for name, value in (
        ("logits", logits.view(np.int16)), ("seeds", seeds), ("positions", positions), ("temperature", temperature),
        ("top_p", top_p))}
    inputs["logits"] = inputs["logits"].view(torch.bfloat16)
    states = {}
    for bins, change in ((1024, no_pivot_launch), (2, no_pivot_launch), (1, lambda config: config)):
        _launches_plan(monkeypatch, force_target, change, HISTOGRAM_BINS=bins)
        plan = kernels.plan_top_k_top_p_sample(kernels.ArgSpec.contiguous(logits.shape, "bfloat16"),
                                               kernels.ArgSpec.contiguous(seeds.shape, "int64"),
                                               torch_execute.target(device), has_top_k=False, has_top_p=True,
                                               has_min_p=False, fp64=False)
        names = [step.kernel.__name__ for step in plan.launches]
        assert names.count("filter_histogram_step_kernel") == 1
        assert ("filter_compact_step_kernel" in names) == (bins == 1)
        final_state = next(step for step in plan.launches if step.kernel is filtered.filtered_partial_kernel).args[7]
        tokens, decided, state = torch_execute.run(
            dataclasses.replace(plan, outputs=("tokens", "state_decided", final_state)), device, inputs)
        tokens, decided, state = tokens.cpu(), decided.cpu(), state.cpu()
        # words: 3 lo, 4 hi, 7 status (the final state's of the rows searched only, which state_decided lists)
        searched = decided.view(torch.int64).numpy()[:, 7] == filtered.STATUS_FILTER
        states[bins] = np.where(searched[:, None], state.view(torch.int64).numpy(), -1)
        if bins == 1024:
            assert_tokens_match_reference(tokens.numpy(), logits, seeds, positions, temperature,
                                          np.zeros(batch, np.int32), top_p, np.zeros(batch, np.float32))
            np.testing.assert_array_equal(both_frontends(OP, logits, seeds, positions, temperature, top_p=top_p),
                                          tokens.numpy())
    searched = states[1024][:, 7] == filtered.STATUS_FILTER
    assert searched.sum() >= 3 and (states[1][:, 7] == states[1024][:, 7]).all(), states[1024][:, 7]
    lo, hi = states[1024][searched, 3], states[1024][searched, 4]
    assert (hi - lo == 1).all() and (lo == states[1][searched, 3]).all(), (states[1024], states[1])
    assert (states[2][searched, 4] - states[2][searched, 3] > 1).sum() >= 3, states[2]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_filtered_top_p_histogram_of_any_width_gives_the_reference_tokens(dtype, monkeypatch, force_target):
    """With 1, 16 or 1024 bins the histogram covers all, some or none of the brackets (float16's span
    thousands of keys); the pivot launches find the thresholds it leaves below its bins. The normaliser
    comes from the winner's sums (top-p alone), or from the histogram launch's own sums (min-p dropped
    the winner: no sums; top-p after top-k). Tokens: the reference's, in both frontends, for every width."""
    rng = np.random.default_rng(22)
    batch = 8
    logits = (rng.standard_normal((batch, 2500)) * rng.uniform(1.0, 4.0, (batch, 1))).astype(np.float32)
    logits[3] = np.round(logits[3] * 2) / 2  # ties, at the thresholds too
    logits = logits.astype(getattr(ml_dtypes, dtype, dtype))
    seeds, positions = make_requests(rng, batch)
    temperature = np.float32([0.8, 1.0, 0.6, 1.3, 0.7, 1.0, 0.9, 0.5])
    top_p = np.float32([0.9, 0.5, 0.95, 0.3, 0.7, 0.99, 0.2, 0.6])
    top_k = np.int32([3000, 50, 2000, 0, 1500, 100, 0, 2500])  # over TOP_K_LIST: searched, not listed
    min_p = np.float32([0.0, 0.3, 0.0, 0.2, 0.0, 0.0, 0.1, 0.0])
    results = []
    for bins in (1, 16, 1024):
        _launches_plan(monkeypatch, force_target, HISTOGRAM_BINS=bins, TOP_K_LIST=16)
        for filters in (dict(top_p=top_p), dict(top_p=top_p, min_p=min_p), dict(top_k=top_k, top_p=top_p)):
            tokens = both_frontends(OP, logits, seeds, positions, temperature, **filters)
            assert_tokens_match_reference(tokens, logits, seeds, positions, temperature,
                                          filters.get("top_k", np.zeros(batch, np.int32)), top_p,
                                          filters.get("min_p", np.zeros(batch, np.float32)))
            results.append(tokens)
    for i in range(3, len(results)):  # every width, the same tokens
        np.testing.assert_array_equal(results[i], results[i % 3])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("programs", [1, 3])
def test_filtered_compact_launches_take_every_listed_item_on_few_programs(programs, dtype, monkeypatch, force_target):
    """The launches' plan's search launches (bfloat16: the histogram and bracket launches too) and its
    sampling launch take the listed rows' items on at most COMPACT_PROGRAMS (COMPACT_SAMPLE_PROGRAMS)
    programs, each striding over those it gets: on one or three programs (many items each) the tokens
    equal those of the shipped counts (an item a program here), in both frontends, on rows that search
    (the same filters as the tiling test)."""
    from jsample.kernels import filtered

    rng = np.random.default_rng(8)
    logits, seeds, positions, temperature = _problem(rng, 6, VOCAB, dtype)
    top_k, top_p, min_p = np.int32([50, 0, 7, 1000, 3, 0]), np.float32([0.9, 0.5, 1.0, 0.95, 0.2, 0.99]), 0.001
    shipped_plan = filtered.plan_top_k_top_p_sample.__wrapped__
    set_filtered(monkeypatch, "MANY_ROWS_ELEMENTS", 0)  # the large-batch tiling
    force_target(large_programs=False, resident_programs=0)  # the launches' plan
    results = []
    for count in (filtered.COMPACT_PROGRAMS, programs):
        set_filtered(monkeypatch, "COMPACT_PROGRAMS", count)
        set_filtered(monkeypatch, "COMPACT_SAMPLE_PROGRAMS", count)
        # a planning function of its own: neither its cache nor the executors' memo holds the other's plan
        monkeypatch.setattr(kernels, "plan_top_k_top_p_sample", functools.partial(shipped_plan))
        plan = kernels.plan_top_k_top_p_sample(kernels.ArgSpec.contiguous(logits.shape, dtype),
                                               kernels.ArgSpec.contiguous(seeds.shape, "int64"),
                                               kernels.Target(interpreter=True, large_programs=False),
                                               has_top_k=True, has_top_p=True, has_min_p=True, fp64=False)
        compact = [step for step in plan.launches if step.kernel in (
            filtered.filter_compact_step_kernel, filtered.filter_histogram_step_kernel,
            filtered.filter_histogram_bracket_kernel, filtered.filtered_partial_kernel)]
        assert (filtered.filter_histogram_bracket_kernel in [step.kernel for step in compact]) == (dtype != "float32")
        chunks = dict(compact[0].constexprs)["MAX_CHUNKS"]
        assert len(compact) > 1 and all(step.grid[0] <= count for step in compact)
        assert count >= 6 * chunks or all(step.grid[0] == count for step in compact)
        results.append(both_frontends(OP, logits, seeds, positions, temperature, top_k=top_k, top_p=top_p,
                                      min_p=min_p))
    np.testing.assert_array_equal(results[1], results[0])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_filtered_mixed_first_pivots_only_where_the_search_steps_have_room(dtype):
    """A search's first launch with mixed pivots narrows its bracket only ways / 2-fold in keys: the
    plan takes them only where that step and search_steps - 1 ways-fold ones still cover every key of
    the dtype (the large-batch tiling's 8 ways), and never at small batches (16 ways, and the
    one-launch plan)."""
    from jsample.kernels import filtered

    bits = 32 - filtered.KEY_SHIFTS[dtype]
    for batch, many_rows in ((256, True), (1, False)):
        config = filtered.filtered_launch_config(batch, 151936, 151936, dtype, False)
        room = (config.ways // 2) * config.ways ** (config.search_steps - 1) >= 2**bits
        assert config.mixed_first_pivots == (many_rows and room)
        assert config.ways ** config.search_steps >= 2**bits
    assert filtered.filtered_launch_config(256, 151936, 151936, dtype, False).mixed_first_pivots
    # the plans with top-k's candidate lists take 16 ways at large batches: fewer, wider search steps
    listed = filtered._with_ways(filtered.filtered_launch_config(256, 151936, 151936, dtype, False),
                                 filtered.LISTED_WAYS)
    room = (listed.ways // 2) * listed.ways ** (listed.search_steps - 1) >= 2**bits
    assert listed.ways ** listed.search_steps >= 2**bits > listed.ways ** (listed.search_steps - 1)
    assert listed.mixed_first_pivots == room == (dtype == "float16")


def test_filtered_row_alone_equals_row_in_a_batch():
    rng = np.random.default_rng(9)
    logits, seeds, positions, temperature = _problem(rng, BATCH, VOCAB, "bfloat16")
    top_k, top_p, min_p = _filters(rng, BATCH, VOCAB)
    whole = both_frontends(OP, logits, seeds, positions, temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    order = rng.permutation(BATCH)
    permuted = both_frontends(OP, logits[order], seeds[order], positions[order], temperature[order],
                              top_k=top_k[order], top_p=top_p[order], min_p=min_p[order])
    np.testing.assert_array_equal(permuted, whole[order])
    for b in (0, 3):
        alone = both_frontends(OP, logits[b:b + 1], seeds[b:b + 1], positions[b:b + 1], temperature[b:b + 1],
                               top_k=top_k[b:b + 1], top_p=top_p[b:b + 1], min_p=min_p[b:b + 1])
        assert alone[0] == whole[b]


@pytest.mark.slow
def test_filtered_distribution_is_the_renormalised_kept_distribution(frontend):
    """Deterministic chi-square: the draws follow softmax(x / T) restricted to the kept tokens and
    renormalised, and never leave the kept set."""
    row = np.linspace(2.0, -4.0, 24).astype(ml_dtypes.bfloat16)  # bf16: half the search launches of f32
    draws = {"cpu": 400, "gpu": 100_000}[SIZE]
    temperature = 0.8
    probs = softmax(row.astype(np.float64) / temperature)
    cases = {"top_k": ({"top_k": 6}, np.arange(24) < 6),
             "top_p": ({"top_p": 0.8}, np.cumsum(probs) - probs < 0.8),
             "min_p": ({"min_p": 0.05}, probs >= 0.05 * probs.max())}
    for filters, kept in cases.values():
        tokens = frontend(OP, np.broadcast_to(row, (draws, 24)).copy(), np.arange(draws, dtype=np.int64),
                          np.full(draws, 5, np.int64), np.float32(temperature), **filters)
        assert kept[tokens].all()
        assert kept[: kept.sum()].all()  # a prefix (the row decreases): token ids index probs[kept]
        assert chi_square_pvalue(tokens, probs[kept]) > P_VALUE


@pytest.mark.parametrize("plan", ["default", "launches"])
def test_filtered_no_finite_logit_gives_minus_one(plan, force_target):
    if plan == "launches":
        force_target(large_programs=False, resident_programs=0)
    logits = np.full((2, 300), -np.inf, np.float32)
    logits[1, 5] = np.nan
    tokens = both_frontends(OP, logits, np.int64([1, 2]), np.int64([0, 0]), 1.0, top_k=3, top_p=0.5, min_p=0.1)
    np.testing.assert_array_equal(tokens, [-1, -1])


def test_filtered_top_k_at_or_above_the_finite_count_keeps_every_finite_logit(force_target):
    """Rows with few finite logits (the rest -inf, +inf or NaN) and top-k just below, at and above their
    finite count: the launches' plan (which searches without the count) and the default plan give
    the reference's tokens, with top-p and min-p after top-k."""
    rng = np.random.default_rng(31)
    batch, vocab = 24, 1024
    logits = (rng.standard_normal((batch, vocab)) * 2).astype(np.float32)
    finite = rng.integers(1, 9, batch)
    for b in range(batch):
        hidden = rng.permutation(vocab)[finite[b]:]
        logits[b, hidden] = rng.choice(np.float32([-np.inf, -np.inf, np.nan]), hidden.size)
    logits[0, 7] = logits[0, 9] = 1.5  # ties among the finite logits
    seeds, positions = make_requests(rng, batch)
    temperature = np.full(batch, 0.9, np.float32)
    top_k = np.maximum(finite + rng.integers(-1, 2, batch), 1).astype(np.int32)
    top_p = rng.choice(np.float32([0.6, 1.0]), batch)
    min_p = rng.choice(np.float32([0.0, 0.2]), batch)
    expected = both_frontends(OP, logits, seeds, positions, temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    assert_tokens_match_reference(expected, logits, seeds, positions, temperature, top_k, top_p, min_p)
    assert (top_k < finite).any() and (top_k == finite).any() and (top_k > finite).any()
    force_target(large_programs=False, resident_programs=0)  # the launches' plan
    tokens = both_frontends(OP, logits, seeds, positions, temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    np.testing.assert_array_equal(tokens, expected)


def test_filtered_launches_plan_keeps_the_lowest_finite_logits_under_a_top_k_of_every_token(force_target):
    """The launches' plan searches top-k without the finite count, from below every finite key, so a
    top-k at least the count keeps the lowest finite logit too. Rows [0, -1.5, -5, -inf...] with
    top_p = 0.97 keep {0, -1.5}; the seeds are those whose unfiltered winner is -5 (found with the
    NumPy reference), so the row is searched, and the token is 0 or -1.5 as the reference says."""
    vocab = 16
    row = np.full(vocab, -np.inf, np.float32)
    row[[3, 8, 12]] = [0.0, -1.5, -5.0]
    rng = np.random.default_rng(41)
    candidates = 20000
    seeds, positions = make_requests(rng, candidates)
    scores = gumbel_scores_reference(np.tile(row, (candidates, 1)), seeds, positions, np.ones(candidates, np.float32))
    chosen = np.flatnonzero(scores.argmax(axis=1) == 12)[:24]
    batch = len(chosen)
    assert batch >= 16, batch
    logits = np.tile(row, (batch, 1))
    temperature = np.ones(batch, np.float32)
    top_k = np.full(batch, vocab, np.int32)
    top_p = np.full(batch, 0.97, np.float32)
    force_target(large_programs=False, resident_programs=0)  # the launches' plan
    tokens = both_frontends(OP, logits, seeds[chosen], positions[chosen], temperature, top_k=top_k, top_p=top_p)
    assert_tokens_match_reference(tokens, logits, seeds[chosen], positions[chosen], temperature, top_k, top_p,
                                  np.zeros(batch, np.float32))
    assert set(tokens) == {3, 8}, tokens  # the kept set's two tokens, and the lower one is kept


BAD_INPUTS = [
    ("negative top_k", {"top_k": -1}, ValueError,
     "top_k_top_p_sample: top_k must be an int in [0, 2**31) (0 keeps every token), got -1."),
    ("float top_k", {"top_k": 2.5}, TypeError,
     "top_k_top_p_sample: top_k must be None, an int or an integer array [B] or (), got float."),
    ("top_p zero", {"top_p": 0.0}, ValueError,
     "top_k_top_p_sample: top_p must be in (0, 1] (1 keeps every token), got 0.0."),
    ("top_p above one", {"top_p": 1.5}, ValueError,
     "top_k_top_p_sample: top_p must be in (0, 1] (1 keeps every token), got 1.5."),
    ("min_p negative", {"min_p": -0.1}, ValueError,
     "top_k_top_p_sample: min_p must be in [0, 1] (0 keeps every token), got -0.1."),
    ("top_p string", {"top_p": "0.9"}, TypeError,
     "top_k_top_p_sample: top_p must be None, a number or a float array [B] or (), got str."),
    ("top_k float array", {"top_k": np.zeros(3, np.float32)}, TypeError,
     "top_k_top_p_sample: top_k must have dtype int32, int64, int16, int8, uint8, uint16, uint32 or uint64, got "
     "float32. It is read as int64."),
    ("min_p int array", {"min_p": np.zeros(3, np.int32)}, TypeError,
     "top_k_top_p_sample: min_p must have dtype float32, float64, bfloat16 or float16, got int32. It is read as "
     "float32."),
    ("top_p huge int", {"top_p": 10**400}, ValueError,
     f"top_k_top_p_sample: top_p must be in (0, 1] (1 keeps every token), got {10**400!r}."),
    ("min_p batch", {"min_p": np.zeros(2, np.float32)}, ValueError,
     "top_k_top_p_sample: min_p must be a number or an array of shape [B] with B = 3 (the batch size of the logits) "
     "or (), got shape (2,)."),
    ("logits 1-D", {"logits": np.zeros(5, np.float32)}, ValueError,
     "top_k_top_p_sample: logits must be a 2-D array [B, V], got shape (5,)."),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_filtered_errors_same_text_in_both_frontends(case):
    import jax.numpy as jnp
    import torch

    import jsample
    import torch_backend

    _, overrides, error, message = case
    args = {"logits": np.zeros((3, 5), np.float32), "seeds": np.zeros(3, np.int64),
            "positions": np.zeros(3, np.int64), "temperature": 1.0}
    filters = {}
    for key, value in overrides.items():
        (args if key in args else filters)[key] = value
    for module, wrap in ((torch_backend, torch.from_numpy), (jsample, jnp.asarray)):
        def convert(v):
            return wrap(v) if isinstance(v, np.ndarray) else v

        with pytest.raises(error) as info:
            module.top_k_top_p_sample(*(convert(a) for a in args.values()),
                                      **{k: convert(v) for k, v in filters.items()})
        assert str(info.value) == message


def test_filtered_reference_top_p_follows_the_sorted_cumulative_rule():
    """The reference itself against the textbook rule (sort, cumulative sum) on tie-free rows."""
    rng = np.random.default_rng(10)
    for _ in range(20):
        row = rng.standard_normal(200).astype(np.float32) * 2
        p = float(rng.uniform(0.05, 0.95))
        probs = softmax(np.float64(row))
        order = np.argsort(-row)
        before = np.cumsum(probs[order]) - probs[order]
        expected = np.zeros(200, bool)
        expected[order[before < p]] = True
        keep = kept_tokens(row, np.float32(1.0), top_p=p)
        margin = np.abs(before - p).min()
        if margin > 1e-6:
            np.testing.assert_array_equal(keep, expected)


@pytest.mark.parametrize("filters", [dict(top_k=3), dict(top_p=0.5), dict(min_p=0.3), dict(top_k=4, top_p=0.6),
                                     dict(top_k=5, top_p=0.5, min_p=0.1)], ids=lambda f: ",".join(f))
def test_filtered_unfiltered_winner_shortcut_on_both_sides_of_the_boundary(filters, force_target):
    """Both plans return the unfiltered Gumbel-max winner where the filters surely keep it and search
    otherwise (from the bracket the winner's sums give): over many seeds, both cases occur, and every
    token equals the reference, in the one-launch plan and in the launches' plan."""
    rng = np.random.default_rng(11)
    batch, vocab = 48, 64
    logits = (rng.standard_normal((batch, vocab)) * 1.5).astype(np.float32)
    logits[:, 7] = logits[:, 9]  # ties at the boundary in some rows
    seeds, positions = make_requests(rng, batch)
    temperature = np.float32(rng.choice([0.7, 1.0, 1.5], size=batch))
    shortcut = both_frontends(OP, logits, seeds, positions, temperature, **filters)
    winners = both_frontends("gumbel_sample", logits, seeds, positions, temperature)
    kept = np.array([kept_tokens(logits[b], temperature[b], filters.get("top_k"), filters.get("top_p"),
                                 filters.get("min_p"))[winners[b]] for b in range(batch)])
    assert 5 <= kept.sum() <= batch - 5, kept.sum()  # both sides of the boundary
    np.testing.assert_array_equal(shortcut[kept], winners[kept])
    every_row = dict(top_k=np.zeros(batch, np.int32), top_p=np.ones(batch, np.float32),  # absent: keeps all
                     min_p=np.zeros(batch, np.float32))
    every_row.update({name: np.full(batch, value, every_row[name].dtype) for name, value in filters.items()})
    assert_tokens_match_reference(shortcut, logits, seeds, positions, temperature, **every_row)
    force_target(large_programs=False, resident_programs=0)  # the launches' plan
    np.testing.assert_array_equal(both_frontends(OP, logits, seeds, positions, temperature, **filters), shortcut)


@pytest.mark.parametrize("fp64", [False, True], ids=["fp32", "fp64"])
def test_filtered_launches_plan_reuses_unfiltered_block_partials_exactly(fp64, force_target, monkeypatch):
    """The launches' plan samples a row whose unfiltered winner the filters drop from the unfiltered
    block partials where it can: a block whose best column is kept keeps its partial, a block that
    keeps no column has no candidate, and only the other blocks draw their noise again. Rows built so
    that all three kinds of block occur (each block's best is gumbel_sample of the row restricted to
    the block: the same noise) give the reference's tokens in both frontends."""
    from jsample.kernels import filtered

    set_filtered(monkeypatch, "MANY_ROWS_ELEMENTS", 0)  # the large-batch tiling: blocks of 512 columns
    # a planning function of its own: neither its cache nor the executors' memo holds an older plan
    monkeypatch.setattr(kernels, "plan_top_k_top_p_sample",
                        functools.partial(filtered.plan_top_k_top_p_sample.__wrapped__))
    force_target(large_programs=False, resident_programs=0)  # the launches' plan
    rng = np.random.default_rng(12)
    batch, vocab, block = 24, 2048, 512
    logits = (rng.standard_normal((batch, vocab)) * 0.3).astype(np.float32)
    logits[:, 5:9] += 4.0  # top-k = 4 keeps these four columns of block 0; the rest of the row outweighs them
    seeds, positions = make_requests(rng, batch)
    temperature = np.full(batch, 1.0, np.float32)
    top_k = np.full(batch, 4, np.int32)
    tokens = both_frontends(OP, logits, seeds, positions, temperature, top_k=top_k, fp64=fp64)
    assert_tokens_match_reference(tokens, logits, seeds, positions, temperature, top_k, np.ones(batch, np.float32),
                                  np.zeros(batch, np.float32), fp64=fp64)
    winners = both_frontends("gumbel_sample", logits, seeds, positions, temperature, fp64=fp64)
    dropped = ~np.isin(winners, np.arange(5, 9))
    reused = redrawn = 0
    for b in np.flatnonzero(dropped):
        only_block_0 = np.full_like(logits[b:b + 1], -np.inf)
        only_block_0[0, :block] = logits[b, :block]
        best = both_frontends("gumbel_sample", only_block_0, seeds[b:b + 1], positions[b:b + 1],
                              temperature[b:b + 1], fp64=fp64)[0]
        reused += 5 <= best < 9
        redrawn += not 5 <= best < 9
    # blocks 1-3 of every such row keep no column
    assert dropped.sum() >= 4 and reused >= 1 and redrawn >= 1, (dropped.sum(), reused, redrawn)


def test_filtered_launches_plan_top_k_bound_from_block_maxima(force_target, monkeypatch):
    """The launches' plan starts top-k's search at the k-th largest of the blocks' largest keys (a lower
    bound of the threshold), drops a winner below it without the winner's sums, and takes a winner at
    the row's largest logit under every filter. Rows where the bound is the threshold (one spike a
    block, tied block maxima), lies below it (several spikes in one block), or is the smallest key
    (k above the number of blocks), with top-p and min-p after top-k, give the reference's tokens in
    both frontends, as the one-program-a-row plan does."""
    from jsample.kernels import filtered

    rng = np.random.default_rng(21)
    batch, vocab, block = 40, 4096, 512
    logits = (rng.standard_normal((batch, vocab)) * 0.5).astype(np.float32)
    blocks = vocab // block
    spikes = rng.integers(0, block, (batch, blocks)) + np.arange(blocks) * block
    for b in range(batch):
        kind = b % 5
        if kind == 0:  # one spike a block, close and distinct: the bound is the threshold
            logits[b, spikes[b]] = 4.0 + 0.05 * rng.permutation(blocks)
        elif kind == 1:  # one spike a block, all tied: the bound is the threshold, with ties
            logits[b, spikes[b]] = 4.0
        elif kind == 2:  # distinct block maxima, three more spikes in block 0: the threshold lies above
            logits[b, spikes[b]] = 3.0 + 0.25 * np.arange(blocks)
            logits[b, 1:4] = 6.0
        elif kind == 3:  # a peak: the winner is the largest logit
            logits[b, spikes[b, 0]] = 30.0
        else:  # ties at values a few apart
            logits[b] = np.round(logits[b] * 4)
    seeds, positions = make_requests(rng, batch)
    temperature = np.full(batch, 1.0, np.float32)
    top_k = rng.choice(np.int32([1, 2, 3, 5, 8, 12]), size=batch).astype(np.int32)
    top_p = rng.choice(np.float32([0.5, 0.9, 1.0]), size=batch).astype(np.float32)
    min_p = rng.choice(np.float32([0.0, 0.01]), size=batch).astype(np.float32)
    block_max = logits.reshape(batch, blocks, block).max(axis=2)
    bound = np.array([np.sort(block_max[b])[::-1][top_k[b] - 1] if top_k[b] <= blocks else -np.inf
                      for b in range(batch)])
    winners = both_frontends("gumbel_sample", logits, seeds, positions, temperature)
    below = logits[np.arange(batch), winners] < bound
    assert 10 <= below.sum() <= batch - 10, below.sum()  # winners the bound drops, and winners it does not
    assert (top_k > blocks).any() and (winners == logits.argmax(axis=1)).sum() >= 4
    expected = both_frontends(OP, logits, seeds, positions, temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    assert_tokens_match_reference(expected, logits, seeds, positions, temperature, top_k, top_p, min_p)
    set_filtered(monkeypatch, "MANY_ROWS_ELEMENTS", 0)  # the large-batch tiling: blocks of 512 columns
    monkeypatch.setattr(kernels, "plan_top_k_top_p_sample",
                        functools.partial(filtered.plan_top_k_top_p_sample.__wrapped__))
    force_target(large_programs=False, resident_programs=0)  # the launches' plan
    plan = kernels.plan_top_k_top_p_sample(kernels.ArgSpec.contiguous(logits.shape, "float32"),
                                           kernels.ArgSpec.contiguous(seeds.shape, "int64"),
                                           kernels.Target(interpreter=True), has_top_k=True, has_top_p=True,
                                           has_min_p=True, fp64=False)
    row = next(step for step in plan.launches if step.kernel is filtered.filter_row_kernel)
    assert dict(row.constexprs)["REDUCE_BLOCK"] == blocks
    tokens = both_frontends(OP, logits, seeds, positions, temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    np.testing.assert_array_equal(tokens, expected)


def test_filtered_launches_plan_winner_sums_skip_tiles_below_the_winner_only_under_an_active_top_k(
        force_target, monkeypatch):
    """The launches' plan's winner sums with top-k and top-p skip the tiles whose largest key is below
    the winner's where top-k is active (its decision reads no mass below the winner), and read every
    tile where it is not (top-p then needs all the mass). Rows of both kinds, whose winners top-p keeps
    and drops, with the mass spread over every tile, give the reference's tokens in both frontends."""
    from jsample.kernels import filtered

    set_filtered(monkeypatch, "MANY_ROWS_ELEMENTS", 0)  # the large-batch tiling: blocks of 512 columns
    monkeypatch.setattr(kernels, "plan_top_k_top_p_sample",
                        functools.partial(filtered.plan_top_k_top_p_sample.__wrapped__))
    force_target(large_programs=False, resident_programs=0)  # the launches' plan
    rng = np.random.default_rng(23)
    batch, vocab = 64, 2048
    # tiles of different spreads, in a random order: some tiles' largest logits lie just above the winner's
    spreads = np.array([rng.permutation([0.3, 0.5, 0.7, 0.9]) for _ in range(batch)]).repeat(vocab // 4, axis=1)
    logits = (rng.standard_normal((batch, vocab)) * spreads).astype(np.float32)
    seeds, positions = make_requests(rng, batch)
    temperature = np.full(batch, 1.0, np.float32)
    top_k = rng.choice(np.int32([0, 600, 1500]), size=batch).astype(np.int32)
    top_p = rng.choice(np.float32([0.3, 0.6]), size=batch).astype(np.float32)
    tokens = both_frontends(OP, logits, seeds, positions, temperature, top_k=top_k, top_p=top_p)
    assert_tokens_match_reference(tokens, logits, seeds, positions, temperature, top_k, top_p,
                                  np.zeros(batch, np.float32))
    # the winner's sums decide rows of every kind: top-k active or not, the winner kept by top-p or not
    winners = both_frontends("gumbel_sample", logits, seeds, positions, temperature)
    kinds = set()
    for b in range(batch):
        by_top_k = kept_tokens(logits[b], temperature[b], int(top_k[b]), None, None)
        if by_top_k[winners[b]] and winners[b] != logits[b].argmax():
            kept = kept_tokens(logits[b], temperature[b], int(top_k[b]), top_p[b], None)[winners[b]]
            kinds.add((bool(top_k[b] > 0), bool(kept)))
    assert kinds == {(True, True), (True, False), (False, True), (False, False)}, kinds


@pytest.mark.parametrize("plan_variant", ["launches", "one launch"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_filtered_top_k_lists_give_the_searches_thresholds(dtype, plan_variant, force_target, monkeypatch):
    """Both plans take top-k's threshold, and top-p's after it, from a row's candidate list (its keys at
    or above the block maxima's bound) where k <= TOP_K_LIST and they fit, and search otherwise. Lists
    of 16 (rows that fit, in a sort of 4 slots or of 16, rows that overflow, k above the length), of
    1024, and none at all (searches only) give the same tokens in both frontends, which are the
    reference's: ties at the threshold, fewer finite logits than k, top-p of 0, NaN and 1 after top-k,
    min-p, greedy rows. (The one-launch plan runs here as the interpreter's: a program a row, in
    blocks of 512 columns as the launches' plan's; its lists hold SHORT_TOP_K_LIST slots, searched, not
    sorted, and longer ones leave the row to the searches.)"""
    from conftest import run_torch

    from jsample.kernels import filtered, gumbel

    if plan_variant == "launches":
        set_filtered(monkeypatch, "MANY_ROWS_ELEMENTS", 0)  # the large-batch tiling: blocks of 512 columns
        force_target(large_programs=False, resident_programs=0)
    else:
        monkeypatch.setattr(gumbel, "_BLOCK_V_MAX_LARGE_PROGRAMS", 512)
    rng = np.random.default_rng(31)
    batch, vocab, block = 24, 8192, 512
    logits = (rng.standard_normal((batch, vocab)) * 2.0).astype(np.float32)
    logits[0:4] = np.round(logits[0:4])  # many ties, at the threshold too
    logits[4, :] = 1.0  # all tied: every key is a candidate
    logits[5, :] = -np.inf
    logits[5, [3, 700, 1500]] = [0.5, 2.0, 1.0]  # three finite logits (k above that: no list)
    logits[6:10, 100:140] += 6.0  # one block holds the top: the bound lies far below the threshold
    seeds, positions = make_requests(rng, batch)
    temperature = rng.choice(np.float32([0.7, 1.0, 1.3]), size=batch)
    temperature[10] = 0.0  # greedy
    top_k = rng.choice(np.int32([1, 3, 8, 12, 40]), size=batch).astype(np.int32)
    top_k[4:6] = 10
    top_p = rng.choice(np.float32([0.3, 0.9, 1.0, 0.0, np.nan]), size=batch).astype(np.float32)
    min_p = rng.choice(np.float32([0.0, 0.0, 0.05]), size=batch).astype(np.float32)
    logits = logits.astype(getattr(ml_dtypes, dtype, dtype))

    # which rows lists of 16 cover: k <= 16 blocks (the bound: the k-th largest block maximum), and
    # candidates (keys >= it) that fit, sorted in 4 slots (SHORT_TOP_K_LIST) or in 16
    values = logits.astype(np.float32)
    block_max = np.where(np.isfinite(values), values, -np.inf).reshape(batch, -1, block).max(axis=2)
    bound = np.sort(block_max, axis=1)[:, ::-1][np.arange(batch), np.minimum(top_k, 16) - 1]
    candidates = (np.isfinite(values) & (values >= bound[:, None])).sum(axis=1)
    listed = (top_k <= 16) & np.isfinite(bound)
    assert (listed & (candidates <= 4)).sum() >= 2 and (listed & (candidates > 4) & (candidates <= 16)).sum() >= 3
    assert (listed & (candidates > 16)).sum() >= 3 and (~listed).sum() >= 3, candidates

    results = []
    for length in (16, 1024, 0):
        set_filtered(monkeypatch, "TOP_K_LIST", length)
        set_filtered(monkeypatch, "SHORT_TOP_K_LIST", 4 if length == 16 else 128)
        # a planning function of its own: neither its cache nor the executors' memo holds an older plan
        monkeypatch.setattr(kernels, "plan_top_k_top_p_sample",
                            functools.partial(filtered.plan_top_k_top_p_sample.__wrapped__))
        target = kernels.Target(interpreter=True, large_programs=plan_variant == "one launch")
        plan = kernels.plan_top_k_top_p_sample(kernels.ArgSpec.contiguous(logits.shape, dtype),
                                               kernels.ArgSpec.contiguous(seeds.shape, "int64"), target,
                                               has_top_k=True, has_top_p=True, has_min_p=True, fp64=False)
        assert plan.variant == ("one launch" if plan_variant == "one launch" else f"{len(plan.launches)} launches")
        lists = [dict(step.constexprs) for step in plan.launches if step.kernel in (
            filtered.filter_decide_kernel, filtered.filtered_one_launch_kernel)]
        short = min(length, 4 if length == 16 else 128)
        if plan_variant == "one launch":  # its lists: the short ones, decided by searches (no sort)
            assert [d["LIST"] for d in lists] == [short]
        else:
            assert [(d["SHORT_LIST"], d.get("LIST", length)) for d in lists] == ([(short, length)] if length
                                                                                 else [(1, 0)])
        if plan_variant == "one launch":
            assert dict(plan.launches[0].constexprs)["BLOCK_V"] == block
        run = both_frontends if length == 16 else run_torch
        results.append(run(OP, logits, seeds, positions, temperature, top_k=top_k, top_p=top_p, min_p=min_p))
    for tokens in results[1:]:
        np.testing.assert_array_equal(tokens, results[0])
    assert_tokens_match_reference(results[0], logits, seeds, positions, temperature, top_k, top_p, min_p)


@jit
def _largest_reaching_probe(keys_ptr, weights_ptr, need_ptr, bounds_ptr, out_ptr, N: tl.constexpr,
                            WAYS: tl.constexpr):
    """_largest_reaching of row i's N keys and weights, need and (lo, hi), into out[i]."""
    i = tl.program_id(0)
    offsets = i * N + tl.arange(0, N)
    found = _largest_reaching(tl.load(keys_ptr + offsets), tl.load(weights_ptr + offsets), tl.load(need_ptr + i),
                              tl.load(bounds_ptr + 2 * i), tl.load(bounds_ptr + 2 * i + 1), WAYS)
    tl.store(out_ptr + i, found)


@pytest.mark.skipif(not kernels.INTERPRETER, reason="runs its probe kernel on the host (the interpreter)")
@pytest.mark.parametrize("n", [16, 128, 256])
def test_largest_reaching_equals_the_brute_force(n):
    """filtered.search._largest_reaching (the lists' thresholds, the k-th largest block maximum, the vocab-parallel
    merge), at the pivots the callers take (2048 // n): the largest t in [lo, hi] whose keys at or above it weigh
    at least `need` (lo where none does), against a brute force over the keys and hi: ties, zero weights, masked
    keys, integer and float needs (<= 0, above the total), lo above the answer, hi above every key."""
    from jsample.kernels.host import launch_on_host

    rng = np.random.default_rng(n)
    rows = 64
    keys = rng.integers(-50, 50, (rows, n)).astype(np.int32)
    keys[::3] = rng.integers(-(2**31) + 1, 2**31 - 1, (len(keys[::3]), n))  # 32-bit keys
    keys[1, :] = 7  # all tied
    weights = rng.integers(0, 4, (rows, n)).astype(np.int64)
    weights[2, n // 2:] = 0
    keys[2, n // 2:] = -(2**31)  # masked, as the lists pad
    needs = rng.uniform(-2, 1.1, rows) * weights.sum(1)
    needs[::4] = np.floor(needs[::4])
    needs[5], needs[6] = 0.0, weights[6].sum() + 1.0
    bounds = np.empty((rows, 2), np.int64)
    for i in range(rows):
        low, high = int(keys[i].min()), int(keys[i].max())
        bounds[i] = (low, high)
        if i % 5 == 3:
            bounds[i, 0] = (low + high) // 2  # lo above some answers
        if i % 7 == 4:
            bounds[i, 1] = min(high + 3, 2**31 - 1)  # hi above every key
    out = np.zeros(rows, np.int64)
    launch_on_host(_largest_reaching_probe, (rows,), keys, weights, needs, bounds.reshape(-1), out, N=n,
                   WAYS=max(2048 // n, 2))
    for i in range(rows):
        lo, hi = bounds[i]
        reach = lambda t: weights[i][keys[i].astype(np.int64) >= t].sum()  # noqa: E731
        candidates = [int(hi)] + [int(k) for k in keys[i] if lo <= k <= hi]
        want = max([t for t in candidates if reach(t) >= needs[i]], default=int(lo))
        assert out[i] == max(want, lo), (n, i, out[i], want, lo, hi, needs[i])
