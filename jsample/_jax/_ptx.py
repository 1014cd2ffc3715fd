"""The PTX ISA version jax-triton asks Triton for: one the ptxas XLA compiles it with accepts (issue 40).

jax-triton hands XLA Triton's PTX, and XLA compiles it with a ptxas of its own (the CUDA toolkit it
finds: the nvidia-cuda-nvcc wheel, `--xla_gpu_cuda_data_dir`, CUDA_HOME, PATH). Triton writes the PTX ISA
of the ptxas bundled with it: triton 3.9 writes 9.4, which XLA's ptxas of CUDA 13.0 refuses
("Unsupported .version 9.4; current version is '9.0'"). So where a ptxas XLA may use is older than
Triton's, the JAX frontend passes `ptx_version` (a Triton CUDA option, through jax-triton 0.4's
backend_options) at the oldest one's ISA: Triton's LLVM backend then targets that ISA, and every ptxas
found accepts it.

Found with public means only: each candidate ptxas's `--version` (and `triton.knobs.nvidia.ptxas` for
Triton's). `JSAMPLE_XLA_PTXAS` names XLA's ptxas explicitly (a path, or "none": leave Triton's ISA).
"""

import functools
import glob
import os
import re
import shutil
import subprocess
import sys

# the oldest PTX ISA jsample's kernels are compiled for on Hopper (Triton's sm_90 code needs 8.0)
MIN_PTX_VERSION = 80


def ptx_version_of_cuda(major: int, minor: int) -> int:
    """The newest PTX ISA (as 10 * major + minor) a CUDA toolkit's ptxas accepts (NVIDIA's release notes:
    12.0-12.5 -> 8.0-8.5, 12.6 -> 8.5 (8.6 came with 12.7), 12.8 -> 8.7, 12.9 -> 8.8, 13.x -> 9.x)."""
    if major >= 13:
        return 90 + (major - 13) * 10 + minor
    if major == 12:
        return 80 + minor if minor < 6 else 80 + minor - 1
    if major == 11:
        return 70 + minor
    raise ValueError(f"jsample: CUDA {major}.{minor} is older than any triton supports")


def ptxas_cuda_version(path: str):
    """(major, minor) of the CUDA release a ptxas binary belongs to, or None if it does not run."""
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"release (\d+)\.(\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else None


def xla_ptxas_candidates() -> list:
    """The ptxas binaries XLA may compile jax-triton's PTX with, as XLA looks for a CUDA toolkit."""
    explicit = os.environ.get("JSAMPLE_XLA_PTXAS")
    if explicit:
        return [] if explicit == "none" else [explicit]
    roots = []
    flags = re.search(r"--xla_gpu_cuda_data_dir=(\S+)", os.environ.get("XLA_FLAGS", ""))
    if flags:
        roots.append(flags.group(1))
    for site in sys.path:  # the CUDA wheels jax[cuda12] / jax[cuda13] install (nvidia-cuda-nvcc)
        roots += glob.glob(os.path.join(site, "nvidia", "cuda_nvcc")) + glob.glob(os.path.join(site, "nvidia", "cu1*"))
    roots += [os.environ[name] for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_DIR") if os.environ.get(name)]
    roots.append("/usr/local/cuda")
    found = [os.path.join(root, "bin", "ptxas") for root in roots]
    on_path = shutil.which("ptxas")
    if on_path:
        found.append(on_path)
    return [path for path in dict.fromkeys(found) if os.path.isfile(path) and os.access(path, os.X_OK)]


def triton_ptx_version():
    """The newest PTX ISA Triton writes by default (its bundled ptxas's: triton 3.9 has one for sm_90 and newer,
    `ptxas_blackwell`, and one for older GPUs), or None where that cannot be read."""
    try:
        from triton import knobs

        tools = [getattr(knobs.nvidia, name, None) for name in ("ptxas", "ptxas_blackwell")]
        versions = [ptxas_cuda_version(tool.path) for tool in tools if tool is not None]
    except Exception:  # noqa: BLE001 (no NVIDIA backend: nothing to ask for)
        return None
    versions = [ptx_version_of_cuda(*v) for v in versions if v]
    return max(versions) if versions else None


@functools.lru_cache(maxsize=1)
def backend_options() -> dict:
    """{"ptx_version": v} where a ptxas XLA may use accepts only an older ISA than Triton writes, else {}.
    Raises a RuntimeError naming the versions and the fix where that ptxas is too old for the kernels."""
    found = [(path, ptxas_cuda_version(path)) for path in xla_ptxas_candidates()]
    found = [(path, version) for path, version in found if version]
    if not found:
        return {}
    path, (major, minor) = min(found, key=lambda item: item[1])
    xla_ptx = ptx_version_of_cuda(major, minor)
    if xla_ptx < MIN_PTX_VERSION:
        raise RuntimeError(
            f"jsample: the ptxas XLA may compile Triton's PTX with ({path}, CUDA {major}.{minor}) accepts PTX ISA up "
            f"to {xla_ptx // 10}.{xla_ptx % 10}, older than the {MIN_PTX_VERSION // 10}.{MIN_PTX_VERSION % 10} "
            "jsample's kernels need: install a newer CUDA toolkit for JAX (pip install 'jax[cuda12]' or "
            "'jax[cuda13]'), or point XLA at one with XLA_FLAGS=--xla_gpu_cuda_data_dir=<CUDA root> (and "
            "JSAMPLE_XLA_PTXAS=<its ptxas>).")
    triton_ptx = triton_ptx_version()
    if triton_ptx is None or xla_ptx >= triton_ptx:
        return {}
    return {"ptx_version": xla_ptx}
