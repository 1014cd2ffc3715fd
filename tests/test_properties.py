"""Property-based tests (hypothesis), every op, both frontends: generated shapes (B = 0, V = 1, V not a
multiple of any block), dtypes, strided / expanded / offset torch views of every tensor argument,
non-finite and extreme logits, temperatures, filter values, seeds and positions, and malformed
arguments. For every example:

* torch == JAX bit for bit, or both raise the same TypeError / ValueError text naming the op;
* every token is in [0, V), or -1 only for a row with no finite logit (STREAM.md);
* tokens equal the NumPy reference, except where the reference itself is within rounding of a
  different answer (near-tied scores, a kept set at the edge of a top-p / min-p limit, a scaled
  logit at the edge of the float32 range, an acceptance ratio next to its uniform);
* token_logprobs with top-k: its three routes (a Python-int k, a per-row k, one vocabulary shard) agree
  bit for bit on rows with levels of tied logits past the 64-logit list.

Deterministic (derandomized): CI runs the same examples every time. `JSAMPLE_PROPERTY_EXAMPLES`
sets how many per op (default 25 on the CPU, 60 on a GPU).
"""

import os

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import ON_GPU, TORCH_DEVICE, run_jax
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jsample
import torch_backend
from jsample.reference import (
    gumbel_scores_reference,
    rejection_sample_reference,
    synthetic_rejection_sample_reference,
)
from jsample.reference.filtered import kept_tokens
from jsample.reference.gumbel import greedy_rows

pytestmark = pytest.mark.slow  # pytest --quick skips it
EXAMPLES = int(os.environ.get("JSAMPLE_PROPERTY_EXAMPLES", 60 if ON_GPU else 25))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
SCORE_MARGIN = 1e-4  # relative: the kernels' and NumPy's logs and roundings agree far closer
LIMIT_MARGIN = 1e-5  # relative change of a top-p / min-p limit within which the kept set is ambiguous
FLOAT32_MAX = float(np.finfo(np.float32).max)

SPECIAL_LOGITS = [np.inf, -np.inf, np.nan, 3e38, -3e38, 1.7e38, 1e-45, -1e-45, 0.0, -0.0, 65504.0, 1e30]
TEMPERATURES = [0.0, 1e-45, 1e-6, 1e-5, 0.3, 0.5, 1.0, 2.0, np.nan, np.inf, -1.0, 3e38]
# V = 1, V not a multiple of any block, and on a GPU the real sizes (several blocks of every kernel)
VOCABS = [1, 2, 3, 7, 16, 17, 100, 257, 600] + ([4097, 32000, 151936] if ON_GPU else [])
LOGIT_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


@st.composite
def logits_rows(draw, rows=None):
    """[B, V] (or [B, rows, V]) logits: a seeded normal draw at a drawn scale, quantised now and then
    (exact ties), with special values sprinkled at drawn places."""
    batch = draw(st.integers(0, 3))
    vocab = draw(st.sampled_from(VOCABS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = (batch, vocab) if rows is None else (batch, rows, vocab)
    x = rng.standard_normal(shape) * draw(st.sampled_from([0.01, 1.0, 5.0, 100.0]))
    if draw(st.booleans()):
        x = np.round(x)
    x = x.reshape(-1, vocab)
    for _ in range(draw(st.integers(0, 6))):
        if x.size:
            x[draw(st.integers(0, len(x) - 1)), draw(st.integers(0, vocab - 1))] = draw(st.sampled_from(SPECIAL_LOGITS))
    if draw(st.booleans()) and len(x):
        x[draw(st.integers(0, len(x) - 1))] = draw(st.sampled_from([-np.inf, np.nan]))  # a row with no finite logit
    dtype = draw(st.sampled_from(list(LOGIT_DTYPES))) if rows is None else "float32"
    with np.errstate(over="ignore"):
        return x.reshape(shape).astype(LOGIT_DTYPES[dtype])


@st.composite
def requests(draw, batch):
    """seeds (int64 any value, uint32, int32, or [B, 2] words) and positions (int64 up to 2**40, int32)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    seeds = rng.integers(-(2**63), 2**63 - 1, size=batch, endpoint=True)
    kind = draw(st.sampled_from(["int64", "uint32", "int32", "words"]))
    if kind == "words":
        seeds = jsample.seed_words(seeds)
    elif kind != "int64":
        seeds = (seeds & 0xFFFFFFFF).astype(np.uint32)
        seeds = seeds.view(np.int32) if kind == "int32" else seeds
    positions = rng.integers(0, 2**40, size=batch)
    if draw(st.booleans()):
        positions = (positions & 0x7FFFFFFF).astype(np.int32)
    return seeds, positions


@st.composite
def temperatures(draw, batch):
    if draw(st.booleans()):
        return draw(st.sampled_from([0.0, 1e-45, 0.7, 1.0, 2.5]))  # a Python number
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float64, np.float16]))
    with np.errstate(over="ignore"):
        return np.array([draw(st.sampled_from(TEMPERATURES)) for _ in range(batch)]).astype(dtype)


@st.composite
def filter_values(draw, batch, vocab):
    filters = {}
    if draw(st.booleans()):
        filters["top_k"] = draw(st.one_of(
            st.integers(0, vocab + 3),
            st.lists(st.sampled_from([0, 1, 2, 5, vocab, vocab + 1, -3, 2**31 - 1]), min_size=batch,
                     max_size=batch).map(lambda v: np.array(v, np.int64)),
            st.lists(st.integers(0, 255), min_size=batch, max_size=batch).map(lambda v: np.array(v, np.uint8))))
    for name, numbers in (("top_p", [0.05, 0.5, 0.9, 1.0, 0.0, -1.0, 1.5, np.nan, np.inf]),
                          ("min_p", [0.0, 0.01, 0.2, 1.0, -0.5, 2.0, np.nan, -np.inf])):
        if draw(st.booleans()):
            filters[name] = draw(st.one_of(
                st.sampled_from([v for v in numbers[:4] if (name == "min_p" or v > 0)]),
                st.lists(st.sampled_from(numbers), min_size=batch, max_size=batch).map(
                    lambda v: np.array(v, np.float32))))
    return filters


@st.composite
def layouts(draw):
    """How torch receives each tensor argument: contiguous, strided, offset, or expanded (stride 0)."""
    return draw(st.lists(st.sampled_from(["contiguous", "strided", "offset", "stride 0"]), min_size=12,
                         max_size=12))


def torch_view(array, layout):
    """A torch tensor equal to `array`, laid out as `layout` says ("stride 0" only where the rows are all
    equal; otherwise contiguous)."""
    if not isinstance(array, np.ndarray):
        return array
    if array.dtype == ml_dtypes.bfloat16:
        dense = torch.from_numpy(np.ascontiguousarray(array).view(np.uint16)).view(torch.bfloat16)
    else:
        dense = torch.from_numpy(np.ascontiguousarray(array))
    dense = dense.to(TORCH_DEVICE)
    if dense.dim() == 0 or dense.shape[0] == 0:
        return dense
    if layout == "strided":
        wide = torch.zeros((dense.shape[0] * 2,) + tuple(dense.shape[1:]), dtype=dense.dtype, device=dense.device)
        wide[::2] = dense
        return wide[::2]
    if layout == "offset":
        flat = torch.zeros(dense.numel() + 1, dtype=dense.dtype, device=dense.device)
        flat[1:] = dense.reshape(-1)
        return flat[1:].view(dense.shape)
    if layout == "stride 0" and bool((dense == dense[:1]).all()):
        return dense[:1].expand(dense.shape)
    return dense


def run_both(op, args, kwargs, layout):
    """(outputs, error): the op in torch (with the drawn layouts) and in JAX (under jit); asserts they
    agree, outputs bit for bit or errors by type and text."""
    results = []
    for runner in ("torch", "jax"):
        try:
            if runner == "torch":
                views = [torch_view(a, layout[i]) for i, a in enumerate(args)]
                kw = {n: torch_view(v, layout[6 + i]) for i, (n, v) in enumerate(kwargs.items())}
                out = getattr(torch_backend, op)(*views, **kw)
                out = tuple(o.cpu().numpy() for o in out) if isinstance(out, tuple) else (out.cpu().numpy(),)
            else:
                out = run_jax(op, *args, **kwargs)
                out = out if isinstance(out, tuple) else (out,)
            results.append(("ok", out))
        except (TypeError, ValueError) as error:
            results.append(("error", (type(error), str(error))))
    (kind_t, value_t), (kind_j, value_j) = results
    assert kind_t == kind_j, (op, results)
    if kind_t == "error":
        assert value_t == value_j, (op, value_t, value_j)
        assert value_t[1].startswith(f"{op}: "), value_t
        return None
    for t, j in zip(value_t, value_j):
        np.testing.assert_array_equal(t, j, err_msg=f"{op}: torch and JAX differ")
    return value_t


def _per_row(value, batch, dtype):
    return np.broadcast_to(np.asarray(value).astype(dtype), (batch,)) if value is not None else [None] * batch


def _at_range_edge(logits_row, temperature):
    """Whether |x| / T of some finite logit lies within rounding of the float32 maximum."""
    finite = np.isfinite(logits_row)
    if not finite.any() or not temperature >= 1e-5:
        return False
    with np.errstate(over="ignore"):
        scaled = np.abs(logits_row[finite]).max() / np.float64(temperature)
    return abs(scaled / FLOAT32_MAX - 1) < 1e-5


def check_tokens(tokens, logits, kept, seeds, positions, temperature, fp64=False):
    """tokens [B] against the reference on the kept sets (a (small, large) pair of [B, V] masks: the
    smallest and largest kept sets a rounding of the limits could give)."""
    logits = np.asarray(logits, np.float32)
    batch, vocab = logits.shape
    temperature = np.broadcast_to(np.asarray(temperature, np.float32), (batch,))
    small, large = kept
    greedy = greedy_rows(logits, temperature)
    for b in range(batch):
        finite = np.isfinite(logits[b])
        assert (0 <= tokens[b] < vocab) or (tokens[b] == -1 and not finite.any()), (b, tokens[b], logits[b])
        if tokens[b] == -1 or _at_range_edge(logits[b], temperature[b]):
            continue
        row = lambda mask: np.where(mask, logits[b], -np.inf)[None]  # noqa: E731
        scores = gumbel_scores_reference(row(large[b]), seeds[b:b + 1], positions[b:b + 1], temperature[b:b + 1],
                                         fp64=fp64)[0]
        assert large[b][tokens[b]] and np.isfinite(logits[b, tokens[b]]), (b, tokens[b])
        best_small = scores[small[b]].max()
        if greedy[b]:  # exact: the lowest column holding the largest logit
            assert scores[tokens[b]] == scores[large[b]].max() and tokens[b] == np.argmax(scores), (b, tokens[b])
        else:
            margin = SCORE_MARGIN * max(1.0, abs(float(best_small)))
            assert scores[tokens[b]] >= best_small - margin, (b, tokens[b], np.argmax(scores))
            top_two = np.sort(scores[large[b]])[-2:]
            if np.array_equal(small[b], large[b]) and (len(top_two) < 2 or top_two[1] - top_two[0] > margin):
                assert tokens[b] == np.argmax(scores), (b, tokens[b], np.argmax(scores))


@PROPERTY
@given(st.data())
def test_gumbel_sample_properties(data):
    logits = data.draw(logits_rows())
    batch = logits.shape[0]
    seeds, positions = data.draw(requests(batch))
    temperature = data.draw(temperatures(batch))
    flags = dict(fp64=data.draw(st.booleans()), draft=data.draw(st.booleans()))
    args = (logits, seeds, positions, temperature)
    out = run_both("gumbel_sample", args, flags, data.draw(layouts()))
    if out is None:
        return
    finite = np.isfinite(np.asarray(logits, np.float32))
    stream_seeds = seeds
    kept = (finite, finite)
    if flags["draft"]:  # the reference of stream 1: gumbel_scores_reference with draft=True
        tokens = out[0]
        scores = gumbel_scores_reference(logits, stream_seeds, positions, temperature, fp64=flags["fp64"], draft=True)
        for b in range(batch):
            assert (0 <= tokens[b] < logits.shape[1]) or (tokens[b] == -1 and not finite[b].any())
            if tokens[b] >= 0:
                assert scores[b, tokens[b]] >= scores[b].max() - SCORE_MARGIN * max(1.0, abs(scores[b].max()))
        return
    check_tokens(out[0], logits, kept, stream_seeds, positions, temperature, flags["fp64"])


@PROPERTY
@given(st.data())
def test_top_k_top_p_sample_properties(data):
    logits = data.draw(logits_rows())
    batch, vocab = logits.shape
    seeds, positions = data.draw(requests(batch))
    temperature = data.draw(temperatures(batch))
    filters = data.draw(filter_values(batch, vocab))
    fp64 = data.draw(st.booleans())
    out = run_both("top_k_top_p_sample", (logits, seeds, positions, temperature), dict(filters, fp64=fp64),
                   data.draw(layouts()))
    if out is None:
        return
    x = np.asarray(logits, np.float32)
    t = np.broadcast_to(np.asarray(temperature, np.float32), (batch,))
    top_k, top_p, min_p = (_per_row(filters.get(n), batch, d)
                           for n, d in (("top_k", np.int64), ("top_p", np.float32), ("min_p", np.float32)))

    def kept(scale):
        return np.array([kept_tokens(x[b], t[b], None if top_k[b] is None else int(top_k[b]), top_p[b], min_p[b],
                                     fp64, top_p_scale=scale, min_p_scale=2.0 - scale) for b in range(batch)])
    small, large = (kept(1 - LIMIT_MARGIN), kept(1 + LIMIT_MARGIN)) if batch else (x > 0, x > 0)
    check_tokens(out[0], x, (small, large), seeds, positions, t, fp64)


@PROPERTY
@given(st.data())
def test_token_logprobs_with_filters_give_the_same_numbers_on_every_route(data):
    """token_logprobs with top-k on generated rows (quantised ties, special values, rows without a finite logit):
    a Python-int top_k in [1, 64] (the list alone, its ties at the k-th largest counted), the same k as a per-row
    tensor (the list, the searches for the rows past it) and vocab-parallel token_logprobs' rounds as one shard
    (their own statistics, searches and kept sums) give the same seven outputs bit for bit; torch == JAX."""
    from test_logprobs import FIELDS, _one_shard_logprobs

    logits = data.draw(logits_rows())
    batch, vocab = logits.shape
    if batch == 0:
        return
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    finite = np.isfinite(np.asarray(logits, np.float32))
    for row in range(batch):  # a level of 65 to 99 tied logits, at one of the row's 20 largest: past the list
        if vocab >= 100 and finite[row].sum() >= 20 and data.draw(st.booleans()):
            level = np.sort(np.asarray(logits[row], np.float32)[finite[row]])[-rng.integers(1, 21)]
            logits[row, rng.permutation(vocab)[:rng.integers(65, 100)]] = level
    temperature = np.broadcast_to(np.asarray(data.draw(temperatures(batch)), np.float32), (batch,)).copy()
    filters = dict(top_k=data.draw(st.integers(1, 64)))
    if data.draw(st.booleans()):
        filters["top_p"] = data.draw(st.sampled_from([0.05, 0.5, 0.9, 1.0]))
    if data.draw(st.booleans()):
        filters["min_p"] = data.draw(st.sampled_from([0.0, 0.01, 0.2]))
    tokens = rng.integers(0, vocab, batch).astype(np.int32)
    num_top = data.draw(st.sampled_from([0, 3]))
    x = torch.from_numpy(np.asarray(logits, np.float32)).to(
        {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[logits.dtype.name])
    x = x.to(TORCH_DEVICE)
    t = torch.from_numpy(temperature).to(TORCH_DEVICE)
    per_row = dict(filters, top_k=np.full(batch, filters["top_k"], np.int64))
    routes = [torch_backend.token_logprobs(x, torch.from_numpy(tokens).to(TORCH_DEVICE), t, num_top=num_top,
                                           **{n: torch.from_numpy(np.asarray(v)).to(TORCH_DEVICE)
                                              if isinstance(v, np.ndarray) else v for n, v in f.items()})
              for f in (filters, per_row)]
    routes = [[getattr(out, name).cpu().numpy() for name in FIELDS] for out in routes]
    routes.append(_one_shard_logprobs(x, tokens, temperature, filters, num_top))
    jax_out = run_jax("token_logprobs", logits, tokens, temperature, num_top=num_top, **filters)
    routes.append([np.asarray(field) for field in jax_out])  # (the fields in Logprobs' order)
    for i, name in enumerate(FIELDS):
        for other in routes[1:]:
            assert np.array_equal(routes[0][i], other[i], equal_nan=True), (name, filters)


@PROPERTY
@given(st.data())
def test_rejection_sample_properties(data):
    k = data.draw(st.integers(0, 3))
    target = data.draw(logits_rows(rows=k + 1))
    batch, _, vocab = target.shape
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    draft_logits = (target[:, :k] + rng.standard_normal((batch, k, vocab))).astype(np.float32)
    with np.errstate(invalid="ignore"):
        drafts = np.where(rng.random((batch, k)) < 0.5, np.nan_to_num(target[:, :k]).argmax(-1),
                          rng.integers(-2, vocab + 2, (batch, k))).astype(np.int32)
    num_drafts = rng.integers(-1, k + 2, batch).astype(np.int32)  # out of [0, K]: clamped
    seeds, positions = data.draw(requests(batch))
    temperature = data.draw(temperatures(batch))
    kwargs = dict(fp64=data.draw(st.booleans()))
    method = data.draw(st.sampled_from(["probabilistic", "one-hot", "strict"]))
    if method == "probabilistic":
        kwargs["draft_logits"] = draft_logits
    elif method == "strict":
        kwargs["method"] = "strict"
    args = (target, drafts, num_drafts, seeds, positions, temperature)
    out = run_both("rejection_sample", args, kwargs, data.draw(layouts()))
    if out is None:
        return
    tokens, num_sampled = out
    expected, expected_n, ratio_margin, score_margin = rejection_sample_reference(*args, **kwargs,
                                                                                  return_margins=True)
    t = np.broadcast_to(np.asarray(temperature, np.float32), (batch,))
    for b in range(batch):
        n = int(np.clip(num_drafts[b], 0, k))
        a = int(num_sampled[b]) - 1
        assert 0 <= a <= n, (b, a, n)
        emitted = tokens[b, a]
        assert (0 <= emitted < vocab) or (emitted == -1 and not np.isfinite(target[b, a]).any()), (b, emitted)
        np.testing.assert_array_equal(tokens[b, :a], drafts[b, :a])
        assert (tokens[b, a + 1:] == -1).all()
        ambiguous = (ratio_margin[b] < 1e-4 or score_margin[b] < SCORE_MARGIN
                     or any(_at_range_edge(target[b, j], t[b]) for j in range(k + 1))
                     or ("draft_logits" in kwargs and any(_at_range_edge(draft_logits[b, j], t[b]) for j in range(k))))
        if not ambiguous:
            np.testing.assert_array_equal(tokens[b], expected[b], err_msg=f"request {b}")
            assert num_sampled[b] == expected_n[b]


@PROPERTY
@given(st.data())
def test_synthetic_rejection_sample_properties(data):
    k = data.draw(st.integers(0, 4))
    batch = data.draw(st.integers(0, 4))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    target_tokens = rng.integers(-1, 1000, (batch, k + 1)).astype(np.int32)
    drafts = rng.integers(-1, 1000, (batch, k)).astype(np.int32)
    num_drafts = rng.integers(-2, k + 3, batch).astype(np.int32)
    seeds, positions = data.draw(requests(batch))
    rates = rng.choice(np.float32([0.0, 0.3, 0.9, 1.0, 1.5, -1.0, np.nan]), size=data.draw(
        st.sampled_from([(k,), (batch, k)])))
    fp64 = data.draw(st.booleans())
    args = (target_tokens, drafts, num_drafts, seeds, positions, rates.astype(np.float32))
    out = run_both("synthetic_rejection_sample", args, dict(fp64=fp64), data.draw(layouts()))
    if out is None:
        return
    for o, e in zip(out, synthetic_rejection_sample_reference(*args, fp64=fp64)):
        np.testing.assert_array_equal(o, e)


CORRUPTIONS = {
    "logits": [np.zeros((2, 3), np.int32), np.zeros(4, np.float32), np.zeros((2, 0), np.float32),
               np.zeros((2, 3), np.uint8)],  # (float64 logits are read as float32: no corruption)
    "seeds": [np.zeros(2, np.float32), np.zeros(3, np.int64), np.zeros((2, 3), np.uint32), np.zeros(2, bool),
              np.zeros((2, 2), np.int64)],
    "positions": [np.zeros(2, np.uint32), np.zeros((2, 1), np.int64), np.zeros(2, np.float32)],
    "temperature": [-1.0, float("nan"), 1e39, np.zeros(3, np.float32), np.zeros(2, np.int32), True, "hot"],
}


@PROPERTY
@given(st.data())
def test_malformed_arguments_raise_the_same_error_in_both_frontends(data):
    args = {"logits": np.zeros((2, 3), np.float32), "seeds": np.zeros(2, np.int64),
            "positions": np.zeros(2, np.int64), "temperature": 1.0}
    name = data.draw(st.sampled_from(sorted(CORRUPTIONS)))
    args[name] = data.draw(st.sampled_from(CORRUPTIONS[name]))
    op = data.draw(st.sampled_from(["gumbel_sample", "top_k_top_p_sample"]))
    kwargs = {}
    if op == "top_k_top_p_sample" and data.draw(st.booleans()):
        kwargs = {data.draw(st.sampled_from(["top_k", "top_p", "min_p"])):
                  data.draw(st.sampled_from([-1, 2.5, 1.5, np.zeros(3, np.int32), "x"]))}
    assert run_both(op, tuple(args.values()), kwargs, ["contiguous"] * 12) is None


@PROPERTY
@given(st.data())
def test_padding_rows_never_change_the_valid_rows(data):
    """num_valid in [0, B], as an int or a scalar array of either integer dtype: in both frontends (torch with
    the drawn layouts) the valid rows' tokens are the unpadded call's, the padding rows' -1."""
    logits = data.draw(logits_rows())
    batch, vocab = logits.shape
    seeds, positions = data.draw(requests(batch))
    temperature = data.draw(temperatures(batch))
    op = data.draw(st.sampled_from(["gumbel_sample", "top_k_top_p_sample"]))
    kwargs = dict(data.draw(filter_values(batch, vocab))) if op == "top_k_top_p_sample" else {}
    layout = data.draw(layouts())
    full = run_both(op, (logits, seeds, positions, temperature), kwargs, layout)
    if full is None:
        return
    n = data.draw(st.integers(0, batch))
    given = data.draw(st.sampled_from([n, np.array(n, np.int32), np.array([n], np.int64)]))
    padded = run_both(op, (logits, seeds, positions, temperature), dict(kwargs, num_valid=given), layout)
    np.testing.assert_array_equal(padded[0][:n], full[0][:n])
    np.testing.assert_array_equal(padded[0][n:], -1)
