"""token_logprobs (issue 41): against the float64 reference, torch == JAX bit for bit, the kept set of
top_k_top_p_sample exactly (RL replay), edge cases, one compilation for every num_top, clear errors."""

import numpy as np
import pytest
import torch

import jsample
import torch_backend
from conftest import TORCH_DEVICE
from jsample import kernels
from jsample.kernels.compiles import compile_key
from jsample.kernels.plan import ArgSpec
from jsample.reference.filtered import kept_tokens
from jsample.reference.logprobs import token_logprobs_reference

FIELDS = ("raw", "scaled", "kept", "log_kept_mass", "rank", "top_ids", "top_logprobs")
FILTERS = [dict(), dict(top_k=5), dict(top_p=0.8), dict(min_p=0.05), dict(top_k=20, top_p=0.9, min_p=0.01)]


def _torch(x, tokens, temperature, **kwargs):
    import ml_dtypes

    if x.dtype == ml_dtypes.bfloat16:
        logits = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    else:
        logits = torch.from_numpy(x)
    convert = {name: (torch.from_numpy(np.asarray(v)).to(TORCH_DEVICE) if isinstance(v, np.ndarray) else v)
               for name, v in kwargs.items()}
    if isinstance(temperature, np.ndarray):
        temperature = torch.from_numpy(temperature).to(TORCH_DEVICE)
    out = torch_backend.token_logprobs(logits.to(TORCH_DEVICE), torch.from_numpy(tokens).to(TORCH_DEVICE),
                                       temperature, **convert)
    return [getattr(out, name).cpu().numpy() for name in FIELDS]


def _jax(x, tokens, temperature, **kwargs):
    out = jsample.token_logprobs(x, tokens, temperature, **kwargs)
    return [np.asarray(getattr(out, name)) for name in FIELDS]


def _rows(batch, vocab, seed, dtype="float32"):
    import ml_dtypes

    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
    x[0, 3] = x[0, 9] = x[0].max()  # a tie at the largest logit
    if batch > 2:
        x[2, : vocab // 2] = -np.inf  # half the row masked
    if batch > 3:
        x[3, 1], x[3, 2], x[3, 4] = np.inf, np.nan, -np.inf  # non-finite logits beside finite ones
    if dtype == "bfloat16":
        x = x.astype(ml_dtypes.bfloat16)
    elif dtype == "float16":
        x = x.astype(np.float16)
    tokens = rng.integers(0, vocab, size=batch).astype(np.int32)
    tokens[0] = 3
    if batch > 3:
        tokens[3] = 2  # NaN at the token
    if batch > 4:
        tokens[4] = 4 if vocab > 4 else 0
    temperature = rng.choice(np.float32([0.0, 0.05, 0.7, 1.0, 1.5]), size=batch)
    return x, tokens, temperature


def _assert_close_to_reference(out, ref, what):
    for name, got, want in zip(FIELDS, out, ref):
        if got.dtype.kind == "f":
            want = np.asarray(want, np.float32)
            assert np.array_equal(np.isnan(got), np.isnan(want)), (what, name, got, want)
            assert np.array_equal(np.isinf(got), np.isinf(want)), (what, name, got, want)
            finite = np.isfinite(want)
            np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=1e-5, err_msg=f"{what} {name}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{what} {name}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("fp64", [False, True])
def test_token_logprobs_equal_the_reference_and_torch_equals_jax(dtype, fp64):
    import ml_dtypes

    x, tokens, temperature = _rows(6, 300, 7, dtype)
    x32 = x.astype(np.float32)
    for i, filters in enumerate(FILTERS):
        num_top = (0, 3, 7)[i % 3]
        t = _torch(x, tokens, temperature, num_top=num_top, fp64=fp64, **filters)
        j = _jax(x if x.dtype != ml_dtypes.bfloat16 else x, tokens, temperature, num_top=num_top, fp64=fp64, **filters)
        for name, a, b in zip(FIELDS, t, j):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), (filters, name, a, b)
        _assert_close_to_reference(t, token_logprobs_reference(x32, tokens, temperature, num_top=num_top, fp64=fp64,
                                                               **filters), (dtype, fp64, filters))


def test_only_the_filters_list_takes_the_short_rows():
    """top_list_kernel's SHORT_ROW is the plan's choice for the filters' fixed list of 64 over fewer blocks (V = 32000
    in blocks of 512 on an H200), never for a caller's num_top (read on the device): compiled in, the short rows'
    code slowed those lists at V = 32000 even where they never took it."""
    from torch_backend import _execute as torch_execute

    def short_rows(vocab, **filters):
        plan = kernels.plan_token_logprobs(ArgSpec.contiguous((4, vocab), "float32"), torch_execute.compiled_target(132, 9),
                                           fp64=False, num_top=20, **filters)
        return [dict(s.constexprs)["SHORT_ROW"] for s in plan.launches if s.kernel.fn.__name__ == "top_list_kernel"]

    none = dict(has_top_k=False, has_top_p=False, has_min_p=False)
    assert short_rows(32000, **none) == [False]
    assert short_rows(32000, **dict(none, has_top_p=True)) == [True]  # the filters' list (num_top's from it)
    assert short_rows(151936, **dict(none, has_top_p=True)) == [False]  # more blocks than the list


@pytest.mark.parametrize("tiling", ["interpreter blocks", "GPU blocks", "GPU blocks, 65 of them"])
def test_top_list_reads_candidate_blocks_and_equals_the_reference(tiling, force_target):
    """num_top >= 1 without filters: the single read's top list (top_list_kernel) over rows of several blocks,
    where the blocks' maxima bound the list well (random rows), badly (the row's largest logits all in one
    block), not at all (every logit equal: every block read), with fewer finite logits than num_top, ties
    across a block boundary, +inf / NaN beside them; torch == JAX, the reference's ids exactly, fused == separate.
    Rows of fewer blocks than the list (5 and 21: their bound is -inf for num_top 64) and of more (65 blocks: the
    blocks' maxima bound the list); and the filters' list of 64 over the same rows (top_k=64, an int: the list alone
    decides), which takes top_list_kernel's SHORT_ROW where the row has fewer blocks (a program's blocks at once)."""
    if tiling.startswith("GPU blocks"):
        force_target(large_programs=False)  # blocks of 512 columns (the interpreter's: 4096)
    block = 512 if tiling.startswith("GPU blocks") else 4096
    rng = np.random.default_rng(21)
    vocab = dict(zip(["interpreter blocks", "GPU blocks", "GPU blocks, 65 of them"], [4, 20, 64]))[tiling] * block + 37
    x = (rng.standard_normal((7, vocab)) * 3).astype(np.float32)
    x[1, block:2 * block] += 20.0  # the row's 64 largest in one block: the other blocks' maxima bound nothing
    x[2] = 1.5  # every logit equal: the lowest columns, every block read
    x[3] = -np.inf
    x[3, [7, block + 3, 3 * block]] = [1.0, 2.0, 1.0]  # three finite logits: -1 / -inf past them
    x[4, block - 1] = x[4, block] = x[4, 3 * block + 5] = 50.0  # a tie across a block boundary (and a third)
    x[5, 0], x[5, 1], x[5, block + 2] = np.inf, np.nan, 40.0  # non-finite logits are never listed
    x[6, :] = -np.inf  # no finite logit: nothing listed
    tokens = np.int32([5, block + 1, 0, block + 3, block, block + 2, -1])
    temperature = np.float32([1.0, 0.7, 1.3, 0.0, 1.0, 0.5, 1.0])
    for num_top in (1, 5, 64) if tiling != "GPU blocks, 65 of them" else (5, 64):  # (CI time)
        t = _torch(x, tokens, temperature, num_top=num_top)
        j = _jax(x, tokens, temperature, num_top=num_top)
        for name, a, b in zip(FIELDS, t, j):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), (num_top, name, a, b)
        ref = token_logprobs_reference(x, tokens, temperature, num_top=num_top)
        _assert_close_to_reference(t, ref, (tiling, num_top))
        assert np.array_equal(t[5], ref.top_ids), (num_top, t[5], ref.top_ids)
        if num_top == 5:
            assert list(t[5][2]) == [0, 1, 2, 3, 4] and list(t[5][3][:3]) == [block + 3, 7, 3 * block]
            assert list(t[5][3][3:]) == [-1, -1] and np.isneginf(t[6][3][3:]).all() and (t[5][6] == -1).all()
            assert list(t[5][4][:3]) == [block - 1, block, 3 * block + 5] and t[5][5][0] == block + 2
    t = _torch(x, tokens, temperature, top_k=64)
    j = _jax(x, tokens, temperature, top_k=64)
    for name, a, b in zip(FIELDS, t, j):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), ("top_k=64", name, a, b)
    _assert_close_to_reference(t, token_logprobs_reference(x, tokens, temperature, top_k=64), (tiling, "top_k=64"))
    seeds, positions = np.arange(7, dtype=np.int64), np.arange(7, dtype=np.int64)
    sampled, fused = jsample.gumbel_sample(x, seeds, positions, temperature, return_logprobs=True, num_top=5)
    separate = _jax(x, np.asarray(sampled), temperature, num_top=5)
    for name, a in zip(FIELDS, separate):
        assert np.array_equal(np.asarray(getattr(fused, name)), a, equal_nan=True), name


@pytest.mark.parametrize("filters, row_5", [(dict(top_k=np.int64([5, 5, 3, 64, 50, 0, 200, 1])), 1),
                                            (dict(top_k=np.int64([5, 5, 3, 64, 50, 0, 200, 1]),
                                                  top_p=np.float32([0.9, 0.5, 0.99, 0.3, 0.0, 0.9, 0.95, 0.5])), 0),
                                            (dict(top_k=np.int64([5, 5, 3, 64, 50, 0, 200, 1]), top_p=0.8,
                                                  min_p=0.05), 0)], ids=["k", "k+p", "k+p+min_p"])
def test_top_k_rows_take_the_list_and_the_others_the_passes(filters, row_5):
    """With top-k, the rows whose kept set lies within the 64 largest logits are decided from the single read's
    list (filtered_list_reduce_kernel, done = 1); the rest (pending) by the searches (one shard's): 100 logits tied
    at the 5th largest and 70 at the 64th (past the list: the list, the ties' count from row_mass_kernel), k
    beyond the finite count over a full list, a greedy row (not filtered: the list). Top-k off (k = 0, row 5)
    over a full list: the list where nothing else limits (k); the searches where top-p keeps more than the list
    (k+p) and min-p does not cut inside it either (k+p+min_p: e of the row's 64th largest logit is 0.054, above
    0.05). Both kinds equal the reference, torch == JAX."""
    import dataclasses

    from torch_backend import _execute as execute

    rng = np.random.default_rng(5)
    vocab = 9000  # several interpreter blocks a row
    x = (rng.standard_normal((8, vocab)) * 3).astype(np.float32)
    x[1, 100:200] = x[1].max() + 1.0  # 100 tied largest: top-k 5 keeps all 100 (more than the list holds)
    x[1, 7] = x[1].max() + 2.0
    x[3, 50:120] = 30.0  # 70 tied largest and k = 64: past the list
    x[4, :vocab - 40] = -np.inf  # 40 finite logits: k = 50 keeps them all (a list short of full)
    tokens = np.int32([0, 150, 2, 60, vocab - 1, 4, 9, 11])
    temperature = np.float32([0.8, 1.0, 1.2, 0.7, 1.0, 1.0, 0.9, 0.0])  # the last row greedy
    device = torch.device(TORCH_DEVICE)
    plan = kernels.plan_token_logprobs(ArgSpec.contiguous(x.shape, "float32"), execute.target(device), has_top_k=True,
                                       has_top_p="top_p" in filters, has_min_p="min_p" in filters, fp64=False,
                                       num_top=3)
    assert plan.variant.startswith("filters' list, then the pending rows' searches"), plan.variant
    probe = dataclasses.replace(plan, outputs=plan.outputs + ("pending", "fast_done"))
    inputs = dict(logits=torch.from_numpy(x).to(device), tokens=torch.from_numpy(tokens).to(device),
                  temperature=torch.from_numpy(temperature).to(device), num_top=torch.full((1,), 3, dtype=torch.int32,
                                                                                         device=device))
    for name in ("top_k", "top_p", "min_p"):
        if name in filters:
            per_row = np.asarray(filters[name], np.int64 if name == "top_k" else np.float32)
            inputs[name] = torch.from_numpy(np.broadcast_to(per_row, (8,)).copy()).to(device)
    *_, pending, done = (a.cpu().numpy() for a in execute.run(probe, device, inputs))
    assert list(done) == [1, 1, 1, 1, 1, row_5, 0, 1], done  # (row 6: k = 200 < the 9000 finite logits)
    assert list(pending) == list(1 - done), pending
    t = _torch(x, tokens, temperature, num_top=3, **filters)
    j = _jax(x, tokens, temperature, num_top=3, **filters)
    for name, a, b in zip(FIELDS, t, j):
        assert np.array_equal(a, b, equal_nan=True), name
    _assert_close_to_reference(t, token_logprobs_reference(x, tokens, temperature, num_top=3, **filters), filters)


def test_filters_leave_raw_scaled_rank_and_the_top_list_as_without_them(force_target):
    """raw, scaled, rank and the top list do not depend on the filters, bit for bit, whichever kernel does a row
    (the list's, or the multi-pass kernel's: top-p keeping hundreds of logits, k = 200): every row takes the single
    read's block statistics, here in the GPU's tiling (512-column blocks combined in FP64)."""
    import torch_backend

    force_target(large_programs=False)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 3000)) * 3).astype(np.float32)
    x[1] *= 0.02  # nearly flat: top-p 0.95 keeps thousands of logits
    logits = torch.from_numpy(x).to(TORCH_DEVICE)
    tokens = torch.tensor([0, 10, 2999, 7], device=TORCH_DEVICE)
    temperature = torch.tensor([0.8, 1.0, 1.3, 0.6], device=TORCH_DEVICE)
    filters = dict(top_k=torch.tensor([5, 0, 200, 3], device=TORCH_DEVICE),
                   top_p=torch.tensor([0.9, 0.95, 1.0, 0.5], device=TORCH_DEVICE))
    filtered = torch_backend.token_logprobs(logits, tokens, temperature, num_top=2, **filters)
    plain = torch_backend.token_logprobs(logits, tokens, temperature, num_top=2)
    assert (filtered.log_kept_mass[:3] < 0).all() and not torch.equal(filtered.kept, plain.kept)
    for name in ("raw", "scaled", "rank", "top_ids", "top_logprobs"):
        assert torch.equal(getattr(filtered, name), getattr(plain, name)), (name, getattr(filtered, name),
                                                                            getattr(plain, name))


def _one_shard_logprobs(logits, tokens, temperature, filters, num_top):
    """token_logprobs through vocab-parallel token_logprobs' rounds with a single shard (its own statistics, searches
    and kept sums: atomics over its blocks), torch on TORCH_DEVICE (`logits` a NumPy array or a torch tensor): the
    seven fields as NumPy arrays."""
    from jsample.kernels.plan import run_rounds
    from torch_backend import _execute as execute

    device = torch.device(TORCH_DEVICE)
    logits = (logits if isinstance(logits, torch.Tensor) else torch.from_numpy(logits)).to(device)
    sharded = execute.plan(kernels.plan_token_logprobs_shard, (logits,), device, None, vocab=logits.shape[1],
                           starts=(0,), start_align=16, num_top=num_top, has_top_k="top_k" in filters,
                           has_top_p="top_p" in filters, has_min_p="min_p" in filters, fp64=False)
    inputs = dict(logits=logits, tokens=torch.from_numpy(tokens).to(device),
                  temperature=torch.from_numpy(np.broadcast_to(temperature, tokens.shape).copy()).to(device),
                  vocab_start=torch.zeros((1,), dtype=torch.int32, device=device),
                  num_top=torch.full((1,), num_top, dtype=torch.int32, device=device))
    for name, value in filters.items():
        per_row = np.broadcast_to(np.asarray(value, np.int64 if name == "top_k" else np.float32), tokens.shape)
        inputs[name] = torch.from_numpy(per_row.copy()).to(device)
    out = run_rounds(sharded.rounds, lambda plan, env: execute.run(plan, device, env),
                     lambda record: record.unsqueeze(0), inputs)
    return [a.cpu().numpy() for a in out]


@pytest.mark.parametrize("filters", [dict(top_k=5), dict(top_k=64, top_p=0.8), dict(top_k=20, top_p=0.9, min_p=0.02)],
                         ids=["k", "k+p", "k+p+min_p"])
def test_a_python_int_top_k_takes_the_list_alone_its_ties_counted(filters):
    """top_k a Python int in [1, 64] (kernels.top_k_within_list): the list decides every row, no search is planned
    (the plan's variant). Rows whose ties at the k-th largest reach past the list (100 tied at the 2nd largest, 70
    at the largest, the token among the ties the list does not hold), rows of coarse values (many ties), fewer
    finite logits than k, a greedy row: bit for bit the per-row top_k array's plan (the searches planned) and
    vocab-parallel token_logprobs' rounds as one shard (their own statistics, searches and kept sums), torch ==
    JAX, against the reference; the samplers' fused logprobs equal these, and padding rows (num_valid) are NaN."""
    from torch_backend import _execute as execute

    rng = np.random.default_rng(64)
    vocab = 5000  # (two interpreter blocks a row)
    x = (rng.standard_normal((8, vocab)) * 3).astype(np.float32)
    x[1, 100:200] = x[1].max() + 1.0
    x[1, 7] = x[1].max() + 2.0
    x[2] = np.round(x[2] * 2) / 2  # coarse: hundreds of logits a value
    x[3, 50:120] = 30.0
    x[4, :vocab - 12] = -np.inf  # 12 finite logits
    x[7] = np.round(x[7])
    tokens = np.int32([0, 190, int(np.argmax(x[2])), 119, vocab - 1, 4, 9, int(np.argsort(x[7])[-70])])
    temperature = np.float32([0.8, 1.0, 1.2, 0.7, 1.0, 0.0, 1.3, 1.0])  # row 5 greedy
    k = filters["top_k"]
    target = execute.target(torch.device(TORCH_DEVICE))
    plan = kernels.plan_token_logprobs(ArgSpec.contiguous(x.shape, "float32"), target, has_top_k=True,
                                       has_top_p="top_p" in filters, has_min_p="min_p" in filters, fp64=False,
                                       num_top=3, top_k_in_list=kernels.top_k_within_list(k))
    assert plan.variant == "filters' list", plan.variant
    assert not kernels.top_k_within_list(65) and not kernels.top_k_within_list(True)
    t = _torch(x, tokens, temperature, num_top=3, **filters)
    j = _jax(x, tokens, temperature, num_top=3, **filters)
    per_row = _torch(x, tokens, temperature, num_top=3, **dict(filters, top_k=np.full(8, k, np.int64)))
    one_shard = _one_shard_logprobs(x, tokens, temperature, filters, 3)
    for name, a, b, c, d in zip(FIELDS, t, j, per_row, one_shard):
        for other in (b, c, d):
            assert np.array_equal(a, other, equal_nan=True), name
    _assert_close_to_reference(t, token_logprobs_reference(x, tokens, temperature, num_top=3, **filters), filters)
    assert np.isfinite(t[FIELDS.index("kept")][[1, 3]]).all()  # (tokens among the ties past the list: kept)
    seeds, positions = np.arange(8, dtype=np.int64) * 31, np.arange(8, dtype=np.int64)
    sampled, fused = jsample.top_k_top_p_sample(x, seeds, positions, temperature, return_logprobs=True, num_top=3,
                                                **filters)
    separate = _jax(x, np.asarray(sampled), temperature, num_top=3, **filters)
    t_args = [torch.from_numpy(a).to(TORCH_DEVICE) for a in (x, seeds, positions, temperature)]
    torch_sampled, torch_padded = torch_backend.top_k_top_p_sample(*t_args, return_logprobs=True, num_top=3,
                                                                   num_valid=5, **filters)
    assert np.array_equal(torch_sampled.cpu().numpy()[:5], np.asarray(sampled)[:5])
    for name, a in zip(FIELDS, separate):
        assert np.array_equal(np.asarray(getattr(fused, name)), a, equal_nan=True), name
        padded = getattr(torch_padded, name).cpu().numpy()
        assert np.array_equal(padded[:5], a[:5], equal_nan=True), name
        if name in ("raw", "scaled", "kept", "log_kept_mass"):
            assert np.isnan(padded[5:]).all(), name


_NO_TOP_K_FILTERS = {
    "p": (dict(top_p=np.float32([0.7, 0.9, 0.0, 1.0, 0.5, 0.9, 0.95, np.nan])), [1, 0, 1, 1, 0, 1, 0, 1]),
    "p+min_p": (dict(top_p=np.float32([0.7, 0.9, 0.0, 1.0, 0.5, 0.9, 0.95, np.nan]),
                     min_p=np.float32([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.2, 0.5])), [1, 0, 1, 1, 0, 1, 1, 1]),
    "min_p": (dict(min_p=np.float32([0.12, 0.0, 0.001, 0.0, 0.5, 0.1, 0.2, 0.5])), [1, 1, 0, 1, 0, 1, 1, 1]),
}


@pytest.mark.parametrize("case", list(_NO_TOP_K_FILTERS))
def test_top_p_and_min_p_rows_take_the_list_where_they_cut_inside_it(case):
    """Without top-k, a row whose top-p or min-p leaves out the 64th largest logit (so every logit at or below
    it) is decided from the single read's list, top-p's limit from the whole row's fixed-point mass (read as the
    searches read it); so is a row no filter limits (top_p >= 1 or NaN, min_p <= 0) and a greedy one.
    Rows 0 and 5 hold ten large probabilities and a tail that weighs 15% (p = 0.7 keeps six, and row 0's token is the
    sixth), the others are flat N(0, 9) (p = 0.9 keeps thousands: the searches), row 4 has 70 tied
    largest logits (p = 0.5 keeps all 70, past the list). Both kinds equal the reference, torch == JAX, and the
    samplers' fused logprobs equal these; with num_valid = 5 (a count in torch, row flags in JAX) the valid rows'
    too, whichever route, and the padding rows are NaN (no route's numbers show through)."""
    import dataclasses

    from torch_backend import _execute as execute

    filters, want_done = _NO_TOP_K_FILTERS[case]
    rng = np.random.default_rng(41)
    vocab = 9000
    x = (rng.standard_normal((8, vocab)) * 3).astype(np.float32)
    # rows 0 and 5: ten probabilities 0.2, 0.15, ..., 0.02 (0.85), the other 8990 columns 0.15 between them: at
    # p = 0.7 top-p keeps six (the whole row's mass), five were the limit taken from the list's mass; min-p 0.12
    # keeps nine (e = p / 0.2: 0.1 would be a tie with the tenth, decided by float rounding)
    top = np.log(np.float32([0.2, 0.15, 0.12, 0.1, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02]))
    for row in (0, 5):
        x[row] = np.log(0.15 / (vocab - 10)) + 0.01 * rng.standard_normal(vocab).astype(np.float32)
        x[row, 3000:3010] = top
    x[4, 100:170] = 20.0
    tokens = np.int32([3005, 5, int(np.argmax(x[2])), 17, 120, 3, 9, 4000])  # row 0: the sixth largest
    temperature = np.float32([1.0, 1.0, 1.2, 0.7, 1.0, 0.0, 1.0, 0.9])  # row 5 greedy
    device = torch.device(TORCH_DEVICE)
    plan = kernels.plan_token_logprobs(ArgSpec.contiguous(x.shape, "float32"), execute.target(device),
                                       has_top_k=False, has_top_p="top_p" in filters, has_min_p="min_p" in filters,
                                       fp64=False, num_top=2)
    assert plan.variant.startswith("filters' list, then the pending rows' searches"), plan.variant
    probe = dataclasses.replace(plan, outputs=plan.outputs + ("pending", "fast_done"))
    inputs = dict(logits=torch.from_numpy(x).to(device), tokens=torch.from_numpy(tokens).to(device),
                  temperature=torch.from_numpy(temperature).to(device),
                  num_top=torch.full((1,), 2, dtype=torch.int32, device=device),
                  **{name: torch.from_numpy(value).to(device) for name, value in filters.items()})
    *_, pending, done = (a.cpu().numpy() for a in execute.run(probe, device, inputs))
    assert list(done) == want_done, done
    assert list(pending) == list(1 - done), pending
    t = _torch(x, tokens, temperature, num_top=2, **filters)
    j = _jax(x, tokens, temperature, num_top=2, **filters)
    for name, a, b in zip(FIELDS, t, j):
        assert np.array_equal(a, b, equal_nan=True), name
    _assert_close_to_reference(t, token_logprobs_reference(x, tokens, temperature, num_top=2, **filters), case)
    seeds, positions = np.arange(8, dtype=np.int64) * 7919, np.arange(8, dtype=np.int64)
    sampled, fused = torch_backend.top_k_top_p_sample(
        torch.from_numpy(x).to(device), torch.from_numpy(seeds).to(device), torch.from_numpy(positions).to(device),
        torch.from_numpy(temperature).to(device), return_logprobs=True, num_top=2,
        **{name: torch.from_numpy(value).to(device) for name, value in filters.items()})
    separate = _torch(x, sampled.cpu().numpy().astype(np.int32), temperature, num_top=2, **filters)
    for name, a in zip(FIELDS, separate):
        assert np.array_equal(getattr(fused, name).cpu().numpy(), a, equal_nan=True), name
    assert np.isfinite(getattr(fused, "kept").cpu().numpy()).all()  # a sampled token is always kept
    torch_padded = torch_backend.top_k_top_p_sample(
        torch.from_numpy(x).to(device), torch.from_numpy(seeds).to(device), torch.from_numpy(positions).to(device),
        torch.from_numpy(temperature).to(device), return_logprobs=True, num_top=2,
        num_valid=torch.tensor(5, device=device),
        **{name: torch.from_numpy(value).to(device) for name, value in filters.items()})[1]
    jax_padded = jsample.top_k_top_p_sample(x, seeds, positions, temperature, return_logprobs=True, num_top=2,
                                            num_valid=5, **filters)[1]
    for name, a in zip(FIELDS, separate):
        for padded in (getattr(torch_padded, name).cpu().numpy(), np.asarray(getattr(jax_padded, name))):
            assert np.array_equal(padded[:5], a[:5], equal_nan=True), name
            if name in ("raw", "scaled", "kept", "log_kept_mass"):
                assert np.isnan(padded[5:]).all(), name
            elif name in ("rank", "top_ids"):
                assert (padded[5:] == (0 if name == "rank" else -1)).all(), name


def test_top_p_row_mass_is_split_over_programs():
    """row_mass_kernel: top-p's whole-row mass (the fixed-point masses of every finite logit) in contiguous parts
    over its programs (10 of 16 hold columns at V = 40000): their sum is the reference's (to rounding of e at a
    few terms' floors), for the rows that may need it (a full list, top-p in (0, 1), top-k not acting), and 0
    for the others (top-p 1, top-p 0, top-k acting, a padding row)."""
    import dataclasses

    from jsample.reference.filtered import MASS_SCALE, relative_probabilities
    from torch_backend import _execute as execute

    rng = np.random.default_rng(47)
    vocab = 40000
    x = (rng.standard_normal((6, vocab)) * 2).astype(np.float32)
    x[:, 12345] = np.inf  # not finite: weighs nothing
    temperature = np.float32([1.0, 0.7, 1.0, 1.0, 1.3, 1.0])
    top_p = np.float32([0.9, 0.5, 1.0, 0.0, 0.9, 0.9])
    top_k = np.int64([0, 0, 0, 0, 0, 20])  # row 5: top-k acts (within the list)
    row_valid = np.uint8([1, 1, 1, 1, 0, 1])  # row 4: padding
    device = torch.device(TORCH_DEVICE)
    plan = kernels.plan_token_logprobs(ArgSpec.contiguous(x.shape, "float32"), execute.target(device), has_top_k=True,
                                       has_top_p=True, has_min_p=False, fp64=False, num_top=0, row_valid=True)
    probe = dataclasses.replace(plan, outputs=plan.outputs + ("row_mass",))
    inputs = dict(logits=torch.from_numpy(x).to(device), tokens=torch.zeros(6, dtype=torch.int32, device=device),
                  temperature=torch.from_numpy(temperature).to(device), top_p=torch.from_numpy(top_p).to(device),
                  top_k=torch.from_numpy(top_k).to(device), row_valid=torch.from_numpy(row_valid).to(device),
                  num_top=torch.zeros(1, dtype=torch.int32, device=device))
    parts = execute.run(probe, device, inputs)[-1].cpu().numpy().view(np.int64)
    assert parts.shape == (6, kernels.logprobs.MASS_PROGRAMS)
    assert (parts[:, :10] > 0).all(axis=1).tolist() == [True, True, False, False, False, False]
    assert (parts[:, 10:] == 0).all() and (parts[2:] == 0).all()
    for row in (0, 1):
        want = np.floor(relative_probabilities(x[row], temperature[row]) * MASS_SCALE).astype(np.int64).sum()
        assert abs(int(parts[row].sum()) - int(want)) <= 1e-5 * want, (row, parts[row].sum(), want)


def test_per_row_filters_and_edge_rows():
    """Per-row filter arrays (out-of-range values clamped as the sampler clamps them), a row without a finite
    logit (token -1), an overflowing greedy row, tokens at the boundaries."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((7, 128)) * 2).astype(np.float32)
    x[1] = -np.inf  # no finite logit
    x[2, 5] = 3e38  # overflows at T = 0.5: greedy, not filtered
    x[3, :10] = 4.0  # ten tied largest logits: top-k = 3 keeps all ten
    tokens = np.int32([0, -1, 5, 9, 10, 127, 64])
    temperature = np.float32([0.9, 1.0, 0.5, 1.0, 1.0, 0.3, 2.0])
    filters = dict(top_k=np.int64([0, 5, 3, 3, 200, -4, 1]), top_p=np.float32([1.5, 0.5, 0.2, 0.0, np.nan, 0.95, 0.3]),
                   min_p=np.float32([0.0, 0.1, 0.9, 2.0, -1.0, np.nan, 0.2]))
    t = _torch(x, tokens, temperature, num_top=4, **filters)
    j = _jax(x, tokens, temperature, num_top=4, **filters)
    for name, a, b in zip(FIELDS, t, j):
        assert np.array_equal(a, b, equal_nan=True), name
    ref = token_logprobs_reference(x, tokens, temperature, num_top=4, **filters)
    _assert_close_to_reference(t, ref, "edge rows")
    assert np.isnan(t[0][1]) and t[4][1] == 0 and (t[5][1] == -1).all()  # token -1: NaN, rank 0; no top ids
    assert t[3][2] == 0.0 and t[2][2] == t[1][2]  # the greedy row is not filtered: kept == scaled (== raw at T = 1)


@pytest.mark.parametrize("filters", FILTERS[1:], ids=lambda f: "+".join(f))
def test_rl_replay_kept_is_the_samplers_distribution(filters):
    """Sample with the filters, then token_logprobs of the sampled tokens: finite kept; over a row's every
    column, exp(kept) sums to 1 on exactly the reference's kept set, and log_kept_mass is the reference's S."""
    rng = np.random.default_rng(11)
    vocab = 64
    x = (rng.standard_normal((4, vocab)) * 2).astype(np.float32)
    seeds, positions = np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32) * 3
    temperature = np.float32([0.7, 1.0, 1.3, 0.5])
    tokens = np.asarray(jsample.top_k_top_p_sample(x, seeds, positions, temperature, **filters))
    sampled = _jax(x, tokens, temperature, **filters)
    assert np.isfinite(sampled[2]).all()
    for b in range(4):
        every = _jax(np.repeat(x[b:b + 1], vocab, axis=0), np.arange(vocab, dtype=np.int32),
                     np.full(vocab, temperature[b]), **{n: v for n, v in filters.items()})
        keep = kept_tokens(x[b], temperature[b], **filters)
        assert np.array_equal(np.isfinite(every[2]), keep), b
        assert abs(np.exp(every[2][keep].astype(np.float64)).sum() - 1.0) < 1e-5
        s = token_logprobs_reference(x[b:b + 1], tokens[b:b + 1], temperature[b:b + 1], **filters).log_kept_mass[0]
        np.testing.assert_allclose(sampled[3][b], s, atol=1e-5)
        np.testing.assert_allclose(every[2][keep], (every[1] - every[3])[keep], atol=1e-6)


def test_no_num_top_and_no_batch_size_costs_a_compilation():
    """num_top is read on the device and the batch is the grid: over every count 0..64 and B = 1..300, one
    compile key per frontend."""
    from jsample._jax import _execute as jax_execute
    from torch_backend import _execute as torch_execute

    for target, frontend in ((torch_execute.compiled_target(132, 9), "torch"),
                             (jax_execute.compiled_target(132), "jax")):
        keys = set()
        for batch, num_top in [(8, n) for n in range(kernels.MAX_NUM_TOP + 1)] + [(b, 20) for b in range(1, 301)]:
            plan = kernels.plan_token_logprobs(ArgSpec.contiguous((batch, 32000), "bfloat16"), target, has_top_k=True,
                                               has_top_p=True, has_min_p=False, fp64=False, num_top=num_top)
            keys.add(compile_key(plan.launches[0], frontend))
        assert len(keys) == 1, (frontend, keys)


@pytest.mark.parametrize("bad, error, text", [
    (dict(num_top=65), ValueError, "token_logprobs: num_top must be in [0, 64], got 65."),
    (dict(num_top=2.0), TypeError, "token_logprobs: num_top must be an int in [0, 64], got float."),
    (dict(tokens=np.float32([1, 2])), TypeError, "token_logprobs: tokens must have dtype int32 or int64, got float32."),
    (dict(tokens=np.int32([1, 40])), ValueError, "token_logprobs: tokens must be -1 or in [0, V) = [0, 40), got 40."),
    (dict(tokens=np.int32([1, 2, 3])), ValueError, "token_logprobs: tokens must be a 1-D array [B] with B = 2"),
])
def test_errors_are_the_same_in_both_frontends(bad, error, text):
    x = np.zeros((2, 40), np.float32)
    args = dict(tokens=np.int32([1, 2]), num_top=0)
    args.update(bad)
    tokens = args.pop("tokens")
    with pytest.raises(error) as jax_error:
        jsample.token_logprobs(x, tokens, 1.0, **args)
    assert str(jax_error.value).startswith(text)
    torch_args = (torch.from_numpy(x).to(TORCH_DEVICE), torch.from_numpy(tokens).to(TORCH_DEVICE), 1.0)
    if "got 40." in text and TORCH_DEVICE != "cpu":  # a device tensor's values are not read: NaN, rank 0
        out = torch_backend.token_logprobs(*torch_args, **args)
        assert torch.isnan(out.raw[1]) and int(out.rank[1]) == 0 and int(out.rank[0]) > 0
        return
    with pytest.raises(error) as torch_error:
        torch_backend.token_logprobs(*torch_args, **args)
    assert str(jax_error.value) == str(torch_error.value)


def test_jit_and_vmap_equal_the_eager_call():
    import jax

    x, tokens, _ = _rows(4, 100, 5)
    eager = _jax(x, tokens, 0.8, top_k=7, num_top=2)
    jitted = jax.jit(lambda a, t: jsample.token_logprobs(a, t, 0.8, top_k=7, num_top=2))(x, tokens)
    mapped = jax.vmap(lambda a, t: jsample.token_logprobs(a, t, 0.8, top_k=7, num_top=2))(
        x.reshape(2, 2, 100), tokens.reshape(2, 2))
    for i, name in enumerate(FIELDS):
        assert np.array_equal(np.asarray(getattr(jitted, name)), eager[i], equal_nan=True), name
        assert np.array_equal(np.asarray(getattr(mapped, name)).reshape(eager[i].shape), eager[i], equal_nan=True), name


@pytest.mark.parametrize("op, filters", [("gumbel_sample", {}), ("gumbel_sample", dict(draft=True)),
                                         ("top_k_top_p_sample", dict(top_k=20, top_p=0.9)),
                                         ("top_k_top_p_sample", dict(min_p=0.05))])
def test_return_logprobs_equals_token_logprobs_of_the_tokens(op, filters):
    """The samplers' return_logprobs: the same tokens as without it, and Logprobs equal to token_logprobs of
    the same inputs and tokens, bit for bit, in both frontends; padding rows (num_valid): token -1, NaN."""
    x, _, temperature = _rows(5, 200, 9)
    seeds, positions = np.arange(5, dtype=np.int32) * 5, np.arange(5, dtype=np.int32)
    sample = getattr(jsample, op)
    tokens = np.asarray(sample(x, seeds, positions, temperature, **filters))
    fused_tokens, fused = sample(x, seeds, positions, temperature, return_logprobs=True, num_top=4, **filters)
    assert np.array_equal(np.asarray(fused_tokens), tokens)
    logprob_filters = {n: v for n, v in filters.items() if n != "draft"}
    separate = _jax(x, tokens, temperature, num_top=4, **logprob_filters)
    t = [torch.from_numpy(a).to(TORCH_DEVICE) for a in (x, seeds, positions, temperature)]
    torch_tokens, torch_fused = getattr(torch_backend, op)(*t, return_logprobs=True, num_top=4, **filters)
    assert np.array_equal(torch_tokens.cpu().numpy(), tokens)
    for i, name in enumerate(FIELDS):
        assert np.array_equal(np.asarray(getattr(fused, name)), separate[i], equal_nan=True), name
        assert np.array_equal(getattr(torch_fused, name).cpu().numpy(), separate[i], equal_nan=True), name
    padded_tokens, padded = sample(x, seeds, positions, temperature, return_logprobs=True, num_valid=3, **filters)
    assert np.array_equal(np.asarray(padded_tokens)[:3], tokens[:3]) and (np.asarray(padded_tokens)[3:] == -1).all()
    without_top = _jax(x, tokens, temperature, **logprob_filters)  # (num_top = 0: gumbel's single read)
    assert np.array_equal(np.asarray(padded.kept)[:3], without_top[2][:3], equal_nan=True)
    assert np.isnan(np.asarray(padded.raw)[3:]).all() and (np.asarray(padded.rank)[3:] == 0).all()


def test_single_read_over_several_blocks_fused_equals_separate():
    """The single read (token_logprobs without filters or top list, gumbel_sample(return_logprobs=True)): rows
    of several blocks (4096 columns a block in the interpreter, 512 on a GPU), their statistics combined; the
    fused rank counts again only in blocks with a larger logit. Against the reference (1e-5, exact rank), fused
    == separate and torch == JAX bit for bit; edge rows: +inf and NaN logits in other blocks than the token's,
    a token far down (every block counted again), a row without a finite logit, a row whose scaled logits
    overflow (greedy), greedy and hot temperatures; at T = 1 and on greedy rows scaled == raw bit for bit."""
    from torch_backend import _execute as torch_execute

    vocab, batch = 9000, 8
    rng = np.random.default_rng(41)
    x = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
    x[1, 8192:] = -50.0  # the last block: low logits, and a +inf, which rank counts
    x[1, 8500], x[1, 100] = np.inf, np.nan
    x[2] = -np.inf  # no finite logit: token -1, NaN logprobs
    x[3, 5000] = 3e38  # 3e38 / 0.05 overflows float32: greedy at T = 1 (the largest logit)
    x[4, 4095:4097] = x[4].max() + 1  # a tie across a block boundary
    temperature = np.float32([1.0, 0.7, 1.0, 0.05, 0.0, 2.5, 1.0, 100.0])
    seeds, positions = np.arange(batch, dtype=np.int64) * 3, np.arange(batch, dtype=np.int64)
    tokens, fused = jsample.gumbel_sample(x, seeds, positions, temperature, return_logprobs=True)
    tokens = np.asarray(tokens)
    assert tokens[2] == -1 and tokens[3] == 5000 and tokens[4] == 4095
    assert np.array_equal(tokens, np.asarray(jsample.gumbel_sample(x, seeds, positions, temperature)))
    replay = tokens.copy()
    replay[6] = int(np.argmin(np.where(np.isfinite(x[6]), x[6], np.inf)))  # the lowest logit: every block recounted
    separate = _jax(x, tokens, temperature)
    for i, name in enumerate(FIELDS):
        assert np.array_equal(np.asarray(getattr(fused, name)), separate[i], equal_nan=True), name
    t = [torch.from_numpy(a).to(TORCH_DEVICE) for a in (x, seeds, positions, temperature)]
    torch_tokens, torch_fused = torch_backend.gumbel_sample(*t, return_logprobs=True)
    assert np.array_equal(torch_tokens.cpu().numpy(), tokens)
    for i, name in enumerate(FIELDS):
        assert np.array_equal(getattr(torch_fused, name).cpu().numpy(), separate[i], equal_nan=True), name
    for chosen in (tokens, replay):
        got = _jax(x, chosen, temperature)
        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(got, _torch(x, chosen, temperature)))
        _assert_close_to_reference(got, token_logprobs_reference(x, chosen, temperature), "single read")
    assert _jax(x, replay, temperature)[4][6] == np.isfinite(x[6]).sum()  # the last of the finite logits
    # T = 1 (rows 0, 2, 6) and greedy rows (4: T = 0; 3: its scaled logits overflow) read at T = 1: scaled is raw,
    # bit for bit (the single read takes the scaled sums from the raw ones where 1 / T == 1)
    unit = [0, 2, 3, 4, 6]
    assert np.array_equal(separate[1][unit], separate[0][unit], equal_nan=True)
    assert not np.array_equal(separate[1][[1, 5, 7]], separate[0][[1, 5, 7]])
    plan = kernels.plan_token_logprobs(ArgSpec.contiguous((batch, vocab), "float32"), torch_execute.target(torch.device(TORCH_DEVICE)), has_top_k=False,
                                       has_top_p=False, has_min_p=False, fp64=False, num_top=0)
    assert plan.variant == "single read" and plan.launches[0].grid[1] >= 3


def test_fused_rank_counts_several_blocks_a_program(force_target):
    """gumbel_sample(return_logprobs=True)'s rank in the GPU tiling (blocks of 512): rank_count_kernel's programs
    each cover several blocks (71 blocks on 64 programs a row; 8 programs a row at B = 300, read from the plan)
    and read again only those with a larger logit, one after the other. Rows: the token the row's largest logit
    (nothing read again), hot rows whose tokens lie far down (most blocks read, two by some programs), every
    logit equal (none larger). The rank equals token_logprobs' (counted in its own single read), the
    reference's and torch's."""
    from torch_backend import _execute as torch_execute

    force_target(large_programs=False)
    vocab, batch = 70 * 512 + 37, 4
    rng = np.random.default_rng(43)
    x = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
    x[0, 5 * 512 + 3] = 100.0
    x[2] = 1.5
    temperature = np.float32([1.0, 100.0, 1.0, 30.0])
    seeds, positions = np.arange(batch, dtype=np.int64) + 7, np.arange(batch, dtype=np.int64)
    tokens, fused = jsample.gumbel_sample(x, seeds, positions, temperature, return_logprobs=True)
    tokens = np.asarray(tokens)
    rank = np.asarray(fused.rank)
    assert tokens[0] == 5 * 512 + 3 and rank[0] == 1 and rank[2] == 1
    assert rank[1] > 8192 and rank[3] > 1000, rank  # far down: (nearly) every block counted again
    separate = _jax(x, tokens, temperature)
    for i, name in enumerate(FIELDS):
        assert np.array_equal(np.asarray(getattr(fused, name)), separate[i], equal_nan=True), name
    assert np.array_equal(rank, token_logprobs_reference(x, tokens, temperature).rank)
    t = [torch.from_numpy(a).to(TORCH_DEVICE) for a in (x, seeds, positions, temperature)]
    torch_tokens, torch_fused = torch_backend.gumbel_sample(*t, return_logprobs=True)
    assert np.array_equal(torch_tokens.cpu().numpy(), tokens) and np.array_equal(torch_fused.rank.cpu().numpy(), rank)
    target = torch_execute.target(torch.device(TORCH_DEVICE))
    # padded plans (row_valid) count on padded_row_slots row slots, P as for that many rows
    for rows, row_valid, grid in ((batch, False, (batch, 64)), (300, False, (300, 8)), (300, True, (32, 64)),
                                  (batch, True, (batch, 64))):
        plan = kernels.plan_gumbel_sample(ArgSpec.contiguous((rows, vocab), "float32"),
                                          ArgSpec.contiguous((rows,), "int64"), target, fp64=False, draft=False,
                                          return_logprobs=True, row_valid=row_valid)
        counting = [step for step in plan.launches if step.kernel is kernels.logprobs.rank_count_kernel]
        assert [step.grid for step in counting] == [grid]
        assert dict(counting[0].constexprs)["ROW_SLOTS"] == row_valid
        assert dict(counting[0].constexprs)["SLOTS"] == 16  # 71 blocks on 8 programs: 9 a program at most


def test_return_logprobs_arguments_are_checked():
    x = np.zeros((2, 40), np.float32)
    args = (x, np.int32([1, 2]), np.int32([0, 0]), 1.0)
    for kwargs, error, text in ((dict(num_top=3), ValueError, "gumbel_sample: num_top = 3 needs return_logprobs=True."),
                                (dict(return_logprobs=1), TypeError,
                                 "gumbel_sample: return_logprobs must be True or False"),
                                (dict(return_logprobs=True, num_top=70), ValueError,
                                 "gumbel_sample: num_top must be in [0, 64], got 70.")):
        with pytest.raises(error) as jax_error:
            jsample.gumbel_sample(*args, **kwargs)
        with pytest.raises(error) as torch_error:
            torch_backend.gumbel_sample(*(torch.from_numpy(a).to(TORCH_DEVICE) if isinstance(a, np.ndarray) else a
                                          for a in args), **kwargs)
        assert str(jax_error.value) == str(torch_error.value) and str(jax_error.value).startswith(text)


def test_torch_fakes_give_the_logprobs_shapes():
    """What torch.compile traces: the custom ops' fakes (shapes and dtypes of every output)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, s = torch.empty(3, 50, device=TORCH_DEVICE), torch.zeros(3, dtype=torch.int64, device=TORCH_DEVICE)
        for out in (torch_backend.token_logprobs(x, s, 1.0, num_top=4),
                    torch_backend.gumbel_sample(x, s, s, 1.0, return_logprobs=True, num_top=4)[1],
                    torch_backend.top_k_top_p_sample(x, s, s, 1.0, top_k=3, return_logprobs=True, num_top=4)[1]):
            assert [tuple(getattr(out, n).shape) for n in FIELDS] == [(3,)] * 5 + [(3, 4)] * 2
            assert [getattr(out, n).dtype for n in FIELDS] == [torch.float32] * 4 + [torch.int32] * 2 + [torch.float32]
        target = torch.empty(3, 3, 50, device=TORCH_DEVICE)
        drafts = torch.zeros(3, 2, dtype=torch.int32, device=TORCH_DEVICE)
        out = torch_backend.rejection_sample(target, drafts, s.to(torch.int32), s, s, 1.0, return_logprobs=True,
                                             num_top=4)[2]
        assert [tuple(getattr(out, n).shape) for n in FIELDS] == [(3, 3)] * 5 + [(3, 3, 4)] * 2


@pytest.mark.parametrize("draft", [False, True])
def test_rejection_sample_return_logprobs(draft):
    """rejection_sample(return_logprobs=True): the same tokens; each emitted token's logprobs under its target
    row equal token_logprobs of that row and token (a -1 token: NaN, rank 0); torch == JAX; padding requests."""
    rng = np.random.default_rng(21)
    batch, k, vocab = 4, 3, 96
    target = (rng.standard_normal((batch, k + 1, vocab)) * 2).astype(np.float32)
    drafts = target[:, :k].argmax(-1).astype(np.int32)
    drafts[1, 1] = 0  # a likely rejection
    counts = np.int32([3, 3, 1, 0])
    seeds, positions = np.arange(batch, dtype=np.int32) + 9, np.arange(batch, dtype=np.int32)
    temperature = np.float32([0.8, 1.0, 0.0, 1.3])
    extra = dict(draft_logits=(target[:, :k] + rng.standard_normal((batch, k, vocab))).astype(np.float32)) if draft else {}
    args = (target, drafts, counts, seeds, positions, temperature)
    tokens, num_sampled = (np.asarray(a) for a in jsample.rejection_sample(*args, **extra))
    got_tokens, got_num, lp = jsample.rejection_sample(*args, return_logprobs=True, num_top=3, **extra)
    assert np.array_equal(np.asarray(got_tokens), tokens) and np.array_equal(np.asarray(got_num), num_sampled)
    rows = _jax(target.reshape(-1, vocab), tokens.reshape(-1), np.repeat(temperature, k + 1), num_top=3)
    for i, name in enumerate(FIELDS):
        got = np.asarray(getattr(lp, name))
        assert got.shape[:2] == (batch, k + 1)
        assert np.array_equal(got.reshape(rows[i].shape), rows[i], equal_nan=True), name
    assert np.isnan(np.asarray(lp.scaled)[tokens < 0]).all() and (np.asarray(lp.rank)[tokens < 0] == 0).all()
    t = [torch.from_numpy(a).to(TORCH_DEVICE) for a in args]
    torch_extra = {n: torch.from_numpy(v).to(TORCH_DEVICE) for n, v in extra.items()}
    torch_out = torch_backend.rejection_sample(*t, return_logprobs=True, num_top=3, **torch_extra)
    for name in FIELDS:
        assert np.array_equal(getattr(torch_out[2], name).cpu().numpy(), np.asarray(getattr(lp, name)),
                              equal_nan=True), name
    _, _, padded = jsample.rejection_sample(*args, return_logprobs=True, num_valid=2, **extra)
    assert np.isnan(np.asarray(padded.scaled)[2:]).all()
    assert np.array_equal(np.asarray(padded.scaled)[:2], np.asarray(lp.scaled)[:2], equal_nan=True)


_COMPILE_SINGLE_READ = """
import compiled_kernels as ck
from jsample import kernels
from jsample.kernels.plan import ArgSpec
from torch_backend import _execute as torch_execute

target = torch_execute.compiled_target(132, 9)
seeds = ArgSpec.contiguous((64,), "int64")
plans = [(kernels.plan_token_logprobs(ArgSpec.contiguous((64, 151936), "bfloat16"), target, has_top_k=False,
                                      has_top_p=False, has_min_p=False, fp64=False, num_top=0), "*bf16"),
         (kernels.plan_token_logprobs(ArgSpec.contiguous((8, 5, 32000), "float32"), target, has_top_k=False,
                                      has_top_p=False, has_min_p=False, fp64=False, num_top=0, row_valid=True), "*fp32"),
         (kernels.plan_gumbel_sample(ArgSpec.contiguous((64, 151936), "bfloat16"), seeds, target, fp64=False,
                                     draft=False, return_logprobs=True), "*bf16"),
         (kernels.plan_gumbel_sample(ArgSpec.contiguous((64, 151936), "float32"), seeds, target, fp64=False,
                                     draft=True, row_valid=True, return_logprobs=True), "*fp32"),
         (kernels.plan_token_logprobs(ArgSpec.contiguous((8, 5, 32000), "bfloat16"), target, has_top_k=False,
                                      has_top_p=False, has_min_p=False, fp64=False, num_top=5, row_valid=True), "*bf16"),
         (kernels.plan_gumbel_sample(ArgSpec.contiguous((64, 151936), "float32"), seeds, target, fp64=False,
                                     draft=False, return_logprobs=True, num_top=20), "*fp32"),
         (kernels.plan_token_logprobs(ArgSpec.contiguous((64, 151936), "bfloat16"), target, has_top_k=True,
                                      has_top_p=True, has_min_p=True, fp64=False, num_top=4), "*bf16"),
         (kernels.plan_token_logprobs(ArgSpec.contiguous((64, 151936), "float32"), target, has_top_k=False,
                                      has_top_p=True, has_min_p=False, fp64=False, num_top=0), "*fp32"),
         (kernels.plan_token_logprobs(ArgSpec.contiguous((2, 151936), "bfloat16"), target, has_top_k=True,
                                      has_top_p=True, has_min_p=True, fp64=False, num_top=0), "*bf16")]
inputs = {"tokens": "*i32", "row_valid": "*i32", "seeds": "*i64", "positions": "*i64", "temperature": "*fp32",
          "num_top": "*i32", "top_k": "*i64", "top_p": "*fp32", "min_p": "*fp32"}
for plan, logits in plans:
    assert plan.variant.startswith("single read") or plan.variant.startswith("filters' list"), plan.variant
    for name in ck.compile_plan(plan, {"logits": logits, **inputs}):
        print("compiled", name)
"""


def test_the_single_read_kernels_compile_for_sm90():
    """The single read's kernels as compiled for an H100/H200, in a process of compiled kernels (the
    interpreter accepts what Triton's compiler may not: a plain global, a mistyped branch)."""
    import os
    import pathlib
    import subprocess
    import sys

    pytest.importorskip("triton.backends.nvidia")
    tests = pathlib.Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "0", "JSAMPLE_INTERPRET": "0",
           "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", _COMPILE_SINGLE_READ], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("compiled") == 59  # (the filtered plans' pending rows: searches, kept mass, finish)
    assert result.stdout.count("compiled top_list_kernel") == 5, result.stdout
    assert result.stdout.count("compiled row_mass_kernel") == 3, result.stdout
    assert "compiled filtered_list_reduce_kernel" in result.stdout
    assert result.stdout.count("compiled filtered_finish_kernel") == 3, result.stdout
    assert result.stdout.count("compiled kept_mass_kernel") == 2, result.stdout  # (B = 64: the rounds)
    assert result.stdout.count("compiled pending_search_kernel") == 1, result.stdout  # (B = 2: in one launch)


@pytest.mark.parametrize("top_k", [None, 900], ids=["top_p", "top_k+top_p"])
def test_top_p_search_over_tied_levels_past_the_list(top_k):
    """The pending rows' top-p search (vocab-parallel top_k_top_p_sample's, one shard) on rows whose kept set is far past
    the 64-logit list: the logits take 12 levels, each 40-300 tied columns (and a -inf, NaN and +inf column), so
    top-p's boundary falls on a level's tie; for each p one row per level asks for a token of that level. Which
    levels are kept equals the reference's kept set (filtered.kept_tokens: the sampler's), kept and
    log_kept_mass equal the reference's, torch == JAX bit for bit. A search that ends early, or takes a pivot's
    neighbour, keeps or drops a level here."""
    rng = np.random.default_rng(4100)
    vocab, levels = 2500, 12
    values = np.float32(4.0) - np.float32(0.35) * np.arange(levels, dtype=np.float32)
    counts = rng.integers(40, 300, levels)
    row = np.full(vocab, -30.0, np.float32)
    columns = rng.permutation(vocab)
    first = np.concatenate([[0], np.cumsum(counts)])
    for level in range(levels):
        row[columns[first[level]:first[level + 1]]] = values[level]
    row[columns[-3:]] = [-np.inf, np.nan, -np.inf]
    members = [columns[first[level]] for level in range(levels)]  # a column of each level
    ps = np.float32([0.05, 0.3, 0.55, 0.8, 0.97])
    x = np.tile(row, (len(ps) * levels, 1))
    tokens = np.int32(members * len(ps))
    top_p = np.repeat(ps, levels)
    temperature = np.float32(1.3)
    kwargs = dict(top_p=top_p) if top_k is None else dict(top_p=top_p, top_k=np.full(len(tokens), top_k, np.int64))
    t = _torch(x, tokens, temperature, **kwargs)
    j = _jax(x, tokens, temperature, **kwargs)
    for name, a, b in zip(FIELDS, t, j):
        assert np.array_equal(a, b, equal_nan=True), name
    ref = token_logprobs_reference(x, tokens, temperature, **kwargs)
    kept = np.isfinite(t[FIELDS.index("kept")])
    levels_kept = []
    for i, p in enumerate(ps):
        keep = kept_tokens(row, temperature, top_k=top_k, top_p=float(p))
        want = keep[members]
        assert 64 < keep.sum() < vocab - 3 or p < 0.1, (p, keep.sum())  # past the list (but the smallest p)
        assert np.array_equal(kept[i * levels:(i + 1) * levels], want), (p, kept[i * levels:(i + 1) * levels], want)
        levels_kept.append(int(want.sum()))
    assert len(set(levels_kept)) >= 4, levels_kept  # the boundary moves across the levels
    for name in ("kept", "log_kept_mass"):
        np.testing.assert_allclose(t[FIELDS.index(name)], getattr(ref, name), atol=1e-5, err_msg=name)


def _pending_search_variant(plan, groups):
    """`plan` with pending_search_kernel on `groups` groups of one program (the interpreter's tiling is one group):
    the rows a group takes one after another, its scratch reused row after row."""
    import dataclasses

    steps = tuple(dataclasses.replace(s, grid=(groups,) + s.grid[1:]) if s.kernel.fn.__name__ == "pending_search_kernel"
                  else s for s in plan.launches)
    buffers = tuple(dataclasses.replace(b, shape=(groups,) + b.shape[1:])
                    if b.name in ("search_partials", "search_tile_max") else b for b in plan.buffers)
    return dataclasses.replace(plan, launches=steps, buffers=buffers)


@pytest.mark.parametrize("filters", ["p", "k+p+min_p"])
def test_pending_rows_searched_in_one_launch_equal_the_rounds(filters, monkeypatch):
    """The pending rows' searches and kept sums as steps of one launch (logprobs_search.pending_search_kernel) give
    every output of the rounds' route (vocab-parallel searches as one shard, kept_mass_kernel) bit for bit, on a
    batch of flat rows (kept sets of thousands: pending), language-model-like rows (mostly the list's), rows of
    per-row k beyond the list, a greedy row and padding rows (num_valid): in the interpreter one group, and three
    groups taking rows in turn (scratch reused row after row); on a GPU (batches of one or two rows) many programs a
    row meeting at barriers, in both frontends. A call without a pending row leaves the flags all zero."""
    import dataclasses

    from jsample.kernels import logprobs_search
    from torch_backend import _execute as execute

    rng = np.random.default_rng(41)
    batch, vocab = 15, 3000
    x = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
    x[::3] *= np.float32(0.02)  # flat rows: top-p keeps most of the row
    x[4, : vocab - 30] = -np.inf  # 30 finite logits
    x[5] = np.round(x[5] * 2) / 2  # coarse
    tokens = rng.integers(0, vocab, size=batch).astype(np.int32)
    tokens[4] = vocab - 1
    temperature = rng.choice(np.float32([0.7, 1.0, 1.3]), size=batch)
    temperature[7] = 0.0  # greedy
    given = dict(top_k=rng.choice(np.int64([0, 5, 50, 200, 1500]), size=batch),
                 top_p=rng.choice(np.float32([0.5, 0.9, 0.99, 1.0]), size=batch),
                 min_p=rng.choice(np.float32([0.0, 0.001, 0.02]), size=batch))
    names = dict(p=("top_p",), **{"k+p+min_p": ("top_k", "top_p", "min_p")})[filters]
    device = torch.device(TORCH_DEVICE)
    target = execute.target(device)

    def plan(rows, num_valid=False):  # (uncached: the rounds' plan below is planned with a patched module)
        return kernels.plan_token_logprobs.__wrapped__(ArgSpec.contiguous((rows, vocab), "float32"), target,
                                                       has_top_k="top_k" in names, has_top_p="top_p" in names,
                                                       has_min_p="min_p" in names, fp64=False, num_top=2,
                                                       row_valid=num_valid)

    def run(plan, rows=slice(None), **extra):
        inputs = dict(logits=torch.from_numpy(x[rows]).to(device), tokens=torch.from_numpy(tokens[rows]).to(device),
                      temperature=torch.from_numpy(temperature[rows]).to(device),
                      num_top=torch.full((1,), 2, dtype=torch.int32, device=device),
                      **{name: torch.from_numpy(given[name][rows]).to(device) for name in names})
        probe = dataclasses.replace(plan, outputs=plan.outputs + ("pending",))
        *out, pending = (a.cpu().numpy() for a in execute.run(probe, device, dict(inputs, **extra)))
        return out, pending

    with monkeypatch.context() as patch:  # the rounds' route (where the GPU's programs may not wait for each other)
        patch.setattr(logprobs_search, "pending_search_launch", lambda *args, **kwargs: None)
        rounds, pending = run(plan(batch))
    assert 3 <= pending.sum() < batch - 3, pending  # both routes' rows
    if target.interpreter:  # every batch in one launch: one group, and three taking rows in turn
        one = plan(batch)
        assert one.variant.endswith("in one launch"), one.variant
        outs = [run(one)[0], run(_pending_search_variant(one, 3))[0]]
    else:  # batches of one or two rows in one launch (their rows' numbers do not depend on the batch)
        assert plan(2).variant.endswith("in one launch") and not plan(3).variant.endswith("in one launch")
        pairs = [run(plan(len(range(batch)[i:i + 2])), slice(i, i + 2))[0] for i in range(0, batch, 2)]
        outs = [[np.concatenate(parts) for parts in zip(*pairs)]]
        # JAX's pairs (its one launch through jax-triton): the same numbers
        jax_pairs = [_jax(x[i:i + 2], tokens[i:i + 2], temperature[i:i + 2], num_top=2,
                          **{name: given[name][i:i + 2] for name in names}) for i in range(0, batch, 2)]
        outs.append([np.concatenate(parts) for parts in zip(*jax_pairs)])
    for out in outs:
        for name, a, b in zip(FIELDS, rounds, out):
            assert np.array_equal(a, b, equal_nan=True), name
    _assert_close_to_reference(rounds, token_logprobs_reference(x, tokens, temperature, num_top=2,
                                                                **{name: given[name] for name in names}), filters)
    # padding rows (torch's count): the valid rows' numbers, NaN past them
    valid = 9 if target.interpreter else 1
    rows = slice(None) if target.interpreter else slice(0, 2)
    out, pending = run(plan(len(tokens[rows]), True), rows,
                       row_valid=torch.full((1,), valid, dtype=torch.int64, device=device))
    assert not pending[valid:].any()
    for name, a, b in zip(FIELDS, rounds, out):
        assert np.array_equal(a[:valid], b[:valid], equal_nan=True), name
    assert np.isnan(out[FIELDS.index("kept")][valid:]).all()
    # no pending row (every row's kept set within the list): the flags stay zero
    given.update(top_k=np.full(batch, 3, np.int64), top_p=np.full(batch, 0.5, np.float32))
    out, pending = run(plan(len(tokens[rows])), rows)
    assert not pending.any() or "top_k" not in names
