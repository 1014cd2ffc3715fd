"""Hostile inputs, every op, both frontends: strided and expanded views, temperatures below 1e-5,
scaled logits that overflow, out-of-range filter values, huge vocabularies, jit with Python numbers
under x64 on and off, 64-bit seeds as words, subnormal logits on the JAX CPU path.

The rules are docs/STREAM.md's ("Clarifications of version 1"); the NumPy reference implements them
independently, so each test compares both frontends with it, and with each other bit for bit.
"""

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import SIZE, both_frontends, make_requests, run_jax, run_torch, to_torch

import jsample
import torch_backend
from jsample.reference import (
    gumbel_sample_reference,
    rejection_sample_reference,
    synthetic_rejection_sample_reference,
    top_k_top_p_sample_reference,
)
from jsample.reference.gumbel import greedy_rows

BATCH, VOCAB = {"cpu": (6, 700), "gpu": (64, 151936)}[SIZE]


def _logits(rng, batch=BATCH, vocab=VOCAB, rows=None):
    shape = (batch, vocab) if rows is None else (batch, rows, vocab)
    return (rng.standard_normal(shape) * 3).astype(np.float32)


def _requests(rng, batch=BATCH):
    seeds, positions = make_requests(rng, batch)
    return seeds, positions


# -- strides: every tensor argument of every op, as a stride-0, a strided and an offset view ----------

def _views(array: np.ndarray):
    """(name, torch view whose values equal `array`) for a strided and a storage-offset view, and a
    stride-0 (expanded) view when all of `array`'s leading entries are equal."""
    tensor = to_torch(np.ascontiguousarray(array))
    wide = torch.empty((tensor.shape[0] * 2,) + tuple(tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    wide[::2] = tensor
    yield "strided", wide[::2]
    flat = torch.empty(tensor.numel() + 3, dtype=tensor.dtype, device=tensor.device)
    flat[3:] = tensor.reshape(-1)
    yield "offset", flat[3:].view(tensor.shape)
    if tensor.shape[0] and (tensor == tensor[:1]).all():
        yield "stride 0", tensor[:1].expand(tensor.shape)
    if tensor.dim() >= 2:  # columns apart too
        wider = torch.empty(tuple(tensor.shape[:-1]) + (tensor.shape[-1] * 2,), dtype=tensor.dtype,
                            device=tensor.device)
        wider[..., ::2] = tensor
        yield "column stride 2", wider[..., ::2]


def _op_cases(rng):
    """(op, positional args, keyword args, names of the positional arrays) with per-request vectors
    that are constant (so that a stride-0 view exists) and ones that are not."""
    batch, vocab, k = 4, 300, 2
    logits = _logits(rng, batch, vocab)
    same_seeds = np.full(batch, 2**40 + 3, np.int64)
    positions = np.arange(batch, dtype=np.int64) * 5 + 2**33
    temperature = np.full(batch, 0.8, np.float32)
    yield "gumbel_sample", (logits, same_seeds, positions, temperature), {}
    yield "gumbel_sample", (logits, jsample.seed_words(same_seeds), positions, temperature), {}
    filters = dict(top_k=np.full(batch, 20, np.int64), top_p=np.full(batch, 0.8, np.float32),
                   min_p=np.full(batch, 0.01, np.float32))
    yield "top_k_top_p_sample", (logits, same_seeds, positions, temperature), filters
    target = _logits(rng, batch, vocab, rows=k + 1)
    draft_logits = (target[:, :k] + rng.standard_normal((batch, k, vocab))).astype(np.float32)
    drafts = target[:, :k].argmax(-1).astype(np.int32)
    drafts[1] = 7
    num_drafts = np.full(batch, k, np.int32)
    yield "rejection_sample", (target, drafts, num_drafts, same_seeds, positions, temperature), \
        dict(draft_logits=draft_logits)
    rates = np.full((batch, k), 0.6, np.float32)
    yield "synthetic_rejection_sample", (target.argmax(-1).astype(np.int32), drafts, num_drafts, same_seeds,
                                         positions, rates), {}


def test_every_tensor_argument_honours_its_strides():
    """Issue: expanded seeds read past their one-element allocation; strided ones ignored the stride."""
    rng = np.random.default_rng(11)
    checked = 0
    for op, args, kwargs in _op_cases(rng):
        expected = run_torch(op, *args, **kwargs)
        from_jax = run_jax(op, *args, **kwargs)
        for e, j in zip(expected if isinstance(expected, tuple) else (expected,),
                        from_jax if isinstance(from_jax, tuple) else (from_jax,)):
            np.testing.assert_array_equal(e, j, err_msg=f"{op}: torch and JAX")
        named = [(i, a) for i, a in enumerate(args)] + [(name, v) for name, v in kwargs.items()]
        for where, array in named:
            for view_name, view in _views(array):
                new_args = [to_torch(a) for a in args]
                new_kwargs = {name: to_torch(v) for name, v in kwargs.items()}
                if isinstance(where, int):
                    new_args[where] = view
                else:
                    new_kwargs[where] = view
                out = getattr(torch_backend, op)(*new_args, **new_kwargs)
                for e, o in zip(expected if isinstance(expected, tuple) else (expected,),
                                out if isinstance(out, tuple) else (out,)):
                    np.testing.assert_array_equal(e, o.cpu().numpy(), err_msg=f"{op} argument {where}: {view_name}")
                checked += 1
    assert checked >= 40, checked


# -- temperatures below 1e-5 are greedy --------------------------------------------------------------

@pytest.mark.parametrize("op", ["gumbel_sample", "top_k_top_p_sample"])
def test_temperatures_below_1e_5_are_greedy(op):
    rng = np.random.default_rng(12)
    logits = _logits(rng, 6)
    seeds, positions = _requests(rng, 6)
    temperature = np.float32([9.99e-6, 1e-30, 1e-45, -1.0, -np.inf, np.nan])
    kwargs = dict(top_k=3, top_p=0.5) if op == "top_k_top_p_sample" else {}
    tokens = both_frontends(op, logits, seeds, positions, temperature, **kwargs)
    np.testing.assert_array_equal(tokens, logits.argmax(axis=1))
    for python_number in (1e-45, 5e-6):  # subnormal and small Python numbers: accepted, greedy
        tokens = both_frontends(op, logits, seeds, positions, python_number, **kwargs)
        np.testing.assert_array_equal(tokens, logits.argmax(axis=1))
    sampled = both_frontends(op, logits, seeds, positions, np.float32(1e-5), **kwargs)  # 1e-5 itself samples
    reference = (gumbel_sample_reference(logits, seeds, positions, np.float32(1e-5)) if op == "gumbel_sample" else
                 top_k_top_p_sample_reference(logits, seeds, positions, np.float32(1e-5), **kwargs))
    np.testing.assert_array_equal(sampled, reference)


def test_rejection_temperatures_below_1e_5_are_greedy():
    rng = np.random.default_rng(13)
    k = 3
    target = _logits(rng, 6, rows=k + 1)
    drafts = target[:, :k].argmax(-1).astype(np.int32)
    drafts[::2, 1] = 0  # rejected at row 1 where the argmax is not 0
    num_drafts = np.full(6, k, np.int32)
    seeds, positions = _requests(rng, 6)
    temperature = np.float32([1e-6, -2.0, 1e-40, 0.0, 9e-6, np.nan])
    for kwargs in (dict(), dict(draft_logits=_logits(rng, 6, rows=k)), dict(method="strict")):
        out = both_frontends("rejection_sample", target, drafts, num_drafts, seeds, positions, temperature, **kwargs)
        greedy = both_frontends("rejection_sample", target, drafts, num_drafts, seeds, positions, 0.0, **kwargs)
        for o, g in zip(out, greedy):
            np.testing.assert_array_equal(o, g)


# -- rows whose scaled logits overflow are greedy -------------------------------------------------------

def _overflowing(rng):
    logits = _logits(rng)
    seeds, positions = _requests(rng)
    temperature = np.full(BATCH, 0.5, np.float32)
    logits[0, 5] = 3e38  # x / T = 6e38: the example (the lowest such column used to win)
    logits[0, 9] = 2e38  # overflows too, and is not the largest
    logits[1, VOCAB - 1] = -3e38  # negative overflow: greedy too (STREAM.md: "some finite x / T overflows")
    logits[2, 17] = 1.7e38  # x / T = 3.4e38: just inside the range, not greedy
    temperature[3] = 1e-5
    logits[3, 40] = 1e34  # 1e39: overflows at the smallest sampling temperature
    return logits, seeds, positions, temperature


def test_gumbel_rows_whose_scaled_logits_overflow_are_greedy():
    rng = np.random.default_rng(14)
    logits, seeds, positions, temperature = _overflowing(rng)
    assert list(greedy_rows(logits, temperature)[:4]) == [True, True, False, True]
    for fp64 in (False, True):
        tokens = both_frontends("gumbel_sample", logits, seeds, positions, temperature, fp64=fp64)
        np.testing.assert_array_equal(tokens, gumbel_sample_reference(logits, seeds, positions, temperature, fp64=fp64))
        assert tokens[0] == 5 and tokens[1] == logits[1].argmax() and tokens[3] == 40
        # only the rows the contract names change: the others are the tokens of the unchanged rows
        plain = logits.copy()
        plain[[0, 1, 3]] = 0.0
        untouched = both_frontends("gumbel_sample", plain, seeds, positions, temperature, fp64=fp64)
        np.testing.assert_array_equal(tokens[4:], untouched[4:])


def test_filtered_rows_whose_scaled_logits_overflow_are_greedy():
    """The issue: min_p on such a row gave -1."""
    rng = np.random.default_rng(15)
    logits, seeds, positions, temperature = _overflowing(rng)
    for filters in (dict(min_p=0.05), dict(top_k=3, top_p=0.9), dict(top_p=0.2, min_p=0.5)):
        tokens = both_frontends("top_k_top_p_sample", logits, seeds, positions, temperature, **filters)
        expected = top_k_top_p_sample_reference(logits, seeds, positions, temperature, **filters)
        np.testing.assert_array_equal(tokens, expected)
        assert tokens[0] == 5 and tokens[1] == logits[1].argmax() and (tokens >= 0).all()


@pytest.mark.parametrize("variant", ["three launches", "four launches"])
def test_rejection_rows_whose_scaled_logits_overflow_are_greedy(force_variant, variant):
    import jax.numpy as jnp

    force_variant(variant)
    rng = np.random.default_rng(16)
    batch, k, vocab = 7, 2, 300
    target = _logits(rng, batch, vocab, rows=k + 1)
    draft_logits = (target[:, :k] + rng.standard_normal((batch, k, vocab))).astype(np.float32)
    drafts = target[:, :k].argmax(-1).astype(np.int32)
    num_drafts = np.int32([2, 2, 1, 2, 0, 2, 2])
    seeds, positions = _requests(rng, batch)
    temperature = np.float32([0.7, 0.5, 0.9, 0.6, 0.8, 0.9, 0.9])
    target[0, 0, 3] = 3e38  # a decision row: greedy, its draft (the old argmax) rejected, argmax 3 emitted
    target[1, 1, 7] = -3e38  # negative overflow of a decision row
    draft_logits[2, 0, 5] = 3.2e38  # the draft row overflows (3.56e38): the row is greedy
    draft_logits[6, 0, 5] = 3e38  # 3.33e38 does not overflow: q is one-hot on 5, the draft accepted (p / q = inf)
    target[3, 2, 9] = 3e38  # the bonus row (every draft is the argmax: accepted unless sampled otherwise)
    target[4, 0, 11] = 3e38  # n = 0: the bonus row 0
    drafts[5, 0] = 250
    target[5, 0, 250] = 2e38  # the draft itself is the overflowing argmax: accepted
    args = (target, drafts, num_drafts, seeds, positions, temperature)
    for kwargs in (dict(), dict(draft_logits=draft_logits), dict(method="strict")):
        from_torch = run_torch("rejection_sample", *args, **kwargs)
        from_jax = jsample.rejection_sample(*[jnp.asarray(a) for a in args],  # eager: the plan is read now
                                            **{n: jnp.asarray(v) if isinstance(v, np.ndarray) else v
                                               for n, v in kwargs.items()})
        expected = rejection_sample_reference(*args, **kwargs)
        for t, j, e in zip(from_torch, from_jax, expected):
            np.testing.assert_array_equal(t, np.asarray(j), err_msg=f"{variant} {kwargs.keys()}: torch and JAX")
            np.testing.assert_array_equal(t, e, err_msg=f"{variant} {kwargs.keys()}: reference")
        tokens, num_sampled = from_torch
        assert tokens[0, 0] == 3 and num_sampled[0] == 1  # greedy row 0: the draft is not its argmax
        assert tokens[4, 0] == 11 and tokens[5, 0] == 250
        if "draft_logits" in kwargs:
            assert num_sampled[2] == 2 and num_sampled[6] == 3, num_sampled
        if num_sampled[3] == 3:
            assert tokens[3, 2] == 9


# -- filter values outside their range are clamped -----------------------------------------------------

def test_filter_values_outside_their_range_are_clamped():
    rng = np.random.default_rng(17)
    batch = 8
    logits = _logits(rng, batch)
    seeds, positions = _requests(rng, batch)
    temperature = np.float32(0.9)
    cases = [
        dict(min_p=np.float32([1.5, np.nan, np.inf, -np.inf, 1.0, -0.5, 0.0, 1e30])),
        dict(top_p=np.float32([1.5, np.nan, np.inf, -np.inf, 0.0, -0.5, 1.0, 1e-30])),
        dict(top_k=np.int64([-5, 0, VOCAB, VOCAB + 10, 2**40, -(2**40), 1, 2**31 + 7])),
        dict(top_k=np.uint32([0, 1, 2**32 - 1, 5, VOCAB, 3, 2**31, 7])),
        dict(top_k=np.int8([0, 1, -1, 5, 127, 3, -128, 7]), top_p=np.float16([0.5, 2, 0, 1, 0.9, 0.1, 0.3, 0.7]),
             min_p=ml_dtypes.bfloat16(0.02) * np.ones(batch, ml_dtypes.bfloat16)),
    ]
    for filters in cases:
        tokens = both_frontends("top_k_top_p_sample", logits, seeds, positions, temperature, **filters)
        reference_filters = {name: np.asarray(v).astype(np.int64 if name == "top_k" else np.float32)
                             for name, v in filters.items()}
        expected = top_k_top_p_sample_reference(logits, seeds, positions, temperature, **reference_filters)
        np.testing.assert_array_equal(tokens, expected, err_msg=str(filters))
        assert (tokens >= 0).all(), filters  # every row has finite logits: never -1
    # the documented meaning of the edges, checked directly
    only_max = both_frontends("top_k_top_p_sample", logits, seeds, positions, temperature,
                              min_p=np.full(batch, 7.0, np.float32))
    np.testing.assert_array_equal(only_max, logits.argmax(axis=1))
    keep_all = both_frontends("top_k_top_p_sample", logits, seeds, positions, temperature,
                              top_p=np.full(batch, np.nan, np.float32), min_p=np.full(batch, np.nan, np.float32))
    np.testing.assert_array_equal(keep_all, both_frontends("gumbel_sample", logits, seeds, positions, temperature))


# -- vocabulary sizes ---------------------------------------------------------------------------------

def test_top_k_top_p_runs_beyond_524288_columns():
    """The issue: V > 524288 raised a bare AssertionError (int32 per-thread mass sums)."""
    rng = np.random.default_rng(18)
    vocab = 524288 + 4099 if SIZE == "cpu" else 1_000_000
    batch = 1 if SIZE == "cpu" else 16
    logits = (rng.standard_normal((batch, vocab)) * 2).astype(np.float32)
    seeds, positions = _requests(rng, batch)
    config = jsample.kernels.filtered_launch_config(batch, vocab, vocab, "float32", False)
    assert config.wide_sums
    for run, filters in ((both_frontends, dict(top_p=0.9)), (run_torch, dict(top_k=1000, min_p=0.001))):
        tokens = run("top_k_top_p_sample", logits, seeds, positions, 0.8, **filters)  # JAX once: the same kernels
        np.testing.assert_array_equal(tokens, top_k_top_p_sample_reference(logits, seeds, positions, 0.8, **filters))


def test_vocabularies_beyond_2_pow_30_are_refused_up_front():
    import jax
    import jax.numpy as jnp

    message = "gumbel_sample: logits must have a vocabulary size V in [1, 2**30], got V = 1073741825."
    huge = torch.zeros(1, 1, dtype=torch.float16).expand(1, 2**30 + 1)  # no memory behind it
    one = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(ValueError) as info:
        torch_backend.gumbel_sample(huge, one, one, 1.0)
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        jax.eval_shape(lambda x: jsample.gumbel_sample(x, jnp.zeros(1, jnp.int32), jnp.zeros(1, jnp.int32), 1.0),
                       jax.ShapeDtypeStruct((1, 2**30 + 1), jnp.float16))
    assert str(info.value) == message


# -- jax.jit with Python numbers, x64 on and off; 64-bit seeds as words ----------------------------------

@pytest.mark.parametrize("x64", [True, False], ids=["x64", "x32"])
def test_jit_with_python_numbers(x64):
    """The issue: with x64 on a Python float is a float64 tracer, and a Python int an int64 one."""
    import jax

    rng = np.random.default_rng(19)
    logits = _logits(rng)
    seeds = np.arange(BATCH, dtype=np.uint32) * 1000
    positions = np.arange(BATCH, dtype=np.int32)
    with jax.enable_x64(x64):
        tokens = jax.jit(jsample.gumbel_sample)(logits, seeds, positions, 0.8)
        filtered = jax.jit(jsample.top_k_top_p_sample)(logits, seeds, positions, 0.8, top_k=5, top_p=0.9,
                                                       min_p=0.01)
    np.testing.assert_array_equal(np.asarray(tokens), run_torch("gumbel_sample", logits, seeds, positions, 0.8))
    np.testing.assert_array_equal(np.asarray(filtered), run_torch("top_k_top_p_sample", logits, seeds, positions,
                                                                  0.8, top_k=5, top_p=0.9, min_p=0.01))


def test_traced_numbers_follow_the_array_rules_in_both_frontends():
    """Under jit a Python number is an array: its value is unchecked and follows the kernels' rules
    (STREAM.md clarifications), exactly as a 0-d tensor of the same value in torch."""
    import jax

    rng = np.random.default_rng(20)
    logits = _logits(rng)
    seeds = np.arange(BATCH, dtype=np.uint32)
    positions = np.arange(BATCH, dtype=np.int32)
    with jax.enable_x64(False):
        negative = jax.jit(jsample.gumbel_sample)(logits, seeds, positions, -1.0)  # greedy (below 1e-5)
        loose = jax.jit(jsample.top_k_top_p_sample)(logits, seeds, positions, 0.8, top_p=1.5)  # keeps all
    np.testing.assert_array_equal(np.asarray(negative), logits.argmax(axis=1))
    np.testing.assert_array_equal(np.asarray(negative),
                                  run_torch("gumbel_sample", logits, seeds, positions, np.array(-1.0, np.float32)))
    np.testing.assert_array_equal(np.asarray(loose), run_torch("top_k_top_p_sample", logits, seeds, positions, 0.8,
                                                               top_p=np.array(1.5, np.float32)))
    np.testing.assert_array_equal(np.asarray(loose), run_torch("gumbel_sample", logits, seeds, positions, 0.8))


def test_seed_words_carry_64_bit_seeds_with_x64_off():
    import jax

    rng = np.random.default_rng(21)
    batch = 6
    logits = _logits(rng, batch)
    seeds = np.array([2**40 + 1, -5, 2**63 - 1, 7, -(2**63), 2**32], np.int64)
    positions = np.arange(batch, dtype=np.int32)
    expected = run_torch("gumbel_sample", logits, seeds, positions, 0.7)
    np.testing.assert_array_equal(expected, gumbel_sample_reference(logits, seeds, positions, 0.7))
    words = jsample.seed_words(seeds)
    assert words.dtype == np.uint32 and words.shape == (batch, 2)
    with jax.enable_x64(False):
        from_words = jax.jit(jsample.gumbel_sample)(logits, words, positions, 0.7)
        with pytest.raises(TypeError, match=r"\(jsample\.seed_words\)"):
            jsample.gumbel_sample(logits, seeds, positions, 0.7)  # eager int64 NumPy seeds: refused, not narrowed
    np.testing.assert_array_equal(np.asarray(from_words), expected)
    for op_args in (("gumbel_sample", logits, words, positions, 0.7),
                    ("top_k_top_p_sample", logits, words, positions, 0.7)):
        np.testing.assert_array_equal(both_frontends(*op_args), expected)
    torch_words = to_torch(words.view(np.int32))  # int32 words work as well as uint32 ones
    np.testing.assert_array_equal(torch_backend.gumbel_sample(to_torch(logits), torch_words, to_torch(positions),
                                                              0.7).cpu().numpy(), expected)
    k = 2
    target = _logits(rng, batch, rows=k + 1)
    drafts = target[:, :k].argmax(-1).astype(np.int32)
    n = np.full(batch, k, np.int32)
    np.testing.assert_array_equal(both_frontends("rejection_sample", target, drafts, n, words, positions, 0.7)[0],
                                  rejection_sample_reference(target, drafts, n, seeds, positions, 0.7)[0])
    rates = np.full(k, 0.5, np.float32)
    np.testing.assert_array_equal(
        both_frontends("synthetic_rejection_sample", drafts[:, :1].repeat(k + 1, 1), drafts, n, words, positions,
                       rates)[0],
        synthetic_rejection_sample_reference(drafts[:, :1].repeat(k + 1, 1), drafts, n, seeds, positions, rates)[0])


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_temperature_and_filters_of_any_float_dtype(dtype):
    rng = np.random.default_rng(22)
    logits = _logits(rng, 6)
    seeds, positions = _requests(rng, 6)
    cast = getattr(ml_dtypes, dtype, None) or np.dtype(dtype)
    temperature = np.float32([0.5, 0.75, 1.0, 1.5, 2.0, 0.25])  # exact in every dtype
    tokens = both_frontends("gumbel_sample", logits, seeds, positions, temperature.astype(cast))
    np.testing.assert_array_equal(tokens, both_frontends("gumbel_sample", logits, seeds, positions, temperature))
    filtered = both_frontends("top_k_top_p_sample", logits, seeds, positions, temperature.astype(cast),
                              top_p=np.full(6, 0.5, cast), min_p=np.full(6, 0.125, cast))
    np.testing.assert_array_equal(filtered, top_k_top_p_sample_reference(logits, seeds, positions, temperature,
                                                                          top_p=0.5, min_p=0.125))


# -- the JAX CPU path passes bits, not values ----------------------------------------------------------

def test_subnormal_logits_give_the_same_tokens_in_both_frontends():
    """The issue: JAX's host callback flushed subnormals to zero (1e-45 arrived as 0.0)."""
    tiny = np.float32(1e-45)
    logits = np.zeros((3, 40), np.float32)
    logits[0, 7] = tiny  # the only positive logit: greedy picks it
    logits[1] = np.arange(40, dtype=np.float32) * tiny  # all subnormal or zero: the last is the largest
    logits[2, 3] = -tiny
    tokens = both_frontends("gumbel_sample", logits, np.arange(3, dtype=np.int64), np.zeros(3, np.int64), 0.0)
    np.testing.assert_array_equal(tokens, [7, 39, 0])
    both_frontends("top_k_top_p_sample", logits, np.arange(3, dtype=np.int64), np.zeros(3, np.int64), 1e-6,
                   top_k=1)
    # subnormal draft logits change q, and with it the decision, in both frontends alike
    target = np.zeros((3, 2, 40), np.float32)
    target[:, :, 5] = 1e-38
    draft_logits = np.zeros((3, 1, 40), np.float32)
    draft_logits[:, 0, 5] = 1e-39
    both_frontends("rejection_sample", target, np.full((3, 1), 5, np.int32), np.ones(3, np.int32),
                   np.arange(3, dtype=np.int64), np.zeros(3, np.int64), 1e-5, draft_logits=draft_logits)


# -- smaller points of the issue --------------------------------------------------------------------------

def test_float0_and_array_rates_are_reported_plainly():
    import jax
    import jax.numpy as jnp

    zeros = np.zeros((3, 5), np.float32)
    with pytest.raises(TypeError) as info:
        jsample.gumbel_sample(zeros, np.zeros(3, jax.dtypes.float0), np.zeros(3, np.int32), 1.0)
    assert "got float0" in str(info.value)
    for rates in (jnp.asarray([0.9, 0.8]), torch.tensor([0.9, 0.8]), np.float32([0.9, 0.8])):
        assert jsample.resolve_synthetic_acceptance_rates(2, rates=rates) == pytest.approx([0.9, 0.8])
    with pytest.raises(ValueError) as info:
        jsample.resolve_synthetic_acceptance_rates(3, length=0.5)
    assert str(info.value).startswith("resolve_synthetic_acceptance_rates: ")


def test_reference_rejects_out_of_range_drafts_quietly():
    rng = np.random.default_rng(23)
    target = _logits(rng, 3, 50, rows=3)
    draft_logits = _logits(rng, 3, 50, rows=2)
    drafts = np.int32([[-1, 3], [50, 2], [10**6, 0]])
    with np.errstate(all="raise"):
        tokens, num_sampled = rejection_sample_reference(target, drafts, np.full(3, 2, np.int32),
                                                         np.arange(3), np.zeros(3, np.int64), 0.8,
                                                         draft_logits=draft_logits)
    np.testing.assert_array_equal(num_sampled, 1)
    out = both_frontends("rejection_sample", target, drafts, np.full(3, 2, np.int32), np.arange(3, dtype=np.int64),
                         np.zeros(3, np.int64), 0.8, draft_logits=draft_logits)
    np.testing.assert_array_equal(out[0], tokens)


def test_residual_with_log_probabilities_beyond_float64():
    """Found by the property suite on the GPU: a rejected row whose probabilities underflow float64
    (x / T = 2.4e38 next to ~0). In exact arithmetic r = max(p - q, 0) is positive at column 1 only
    (q < p there), so the residual sample is 1; a linear-space reference (r = 0 everywhere, so the
    fallback to p) said 0. The kernels work in log space, and so does the reference now."""
    target = np.array([[[1.7e38, -1.3210486e-03], [6.4042266e-03, 1.0490011e-03]]], np.float32)
    draft_logits = np.array([[[1.7e38, -6.241797e-01]]], np.float32)
    args = (target, np.int32([[2]]), np.int32([1]), np.array([2526497193922298463]), np.array([296633628802]), 0.7)
    tokens, num_sampled = both_frontends("rejection_sample", *args, draft_logits=draft_logits)
    np.testing.assert_array_equal(tokens, [[1, -1]])
    reference = rejection_sample_reference(*args, draft_logits=draft_logits)
    np.testing.assert_array_equal(reference[0], tokens)


def test_torch_names_a_numpy_array_as_not_a_tensor():
    seeds = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(TypeError, match=r"gumbel_sample: logits must be a torch.Tensor, got a NumPy array; convert "
                                        r"it with torch.from_numpy\(logits\)"):
        torch_backend.gumbel_sample(np.zeros((2, 3), np.float32), seeds, seeds, 1.0)
    with pytest.raises(TypeError, match="rejection_sample: draft_tokens must be a torch.Tensor, got a NumPy array"):
        torch_backend.rejection_sample(torch.zeros(2, 2, 5), np.zeros((2, 1), np.int32), torch.ones(2, dtype=torch.int32),
                                       seeds, seeds, 1.0)
    with pytest.raises(TypeError, match="synthetic_rejection_sample: conditional_rates must be a torch.Tensor, got a "
                                        "NumPy array"):  # a list is taken (copied), a NumPy array is not
        torch_backend.synthetic_rejection_sample(torch.zeros(2, 2, dtype=torch.int32), torch.zeros(2, 1), seeds, seeds,
                                                 seeds, np.float32([0.5]))
