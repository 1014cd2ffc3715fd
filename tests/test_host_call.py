"""The JAX CPU path's FFI handler (jsample/_jax/_host_call.py): a launch runs on the call's buffers,
a failure inside it raises in the caller (never an unwritten output), and buffers that do not match
the registered launch are refused."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from jsample._jax import _host_call  # noqa: E402

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu" or not _host_call.register(),
                                reason="the FFI handler serves the CPU platform")


def _call(launch_id, x, out_shape):
    return jax.ffi.ffi_call(_host_call.TARGET_NAME, out_shape)(x, launch_id=np.int64(launch_id))


def _task(inputs, outputs):
    outputs[0][...] = inputs[0].argmax(axis=1).astype(np.int32) * 10


def test_host_call_runs_the_registered_launch_on_the_buffers():
    x = np.random.default_rng(0).standard_normal((5, 9)).astype(np.float32)
    types = ((("float32", (5, 9)),), (("int32", (5,)),))
    launch = _host_call.launch_id(("test", "argmax"), lambda: _host_call.HostLaunch(_task, *types))
    assert _host_call.launch_id(("test", "argmax"), lambda: pytest.fail("registered twice")) == launch
    out = jax.jit(lambda x: _call(launch, x, jax.ShapeDtypeStruct((5,), jnp.int32)))(x)
    np.testing.assert_array_equal(np.asarray(out), x.argmax(axis=1) * 10)


def test_host_call_raises_the_launch_error_in_the_caller():
    def failing(inputs, outputs):
        raise ValueError("kernel exploded")

    types = ((("float32", (2, 3)),), (("int32", (2,)),))
    launch = _host_call.launch_id(("test", "failing"), lambda: _host_call.HostLaunch(failing, *types))
    with pytest.raises(Exception, match="ValueError: kernel exploded"):
        np.asarray(_call(launch, np.zeros((2, 3), np.float32), jax.ShapeDtypeStruct((2,), jnp.int32)))


@pytest.mark.parametrize("x, out", [
    (np.zeros((4, 9), np.float32), jax.ShapeDtypeStruct((4,), jnp.int32)),  # other shape
    (np.zeros((5, 9), np.float64), jax.ShapeDtypeStruct((5,), jnp.int32)),  # other dtype (x64 on in tests)
    (np.zeros((5, 9), np.float32), jax.ShapeDtypeStruct((5,), jnp.int64)),  # other output dtype
])
def test_host_call_refuses_buffers_unlike_the_registered_launch(x, out):
    if not jax.config.jax_enable_x64 and (x.dtype == np.float64 or out.dtype == jnp.int64):
        pytest.skip("64-bit buffers need x64")
    types = ((("float32", (5, 9)),), (("int32", (5,)),))
    launch = _host_call.launch_id(("test", "argmax"), lambda: _host_call.HostLaunch(_task, *types))
    with pytest.raises(Exception, match="jsample host launch: .* expected"):
        np.asarray(_call(launch, x, out))
