"""The import rule is the architecture: torch_backend -> jsample.kernels <- jsample (JAX)."""

import os
import subprocess
import sys

import pytest


def _run(code: str, env=None) -> None:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]


def _block(framework: str) -> str:
    """Code that makes `framework` uninstalled for the rest of a process: imports of it fail and it
    never appears in sys.modules (a None entry there is not the same: triton 3.9's launcher then
    looks up sys.modules["torch"].Tensor)."""
    return ("import sys\n"
            "class _Blocked:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] == {framework!r}:\n"
            "            raise ImportError(name + ' is blocked')\n"
            "sys.meta_path.insert(0, _Blocked())\n")


@pytest.mark.parametrize("module", ["torch_backend", "jsample", "jsample.kernels", "jsample.reference",
                                    "jsample.validation"])
def test_imports_do_not_pull_jax(module):
    _run(f"import sys, {module}; assert 'jax' not in sys.modules, '{module} imported jax'")


def test_torch_backend_works_with_jax_blocked():
    _run(_block("jax") +
         "import torch, torch_backend\n"
         "d = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
         "t = torch_backend.gumbel_sample(torch.zeros(2, 8, device=d), torch.tensor([1, 2], device=d),\n"
         "                                torch.tensor([0, 0], device=d), 1.0)\n"
         "assert t.shape == (2,)")


def test_jax_frontend_works_with_torch_blocked():
    _run(_block("torch") +
         "import numpy as np, jax, jsample\n"
         "t = jax.jit(jsample.gumbel_sample)(np.zeros((2, 8), np.float32), np.int32([1, 2]), np.int32([0, 0]), 1.0)\n"
         "assert t.shape == (2,) and 'torch' not in sys.modules")


def test_versions_match():
    import jsample
    import torch_backend

    assert jsample.__version__ == torch_backend.__version__
    assert jsample.STREAM_VERSION == torch_backend.STREAM_VERSION == 1


@pytest.mark.parametrize("blocked", ["torch", "jax", None])
def test_demo_runs_with_either_frontend_alone(blocked):
    _run((_block(blocked) if blocked else "") + "from jsample.demo import main\nassert main(batch=4, vocab=300)")


def test_demo_without_either_frontend_compares_nothing_and_says_so():
    result = subprocess.run([sys.executable, "-c", _block("torch") + _block("jax") +
                             "from jsample.demo import main\nraise SystemExit(0 if main(batch=4, vocab=300) else 3)"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 3, result.stderr[-3000:]
    assert "no kernel ran, nothing was compared" in result.stdout and "identical" not in result.stdout


def test_the_interpreter_choice_does_not_depend_on_import_order():
    """Triton picks interpreted or compiled per kernel when the kernel is defined, so jsample's choice
    (jsample.kernels: TRITON_INTERPRET, else the interpreter when no GPU is present) holds whatever
    was imported before it; on a CPU machine, tokens then equal the reference's."""
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}  # the automatic choice
    _run("import os, triton, torch, jax\n"
         "import numpy as np, torch_backend, jsample, jsample.kernels as k\n"
         "from jsample.reference import gumbel_sample_reference\n"
         "gpu = torch.cuda.is_available()\n"
         "assert k.INTERPRETER == (not gpu)\n"
         "x = np.random.default_rng(0).standard_normal((3, 300)).astype(np.float32)\n"
         "s, p, t = np.arange(3), np.arange(3) * 7, np.float32([0.7, 1.0, 0.0])\n"
         "d = 'cuda' if gpu else 'cpu'\n"
         "out = torch_backend.gumbel_sample(*(torch.tensor(a, device=d) for a in (x, s, p, t))).cpu().numpy()\n"
         "if not gpu: np.testing.assert_array_equal(out, gumbel_sample_reference(x, s, p, t))\n"
         "np.testing.assert_array_equal(np.asarray(jsample.gumbel_sample(x, s.astype(np.int32), p.astype(np.int32), t)), out)\n"
         "f = torch_backend.top_k_top_p_sample(*(torch.tensor(a, device=d) for a in (x, s, p, t)), top_k=5, top_p=0.8)\n"
         "np.testing.assert_array_equal(np.asarray(jsample.top_k_top_p_sample(x, s.astype(np.int32), p.astype(np.int32), t,\n"
         "                              top_k=5, top_p=0.8)), f.cpu().numpy())",
         env)
