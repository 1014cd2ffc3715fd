"""`jsample.describe()`: what runs where, and through which fences, in this process."""

import importlib.metadata
import sys


def _version(package: str):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe() -> dict:
    """The versions found, whether the kernels are interpreted or compiled, and the path each frontend takes
    where it depends on another library's private internals (each behind a fence with a public fallback):

    * `torch_launch`: eager torch calls through the compiled launchers' entry points ("direct") or
      Triton's public launch ("triton"): torch_backend/_fast_path.py, switch JSAMPLE_TORCH_LAUNCH;
    * `torch_triton_setup`: Triton's once-a-process set-up (its driver utilities' build, its compiler's hash)
      begun on threads when torch_backend is imported, or left to the first call: torch_backend/_triton_setup.py,
      switch JSAMPLE_WARM_TRITON;
    * `torch_compile_behind`: whether an eager call of a plan that takes seconds to compile runs its stand-in while
      it compiles on a thread: torch_backend/_compile_behind.py, switch JSAMPLE_COMPILE_BEHIND (no private
      internals: reported for what a first call does);
    * `jax_cpu_path`: the JAX CPU path's launches as XLA FFI custom calls ("ffi") or `jax.pure_callback`:
      jsample/_jax/_host_call.py, switch JSAMPLE_JAX_CPU_PATH.

    A frontend that is not installed is reported as None; describing one imports it.
    """
    from jsample import kernels

    found = {"jsample": _version("jsample"), "python": sys.version.split()[0], "triton": _version("triton"),
             "torch": _version("torch"), "jax": _version("jax"), "jaxlib": _version("jaxlib"),
             "jax_triton": _version("jax-triton"),
             "kernels": "Triton interpreter (CPU)" if kernels.INTERPRETER else "compiled (GPU)"}
    try:
        from torch_backend import _fast_path

        found["torch_launch"] = _fast_path.path()
        from torch_backend import _triton_setup

        found["torch_triton_setup"] = _triton_setup.path()
        from torch_backend import _compile_behind

        found["torch_compile_behind"] = "on" if _compile_behind.enabled() else "off (JSAMPLE_COMPILE_BEHIND=0)"
    except ImportError:
        found["torch_launch"] = found["torch_triton_setup"] = found["torch_compile_behind"] = None
    try:
        from jsample._jax import _host_call
        from jsample._jax._launch import on_gpu

        found["jax_cpu_path"] = _host_call.path()
        found["jax_backend"] = "GPU: jax-triton" if on_gpu() else "CPU"
        from jsample._jax import _ptx

        try:  # the PTX ISA asked of Triton for XLA's ptxas (jax-triton 0.4), or Triton's own
            found["jax_ptx_version"] = _ptx.backend_options().get("ptx_version", "triton's")
        except RuntimeError as error:
            found["jax_ptx_version"] = str(error)
    except ImportError:
        found["jax_cpu_path"] = found["jax_backend"] = None
    return found
