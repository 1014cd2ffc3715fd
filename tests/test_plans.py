"""Launch plans are framework-free values that both executors run: every launch decision is in the
planning functions (jsample.kernels), none in the frontends."""

import pathlib
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import jsample.kernels as kernels
from jsample._jax import _execute as jax_execute
from jsample.kernels.plan import ArgSpec, Plan, Target
from torch_backend import _execute as torch_execute
from torch_backend._launch import call_key

ROOT = pathlib.Path(__file__).resolve().parents[1]
OP_MODULES = [ROOT / "torch_backend" / name for name in ("gumbel.py", "filtered.py", "rejection.py")] + [
    ROOT / "jsample" / "_jax" / name for name in ("gumbel.py", "filtered.py", "rejection.py")]
TARGETS = [Target(interpreter=True), Target(interpreter=False, pdl=True, arrival_counters=True),
           Target(interpreter=False, launch_bound=True)]


@pytest.mark.parametrize("path", OP_MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_frontends_spell_no_launch_detail(path):
    """An op wrapper validates, plans and runs: no grid, warps, constexpr, kernel or config there."""
    source = path.read_text()
    for pattern in (r"\bgrid\b", r"num_warps", r"num_stages", r"\b[A-Z][A-Z0-9_]{2,}\s*=", r"_kernel\b",
                    r"launch_config", r"decide_in_emit", r"\[\(batch"):
        assert not re.search(pattern, source), f"{path.name} spells {pattern}"


def _specs(op, batch, vocab, dtype="float32", k=3):
    seeds = ArgSpec.contiguous((batch,), "int64")
    if op == "gumbel_sample":
        return dict(logits=ArgSpec.contiguous((batch, vocab), dtype), seeds=seeds)
    if op == "top_k_top_p_sample":
        return dict(logits=ArgSpec.contiguous((batch, vocab), dtype), seeds=seeds)
    if op == "rejection_sample":
        return dict(target_logits=ArgSpec.contiguous((batch, k + 1, vocab), dtype),
                    draft_logits=ArgSpec.contiguous((batch, k, vocab), "float32"), seeds=seeds)
    return dict(target_tokens=ArgSpec.contiguous((batch, k + 1), "int32"),
                conditional_rates=ArgSpec.contiguous((k,), "float32"), seeds=seeds)


def _every_plan(target):
    """(name, plan, inputs) over a grid of shapes, flags and variants."""
    for batch in (0, 1, 7, 300):
        for vocab in (1, 37, 5000, 151936):
            for fp64 in (False, True):
                specs = _specs("gumbel_sample", batch, vocab)
                for draft in (False, True):
                    yield "gumbel", kernels.plan_gumbel_sample(*specs.values(), target, fp64=fp64, draft=draft), {
                        "logits", "seeds", "positions", "temperature"}
                for dtype in ("float32", "bfloat16"):
                    specs = _specs("top_k_top_p_sample", batch, vocab, dtype)
                    for has in ((False, False, False), (True, True, True), (False, True, False), (True, False, True)):
                        inputs = {"logits", "seeds", "positions", "temperature"} | {
                            name for name, given in zip(("top_k", "top_p", "min_p"), has) if given}
                        yield "filtered", kernels.plan_top_k_top_p_sample(
                            *specs.values(), target, has_top_k=has[0], has_top_p=has[1], has_min_p=has[2],
                            fp64=fp64), inputs
                for k in (0, 1, 4):
                    specs = _specs("rejection_sample", batch, vocab, k=k)
                    common = {"target_logits", "draft_tokens", "num_draft_tokens", "seeds", "positions", "temperature"}
                    for strict in (False, True):
                        for variant in (None,) + kernels.REJECTION_VARIANTS:
                            if variant == "one launch" and k > 1:
                                continue
                            yield "rejection", kernels.plan_rejection_sample(
                                specs["target_logits"], specs["draft_logits"], specs["seeds"], target, strict=strict,
                                fp64=fp64, variant=variant), common | {"draft_logits"}
                    specs = _specs("synthetic_rejection_sample", batch, vocab, k=k)
                    yield "synthetic", kernels.plan_synthetic_rejection_sample(*specs.values(), target, fp64=fp64), {
                        "target_tokens", "draft_tokens", "num_draft_tokens", "seeds", "positions", "conditional_rates"}


@pytest.mark.parametrize("target", TARGETS, ids=["interpreter", "gpu, PDL, counters", "gpu, launch-bound"])
def test_every_plan_names_only_inputs_and_buffers_and_reads_what_was_written(target):
    for name, plan, inputs in _every_plan(target):
        buffers = {b.name: b for b in plan.buffers}
        assert len(buffers) == len(plan.buffers) and not set(buffers) & inputs, name
        written = set()
        ever_written = {o for launch in plan.launches for o in launch.outputs}
        for launch in plan.launches:
            for arg in launch.args:
                if isinstance(arg, str):
                    assert arg in inputs or arg in buffers, f"{name} {plan.variant}: {arg}"
                    if arg in buffers:  # a scratch buffer is read after a launch wrote it, or is a constant
                        assert arg in written or arg not in ever_written, f"{name}: {arg} read before written"
                else:
                    assert isinstance(arg, int) and -(2**63) <= arg < 2**63, f"{name}: {arg!r}"
            assert set(launch.outputs) <= set(buffers) and all(isinstance(g, int) and g > 0 for g in launch.grid)
            assert launch.pdl <= (target.pdl and not target.interpreter)
            assert dict(launch.constexprs).get("FAST_MATH", not target.interpreter) == (not target.interpreter)
            written |= set(launch.outputs)
        assert set(plan.outputs) <= written | {b for b in buffers if b not in ever_written}, name


@pytest.mark.parametrize("target", TARGETS, ids=["interpreter", "gpu, PDL, counters", "gpu, launch-bound"])
def test_the_torch_executor_gives_every_counters_buffer_all_its_elements(target):
    """Counters buffers live in one int32 region per place (torch_backend/_execute.py): each gets every
    element of its shape (a [B, bins] histogram too), and no two overlap."""
    for name, plan, _ in _every_plan(target):
        recipe = torch_execute._Recipe(plan)
        sizes = {b.name: int(np.prod(b.shape)) for b in plan.buffers if b.counters}
        assert {counter for counter, _ in recipe.counters} == set(sizes), name
        end = 0
        for counter, offset in sorted(recipe.counters, key=lambda c: c[1]):
            assert offset >= end, f"{name} {plan.variant}: {counter} overlaps the counters before it"
            end = offset + sizes[counter]
        assert recipe.counter_count >= end, f"{name} {plan.variant}: {recipe.counter_count} counters, {end} used"


def test_plans_are_cached_values_and_torch_and_jax_get_the_same_plan():
    """A contiguous tensor and a JAX array of the same shape and dtype give the same specs, hence the
    very same plan object (planning functions are cached); the torch frontend's only other input is
    what its device can do."""
    logits = np.zeros((5, 300), np.float32)
    torch_spec, jax_spec = torch_execute.arg_spec(torch.from_numpy(logits)), jax_execute.arg_spec(logits)
    assert torch_spec == jax_spec
    seeds = torch_execute.arg_spec(torch.zeros(5, dtype=torch.int64))
    assert seeds == jax_execute.arg_spec(np.zeros(5, np.int64))
    one = kernels.plan_gumbel_sample(torch_spec, seeds, jax_execute.TARGET, fp64=False, draft=False)
    assert one is kernels.plan_gumbel_sample(jax_spec, seeds, jax_execute.TARGET, fp64=False, draft=False)


def test_the_plan_follows_the_row_stride_and_only_the_tiling_depends_on_it():
    """A strided torch view plans with its real row stride (honoured, not copied); the launches are
    otherwise those of the contiguous array."""
    base = torch.zeros(4, 512)
    view = base[:, :300]
    strided = kernels.plan_gumbel_sample(torch_execute.arg_spec(view), ArgSpec.contiguous((4,), "int64"),
                                         Target(interpreter=True), fp64=False, draft=False)
    dense = kernels.plan_gumbel_sample(ArgSpec.contiguous((4, 300), "float32"), ArgSpec.contiguous((4,), "int64"),
                                       Target(interpreter=True), fp64=False, draft=False)
    # (logits, seeds, positions, temperature, row_valid, num_rows, V, row_stride)
    assert [launch.args for launch in strided.launches][0][7] == 512
    assert [launch.args for launch in dense.launches][0][7] == 300
    assert [(l.kernel, l.grid) for l in strided.launches] == [(l.kernel, l.grid) for l in dense.launches]


def test_the_rejection_variant_follows_the_target():
    """Large batches: four launches; small ones: three (chained by PDL where the target has it), or one
    at K <= 1 where launches cost host time."""
    plan = lambda target, batch=1, k=1: kernels.plan_rejection_sample(  # noqa: E731
        *_specs("rejection_sample", batch, 151936, k=k).values(), target, strict=False, fp64=False).variant
    assert plan(Target(interpreter=False, pdl=True)) == "three launches, PDL"
    assert plan(Target(interpreter=False)) == "three launches"
    assert plan(Target(interpreter=False, launch_bound=True)) == "one launch"
    assert plan(Target(interpreter=False, launch_bound=True), k=4) == "three launches"
    assert plan(Target(interpreter=False, pdl=True), batch=256) == "four launches"
    with pytest.raises(ValueError, match="no variant"):
        kernels.plan_rejection_sample(*_specs("rejection_sample", 1, 100, k=4).values(), Target(interpreter=True),
                                      strict=False, fp64=False, variant="one launch")


def test_the_gumbel_variant_follows_the_batch_and_the_target():
    """Small batches take one launch (the last program of a row reduces it) where the executor provides
    arrival counters (torch eagerly, JAX); CUDA-graph captures in torch and large batches take two."""
    def variant(target, batch):
        specs = _specs("gumbel_sample", batch, 151936)
        return kernels.plan_gumbel_sample(*specs.values(), target, fp64=False, draft=False).variant

    torch_target = Target(interpreter=False, pdl=True, arrival_counters=True)
    assert variant(torch_target, 1) == "one launch" and variant(torch_target, 256) == "two launches"
    assert variant(jax_execute.TARGET, 1) == "one launch" and variant(jax_execute.TARGET, 256) == "two launches"
    assert variant(Target(interpreter=False, pdl=True, arrival_counters=False), 1) == "two launches"  # captured
    plan = kernels.plan_gumbel_sample(*_specs("gumbel_sample", 2, 5000).values(), torch_target, fp64=False, draft=False)
    assert [b.name for b in plan.buffers if b.counters] == ["arrivals"]

    def fp64_variant(batch, vocab):
        specs = _specs("gumbel_sample", batch, vocab)
        return kernels.plan_gumbel_sample(*specs.values(), torch_target, fp64=True, draft=False).variant

    # FP64: blocks store FP32 intervals from gumbel.FP64_INTERVALS_MIN_PROGRAMS programs (256 x 297 blocks)
    assert fp64_variant(1, 151936) == "one launch" and fp64_variant(64, 32000) == "two launches"  # 64 x 63
    assert fp64_variant(256, 151936) == "two launches, FP64 intervals"


def test_resident_programs_follow_the_process_share_of_the_gpu(monkeypatch):
    """Plans whose programs wait for each other count on Target.resident_programs: the SM count, the
    process's MPS share of it, or JSAMPLE_RESIDENT_PROGRAMS (0 turns such plans off)."""
    from jsample.kernels.plan import resident_programs

    monkeypatch.delenv("JSAMPLE_RESIDENT_PROGRAMS", raising=False)
    monkeypatch.delenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", raising=False)
    assert resident_programs(132) == 132
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
    assert resident_programs(132) == 33
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "not a number")
    assert resident_programs(132) == 132
    monkeypatch.setenv("JSAMPLE_RESIDENT_PROGRAMS", "0")
    assert resident_programs(132) == 0


def test_filtered_one_launch_plan_only_where_its_programs_fit_at_once():
    """The one-launch filtered plan (a barrier per search step) takes at most resident_programs
    programs, and the launches' plan otherwise; the interpreter's plan has one program a row."""
    def plan(batch, vocab, resident, interpreter=False):
        return kernels.plan_top_k_top_p_sample(
            ArgSpec.contiguous((batch, vocab), "float32"), ArgSpec.contiguous((batch,), "int64"),
            Target(interpreter=interpreter, large_programs=interpreter, resident_programs=resident),
            has_top_k=True, has_top_p=True, has_min_p=False, fp64=False)

    for batch, vocab, resident in ((1, 32000, 132), (3, 151936, 132), (2, 32000, 33), (2, 32000, 132)):
        one = plan(batch, vocab, resident)
        assert one.variant == "one launch", (batch, vocab, resident)
        grid = one.launches[0].grid
        assert grid[0] == batch and grid[0] * grid[1] <= resident, (batch, vocab, resident, grid)
    assert plan(1, 32000, 0).variant != "one launch"
    assert plan(256, 151936, 132).variant != "one launch"
    assert plan(200, 32000, 132).variant != "one launch"
    assert plan(16, 32000, 132).variant != "one launch"  # past the tiling of two rows: the launches' plan
    interpreted = plan(7, 151936, 0, interpreter=True)
    assert interpreted.variant == "one launch" and interpreted.launches[0].grid == (7, 1)


def test_torch_replay_only_for_calls_whose_tensors_reach_the_plan_unchanged(monkeypatch):
    """An eager call is remembered for replay only when every tensor it ran is the caller's own (no
    copy or conversion) and numbers were converted as the key's value says; a replay then runs the
    remembered plan on the new call's tensors, and only for the planning function that made it."""
    monkeypatch.setattr(torch_execute, "_REPLAYS", {})
    monkeypatch.setattr(torch_execute, "_LAST", {})
    plan, device = Plan(buffers=(), launches=(), outputs=()), torch.device("cuda", 0)
    logits, seeds = torch.zeros(2, 3), torch.zeros(2, dtype=torch.int64)
    arguments = dict(logits=logits, seeds=seeds, temperature=1, top_k=None)
    same = call_key("op", arguments, (False,))
    torch_execute._remember(same, arguments, "planner", plan, device, dict(logits=logits, seeds=seeds,
                                                                            temperature=1.0))
    entry = torch_execute._REPLAYS[same]
    assert (entry.planner, entry.plan, entry.device, entry.sources) == (
        "planner", plan, device, (("logits", "logits", None), ("seeds", "seeds", None), ("temperature", None, 1.0)))
    assert entry.launches is None  # linked to compiled kernels only after a run compiled them
    copied = call_key("op", arguments, (True,))
    torch_execute._remember(copied, arguments, "planner", plan, device, dict(logits=logits.clone(), seeds=seeds,
                                                                              temperature=1.0))
    assert copied not in torch_execute._REPLAYS

    ran = []
    monkeypatch.setattr(torch_execute, "run", lambda found, dev, inputs: ran.append((found, dev, inputs)) or "out")
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False, raising=False)
    monkeypatch.setattr(torch_execute._Replay, "_link", lambda self, values: None)
    other = dict(logits=torch.ones(2, 3), seeds=seeds, temperature=1, top_k=None)
    for _ in range(2):  # found by its key, then by the op's latest replay
        assert torch_execute.replay("op", other, (False,), "planner") == ("out", None)
        assert ran[-1][2]["logits"] is other["logits"] and ran[-1][2]["temperature"] == 1.0
    assert torch_execute.replay("op", other, (False,), "another planner") == (None, same)  # tests patch planners
    assert torch_execute.replay("op", other, (True,), "planner") == (None, copied)
    wider = dict(other, logits=torch.ones(2, 4))
    assert torch_execute.replay("op", wider, (False,), "planner") == (None, call_key("op", wider, (False,)))
    assert torch_execute.replay("op", dict(other, top_k=[1]), (False,), "planner") == (None, None)  # unhashable
    assert len(ran) == 2


def _layouts():
    """Arguments that differ from each other in one thing a call key holds."""
    base = torch.zeros(4, 6)
    tensors = [base, torch.zeros(4, 6), base[:, :5], base[:3], base.t(), torch.zeros(6, 4).t(), base.to(torch.bfloat16),
               torch.zeros(24)[::1].view(4, 6), torch.zeros(4, 12)[:, ::2], torch.zeros(4, 6, dtype=torch.int32),
               torch.zeros(6), torch.zeros(()), torch.nn.Parameter(torch.zeros(4, 6), requires_grad=False)]
    numbers = [1, 1.0, True, 2, 0.5, -0.0, 0.0, None, "strict"]
    return tensors, numbers


@pytest.mark.parametrize("seed", range(3))
def test_torch_latest_replay_match_agrees_with_the_call_key(seed):
    """_Match (a C++ check of the tensors, the numbers and flags in Python) says 'same call' exactly when
    call_key says so, over arguments that differ in type, shape, strides, dtype, number type or
    value; where a call passes one tensor twice it may say 'another call' (the key then finds it)."""
    if torch_execute._TensorGuards is None:
        pytest.skip("this torch has no TensorGuards: replays are found by their key")
    tensors, numbers = _layouts()
    values = tensors + numbers
    rng = np.random.default_rng(seed)
    for _ in range(300):
        first = {name: values[rng.integers(len(values))] for name in "abc"}
        second = dict(first)
        for name in rng.choice(list("abc"), size=rng.integers(0, 3), replace=False):
            second[name] = values[rng.integers(len(values))]
        flags = (bool(rng.integers(2)),)
        other_flags = flags if rng.integers(2) else (not flags[0],)
        match = torch_execute._Match(SimpleNamespace(planner="planner"), first, flags)
        same_key = call_key("op", first, flags) == call_key("op", second, other_flags)
        passed = [value for value in second.values() if isinstance(value, torch.Tensor)]
        if len({id(tensor) for tensor in passed}) < len(passed):  # TensorGuards refuses a tensor given twice
            assert not (match.flags == other_flags and match.matches(second)) or same_key, (first, second, flags,
                                                                                            other_flags)
        else:
            assert (match.flags == other_flags and match.matches(second)) == same_key, (first, second, flags,
                                                                                         other_flags)

class _FlatLauncher:
    """A launcher shaped like Triton 3.4-3.6's: constants between the function and the arguments, which
    follow one by one; `per_call` passes a value that follows the grid (as a scratch buffer's size)."""

    def __init__(self, per_call=False):
        self.global_scratch_size = self.profile_scratch_size = 0
        self.per_call = per_call
        self.launch = lambda *passed: None

    def __call__(self, x, y, z, stream, function, *args):
        scratch = 256 * x * y * z if self.per_call else None
        self.launch(x, y, z, stream, function, False, True, scratch, None, *args)


def _cuda_launcher():
    """Triton's own CudaLauncher (this Triton's __call__), its attributes set by hand: no GPU here."""
    from triton.backends.nvidia.driver import CudaLauncher

    launcher = object.__new__(CudaLauncher)
    launcher.__dict__.update(gsan_enabled=False, num_ctas=1, global_scratch_size=0, global_scratch_align=1,
                             profile_scratch_size=0, profile_scratch_align=1, launch_cooperative_grid=False,
                             launch_pdl=True, arg_annotations=("annotations",), kernel_signature=b"signature",
                             launch=lambda *passed: None)
    return launcher


@pytest.mark.parametrize("make", [_FlatLauncher, _cuda_launcher], ids=["flat arguments", "this Triton's launcher"])
def test_a_replay_calls_the_launchers_entry_point_with_what_tritons_launcher_passes(make, monkeypatch):
    """_entry_point reads, from a dry run, what a compiled kernel's Python launcher passes its C entry
    point; a replay's direct call (as _launch_direct makes it) must pass exactly that for any grid,
    stream and arguments. A launcher that passes something new every call keeps Triton's path."""
    from triton.runtime import driver

    from torch_backend import _fast_path

    monkeypatch.setattr(_fast_path, "_ENTRY_POINTS", {})
    monkeypatch.setattr(driver, "_active", SimpleNamespace())  # a driver object: this machine has no GPU
    launcher = make()
    passed = []
    launcher.launch = lambda *a: passed.append(a)
    kernel = SimpleNamespace(run=launcher, function=0x1234, packed_metadata=(4, 1, 0))
    found = torch_execute._entry_point(kernel, 5)
    assert found is not None and found[0] is launcher.launch and not passed  # the dry run launched nothing
    entry_point, between, packed = found
    for grid, stream, arguments in [((1, 1, 1), 77, (10, 20, 30, True, 2.5)), ((9, 2, 3), 0, (1, 2, 3, False, 0))]:
        launcher(*grid, stream, kernel.function, kernel.packed_metadata, None, None, None, *arguments)
        if packed:
            entry_point(*grid, stream, kernel.function, *between, tuple(arguments))
        else:
            entry_point(*grid, stream, kernel.function, *between, *arguments)
        assert passed[-1] == passed[-2]
    assert torch_execute._entry_point(kernel, 5) is found  # once per launcher and argument count

    if make is _FlatLauncher:
        changing = _FlatLauncher(per_call=True)
        assert torch_execute._entry_point(SimpleNamespace(run=changing, function=1, packed_metadata=()), 2) is None
    scratch = make()
    scratch.global_scratch_size = 128  # an address per launch: Triton's launcher allocates it
    assert torch_execute._entry_point(SimpleNamespace(run=scratch, function=1, packed_metadata=()), 2) is None


def test_run_jax_runs_the_plan_a_test_forces(monkeypatch):
    """The tests' JAX calls (conftest.run_jax, jitted) plan again when a test replaces a planning function or
    the target: a jitted function keeps the plan of its first trace, and the plan comparisons in both
    frontends would otherwise compare torch's forced plans with JAX's first one."""
    import dataclasses

    from conftest import run_jax

    shipped = kernels.plan_gumbel_sample.__wrapped__
    planned = []
    args = (np.zeros((2, 40), np.float32), np.int64([1, 2]), np.int64([3, 4]), np.float32([1.0, 1.0]))
    for forced in range(3):
        def planner(*specs, forced=forced, **flags):
            planned.append(forced)
            return shipped(*specs, **flags)
        monkeypatch.setattr(kernels, "plan_gumbel_sample", planner)
        run_jax("gumbel_sample", *args)
        run_jax("gumbel_sample", *args)  # the same plan: the trace is kept
    # another target (the interpreter's has large programs, a GPU's not)
    monkeypatch.setattr(jax_execute, "TARGET", dataclasses.replace(
        jax_execute.TARGET, large_programs=not jax_execute.TARGET.large_programs))
    run_jax("gumbel_sample", *args)
    traces = [planned.count(forced) for forced in range(3)]  # planner calls (a trace may call it more than once)
    # every forced planner traced once (its second call kept the trace), the last again for the new target
    assert traces[0] == traces[1] > 0 and traces[2] == 2 * traces[0], planned
