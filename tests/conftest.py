"""Shared fixtures: every op test runs on both frontends with NumPy inputs and NumPy outputs.

On a CPU machine both frontends run the same Triton kernels through the interpreter (the JAX
frontend through an XLA FFI call, jsample/_jax/_host_call.py); with a GPU, torch runs CUDA tensors and JAX runs jax-triton.
Sizes grow on the GPU (`SIZE`), so the same tests check real shapes there.
"""

import dataclasses
import functools
import os

import jsample.kernels  # noqa: F401  (chooses the Triton interpreter on CPU-only machines first)
import jax
import numpy as np
import pytest
import torch

jax.config.update("jax_enable_x64", True)  # int64 seeds/positions; x64-off is tested explicitly

import jsample  # noqa: E402
import torch_backend  # noqa: E402

ON_GPU = torch.cuda.is_available()
TORCH_DEVICE = "cuda" if ON_GPU else "cpu"
# Problem scale: the interpreter runs ~5 ms per program, the GPU runs real sizes (pytest --size overrides).
SIZE = "gpu" if ON_GPU else "cpu"
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# Tokens may differ from the reference where its top-2 scores are this close (relative to max(1, |best|)):
# GPU logs are not NumPy logs.
SCORE_MARGIN = {False: 1e-4, True: 1e-9}


def pytest_addoption(parser):
    parser.addoption("--size", choices=["cpu", "gpu"], default=None,
                     help="problem sizes of the shared tests (default: gpu with a CUDA GPU, else cpu)")
    parser.addoption("--quick", action="store_true",
                     help="the quick tier for local runs (a few minutes on 2 cores): every op in both frontends "
                          "(QUICK_FILES), without the tests marked slow")


def pytest_configure(config):
    global SIZE
    SIZE = config.getoption("--size") or SIZE  # before the test modules import it


# the quick tier's files: every op through both frontends (padding compares every op's torch and JAX outputs
# with the unpadded call), the random stream's bits, plans and compile keys, errors, fences and doctests
QUICK_FILES = {"test_padding.py", "test_stream.py", "test_plans.py", "test_compiles.py", "test_fences.py",
               "test_docstrings.py", "test_rates.py"}


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    skip_quick = pytest.mark.skip(reason="--quick: not in the quick tier")
    for item in items:
        if "gpu" in item.keywords and not ON_GPU:
            item.add_marker(skip_gpu)
        if config.getoption("--quick") and ("slow" in item.keywords or item.path.name not in QUICK_FILES):
            item.add_marker(skip_quick)


def to_torch(value):
    if isinstance(value, np.ndarray):
        value = np.require(value, requirements="C")  # not ascontiguousarray: it makes 0-d arrays 1-D
        if value.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: torch cannot wrap it directly
            return torch.from_numpy(value.view(np.uint16)).view(torch.bfloat16).to(TORCH_DEVICE)
        return torch.from_numpy(value).to(TORCH_DEVICE)
    return value


def run_torch(op_name, *args, **kwargs):
    out = getattr(torch_backend, op_name)(*map(to_torch, args), **{k: to_torch(v) for k, v in kwargs.items()})
    if isinstance(out, tuple):  # (a Logprobs among the outputs: its fields as arrays, the same named tuple)
        return tuple(type(o)(*(f.cpu().numpy() for f in o)) if isinstance(o, tuple) else o.cpu().numpy()
                     for o in out)
    return out.cpu().numpy()


_jitted = {}


@pytest.fixture(autouse=True)
def _fresh_jax_traces():
    """Each test traces its JAX calls anew (run_jax): a jitted function keeps the plan of its first trace,
    and a test may plan otherwise than the one before it with the same planning function and target (a
    fixture that patches a planning constant and clears the plan cache, for one)."""
    _jitted.clear()


def _planning():
    """What the JAX frontend plans with: the target and the planning functions (tests replace them to force
    a plan; a jitted function keeps the plan it was traced with, so run_jax traces again when they change)."""
    from jsample._jax import _execute

    # the functions themselves, not their ids: the key keeps them alive, so no later function reuses an id.
    # target(), not TARGET: on a GPU the first call resolves TARGET's SM count, and a key taken before it
    # would make a test's first JAX call trace twice
    return (_execute.target(),) + tuple(getattr(jsample.kernels, name) for name in sorted(dir(jsample.kernels))
                                      if name.startswith("plan_"))


def run_jax(op_name, *args, **kwargs):
    """Calls the JAX op under jax.jit: NumPy arrays are traced, everything else is static; traced again
    whenever the target or a planning function was replaced (_planning), so that a forced plan runs."""
    arg_is_array = tuple(isinstance(a, np.ndarray) for a in args)
    static_args = [a for a, is_array in zip(args, arg_is_array) if not is_array]
    static_kwargs = {k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray)}
    array_kwarg_names = tuple(sorted(k for k in kwargs if k not in static_kwargs))
    key = (op_name, arg_is_array, repr(static_args), repr(sorted(static_kwargs.items())), array_kwarg_names,
           _planning())
    if key not in _jitted:
        op = getattr(jsample, op_name)

        def call(positional_arrays, keyword_arrays):
            arrays, statics = iter(positional_arrays), iter(static_args)
            full = [next(arrays) if is_array else next(statics) for is_array in arg_is_array]
            return op(*full, **static_kwargs, **keyword_arrays)

        _jitted[key] = jax.jit(call)
    out = _jitted[key]([jax.numpy.asarray(a) for a in args if isinstance(a, np.ndarray)],
                       {k: jax.numpy.asarray(kwargs[k]) for k in array_kwarg_names})
    if isinstance(out, tuple):  # (a Logprobs among the outputs: its fields as arrays, the same named tuple)
        return tuple(type(o)(*map(np.asarray, o)) if isinstance(o, tuple) else np.asarray(o) for o in out)
    return np.asarray(out)


def make_requests(rng, batch, seed_dtype="int64", position_dtype="int64", *, wide_seeds=True):
    """Seeds and positions of `batch` requests: 64-bit seeds (every third >= 2**31 when wide_seeds) and
    positions, every fourth >= 2**32, narrowed to the dtypes asked for."""
    seeds = rng.integers(-(2**62), 2**62, size=batch)
    if wide_seeds:
        seeds[::3] = rng.integers(2**31, 2**40, size=len(seeds[::3]))  # >= 2**31
    positions = rng.integers(0, 2**20, size=batch)
    positions[1::4] = rng.integers(2**32, 2**40, size=len(positions[1::4]))  # >= 2**32
    if seed_dtype != "int64":
        seeds = seeds.astype(np.int64) & 0xFFFFFFFF
        seeds = seeds.astype(np.uint32).view(np.int32) if seed_dtype == "int32" else seeds.astype(np.uint32)
    if position_dtype == "int32":
        positions = positions & 0x7FFFFFFF
    return seeds.astype(seed_dtype), positions.astype(position_dtype)


FRONTENDS = {"torch": run_torch, "jax": run_jax}


@pytest.fixture(params=list(FRONTENDS))
def frontend(request):
    """run(op_name, *numpy_args, **kwargs) -> numpy outputs, for one frontend. On the CPU the slow
    statistical tests run the torch frontend only: both run the same kernels, and torch == JAX is
    asserted bit for bit by the other tests (the GPU runs both)."""
    if request.param == "jax" and SIZE == "cpu" and request.node.get_closest_marker("slow"):
        pytest.skip("CPU: a slow statistical test runs on torch only (the same kernels as JAX)")
    return FRONTENDS[request.param]


@pytest.fixture
def force_variant(monkeypatch):
    """force_variant(variant): both frontends' rejection_sample calls run that plan variant
    (kernels.REJECTION_VARIANTS) instead of the one the planning function would choose (call JAX
    eagerly: a jitted function keeps the plan it was traced with)."""
    from jsample.kernels import rejection

    def force(variant):
        monkeypatch.setattr(jsample.kernels, "plan_rejection_sample",
                            functools.partial(rejection.plan_rejection_sample, variant=variant))
    return force


@pytest.fixture
def force_target(monkeypatch):
    """force_target(**changes): both frontends plan for their target with these fields replaced
    (kernels.plan.Target), e.g. large_programs=False runs the GPU's tilings through the interpreter
    (call JAX eagerly: a jitted function keeps the plan it was traced with)."""
    from jsample._jax import _execute as jax_execute
    from torch_backend import _execute as torch_execute

    def force(**changes):
        torch_target = torch_execute.target
        monkeypatch.setattr(torch_execute, "target", lambda device: dataclasses.replace(torch_target(device), **changes))
        monkeypatch.setattr(jax_execute, "TARGET", dataclasses.replace(jax_execute.TARGET, **changes))
    return force


def forget_plans():
    """Empty the planning functions' and the torch executor's caches (after a test changed a planning constant)."""
    from jsample.kernels import gumbel, rejection
    from torch_backend import _execute

    gumbel.plan_gumbel_sample.cache_clear()
    rejection.plan_rejection_sample.cache_clear()
    for cache in (_execute._PLANS, _execute._LAUNCHERS, _execute._RECIPES, _execute._REPLAYS, _execute._LAST):
        cache.clear()


@pytest.fixture
def fp64_intervals_everywhere(monkeypatch):
    """gumbel_sample's two-launch plans take FP64 intervals at any size (gumbel.FP64_INTERVALS_MIN_PROGRAMS)."""
    from jsample.kernels import gumbel

    monkeypatch.setattr(gumbel, "FP64_INTERVALS_MIN_PROGRAMS", 0)
    forget_plans()
    yield
    forget_plans()  # before monkeypatch restores the threshold


@pytest.fixture
def rejection_in_four_launches(monkeypatch):
    """rejection_sample's plans take the four launches at any batch (rejection.DECIDE_IN_EMIT_MAX_PROGRAMS)."""
    from jsample.kernels import rejection

    monkeypatch.setattr(rejection, "DECIDE_IN_EMIT_MAX_PROGRAMS", 0)
    forget_plans()
    yield
    forget_plans()


def both_frontends(op_name, *args, **kwargs):
    """Runs the op in torch and JAX and asserts the outputs are identical; returns them."""
    from_torch = run_torch(op_name, *args, **kwargs)
    from_jax = run_jax(op_name, *args, **kwargs)
    for t, j in zip(from_torch if isinstance(from_torch, tuple) else (from_torch,),
                    from_jax if isinstance(from_jax, tuple) else (from_jax,)):
        np.testing.assert_array_equal(t, j, err_msg=f"{op_name}: torch and JAX differ")
    return from_torch


def set_filtered(monkeypatch, name, value):
    """monkeypatch.setattr of a name of jsample.kernels.filtered in the package and in each of its modules that
    holds it (the package re-exports its modules' names, and each module reads the names it imported)."""
    import importlib
    import pkgutil

    import jsample.kernels.filtered as package

    modules = [package] + [importlib.import_module(f"{package.__name__}.{info.name}")
                           for info in pkgutil.iter_modules(package.__path__)]
    holders = [module for module in modules if hasattr(module, name)]
    assert holders, name
    for module in holders:
        monkeypatch.setattr(module, name, value)
