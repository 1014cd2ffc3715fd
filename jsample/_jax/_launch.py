"""Launching a shared Triton kernel from JAX: jax-triton on a GPU, an FFI call into the interpreter on the CPU.

This is the only module that imports jax_triton. jax-triton 0.3.1 sets TRITON_CACHE_DIR to "" on
import, which breaks torch's Triton launcher in the same process, so we restore it. Both jax-triton
0.3.1 and 0.4 are supported, each through its own keywords (`launch`), with no deprecated ones.
"""

import functools
import inspect
import os

import jax
import jax.numpy as jnp
import numpy as np

from jsample._jax import _host_call, _ptx
from jsample.ops import FILTER_DTYPES, output_shapes
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


def not_differentiable(op: str):
    """Decorates a public op so that jax.grad / jax.jvp through it raise a clear error naming the op
    (the tokens are integers: sampling has no derivative), instead of an internal one about host
    callbacks or Triton calls. The floating inputs pass through a jax.custom_jvp whose rule raises;
    inputs whose tangents are zero (jax.lax.stop_gradient) never reach it."""
    message = (f"{op}: sampling is not differentiable (its outputs are integer tokens), so jax.grad and jax.jvp "
               "cannot pass through it; wrap its inputs in jax.lax.stop_gradient to treat them as constants "
               "(their gradient is then zero).")

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            leaves, tree = jax.tree_util.tree_flatten((args, kwargs), is_leaf=lambda x: x is None)
            floating = [i for i, leaf in enumerate(leaves) if isinstance(leaf, (jax.Array, np.ndarray))
                        and jnp.issubdtype(leaf.dtype, jnp.floating)]

            @jax.custom_jvp
            def call(*floats):
                full = list(leaves)
                for i, value in zip(floating, floats):
                    full[i] = value
                call_args, call_kwargs = jax.tree_util.tree_unflatten(tree, full)
                return fn(*call_args, **call_kwargs)

            @call.defjvp
            def _(primals, tangents):
                raise TypeError(message)

            return call(*[leaves[i] for i in floating])
        return wrapper
    return decorate


def rowwise(fn, *arrays, vocab_fn=None, vocab_arrays=(0,)):
    """fn(*arrays), where every array (None allowed) has the requests on axis 0 and fn's outputs too, with
    a batching rule: under jax.vmap (any number of nested axes) the mapped axes are flattened into
    requests, fn runs once on all of them, and its outputs are unflattened, so the tokens equal those
    of the flattened call. Arrays that are not mapped are broadcast along the mapped axis. Under
    jax.jit on several GPUs, the requests are partitioned as the first array's axis 0 is
    (batch_partitioned); with `vocab_fn(axis, shards, *arrays)`, a first array (the logits) sharded along
    its last axis runs vocab_fn on each device's shard instead of being gathered (and so do the arrays at
    `vocab_arrays`, their last axes split alike: rejection_sample's draft logits)."""
    present = [i for i, a in enumerate(arrays) if a is not None]

    def filled(given):
        """`arrays` with the present ones replaced by `given` (the Nones stay)."""
        full = list(arrays)
        for i, a in zip(present, given):
            full[i] = a
        return full

    def unpartitioned(*given):
        return fn(*filled(given))

    def vocab_partitioned(axis, shards):
        return lambda *given: vocab_fn(axis, shards, *filled(given))

    # launches are custom calls (jax-triton's on a GPU, _host_call's on the CPU), which a custom
    # partitioning can split; pure callbacks cannot run inside one (jax-ml/jax#23620), so where the FFI
    # handler is refused (an old jaxlib) jit gathers the batch on CPU devices

    partitionable = on_gpu() or _host_call.register()
    call_fn = batch_partitioned(unpartitioned, [arrays[i] for i in present],
                                vocab_fn=vocab_partitioned if vocab_fn else None,
                                vocab_arrays=tuple(present.index(i) for i in vocab_arrays if arrays[i] is not None)
                                ) if partitionable else unpartitioned

    call = jax.custom_batching.custom_vmap(call_fn)

    @call.def_vmap
    def _(axis_size, in_batched, *given):
        requests = next(a.shape[1] if mapped else a.shape[0] for a, mapped in zip(given, in_batched))
        flat = [(a if mapped else jnp.broadcast_to(a, (axis_size,) + a.shape)).reshape(
                (axis_size * requests,) + a.shape[(2 if mapped else 1):]) for a, mapped in zip(given, in_batched)]
        outputs = call(*flat)
        unflat = jax.tree_util.tree_map(lambda o: o.reshape((axis_size, requests) + o.shape[1:]), outputs)
        return unflat, jax.tree_util.tree_map(lambda o: True, outputs)

    return call(*[arrays[i] for i in present])


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
    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        raise TypeError(f"{op}: {name} must be an integer array, got a JAX PRNG key array; draw seeds from it with "
                        "jsample.seeds_from_key(key, batch).")
    if isinstance(value, (jax.Array, np.ndarray)):
        dtype = value.dtype
        name = "float0" if dtype == jax.dtypes.float0 else jnp.dtype(dtype).name
        return ArraySpec(tuple(value.shape), name)
    return value


def row_valid(op: str, num_valid, batch: int):
    """`num_valid` (checked) as the kernels' per-row flags [B] uint8 (0: a padding row), or None. A row flag
    array, not a scalar, so that vmap and batch sharding split it with the requests."""
    from jsample.validation import check_num_valid

    if num_valid is None:
        return None
    check_num_valid(op, spec(op, "num_valid", num_valid), batch)
    return (jnp.arange(batch) < jnp.asarray(num_valid).reshape(())).astype(jnp.uint8)


def empty_outputs(op: str, batch: int, rows: int = 1):
    """`op`'s outputs (jsample.ops.output_shapes) for an empty batch."""
    return tuple(jnp.zeros(shape, dtype) for shape, dtype in output_shapes(op, batch, rows))


def logits_array(value) -> jax.Array:
    """Logits as a JAX array, float64 read as float32 (the one rule of both frontends, whatever the x64 flag)."""
    if isinstance(value, np.ndarray) and value.dtype == np.float64:
        value = value.astype(np.float32)
    value = jnp.asarray(value)
    return value.astype(jnp.float32) if value.dtype == jnp.float64 else value


def per_row(value, batch: int, dtype) -> jax.Array:
    """A per-request value as a [B] array: an array [B] or () is converted (a float as float32, an
    integer that is neither int32 nor int64 as int64, int32 with x64 off) and broadcast; a number is
    filled."""
    if dtype == jnp.int64 and not jax.config.jax_enable_x64:
        dtype = jnp.int32
    if isinstance(value, (jax.Array, np.ndarray)):
        value = jnp.asarray(value)
        if value.dtype != dtype and not (jnp.issubdtype(dtype, jnp.integer) and value.dtype in (jnp.int32, jnp.int64)):
            value = value.astype(dtype)
        return jnp.broadcast_to(value, (batch,))
    return jnp.full((batch,), value, dtype=dtype)


def filter_rows(top_k, top_p, min_p, batch: int) -> tuple:
    """top_k (int64), top_p and min_p (float32) as [B] arrays (jsample.ops.FILTER_DTYPES; None stays None)."""
    return tuple(None if value is None else per_row(value, batch, jnp.dtype(dtype))
                 for value, (_, dtype) in zip((top_k, top_p, min_p), FILTER_DTYPES))


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
        if "backend_options" not in inspect.signature(jax_triton.triton_call).parameters:  # jax-triton 0.3
            return jax_triton.triton_call(
                *args, kernel=kernel, grid=grid, num_warps=num_warps, num_stages=num_stages,
                enable_fp_fusion=enable_fp_fusion, zeroed_outputs=tuple(zeroed_outputs),
                out_shape=list(out_shapes), **constexprs)
        # jax-triton 0.4: compiler options in backend_options (an unknown keyword would silently become a
        # metaparameter, and FMA contraction would change the rounding), with the PTX ISA XLA's ptxas takes
        # (_ptx); zeroed outputs are zero arrays passed as Refs (its deprecated zeroed_outputs), which must come
        # before the other outputs' pointers
        refs = [jax.new_ref(jnp.zeros(s.shape, s.dtype)) for s in out_shapes[:max(zeroed_outputs, default=-1) + 1]]
        results = jax_triton.triton_call(
            *args, *refs, kernel=kernel, grid=grid, num_warps=num_warps, num_stages=num_stages,
            backend_options={"enable_fp_fusion": enable_fp_fusion, **_ptx.backend_options()},
            out_type=list(out_shapes[len(refs):]),
            **constexprs)
        return [ref[...] for ref in refs] + list(results)

    from jsample.kernels.host import launch_on_host, start_worker

    start_worker()  # on this (tracing) thread: see start_worker

    array_positions = [i for i, a in enumerate(args) if not isinstance(a, int)]
    arrays = [args[i] for i in array_positions]

    def run_on_host(inputs, outputs):  # on one of XLA's threads: launch_on_host runs the kernel on a clean one
        host_args = list(args)
        for i, array in zip(array_positions, inputs):
            host_args[i] = np.ascontiguousarray(array)
        for i in zeroed_outputs:
            outputs[i][...] = 0
        launch_on_host(kernel, grid, *host_args, *outputs, **constexprs)

    if _host_call.register():  # an FFI custom call, which custom partitioning can split (_host_call)
        in_types = tuple((jnp.dtype(a.dtype).name, tuple(a.shape)) for a in arrays)
        out_types = tuple((jnp.dtype(s.dtype).name, tuple(s.shape)) for s in out_shapes)
        key = (kernel, tuple(a if isinstance(a, int) else None for a in args), tuple(grid), in_types, out_types,
               tuple(zeroed_outputs), tuple(sorted(constexprs.items())))
        launch_id = _host_call.launch_id(key, lambda: _host_call.HostLaunch(run_on_host, in_types, out_types))
        return list(jax.ffi.ffi_call(_host_call.TARGET_NAME, list(out_shapes))(*arrays, launch_id=np.int64(launch_id)))

    def callback(*inputs):
        outputs = [np.empty(s.shape, s.dtype) for s in out_shapes]
        run_on_host(inputs, outputs)
        return outputs

    return jax.pure_callback(callback, list(out_shapes), *arrays)


def batch_partitioned(fn, arrays, vocab_fn=None, vocab_arrays=(0,)):
    """fn, partitioned along the requests (axis 0 of every array and output) under jax.jit on several
    devices: each device runs fn on its own requests, with the first array's axis-0 sharding for all
    of them, and no other axis is split (an array sharded otherwise is resharded to that first). A
    request's outputs depend on its own rows only, so this is the unpartitioned call's result, with
    no gather of the logits. On one device, or inside shard_map, fn is called as it is.

    With `vocab_fn(axis, shards)` (a function of the same arrays, for its device's shard), a first array
    sharded along its last axis (the vocabulary) over mesh axes `axis` (`shards` devices, equal shards whose
    width is a multiple of 4: the vocab-parallel plans' rule) stays so, as do the last axes of the arrays at
    `vocab_arrays` (split alike), and each device runs vocab_fn's function on its shards (it gathers what it
    needs over `axis` itself); the outputs are replicated over `axis`. Any other split of that axis is
    gathered first."""
    from jax.experimental.custom_partitioning import custom_partitioning
    from jax.sharding import NamedSharding, PartitionSpec

    partitioned = custom_partitioning(fn)

    def request_axes(arg_shapes):
        spec = getattr(arg_shapes[0].sharding, "spec", ())
        return spec[0] if len(spec) else None

    def vocab_axes(mesh, arg_shapes):
        """(axes, shards) of the first array's last axis, where vocab_fn takes them; (None, 1) otherwise."""
        spec = tuple(getattr(arg_shapes[0].sharding, "spec", ()))
        rank = len(arg_shapes[0].shape)
        axes = spec[rank - 1] if vocab_fn is not None and rank > 1 and len(spec) >= rank else None
        if axes is None:
            return None, 1
        shards = 1
        for name in (axes,) if isinstance(axes, str) else axes:
            shards *= mesh.shape[name]
        vocab = arg_shapes[0].shape[-1]
        if shards == 1 or vocab % shards or (vocab // shards) % 4:
            return None, 1
        return axes, shards

    def shardings(mesh, axes, shapes, vocab=None):
        def one(s, split):
            rest = [None] * (len(s.shape) - 1)
            if split and vocab is not None:
                rest[-1] = vocab
            return NamedSharding(mesh, PartitionSpec(axes, *rest))
        leaves, tree = jax.tree_util.tree_flatten(shapes)
        return jax.tree_util.tree_unflatten(tree, [one(s, i in vocab_arrays) for i, s in enumerate(leaves)])

    def infer(mesh, arg_shapes, result_shape):
        return shardings(mesh, request_axes(arg_shapes), result_shape)

    def partition(mesh, arg_shapes, result_shape):
        axes = request_axes(arg_shapes)
        vocab, shards = vocab_axes(mesh, arg_shapes)
        lower = fn if vocab is None else vocab_fn(vocab, shards)
        return mesh, lower, shardings(mesh, axes, result_shape), shardings(mesh, axes, tuple(arg_shapes), vocab)

    # Shardy's rule: factor b (the requests) shared by every array and output; every other axis a factor
    # of its own that must stay replicated, except the vocabulary (the last axis of the arrays at
    # vocab_arrays, one factor v) where vocab_fn takes it (a factor the outputs do not have: reduced, as the
    # vocab-parallel plan's all-gathers and combine do)
    others, reduced = [], []

    def factors(name, rank, vocab=False):
        names = [f"{name}{d}" for d in range(1, rank)]
        if vocab and vocab_fn is not None and names:
            names[-1] = "v"
            if "v" not in reduced:
                reduced.append("v")
        others.extend(n for n in names if n not in reduced and n not in others)
        return " ".join(["b"] + names)

    out_shapes = jax.eval_shape(fn, *arrays)
    rule = ", ".join(factors(f"i{n}_", a.ndim, n in vocab_arrays) for n, a in enumerate(arrays)) + " -> " + ", ".join(
        factors(f"o{n}_", len(o.shape)) for n, o in enumerate(jax.tree_util.tree_leaves(out_shapes)))
    partitioned.def_partition(partition=partition, infer_sharding_from_operands=infer, sharding_rule=rule,
                              reduction_factors=tuple(reduced), need_replication_factors=tuple(others))
    return partitioned
