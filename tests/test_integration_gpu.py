"""Every op on a real GPU, the ways people call it: eager (the direct-launch path), as a replayed CUDA
graph, under torch.compile, from several threads and CUDA streams at once, and jitted in JAX; tokens
equal the plain eager call's bit for bit, and changing values never recompiles. Skipped without a
CUDA GPU (see conftest)."""

import threading

import numpy as np
import pytest
from conftest import ON_GPU

pytestmark = pytest.mark.gpu

if ON_GPU:
    import jax
    import jax.numpy as jnp
    import torch

    import jsample
    import torch_backend
    from torch_backend import _execute

OPS = ["gumbel_sample", "gumbel_sample fp64", "top_k_top_p_sample", "top_k_top_p_sample min_p",
       "rejection_sample", "rejection_sample one-hot", "synthetic_rejection_sample"]
BATCH, K, VOCAB = 24, 3, 32000


def _case(op: str, seed: int = 0, batch: int = BATCH):
    """(call, jax_call, tensors): call(*tensors) runs the torch op, jax_call(*arrays) the JAX op on the
    same values; tensors are the per-call arrays a decode loop updates in place (logits or target
    logits first, then seeds, positions and temperature or rates)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    seeds = torch.randint(-(2**62), 2**62, (batch,), device="cuda", generator=gen)
    positions = torch.randint(0, 2**40, (batch,), device="cuda", generator=gen)
    temperature = torch.rand(batch, device="cuda", generator=gen) + 0.3
    temperature[4::5] = 0  # greedy rows (not row 0: B = 1 cases sample)
    if op.startswith("gumbel") or op.startswith("top_k"):
        logits = (torch.randn(batch, VOCAB, device="cuda", generator=gen) * 3).to(torch.bfloat16)
        if op.startswith("gumbel"):
            fp64 = op.endswith("fp64")
            return (lambda x, s, p, t: torch_backend.gumbel_sample(x, s, p, t, fp64=fp64),
                    lambda x, s, p, t: jsample.gumbel_sample(x, s, p, t, fp64=fp64), [logits, seeds, positions, temperature])
        top_k = torch.randint(1, 100, (batch,), device="cuda", generator=gen)
        filters = dict(min_p=0.1) if op.endswith("min_p") else dict(top_k=top_k, top_p=0.9)
        jax_filters = {name: _jax(value) for name, value in filters.items()}
        return (lambda x, s, p, t: torch_backend.top_k_top_p_sample(x, s, p, t, **filters),
                lambda x, s, p, t: jsample.top_k_top_p_sample(x, s, p, t, **jax_filters),
                [logits, seeds, positions, temperature])
    num_drafts = torch.randint(0, K + 1, (batch,), device="cuda", generator=gen, dtype=torch.int32)
    if op == "synthetic_rejection_sample":
        target_tokens = torch.randint(0, VOCAB, (batch, K + 1), device="cuda", generator=gen, dtype=torch.int32)
        drafts = torch.randint(0, VOCAB, (batch, K), device="cuda", generator=gen, dtype=torch.int32)
        rates = torch.rand(batch, K, device="cuda", generator=gen)
        return (lambda x, s, p, r: torch_backend.synthetic_rejection_sample(x, drafts, num_drafts, s, p, r),
                lambda x, s, p, r: jsample.synthetic_rejection_sample(x, _jax(drafts), _jax(num_drafts), s, p, r),
                [target_tokens, seeds, positions, rates])
    target = torch.randn(batch, K + 1, VOCAB, device="cuda", generator=gen) * 2
    draft = target[:, :K] + torch.randn(batch, K, VOCAB, device="cuda", generator=gen)
    drafts = draft.argmax(-1).to(torch.int32)
    draft_logits = None if op.endswith("one-hot") else draft
    return (lambda x, s, p, t: torch_backend.rejection_sample(x, drafts, num_drafts, s, p, t, draft_logits=draft_logits),
            lambda x, s, p, t: jsample.rejection_sample(x, _jax(drafts), _jax(num_drafts), s, p, t,
                                                        draft_logits=_jax(draft_logits)),
            [target, seeds, positions, temperature])


def _jax(value):
    """A torch tensor's values as a JAX array (None stays None)."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.dtype == torch.bfloat16:
        return jnp.asarray(value.float().cpu().numpy()).astype(jnp.bfloat16)
    return jnp.asarray(value.cpu().numpy())


def _update(tensors, step):
    """What a decode loop does between steps, in place."""
    logits, seeds, positions, last = tensors
    if logits.is_floating_point():
        logits.mul_(1.01)
    seeds.add_(7919 * step)
    positions.add_(1)
    last.mul_(0.97)


def _same(got, expected, message=""):
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0, msg=message)


@pytest.mark.parametrize("op", OPS)
def test_cuda_graph_replay_follows_in_place_updates(op):
    call, _, tensors = _case(op)
    call(*tensors)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call(*tensors)
    for step in range(3):
        _update(tensors, step)
        graph.replay()
        _same(captured, call(*tensors), f"{op}: step {step}")


@pytest.mark.parametrize("op", OPS)
def test_torch_compile_equals_eager_and_changing_values_never_recompiles(op):
    call, _, tensors = _case(op, seed=1)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(call, fullgraph=True)
    for step in range(3):
        _same(compiled(*tensors), call(*tensors), f"{op}: step {step}")
        _update(tensors, step)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    plans, launchers = len(_execute._PLANS), len(_execute._LAUNCHERS)
    kernels_compiled = {k: sum(len(c) for c in k.device_caches[torch.cuda.current_device()][0:1])
                        for facts in list(_execute._LAUNCHERS) for k in {s.kernel for s in facts[0].launches}}
    for step in range(3):
        _update(tensors, step)
        call(*tensors)
    assert (len(_execute._PLANS), len(_execute._LAUNCHERS)) == (plans, launchers)  # nothing new for new values
    assert all(sum(len(c) for c in k.device_caches[torch.cuda.current_device()][0:1]) == n
               for k, n in kernels_compiled.items())


@pytest.mark.parametrize("batch", [1, BATCH])
@pytest.mark.parametrize("op", OPS)
def test_direct_launches_equal_tritons_own_launch_path(op, batch):
    """The executor's cached direct launches (launch hooks honoured) against Triton's per-call binding,
    and a Python-number temperature against the same value as a tensor; B = 1 takes the small-batch
    plans (one launch, PDL chains)."""
    from triton import knobs

    call, _, tensors = _case(op, seed=2, batch=batch)
    direct = [call(*tensors) for _ in range(3)]  # planned and run; replayed and linked; replayed directly
    linked = [match.entry for match in _execute._LAST.values() if match.entry.launches is not None]
    assert linked and all(not hasattr(launch[0], "launch") for entry in linked for launch in entry.launches), \
        "replays call the compiled launchers' entry points, not Triton's Python launcher"
    launched = []
    knobs.runtime.launch_enter_hook = launched.append
    try:
        hooked = call(*tensors)
    finally:
        knobs.runtime.launch_enter_hook = None
    assert launched  # Triton's launch hooks see the direct launches
    _execute.DIRECT_LAUNCHES = False
    try:
        through_triton = call(*tensors)
    finally:
        _execute.DIRECT_LAUNCHES = True
    _same(hooked, direct[0], op)
    _same(direct[1], direct[0], op)
    _same(direct[2], direct[0], op)
    _same(through_triton, direct[0], op)
    if op != "synthetic_rejection_sample":
        tensors[3].fill_(0.8)
        _same(call(*tensors[:3], 0.8), call(*tensors), f"{op}: temperature as a number")


@pytest.mark.parametrize("op", ["gumbel_sample", "top_k_top_p_sample", "rejection_sample", "synthetic_rejection_sample"])
def test_threads_and_streams_at_once_give_the_sequential_tokens(op):
    """Eight threads, each on a CUDA stream of its own, call the op 20 times at once (each with its
    own seeds): every output equals the same call made alone, one after another. Scratch buffers come
    from the caching allocator per call (stream-aware), the plan and launcher caches are read-mostly."""
    call, _, tensors = _case(op, seed=3)
    cases = [[tensors[0], tensors[1] + 1000 * i, tensors[2] + i, tensors[3]] for i in range(8)]
    expected = [[call(*case[:1], case[1] + j, *case[2:]) for j in range(20)] for case in cases]
    torch.cuda.synchronize()
    results, errors = [None] * 8, []

    def work(i):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                results[i] = [call(*cases[i][:1], cases[i][1] + j, *cases[i][2:]) for j in range(20)]
            stream.synchronize()
        except Exception as error:  # reported on the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for i in range(8):
        for j in range(20):
            _same(results[i][j], expected[i][j], f"{op}: thread {i} call {j}")


@pytest.mark.parametrize("op", OPS)
def test_jax_jit_equals_torch_and_changing_values_never_recompiles(op):
    call, jax_call, tensors = _case(op, seed=4)
    jitted = jax.jit(jax_call)
    for step in range(3):
        from_jax = jitted(*map(_jax, tensors))
        from_jax = tuple(torch.from_numpy(np.asarray(o)).cuda() for o in
                         (from_jax if isinstance(from_jax, tuple) else (from_jax,)))
        _same(from_jax, call(*tensors), f"{op}: step {step}")
        _update(tensors, step)
    assert jitted._cache_size() == 1
