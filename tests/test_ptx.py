"""The PTX ISA jax-triton asks of Triton for XLA's ptxas (issue 40: triton 3.9 writes PTX 9.4, which the ptxas
of CUDA 13.0 that XLA used refuses). Checked without a GPU: the version detection against stand-in ptxas
binaries, and, where this machine has a CUDA toolkit's ptxas older than Triton's, the real thing: a jsample
kernel's PTX from Triton, assembled by that ptxas as XLA would, fails at Triton's ISA and passes at the one
jsample asks for."""

import os
import stat
import subprocess

import pytest

from jsample._jax import _ptx


def _fake_ptxas(tmp_path, release):
    path = tmp_path / f"ptxas-{release}"
    path.write_text(f"#!/bin/sh\necho 'ptxas: NVIDIA (R) Ptx optimizing assembler'\n"
                    f"echo 'Cuda compilation tools, release {release}, V{release}.1'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_cuda_releases_map_to_their_ptx_isa():
    assert [_ptx.ptx_version_of_cuda(*v) for v in ((11, 8), (12, 0), (12, 4), (12, 8), (13, 0), (13, 4))] == \
        [78, 80, 84, 87, 90, 94]


@pytest.mark.parametrize("release, triton, expected", [("13.0", 94, {"ptx_version": 90}), ("13.4", 94, {}),
                                                         ("12.8", 90, {"ptx_version": 87}), ("13.0", None, {})])
def test_the_ptx_version_asked_follows_xla_ptxas(tmp_path, monkeypatch, release, triton, expected):
    monkeypatch.setenv("JSAMPLE_XLA_PTXAS", _fake_ptxas(tmp_path, release))
    monkeypatch.setattr(_ptx, "triton_ptx_version", lambda: triton)
    _ptx.backend_options.cache_clear()
    try:
        assert _ptx.backend_options() == expected
    finally:
        _ptx.backend_options.cache_clear()


def test_a_ptxas_too_old_fails_before_any_launch_naming_the_fix(tmp_path, monkeypatch):
    path = _fake_ptxas(tmp_path, "11.4")
    monkeypatch.setenv("JSAMPLE_XLA_PTXAS", path)
    _ptx.backend_options.cache_clear()
    try:
        with pytest.raises(RuntimeError) as raised:
            _ptx.backend_options()
    finally:
        _ptx.backend_options.cache_clear()
    message = str(raised.value)
    assert message.startswith("jsample: ") and path in message and "CUDA 11.4" in message
    assert "PTX ISA up to 7.4" in message and "--xla_gpu_cuda_data_dir" in message


def test_explicitly_none_keeps_tritons_isa(monkeypatch):
    monkeypatch.setenv("JSAMPLE_XLA_PTXAS", "none")
    _ptx.backend_options.cache_clear()
    try:
        assert _ptx.backend_options() == {}
    finally:
        _ptx.backend_options.cache_clear()


def test_triton_ptx_at_the_asked_isa_assembles_with_an_older_ptxas(tmp_path, monkeypatch):
    """A jsample kernel compiled by Triton for sm_90, its PTX then assembled by this machine's CUDA ptxas (as
    XLA assembles jax-triton's): where that ptxas is older than Triton's, Triton's own ISA is refused and the
    one backend_options asks for is accepted."""
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.delenv("JSAMPLE_XLA_PTXAS", raising=False)
    system = [p for p in _ptx.xla_ptxas_candidates() if _ptx.ptxas_cuda_version(p)]
    triton_ptx = _ptx.triton_ptx_version()
    if not system or triton_ptx is None:
        pytest.skip("no CUDA toolkit ptxas here, or no NVIDIA backend in triton")
    path = min(system, key=_ptx.ptxas_cuda_version)
    xla_ptx = _ptx.ptx_version_of_cuda(*_ptx.ptxas_cuda_version(path))
    if xla_ptx >= triton_ptx:
        pytest.skip(f"this machine's ptxas ({path}) takes Triton's PTX {triton_ptx}: nothing to show")
    _ptx.backend_options.cache_clear()
    assert _ptx.backend_options() == {"ptx_version": xla_ptx}
    _ptx.backend_options.cache_clear()

    code = f"""
import os, sys
os.environ["TRITON_INTERPRET"] = "0"
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from jsample import kernels
source = ASTSource(fn=kernels.argmax_reduce_kernel, signature={{"partial_score_ptr": "*fp32", "partial_index_ptr": "*i32",
    "logits_ptr": "*fp32", "row_valid_ptr": "*i32", "V": "i32", "row_stride": "i32", "num_blocks": "i32",
    "tokens_ptr": "*i32", "FP64": "constexpr", "REDUCE_BLOCK": "constexpr", "HAS_ROW_VALID": "constexpr"}},
    constexprs={{"FP64": False, "REDUCE_BLOCK": 64, "HAS_ROW_VALID": True}})
options = dict(num_warps=1, enable_fp_fusion=False)
if sys.argv[1] != "default":
    options["ptx_version"] = int(sys.argv[1])
open(sys.argv[2], "w").write(triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"])
"""
    results = {}
    for asked in ("default", str(xla_ptx)):
        ptx_file = tmp_path / f"kernel_{asked}.ptx"
        subprocess.run(["python", "-c", code, asked, str(ptx_file)], check=True, capture_output=True, timeout=600,
                       env={**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")})
        header = next(line for line in ptx_file.read_text().splitlines() if line.startswith(".version"))
        target = next(line for line in ptx_file.read_text().splitlines() if line.startswith(".target"))
        assembled = subprocess.run([path, f"-arch={target.split()[1].rstrip(',')}", str(ptx_file), "-o",
                                    str(tmp_path / f"kernel_{asked}.cubin")], capture_output=True, text=True)
        results[asked] = (header, assembled.returncode, assembled.stderr)
    assert results["default"][0] == f".version {triton_ptx // 10}.{triton_ptx % 10}"
    assert results["default"][1] != 0 and "Unsupported .version" in results["default"][2], results["default"]
    assert results[str(xla_ptx)][0] == f".version {xla_ptx // 10}.{xla_ptx % 10}"
    assert results[str(xla_ptx)][1] == 0, results[str(xla_ptx)]
