"""Launching a shared Triton kernel from JAX: jax-triton on a GPU, a host callback on the CPU.

This is the only module that imports jax_triton. jax-triton 0.3.1 sets TRITON_CACHE_DIR to "" on
import, which breaks torch's Triton launcher in the same process, so we restore it; and we hide
the 0.3 (`out_shape=`) vs 0.4 (`out_type=`) keyword rename.
"""

import inspect
import os

import jax
import jax.numpy as jnp
import numpy as np

from jsample.validation import ArraySpec

_jax_triton = None


def _import_jax_triton():
    global _jax_triton
    if _jax_triton is None:
        saved = os.environ.get("TRITON_CACHE_DIR")
        import jax_triton

        if saved is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = saved
        _jax_triton = jax_triton
    return _jax_triton


def on_gpu() -> bool:
    return jax.default_backend() in ("gpu", "cuda", "rocm")


def spec(op: str, name: str, value):
    """An ArraySpec for an array (traced or concrete), the value itself otherwise.

    A 64-bit NumPy integer array is refused with x64 off, where JAX would narrow it to 32 bits (a seed
    or position would change silently); 64-bit floats are read as float32 anyway."""
    if (isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.dtype.itemsize == 8
            and not jax.config.jax_enable_x64):
        hint = ", or pass 64-bit seeds as [B, 2] uint32 (low, high) words (jsample.seed_words)" if name == "seeds" else ""
        raise TypeError(f"{op}: {name} has dtype {value.dtype}, which JAX narrows to 32 bits unless "
                        f"jax_enable_x64 is on; enable it or pass a 32-bit array{hint}.")
    if isinstance(value, (jax.Array, np.ndarray)):
        dtype = value.dtype
        name = "float0" if dtype == jax.dtypes.float0 else jnp.dtype(dtype).name
        return ArraySpec(tuple(value.shape), name)
    return value


def seed_words(seeds) -> int:
    """The kernels' SEED_WORDS: 2 for [B, 2] (low, high) words, 1 for [B] seeds."""
    return 2 if len(seeds.shape) == 2 else 1


def per_row(value, batch: int, dtype) -> jax.Array:
    """A per-request value as a [B] array: an array [B] or () is converted (a float as float32, an
    integer that is neither int32 nor int64 as int64, int32 with x64 off) and broadcast; a number is
    filled."""
    if isinstance(value, (jax.Array, np.ndarray)):
        value = jnp.asarray(value)
        if value.dtype != dtype and not (dtype == jnp.int64 and value.dtype in (jnp.int32, jnp.int64)):
            value = value.astype(dtype if jax.config.jax_enable_x64 or dtype != jnp.int64 else jnp.int32)
        return jnp.broadcast_to(value, (batch,))
    return jnp.full((batch,), value, dtype=dtype if jax.config.jax_enable_x64 or dtype != jnp.int64 else jnp.int32)


def temperature_array(temperature, batch: int) -> jax.Array:
    """Per-row temperatures as a float32 array [B]; a number is broadcast."""
    return per_row(temperature if isinstance(temperature, (jax.Array, np.ndarray)) else float(temperature), batch,
                   jnp.float32)


def launch(kernel, *args, grid, out_shapes, num_warps, num_stages, enable_fp_fusion, zeroed_outputs=(),
           **constexprs):
    """Run `kernel` over `grid` with array and Python-int arguments; returns its outputs.

    Outputs (`out_shapes`, a list of jax.ShapeDtypeStruct) follow all positional arguments in the
    kernel's signature, as jax-triton appends them; those in `zeroed_outputs` (indices into
    out_shapes) are zeroed before the launch, the others are uninitialised.
    """
    if on_gpu():
        jax_triton = _import_jax_triton()
        out_keyword = "out_type" if "out_type" in inspect.signature(jax_triton.triton_call).parameters else "out_shape"
        return jax_triton.triton_call(
            *args, kernel=kernel, grid=grid, num_warps=num_warps, num_stages=num_stages,
            enable_fp_fusion=enable_fp_fusion, zeroed_outputs=tuple(zeroed_outputs),
            **{out_keyword: list(out_shapes)}, **constexprs)

    from jsample.kernels.host import launch_on_host

    array_positions = [i for i, a in enumerate(args) if not isinstance(a, int)]

    def run_on_host(*arrays):  # on one of XLA's threads: launch_on_host runs the kernel on a clean one
        host_args = list(args)
        for i, array in zip(array_positions, arrays):
            host_args[i] = np.ascontiguousarray(array)
        outputs = [(np.zeros if i in zeroed_outputs else np.empty)(s.shape, s.dtype) for i, s in enumerate(out_shapes)]
        launch_on_host(kernel, grid, *host_args, *outputs, **constexprs)
        return outputs

    return jax.pure_callback(run_on_host, list(out_shapes), *[args[i] for i in array_positions])
