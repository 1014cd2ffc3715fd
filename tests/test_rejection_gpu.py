"""rejection_sample and synthetic_rejection_sample on a real GPU:
the benchmark's sizes with torch and JAX in one process. Skipped without a CUDA GPU (see conftest)."""

import numpy as np
import pytest
from conftest import ON_GPU

from jsample.reference import rejection_sample_reference

pytestmark = pytest.mark.gpu

if ON_GPU:
    import jax
    import jax.numpy as jnp
    import torch

    import jsample
    import torch_backend


def _problem(batch, k, vocab, seed=0, dtype=None):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    target = (torch.randn(batch, k + 1, vocab, device="cuda", generator=gen) * 3).to(dtype or torch.bfloat16)
    draft = target[:, :k].float() + torch.randn(batch, k, vocab, device="cuda", generator=gen)
    # drafts from the draft distribution, so that acceptances and rejections both happen
    draft_tokens = torch.multinomial(torch.softmax(draft.reshape(-1, vocab), -1), 1, generator=gen)
    draft_tokens = draft_tokens.view(batch, k).int()
    num_drafts = torch.randint(0, k + 1, (batch,), device="cuda", generator=gen, dtype=torch.int32)
    seeds = torch.randint(-(2**62), 2**62, (batch,), device="cuda", generator=gen)
    positions = torch.randint(0, 2**40, (batch,), device="cuda", generator=gen)
    temperature = torch.rand(batch, device="cuda", generator=gen) + 0.3
    temperature[::5] = 0
    return target, draft_tokens, num_drafts, seeds, positions, temperature, draft


@pytest.mark.parametrize("batch,k,dtype", [(256, 8, "bfloat16"), (64, 4, "float32"), (1, 1, "float16")])
def test_rejection_gpu_benchmark_sizes_torch_equals_jax_and_reference(batch, k, dtype):
    vocab = 151936
    problem = _problem(batch, k, vocab, seed=batch + k, dtype=getattr(torch, dtype))
    target, draft_tokens, num_drafts, seeds, positions, temperature, draft = problem
    for kwargs in (dict(draft_logits=draft), dict(method="strict")):
        from_torch = torch_backend.rejection_sample(*problem[:6], **kwargs)
        jax_kwargs = {name: jnp.from_dlpack(v) if isinstance(v, torch.Tensor) else v for name, v in kwargs.items()}
        from_jax = jax.jit(lambda *a: jsample.rejection_sample(*a, **jax_kwargs))(
            *(jnp.from_dlpack(t) for t in problem[:6]))
        for t, j in zip(from_torch, from_jax):
            np.testing.assert_array_equal(t.cpu().numpy(), np.asarray(j))
        rows = np.arange(0, batch, max(1, batch // 8))  # the NumPy reference on a subset of requests
        tokens, num_sampled, ratio_margin, score_margin = rejection_sample_reference(
            target[rows].float().cpu().numpy(), draft_tokens[rows].cpu().numpy(), num_drafts[rows].cpu().numpy(),
            seeds[rows].cpu().numpy(), positions[rows].cpu().numpy(), temperature[rows].cpu().numpy(),
            draft_logits=draft[rows].cpu().numpy() if "draft_logits" in kwargs else None,
            method=kwargs.get("method", "probabilistic"), return_margins=True)
        checked = (ratio_margin >= 1e-5) & (score_margin >= 1e-4)  # GPU logs are not NumPy's: skip near-ties
        assert checked.sum() >= len(rows) - 1
        np.testing.assert_array_equal(from_torch[0].cpu().numpy()[rows][checked], tokens[checked])
        np.testing.assert_array_equal(from_torch[1].cpu().numpy()[rows][checked], num_sampled[checked])


@pytest.mark.parametrize("batch,k,one_hot", [(512, 1, False), (256, 4, False), (96, 8, True), (3, 2, False),
                                             (1, 8, False), (1, 1, True)])
def test_rejection_gpu_no_partial_leaks_between_calls(batch, k, one_hot):
    """The launches hand each other partials in uninitialised buffers, which torch's caching allocator
    reuses from call to call: a partial that one launch failed to write, or that another read
    before it was written, would show up as the previous call's value. 80 calls alternate two
    problems, and every call must give its problem's first answer."""
    problems = [_problem(batch, k, 32000, seed=seed) for seed in (1, 2)]
    calls = [lambda p=p: torch_backend.rejection_sample(*p[:6], draft_logits=None if one_hot else p[6])
             for p in problems]
    expected = [call() for call in calls]
    assert not torch.equal(expected[0][0], expected[1][0])
    for step in range(80):
        tokens, num_sampled = calls[step % 2]()
        torch.testing.assert_close(tokens, expected[step % 2][0], rtol=0, atol=0)
        torch.testing.assert_close(num_sampled, expected[step % 2][1], rtol=0, atol=0)


@pytest.mark.parametrize("batch,k,vocab", [(1, 0, 32000), (1, 1, 151936), (2, 1, 1000), (4, 1, 32000),
                                            (1, 4, 151936), (1, 8, 151936), (8, 3, 32000)])
def test_rejection_gpu_every_plan_variant_gives_the_same_tokens(force_variant, monkeypatch, batch, k, vocab):
    """Every plan an input can get (kernels.plan_rejection_sample): three launches chained by
    programmatic dependent launch (torch on Hopper), the same unchained, four launches, and at K <= 1
    one launch whose phases are ordered by an atomic ticket counter (JAX's plan; torch can run it
    too). Tokens are equal bit for bit, eagerly and as a replayed CUDA graph, over many seeds: a launch
    or phase that read before its predecessor finished would show up as a wrong token now and then;
    JAX's jitted one-launch call repeated must give the same tokens every time."""
    import jax
    import jax.numpy as jnp

    import jsample
    from jsample import kernels
    from jsample.kernels.plan import Target
    from torch_backend import _execute

    assert kernels.decide_in_emit(batch, kernels.rejection_launch_config(vocab, k, (0,), False))
    problem = list(_problem(batch, k, vocab, seed=10 + k))
    problem[2].fill_(k)  # every draft verified
    if k:
        rows = torch.arange(batch, device="cuda")[:, None], torch.arange(k, device="cuda")[None, :]
        problem[6][rows[0], rows[1], problem[1]] += 1.0  # q(d) > p(d) mostly: the seeds decide acceptances
    problem[5][0] = 0.9  # request 0 samples (the others keep _problem's mix of greedy and sampled rows)
    seeds = problem[3]

    def run(step):
        return torch_backend.rejection_sample(*problem[:3], seeds + step, *problem[4:6], draft_logits=problem[6])

    steps = range(40)
    assert "PDL" in _execute.plan(kernels.plan_rejection_sample, (problem[0], problem[6], seeds), seeds.device,
                                  strict=False, fp64=False).variant
    chained = [run(step) for step in steps]
    graph_seeds = seeds.clone()
    graph = torch.cuda.CUDAGraph()
    run(0)
    with torch.cuda.graph(graph):
        graph_out = torch_backend.rejection_sample(*problem[:3], graph_seeds, *problem[4:6], draft_logits=problem[6])
    replayed = []
    for step in steps:
        graph_seeds.copy_(seeds + step)
        graph.replay()
        replayed.append(tuple(t.clone() for t in graph_out))
    monkeypatch.setattr(_execute, "target", lambda device: Target(interpreter=False, pdl=False))
    unchained = [run(step) for step in steps]
    variants = {"chained": chained, "replayed": replayed, "unchained": unchained}
    if k <= 1:
        force_variant("one launch")
        variants["one launch"] = [run(step) for step in steps]
        jitted = jax.jit(lambda *a: jsample.rejection_sample(*a[:6], draft_logits=a[6]))
        jax_args = [jnp.asarray(t.float().cpu().numpy()).astype(jnp.bfloat16) if t.dtype == torch.bfloat16
                    else jnp.asarray(t.cpu().numpy()) for t in problem]
        for step in steps[:8]:
            jax_args[3] = jnp.asarray((seeds + step).cpu().numpy())
            for repeat in range(3):
                variants.setdefault(f"JAX one launch, call {repeat}", []).append(
                    tuple(torch.from_numpy(np.asarray(o)).cuda() for o in jitted(*jax_args)))
    force_variant("four launches")
    four_launches = [run(step) for step in steps]
    assert len({int(out[1].sum()) for out in four_launches}) > 1 or k == 0  # the seeds change the acceptances
    for name, outputs in variants.items():
        for got, expected in zip(outputs, four_launches):
            for g, e in zip(got, expected):
                torch.testing.assert_close(g, e, rtol=0, atol=0, msg=name)
