"""Other libraries' private internals sit behind fences: a version check, a self-check, one switch, and a
public fallback that these tests force (issue 40). On the GPU, tests/test_integration_gpu.py compares the
torch fast path's tokens with Triton's public launch."""

import ctypes
import os
import subprocess
import sys

import pytest

from jsample._jax import _host_call


def _run(code: str, **env) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**os.environ, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


SAMPLE_JAX = ("import numpy as np, jax, jsample\n"
              "from jsample._jax import _host_call\n"
              "x = np.random.default_rng(0).standard_normal((4, 300)).astype(np.float32)\n"
              "t = jax.jit(jsample.gumbel_sample)(x, np.int32([1, 2, 3, 4]), np.int32([0, 5, 9, 2]), 0.8)\n"
              "print(_host_call.path(), jsample.describe()['jax_cpu_path'], np.asarray(t).tolist())\n")


def test_jax_cpu_path_forced_to_pure_callback_gives_the_same_tokens():
    ffi = _run(SAMPLE_JAX, JSAMPLE_JAX_CPU_PATH="ffi").split(" ", 2)
    fallback = _run(SAMPLE_JAX, JSAMPLE_JAX_CPU_PATH="pure_callback").split(" ", 2)
    assert ffi[:2] == ["ffi", "ffi"] and fallback[:2] == ["pure_callback", "pure_callback"]
    assert ffi[2] == fallback[2]


def test_jax_ffi_handler_only_on_verified_jaxlib_versions():
    out = _run("import jaxlib\njaxlib.__version__ = '0.9.1'\n" + SAMPLE_JAX, JSAMPLE_JAX_CPU_PATH="")
    assert out.startswith("pure_callback pure_callback")
    assert (0, 10) in _host_call.VERIFIED_JAXLIB


def test_jax_cpu_path_switch_refuses_unknown_values():
    result = subprocess.run([sys.executable, "-c", SAMPLE_JAX], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "JSAMPLE_JAX_CPU_PATH": "fast"})
    assert result.returncode != 0 and "JSAMPLE_JAX_CPU_PATH must be 'ffi' or 'pure_callback', got 'fast'" in result.stderr


def _attrs(attr_type=_host_call._ATTR_SCALAR, dtype=_host_call._DTYPE_S64, name=b"launch_id", value=0, size=None):
    value_box = ctypes.c_int64(value)
    scalar = _host_call._Scalar(dtype, ctypes.pointer(value_box))
    name_buffer = ctypes.create_string_buffer(name)
    span = _host_call._ByteSpan(ctypes.cast(name_buffer, ctypes.c_void_p), len(name))
    span_pointer = (ctypes.POINTER(_host_call._ByteSpan) * 1)(ctypes.pointer(span))
    types = (ctypes.c_int * 1)(attr_type)
    items = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(scalar), ctypes.c_void_p))
    attrs = _host_call._Attrs(size or ctypes.sizeof(_host_call._Attrs), None, 1, types,
                              ctypes.cast(span_pointer, ctypes.c_void_p), items)
    return attrs, (value_box, scalar, name_buffer, span, span_pointer, types, items)  # kept alive


def test_ffi_handler_checks_the_attribute_it_reads():
    _host_call.launch_id(("test_fences", 1), lambda: None)  # at least one registered launch
    attrs, keep = _attrs()
    assert _host_call._launch_id(attrs) == 0
    for changes, message in ((dict(attr_type=1), "attribute type 1, expected a scalar"),
                             (dict(dtype=4), "launch_id has XLA dtype 4, expected int64"),
                             (dict(name=b"other"), "attribute 0 is named b'other'"),
                             (dict(value=10**9), "launch_id 1000000000 names no registered launch")):
        attrs, keep = _attrs(**changes)
        with pytest.raises(RuntimeError, match=message):
            _host_call._launch_id(attrs)


def test_ffi_handler_checks_every_struct_size():
    attrs, keep = _attrs(size=8)
    with pytest.raises(_host_call._AbiMismatch, match="XLA_FFI_Attrs has struct_size 8, expected at least"):
        _host_call._check_size(attrs, _host_call._Attrs, "XLA_FFI_Attrs")
    buffer = _host_call._Buffer(16, None, 11, None, 0, None)
    launch = _host_call.HostLaunch(None, (("float32", ()),), ())
    frame_list = _host_call._List(ctypes.sizeof(_host_call._List), None, 1, None,
                                  (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(buffer), ctypes.c_void_p)))
    with pytest.raises(_host_call._AbiMismatch, match="XLA_FFI_Buffer has struct_size 16"):
        launch.views(frame_list, launch.in_types, "argument")


TORCH_PATH = ("import torch_backend\nfrom torch_backend import _execute, _fast_path\n"
              "print(_execute.DIRECT_LAUNCHES, _execute._TensorGuards is not None, _fast_path.path())\n")


def test_torch_fast_path_switch_and_version_check():
    direct = _run(TORCH_PATH, JSAMPLE_TORCH_LAUNCH="direct")
    assert direct.startswith("True True direct")
    public = _run(TORCH_PATH, JSAMPLE_TORCH_LAUNCH="triton")
    assert public.startswith("False False triton (Triton's public launch: JSAMPLE_TORCH_LAUNCH=triton)")
    unverified = _run("import triton\ntriton.__version__ = '3.7.0'\n" + TORCH_PATH, JSAMPLE_TORCH_LAUNCH="")
    assert unverified.startswith("False False triton (Triton's public launch: triton 3.7.0 is not among the verified")


def test_torch_public_launch_path_gives_the_same_tokens():
    code = ("import torch, torch_backend\n"
            "d = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
            "x = torch.randn(4, 300, generator=torch.Generator().manual_seed(0)).to(d)\n"
            "t = torch_backend.top_k_top_p_sample(x, torch.tensor([1, 2, 3, 4], device=d),\n"
            "                                     torch.tensor([0, 5, 9, 2], device=d), 0.8, top_k=9)\n"
            "print(t.tolist())\n")
    assert _run(code, JSAMPLE_TORCH_LAUNCH="triton") == _run(code, JSAMPLE_TORCH_LAUNCH="direct")


def test_describe_says_what_runs():
    import jsample

    found = jsample.describe()
    for key in ("triton", "kernels", "torch_launch", "torch_triton_setup", "jax_cpu_path"):
        assert found[key], key


def test_torch_c_entry_points_only_with_the_fast_path():
    """The executor's per-call questions (capturing? which device?) take torch's C entry points only on the fast
    path and where this torch has them (its CUDA builds); otherwise the public functions, which the token test
    above then exercises."""
    code = ("import torch, torch_backend\n"
            "from torch_backend import _fast_path as f\n"
            "c = [getattr(torch._C, n, None) for n in ('_cuda_isCurrentStreamCapturing', '_cuda_getDevice')]\n"
            "print(all(c), f.stream_capturing is c[0] and f.current_device is c[1])\n")
    has_c, uses_c = _run(code, JSAMPLE_TORCH_LAUNCH="direct").split()
    assert uses_c == has_c
    assert _run(code, JSAMPLE_TORCH_LAUNCH="triton").split()[1] == "False"
