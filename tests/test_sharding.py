"""Batch-sharded jax.jit on several devices (forced host devices: each case runs in a subprocess,
since the device count is fixed when JAX starts). The partitioning rule (`batch_partitioned`) splits
the requests as the first array's batch axis is split, with no gather; the GPU path uses it
(tests/test_multi_gpu.py checks the real ops on two GPUs). On CPU devices the real ops' launches are
FFI calls into the interpreter (jsample/_jax/_host_call.py), partitioned the same way: no collective
in the compiled module, outputs sharded as the inputs, the unsharded call's tokens."""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import os, sys
    devices = int(sys.argv[1])
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    import numpy as np, jax, jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jsample
    from jsample._jax._launch import batch_partitioned

    assert len(jax.devices()) == devices
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    rng = np.random.default_rng(devices)

    def rows(logits, seeds, temperature):  # row-wise, as every op: a stand-in kernel without host callbacks
        noisy = logits / temperature[:, None] + (seeds[:, None] % 7).astype(jnp.float32) * 1e-3
        return jnp.argmax(noisy, axis=1).astype(jnp.int32), seeds * 2

    def partitioned(logits, seeds, temperature):
        return batch_partitioned(rows, [logits, seeds, temperature])(logits, seeds, temperature)

    for batch in (2 * devices, 3 * devices + 1):
        logits = rng.standard_normal((batch, 1000)).astype(np.float32)
        seeds, temperature = np.arange(batch) * 11, rng.uniform(0.5, 2, batch).astype(np.float32)
        expected = rows(logits, seeds, temperature)
        layouts = [(P("batch", None), P("batch"))] if batch % devices == 0 else []
        layouts += [(P(None, "batch"), P()), (P(), P())]  # vocabulary-sharded or replicated: resharded
        for logits_spec, row_spec in layouts:
            args = (jax.device_put(logits, NamedSharding(mesh, logits_spec)),
                    jax.device_put(seeds, NamedSharding(mesh, row_spec)), temperature)
            jitted = jax.jit(partitioned)
            hlo = jitted.lower(*args).compile().as_text()
            out = jitted(*args)
            for got, want in zip(out, expected):
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
            if logits_spec == P("batch", None):  # batch-sharded: every device its own requests, no collective
                assert "all-gather" not in hlo and "all-to-all" not in hlo, hlo
                assert out[0].sharding.spec == P("batch") and len(out[0].sharding.device_set) == devices
            print("stand-in", devices, batch, logits_spec, "ok")

    # the real ops on CPU devices under plain jit with batch-sharded inputs: the unsharded tokens
    batch, k, vocab = 2 * devices, 2, 500
    target = rng.standard_normal((batch, k + 1, vocab)).astype(np.float32) * 2
    seeds, positions = rng.integers(-(2**62), 2**62, batch), rng.integers(0, 2**40, batch)
    temperature = rng.choice(np.float32([0.0, 0.7, 1.0]), batch)
    drafts, num_drafts = target[:, :k].argmax(-1).astype(np.int32), np.full(batch, k, np.int32)

    def step(target, drafts, num_drafts, seeds, positions, temperature):
        return (jsample.gumbel_sample(target[:, 0], seeds, positions, temperature),
                jsample.top_k_top_p_sample(target[:, 1], seeds, positions, temperature, top_k=20, top_p=0.9),
                *jsample.rejection_sample(target, drafts, num_drafts, seeds, positions, temperature))

    arrays = (target, drafts, num_drafts, seeds, positions, temperature)
    expected = step(*arrays)
    sharded = [jax.device_put(a, NamedSharding(mesh, P("batch", *([None] * (a.ndim - 1))))) for a in arrays]
    jitted = jax.jit(step)
    hlo = jitted.lower(*sharded).compile().as_text()
    assert not any(c in hlo for c in ("all-gather", "all-to-all", "all-reduce", "collective-permute")), hlo
    assert hlo.count("jsample_interpreted_launch") >= 3, hlo  # the launches are FFI calls, run per device
    outputs = jitted(*sharded)
    for got, want in zip(outputs, expected):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert got.sharding.spec[0] == "batch" and len(got.sharding.device_set) == devices, got.sharding
    print("ops", devices, "ok")
''')


@pytest.mark.parametrize("devices", [2, 4])
def test_batch_sharded_jit(devices):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    env.pop("XLA_FLAGS", None)
    env.update(JAX_PLATFORMS="cpu", TRITON_INTERPRET="1")  # host devices, also on a GPU machine
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(devices)], capture_output=True, text=True, env=env,
                            timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("stand-in") == 5 and f"ops {devices} ok" in result.stdout


if __name__ == "__main__":  # the script alone, e.g. under another JAX (.ci/packaging.sh): DEVICES as argument
    exec(SCRIPT)
