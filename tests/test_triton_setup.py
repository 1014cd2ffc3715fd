"""torch_backend._triton_setup: Triton's once-a-process set-up begun at import (issue 39), behind its fence."""

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str, **env) -> str:
    full = dict(os.environ, PYTHONPATH=ROOT, **env)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_fence_decides_the_steps(monkeypatch):
    from torch_backend import _triton_setup

    monkeypatch.setenv("JSAMPLE_WARM_TRITON", "0")
    assert _triton_setup.steps() == []
    monkeypatch.setenv("JSAMPLE_WARM_TRITON", "1")
    assert [step.__name__ for step in _triton_setup.steps()] == ["CudaUtils", "triton_key"]
    monkeypatch.setenv("JSAMPLE_WARM_TRITON", "")
    monkeypatch.setattr(_triton_setup, "VERIFIED_TRITON", set())
    assert _triton_setup.steps() == []  # an unverified Triton: the public path (Triton does both in the first call)
    monkeypatch.setenv("JSAMPLE_WARM_TRITON", "yes")
    with pytest.raises(ValueError, match="JSAMPLE_WARM_TRITON must be 0 or 1"):
        _triton_setup.steps()


def test_the_set_up_runs_ahead_and_the_first_call_waits_for_it():
    """In a fresh process: the key is hashed on a thread started before any call (on a CPU without CUDA's library
    the driver utilities' step fails, quietly: a GPU-less first call raises Triton's own error, as before);
    wait() joins both; a fork waits too; and the interpreter starts nothing."""
    out = _run(
        "import os, threading\n"
        "from triton.runtime.cache import triton_key\n"
        "from torch_backend import _triton_setup\n"
        "assert triton_key.cache_info().currsize == 0\n"
        "names = _triton_setup.start(False)\n"
        "print(sorted(names))\n"
        "assert _triton_setup.start(False) == []  # once\n"
        "_triton_setup.wait()\n"
        "assert not _triton_setup._THREADS\n"
        "assert triton_key.cache_info().currsize == 1  # hashed by the thread: the first compile's lookup is a hit\n"
        "assert not [t for t in threading.enumerate() if t.name.startswith('jsample-triton-setup')]\n"
        "assert _triton_setup.start(False) == []  # still once, after the join\n"
        "print('fork hook', len(_triton_setup._STARTED))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "print('child', os.waitpid(pid, 0)[1])\n",
        JSAMPLE_WARM_TRITON="1", JSAMPLE_INTERPRET="1")  # (interpreted: the package's import starts nothing itself)
    assert out.split("\n")[:3] == ["['jsample-triton-setup-CudaUtils', 'jsample-triton-setup-triton_key']",
                                   "fork hook 1", "child 0"]
    out = _run("import torch_backend\nfrom torch_backend import _triton_setup\n"
               "from triton.runtime.cache import triton_key\n"
               "print(len(_triton_setup._THREADS), triton_key.cache_info().currsize)\n",
               JSAMPLE_INTERPRET="1", JSAMPLE_WARM_TRITON="1")
    assert out.strip() == "0 0"  # interpreted kernels: no set-up thread


def test_a_fork_waits_for_the_set_up():
    """A fork while a set-up step runs waits for it (os.register_at_fork): the child never inherits a half-done step
    (a step that sleeps stands in for the C compiler's build)."""
    out = _run(
        "import os, time\n"
        "from torch_backend import _triton_setup\n"
        "done = []\n"
        "def slow():\n"
        "    time.sleep(0.5)\n"
        "    done.append(1)\n"
        "_triton_setup.steps = lambda: [slow]\n"
        "print(_triton_setup.start(False))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if done else 3)\n"
        "print(len(done), os.waitpid(pid, 0)[1], len(_triton_setup._THREADS))\n",
        JSAMPLE_INTERPRET="1")
    assert out.split("\n")[:2] == ["['jsample-triton-setup-slow']", "1 0 0"]


def test_an_import_with_the_set_up_on_still_samples():
    """The executor waits for the threads before its first launch (here the interpreter's, with the threads
    forced on through start(False)): the same token as without them."""
    out = _run(
        "import torch, torch_backend\n"
        "from torch_backend import _triton_setup\n"
        "_triton_setup.start(False)\n"
        "logits = torch.randn(3, 300, generator=torch.Generator().manual_seed(0))\n"
        "seeds = torch.arange(3)\n"
        "print(torch_backend.gumbel_sample(logits, seeds, seeds, torch.full((3,), 0.7)).tolist(), "
        "len(_triton_setup._THREADS))\n",
        JSAMPLE_INTERPRET="1", JSAMPLE_WARM_TRITON="1")
    without = _run(
        "import torch, torch_backend\n"
        "logits = torch.randn(3, 300, generator=torch.Generator().manual_seed(0))\n"
        "seeds = torch.arange(3)\n"
        "print(torch_backend.gumbel_sample(logits, seeds, seeds, torch.full((3,), 0.7)).tolist(), 0)\n",
        JSAMPLE_INTERPRET="1", JSAMPLE_WARM_TRITON="0")
    assert out.strip() == without.strip()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled kernels on a GPU")
def test_importing_on_a_gpu_starts_the_set_up_and_the_first_call_joins_it():
    """On a GPU machine, importing torch_backend starts both steps (Triton 3.6 / 3.9), the first call joins them
    and samples, and JSAMPLE_WARM_TRITON=0 starts nothing."""
    code = ("import torch, torch_backend\n"
            "from torch_backend import _triton_setup\n"
            "started = len(_triton_setup._THREADS)\n"
            "x = torch.randn(2, 1000, device='cuda')\n"
            "s = torch.arange(2, device='cuda')\n"
            "token = torch_backend.gumbel_sample(x, s, s, torch.full((2,), 0.7, device='cuda'))\n"
            "print(started, len(_triton_setup._THREADS), token.shape[0])\n")
    assert _run(code, JSAMPLE_WARM_TRITON="").split() == ["2", "0", "2"]
    assert _run(code, JSAMPLE_WARM_TRITON="0").split() == ["0", "0", "2"]
