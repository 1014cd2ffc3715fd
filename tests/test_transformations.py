"""JAX transformations of every op: jax.vmap over leading axes (tokens equal the flattened call's),
jax.grad / jax.jvp (a clear error naming the op; zero gradients through jax.lax.stop_gradient)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jsample

N, M, B, V, K = 2, 3, 2, 70, 2
ONE = np.float32(1.0)  # float32 under x64 too: the logits stay float32


def _flat(a):
    return a.reshape((-1,) + a.shape[2:])


def _inputs(rng):
    logits = rng.standard_normal((N, M, B, V)).astype(np.float32)
    seeds = rng.integers(0, 2**40, (N, M, B))
    positions = rng.integers(0, 100, (N, M, B))
    target = rng.standard_normal((N, M, B, K + 1, V)).astype(np.float32)
    draft_logits = (target[..., :K, :] + rng.standard_normal((N, M, B, K, V))).astype(np.float32)
    drafts = target[..., :K, :].argmax(-1).astype(np.int32)
    num_drafts = rng.integers(0, K + 1, (N, M, B)).astype(np.int32)
    return logits, seeds, positions, target, draft_logits, drafts, num_drafts


def _assert_same(vmapped, flat):
    for v, f in zip(vmapped if isinstance(vmapped, tuple) else (vmapped,), flat if isinstance(flat, tuple) else (flat,)):
        np.testing.assert_array_equal(np.asarray(v).reshape(np.asarray(f).shape), np.asarray(f))


def _flatten2(a):
    return a.reshape((N * M * B,) + a.shape[3:])


def test_vmap_over_two_axes_equals_the_flattened_call():
    rng = np.random.default_rng(40)
    logits, seeds, positions, target, draft_logits, drafts, num_drafts = _inputs(rng)
    twice = lambda f: jax.jit(jax.vmap(jax.vmap(f)))  # noqa: E731
    _assert_same(twice(lambda x, s, p: jsample.gumbel_sample(x, s, p, 0.7))(logits, seeds, positions),
                 jsample.gumbel_sample(_flatten2(logits), _flatten2(seeds), _flatten2(positions), 0.7))
    _assert_same(twice(lambda x, s, p: jsample.top_k_top_p_sample(x, s, p, 0.7, top_k=5, top_p=0.8))(
        logits, seeds, positions),
        jsample.top_k_top_p_sample(_flatten2(logits), _flatten2(seeds), _flatten2(positions), 0.7, top_k=5,
                                   top_p=0.8))
    for kwargs_fn in (lambda dl: {}, lambda dl: dict(draft_logits=dl), lambda dl: dict(method="strict")):
        _assert_same(
            twice(lambda t, d, n, s, p, dl: jsample.rejection_sample(t, d, n, s, p, 0.8, **kwargs_fn(dl)))(
                target, drafts, num_drafts, seeds, positions, draft_logits),
            jsample.rejection_sample(_flatten2(target), _flatten2(drafts), _flatten2(num_drafts), _flatten2(seeds),
                                     _flatten2(positions), 0.8, **kwargs_fn(_flatten2(draft_logits))))
    rates = np.float32([0.9, 0.5])
    _assert_same(twice(lambda t, d, n, s, p: jsample.synthetic_rejection_sample(t, d, n, s, p, rates))(
        target.argmax(-1).astype(np.int32), drafts, num_drafts, seeds, positions),
        jsample.synthetic_rejection_sample(_flatten2(target.argmax(-1).astype(np.int32)), _flatten2(drafts),
                                           _flatten2(num_drafts), _flatten2(seeds), _flatten2(positions), rates))


def test_vmap_with_unmapped_arguments_broadcasts_them():
    """Mapping only the seeds (one batch of logits, several seeds: independent samples)."""
    rng = np.random.default_rng(41)
    logits, seeds, positions, *_ = _inputs(rng)
    x, p = logits[0, 0], positions[0, 0]
    temperature = np.float32([0.5, 1.5])
    out = jax.vmap(lambda s: jsample.gumbel_sample(x, s, p, temperature))(seeds[0])
    for i in range(M):
        np.testing.assert_array_equal(np.asarray(out[i]), np.asarray(jsample.gumbel_sample(x, seeds[0, i], p,
                                                                                          temperature)))
    top_p = jax.vmap(lambda t: jsample.top_k_top_p_sample(x, seeds[0, 0], p, 0.9, top_p=t))(jnp.float32([0.3, 0.9]))
    for i, t in enumerate((0.3, 0.9)):
        np.testing.assert_array_equal(np.asarray(top_p[i]),
                                      np.asarray(jsample.top_k_top_p_sample(x, seeds[0, 0], p, 0.9, top_p=t)))


@pytest.mark.parametrize("op", ["gumbel_sample", "top_k_top_p_sample", "rejection_sample",
                                "synthetic_rejection_sample"])
def test_grad_and_jvp_raise_a_clear_error_naming_the_op(op):
    rng = np.random.default_rng(42)
    logits, seeds, positions, target, draft_logits, drafts, num_drafts = _inputs(rng)
    s, p, n, d = seeds[0, 0], positions[0, 0], num_drafts[0, 0], drafts[0, 0]
    calls = {
        "gumbel_sample": lambda x: jsample.gumbel_sample(logits[0, 0] * x, s, p, 0.7),
        "top_k_top_p_sample": lambda x: jsample.top_k_top_p_sample(logits[0, 0], s, p, 0.7 * x, top_p=0.5),
        "rejection_sample": lambda x: jsample.rejection_sample(target[0, 0] * x, d, n, s, p, 0.8)[0],
        "synthetic_rejection_sample": lambda x: jsample.synthetic_rejection_sample(
            d[:, :1].repeat(K + 1, 1), d, n, s, p, jnp.float32([0.5, 0.5]) * x)[0],
    }
    loss = lambda x: jnp.sum(calls[op](x).astype(jnp.float32)) * x  # noqa: E731
    expected = f"{op}: sampling is not differentiable"
    with pytest.raises(TypeError, match=expected):
        jax.grad(loss)(ONE)
    with pytest.raises(TypeError, match=expected):
        jax.jvp(calls[op], (ONE,), (ONE,))
    # stopped at the inputs: the op is a constant, and the gradient is the rest's
    stopped = lambda x: jnp.sum(calls[op](jax.lax.stop_gradient(x)).astype(jnp.float32)) * x  # noqa: E731
    assert float(jax.grad(stopped)(ONE)) == float(jnp.sum(calls[op](ONE).astype(jnp.float32)))


def test_traced_flags_say_how_to_make_them_static():
    x, s = np.zeros((2, 5), np.float32), np.zeros(2, np.int32)
    with pytest.raises(TypeError, match=r'gumbel_sample: fp64 must be True or False, got a traced value: under '
                                        r'jax.jit, make it static, e.g. jax.jit\(jsample.gumbel_sample, '
                                        r'static_argnames=\("fp64",\)\).'):
        jax.jit(jsample.gumbel_sample)(x, s, s, 0.5, fp64=True)
    static = jax.jit(jsample.gumbel_sample, static_argnames=("fp64",))(x, s, s, 0.5, fp64=True)
    np.testing.assert_array_equal(np.asarray(static), np.asarray(jsample.gumbel_sample(x, s, s, 0.5, fp64=True)))


def test_seeds_from_a_prng_key():
    rng = np.random.default_rng(43)
    x = rng.standard_normal((4, 50)).astype(np.float32)
    positions = np.arange(4, dtype=np.int32)
    with pytest.raises(TypeError, match=r"gumbel_sample: seeds must be an integer array, got a JAX PRNG key array; "
                                        r"draw seeds from it with jsample.seeds_from_key\(key, batch\)."):
        jsample.gumbel_sample(x, jax.random.key(0), positions, 0.7)
    seeds = jsample.seeds_from_key(jax.random.key(7), 4)
    assert seeds.dtype == jnp.uint32 and seeds.shape == (4, 2)
    np.testing.assert_array_equal(np.asarray(seeds), np.asarray(jsample.seeds_from_key(jax.random.key(7), 4)))
    assert not np.array_equal(np.asarray(seeds), np.asarray(jsample.seeds_from_key(jax.random.key(8), 4)))
    words = np.asarray(seeds).astype(np.int64)
    as_int64 = (words[:, 0] | (words[:, 1] << 32)).astype(np.uint64).view(np.int64)
    np.testing.assert_array_equal(np.asarray(jsample.gumbel_sample(x, seeds, positions, 0.7)),
                                  np.asarray(jsample.gumbel_sample(x, as_int64, positions, 0.7)))
