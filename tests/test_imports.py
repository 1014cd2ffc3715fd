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
    """jsample defines its own kernels interpreted or compiled by its own choice (JSAMPLE_INTERPRET,
    else TRITON_INTERPRET, else the interpreter when no GPU is present), whatever was imported before
    it; on a CPU machine, tokens then equal the reference's."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("TRITON_INTERPRET", "JSAMPLE_INTERPRET")}  # the automatic choice
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


_USER_KERNEL = (
    "import triton, triton.language as tl\n"
    "def row_max(x_ptr, out_ptr, N: tl.constexpr):\n"
    "    tl.store(out_ptr, tl.max(tl.load(x_ptr + tl.arange(0, N)), axis=0))\n")

_SNAPSHOT = (
    "import os, sys, threading, warnings, triton, triton.language as tl\n"
    "from triton.runtime import interpreter\n"
    "def snapshot():\n"
    "    return dict(env=dict(os.environ), warnings=list(warnings.filters), patch=interpreter._patch_lang,\n"
    "                modules={n: id(m) for n, m in sys.modules.items() if n.startswith('triton')},\n"
    "                library={n: id(getattr(tl, n)) for n in dir(tl)},\n"
    "                standard={n: id(v) for n, v in vars(tl.standard).items()},\n"
    "                methods={n: getattr(tl.core.tensor, n) for n in dir(tl.core.tensor)})\n"
    "def same(a, b, what):\n"
    "    for key in a:\n"
    "        if key in ('modules', 'standard'):  # none replaced; new ones may come: triton modules imported,\n"
    "            changed = [n for n in a[key] if b[key].get(n) != a[key][n]]  # and the names Triton's\n"
    "        else:  # interpreter adds to the module of each function it rewrites\n"
    "            changed = a[key] != b[key]\n"
    "        assert not changed, (what, key, changed if isinstance(changed, list) else '')\n")


@pytest.mark.parametrize("triton_interpret", [None, "1"])
def test_import_and_calls_change_nothing_they_do_not_own(triton_interpret, tmp_path):
    """Importing jsample (both frontends) and running its ops set no environment variable, reload no
    triton module, patch nothing in triton.language or the interpreter, add no warning filter and start
    no thread at import; a user's own @triton.jit kernel, defined before and after `import jsample`,
    is the same kind of object and (where it can run: interpreted, or on a GPU) gives the same result,
    also after jsample's kernels ran."""
    env = {name: value for name, value in os.environ.items() if name not in ("TRITON_INTERPRET", "JSAMPLE_INTERPRET")}
    if triton_interpret:  # (on a GPU machine too: CPU arrays, which the interpreter runs)
        env.update(TRITON_INTERPRET=triton_interpret, JAX_PLATFORMS="cpu")
    script = tmp_path / "user_program.py"  # @triton.jit needs its function's source file
    script.write_text(_SNAPSHOT + _USER_KERNEL +
         "before = triton.jit(row_max)\n"
         "start, threads = snapshot(), threading.active_count()\n"
         "import numpy as np, torch, jax, jax.numpy as jnp\n"
         "start, threads = snapshot(), threading.active_count()\n"
         "import jsample, torch_backend, jsample.kernels\n"
         "same(start, snapshot(), 'import')\n"
         "assert threading.active_count() == threads, 'import started a thread'\n"
         "after = triton.jit(row_max)\n"
         "assert type(before) is type(after), (type(before), type(after))\n"
         "interpreted = os.environ.get('TRITON_INTERPRET') == '1'\n"
         "gpu = torch.cuda.is_available() and not interpreted\n"
         "d = 'cuda' if gpu else 'cpu'\n"
         "runs = gpu or interpreted\n"
         "x = torch.tensor([3.0, -1.0, 7.5, 2.0], device=d)\n"
         "def run(kernel):\n"
         "    out = torch.zeros(1, device=d)\n"
         "    kernel[(1,)](x, out, N=4)\n"
         "    return float(out[0])\n"
         "if runs: assert run(before) == run(after) == 7.5\n"
         "logits = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)\n"
         "s, p = np.int32([1, 2]), np.int32([0, 0])\n"
         "t = torch_backend.top_k_top_p_sample(torch.tensor(logits, device=d), torch.tensor(s, device=d),\n"
         "                                     torch.tensor(p, device=d), 0.8, top_k=5, top_p=0.9)\n"
         "j = jsample.top_k_top_p_sample(logits, s, p, 0.8, top_k=5, top_p=0.9)\n"
         "assert (np.asarray(j) == t.cpu().numpy()).all()\n"
         "same(start, snapshot(), 'calls')\n"
         "if runs: assert run(before) == run(after) == 7.5\n"
         "mine = triton.jit(row_max)\n"
         "assert type(mine) is type(before)\n"
         "if runs: assert run(mine) == 7.5\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                            cwd=os.getcwd())
    assert result.returncode == 0, result.stderr[-3000:]
