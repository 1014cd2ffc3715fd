"""torch_backend._compile_behind: a plan that takes seconds to compile runs a stand-in while it compiles (issue 39)."""

import os
import subprocess
import sys
import threading
import types

import pytest
import torch

from jsample import kernels
from jsample.kernels.plan import ArgSpec, Launch, Plan, Target
from torch_backend import _compile_behind
from torch_backend import _execute as execute

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FACTS = (("torch.bfloat16", True), ("torch.int64", True), "float")


class _Kernel:
    """A kernel as the markers see it: a source hash and a name (hashed by identity, as Triton's JITFunction)."""

    def __init__(self, source):
        self.cache_key, self.fn = source, types.SimpleNamespace(__name__="slow_kernel")


def _plans(source="source-hash", **constexprs):
    kernel = _Kernel(source)
    stand_in = Plan((), (), ("tokens",), "stand-in")
    step = Launch(kernel, (1, 4), ("logits", 151936), ("tokens",), tuple(constexprs.items()) or (("CHUNK", 8),), 8)
    return Plan((), (step,), ("tokens",), "slow", while_compiling=stand_in), stand_in


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("JSAMPLE_COMPILE_BEHIND", raising=False)
    _compile_behind.forget()
    yield tmp_path
    _compile_behind.forget()


def test_a_cold_plan_runs_its_stand_in_until_compiled_behind_it(fresh):
    plan, stand_in = _plans()
    release, compiled = threading.Event(), []

    def compile_plan():  # stands in for Triton's warmup of the plan's kernels
        assert release.wait(10)
        compiled.append(True)

    chosen, after = _compile_behind.choose(plan, 0, FACTS, (9, 0))
    assert chosen is stand_in and after is not None
    after(compile_plan)
    assert _compile_behind.states() == [("slow", 0, "compiling")]
    assert _compile_behind.choose(plan, 0, FACTS, (9, 0)) == (stand_in, None)  # still compiling
    assert not _compile_behind.compiled(plan, 0)
    assert not os.path.exists(os.path.join(fresh, "jsample-compiled"))
    # a capture's plan of the same launches (another Plan: another target) waits for the compile, not compiling it too
    twin = Plan((), plan.launches, ("tokens",), "capture's", while_compiling=stand_in)
    waiter = threading.Thread(target=_compile_behind.wait_for, args=(twin, 0))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    _compile_behind.wait_for(twin, 1)  # another device's: nothing compiling there
    release.set()
    waiter.join(10)
    assert not waiter.is_alive()
    _compile_behind.wait()
    assert compiled == [True]
    assert _compile_behind.choose(plan, 0, FACTS, (9, 0)) == (plan, None)
    assert _compile_behind.compiled(plan, 0) and _compile_behind.states() == [("slow", 0, "compiled")]
    # another device of the same capability loads it from Triton's cache (the marker); another capability compiles
    assert _compile_behind.choose(plan, 1, FACTS, (9, 0))[0] is plan
    assert _compile_behind.choose(plan, 2, FACTS, (10, 0))[0] is stand_in
    # the marker: a later process (here: the state forgotten) runs the plan from its first call
    key = _compile_behind.marker_key(plan, FACTS, (9, 0))
    assert os.listdir(os.path.join(fresh, "jsample-compiled")) == [key]
    _compile_behind.forget()  # (waits for device 2's compile, which no one started: none)
    chosen, after = _compile_behind.choose(plan, 0, FACTS, (9, 0))
    assert chosen is plan


def test_a_plan_compiled_in_the_foreground_leaves_its_marker(fresh, monkeypatch):
    plan, stand_in = _plans()
    chosen, after = _compile_behind.choose(plan, 0, FACTS, (9, 0), behind=False)  # precompile's
    assert chosen is plan
    after(lambda: pytest.fail("nothing compiles behind a plan run in the foreground"))
    _compile_behind.forget()
    assert _compile_behind.choose(plan, 0, FACTS, (9, 0))[0] is plan  # its marker
    monkeypatch.setenv("JSAMPLE_COMPILE_BEHIND", "0")
    other, _ = _plans(source="another source")
    assert _compile_behind.choose(other, 0, FACTS, (9, 0))[0] is other  # switched off: the plan, compiled here
    monkeypatch.setenv("JSAMPLE_COMPILE_BEHIND", "yes")
    with pytest.raises(ValueError, match="JSAMPLE_COMPILE_BEHIND must be 0 or 1"):
        _compile_behind.choose(_plans(source="a third")[0], 0, FACTS, (9, 0))


def test_a_failed_compile_behind_leaves_the_plan_to_its_own_first_run(fresh):
    plan, stand_in = _plans()

    def failing():
        raise RuntimeError("a compiler error")

    _, after = _compile_behind.choose(plan, 0, FACTS, (9, 0))
    after(failing)
    _compile_behind.wait()
    assert _compile_behind.choose(plan, 0, FACTS, (9, 0))[0] is plan  # whose first run raises Triton's error
    assert not os.path.exists(os.path.join(fresh, "jsample-compiled"))  # no marker for what did not compile


def test_the_marker_names_what_the_compiled_kernel_depends_on():
    plan, _ = _plans()
    key = _compile_behind.marker_key(plan, FACTS, (9, 0))
    assert key == _compile_behind.marker_key(_plans()[0], FACTS, (9, 0))  # a value: the same in every process
    assert key != _compile_behind.marker_key(plan, (("torch.float32", True),) + FACTS[1:], (9, 0))
    assert key != _compile_behind.marker_key(plan, (("torch.bfloat16", False),) + FACTS[1:], (9, 0))
    assert key != _compile_behind.marker_key(plan, FACTS, (10, 0))
    assert key != _compile_behind.marker_key(_plans(source="edited")[0], FACTS, (9, 0))
    assert key != _compile_behind.marker_key(_plans(CHUNK=16)[0], FACTS, (9, 0))
    no_hash = Plan((), (Launch(object(), (1,), (), (), (), 4),), (), "x", while_compiling=plan)
    assert _compile_behind.marker_key(no_hash, FACTS, (9, 0)) is None  # no source hash: no marker, never a wrong one


def test_only_the_one_launch_filtered_plan_has_a_stand_in_and_it_is_the_launches_plan():
    target = execute.compiled_target(132, 9)
    for batch in (1, 2):
        plan = kernels.plan_top_k_top_p_sample(ArgSpec.contiguous((batch, 151936), "bfloat16"),
                                               ArgSpec.contiguous((batch,), "int64"), target, has_top_k=True,
                                               has_top_p=True, has_min_p=False, fp64=False)
        stand_in = plan.while_compiling
        assert plan.variant == "one launch" and len(plan.launches) == 1
        assert stand_in.outputs == plan.outputs and stand_in.while_compiling is None
        assert stand_in.launches == kernels.plan_top_k_top_p_sample(
            ArgSpec.contiguous((batch, 151936), "bfloat16"), ArgSpec.contiguous((batch,), "int64"),
            Target(interpreter=False, pdl=True, arrival_counters=True, resident_programs=0), has_top_k=True,
            has_top_p=True, has_min_p=False, fp64=False).launches  # the launches' plan a GPU without barriers takes
        assert len(stand_in.launches) > 4
    interpreted = kernels.plan_top_k_top_p_sample(ArgSpec.contiguous((1, 1000), "float32"),
                                                  ArgSpec.contiguous((1,), "int64"),
                                                  Target(interpreter=True, large_programs=True, arrival_counters=True),
                                                  has_top_k=True, has_top_p=False, has_min_p=False, fp64=False)
    assert interpreted.variant == "one launch" and interpreted.while_compiling is None  # nothing compiles there
    gumbel = kernels.plan_gumbel_sample(ArgSpec.contiguous((1, 151936), "bfloat16"), ArgSpec.contiguous((1,), "int64"),
                                        target, fp64=False, draft=False)
    assert gumbel.while_compiling is None


@pytest.mark.gpu
def test_a_first_call_runs_the_stand_in_then_the_one_launch_plan(tmp_path):
    """On a GPU, in fresh processes on an empty Triton cache: the first top-k call at B = 1 runs the launches' plan
    while the one-launch kernel compiles behind it, with the same tokens as the one-launch plan's (a process with
    compiling behind turned off); once compiled, calls run the one-launch plan; a second process on the same cache
    runs it from its first call."""
    code = (
        "import torch, torch_backend\n"
        "from torch_backend import _compile_behind\n"
        "from torch_backend import _execute as execute\n"
        "g = torch.Generator(device='cuda').manual_seed(3)\n"
        "logits = torch.randn(1, 151936, device='cuda', generator=g).to(torch.bfloat16) * 4\n"
        "seeds, positions = torch.arange(1, device='cuda') + 11, torch.arange(1, device='cuda') + 5\n"
        "temperature = torch.full((1,), 0.8, device='cuda')\n"
        "def sample(position):\n"
        "    return torch_backend.top_k_top_p_sample(logits, seeds, positions + position, temperature, top_k=50,\n"
        "                                            top_p=0.9).tolist()\n"
        "first = [sample(i) for i in range(20)]\n"
        "print('first', sorted(set(s for *_, s in _compile_behind.states())))\n"
        "_compile_behind.wait()\n"
        "after = [sample(i) for i in range(20)]\n"
        "print('after', sorted(set(s for *_, s in _compile_behind.states())))\n"
        "print('tokens', first == after, first)\n"
        "if capture:\n"  # a capture right after a cold first call: it waits for the compile behind, records the plan
        "    import triton\n"
        "    names = []\n"
        "    def hook(*args, **kwargs):\n"
        "        names.append(getattr(kwargs.get('fn'), 'name', '?'))\n"
        "    triton.knobs.runtime.jit_post_compile_hook = hook\n"
        "    two = torch.cat([logits, logits.flip(1)]).contiguous()\n"  # B = 2: the one-launch kernel's other tiling
        "    s2, p2 = torch.arange(2, device='cuda') + 11, torch.arange(2, device='cuda') + 5\n"
        "    t2 = temperature.repeat(2)\n"
        "    eager = torch_backend.top_k_top_p_sample(two, s2, p2, t2, top_k=50, top_p=0.9)\n"
        "    state = sorted(set(s for *_, s in _compile_behind.states()))\n"
        "    graph = torch.cuda.CUDAGraph()\n"
        "    with torch.cuda.graph(graph):\n"
        "        out = torch_backend.top_k_top_p_sample(two, s2, p2, t2, top_k=50, top_p=0.9)\n"
        "    graph.replay()\n"
        "    print('graph', out.tolist() == eager.tolist(), state, names.count('filtered_one_launch_kernel'))\n")
    env = dict(os.environ, PYTHONPATH=ROOT, TRITON_CACHE_DIR=str(tmp_path))
    env.pop("JSAMPLE_COMPILE_BEHIND", None)

    def run(capture=False, **extra):
        done = subprocess.run([sys.executable, "-c", f"capture = {capture}\n" + code], capture_output=True, text=True,
                              env=dict(env, **extra), timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return dict(line.split(" ", 1) for line in done.stdout.strip().split("\n"))

    cold = run()
    assert cold["first"] == "['compiling']" and cold["after"] == "['compiled']"
    assert cold["tokens"].startswith("True")
    assert os.listdir(os.path.join(tmp_path, "jsample-compiled"))
    warm = run()
    assert warm["first"] == "['compiled']"  # the marker: the one-launch plan from the first call
    assert warm["tokens"] == cold["tokens"]
    off = run(JSAMPLE_COMPILE_BEHIND="0")
    assert off["first"] == "['compiled']" and off["tokens"] == cold["tokens"]
    # a first call at another shape (its stand-in, its compile behind begun), then a CUDA graph of it captured at once
    captured = run(capture=True)
    # (the one-launch kernel compiled once, behind the eager call: the capture waited for it; the states after the
    # eager call: B = 1's compiled, B = 2's compiling)
    assert captured["graph"] == "True ['compiled', 'compiling'] 1", captured


def test_a_fork_waits_for_a_compile_behind(tmp_path):
    """A fork while a compile runs behind a stand-in waits for it (os.register_at_fork): no child inherits a half-done
    compile (a compile that sleeps stands in for Triton's)."""
    code = (
        "import os, time, types\n"
        "from jsample.kernels.plan import Launch, Plan\n"
        "from torch_backend import _compile_behind\n"
        "class Kernel:\n"
        "    cache_key, fn = 'source', types.SimpleNamespace(__name__='slow_kernel')\n"
        "plan = Plan((), (Launch(Kernel(), (1,), (), (), (), 4),), (), 'slow',\n"
        "            while_compiling=Plan((), (), (), 'stand-in'))\n"
        "done = []\n"
        "def slow():\n"
        "    time.sleep(0.5)\n"
        "    done.append(1)\n"
        "chosen, after = _compile_behind.choose(plan, 0, (), (9, 0))\n"
        "after(slow)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if done else 3)\n"
        "print(chosen.variant, len(done), os.waitpid(pid, 0)[1], len(_compile_behind._THREADS))\n")
    env = dict(os.environ, PYTHONPATH=ROOT, TRITON_CACHE_DIR=str(tmp_path), JSAMPLE_INTERPRET="1")
    env.pop("JSAMPLE_COMPILE_BEHIND", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "stand-in 1 0 0"
