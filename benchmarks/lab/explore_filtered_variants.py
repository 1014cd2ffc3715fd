"""Lab: top_k_top_p_sample's launch-plan variants against the shipped plan and gumbel_sample, in one process
(issue "throughput", target 2: <= 2.5x gumbel_sample at B = 256 and B = 1, every family and filter row).

Each variant changes only how the kernels are launched (a plan is a value: a tiling, a count of pivots or
of work items a program, the programs the one-launch plan may count on running at once), never what they
compute, so every variant must give the shipped plan's tokens: the script asserts that on every cell
before it times it. The logits are bench_filtered.py's (bfloat16, V = 151936, temperature 0.8, torch
generator seeded with B, rotated copies), so the shipped column is that benchmark's torch CUDA-graph
column, and at B = 1 each figure is the mean over bench_filtered's 64 draws (whose winners the filters
keep or drop as they happen to); `--one-draw` times a single draw instead (explore_filtered_ratios.py's).

    PYTHONPATH=. python3 benchmarks/lab/explore_filtered_variants.py [--variants shipped,resident_x2,...]
        [--batches 256,1] [--families flat,typical] [--filters top_p,top_k+top_p]
    (each variant compiles the kernels it changes on first use: a few variants a command; every cell of
    every variant may not fit one 10-minute device command)
    python benchmarks/lab/explore_filtered_variants.py --cpu-check    # no GPU: tokens of each variant's
        tiling through the interpreter equal the shipped tiling's (resident_x2 needs a GPU)
    TRITON_INTERPRET=0 python benchmarks/lab/explore_filtered_variants.py --sm90-check   # no GPU: N of a
        resident_xN variant's one-launch programs fit an H200 SM (the GPU run checks that too before it runs them)
"""

import argparse
import contextlib
import dataclasses
import functools
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

FILTERS = {"top_k": dict(top_k=50), "top_p": dict(top_p=0.9), "min_p": dict(min_p=0.05),
           "top_k+top_p": dict(top_k=50, top_p=0.9)}
VOCAB = 151936


def _with_plan_change(change):
    """A context in which both frontends plan top_k_top_p_sample with `change(plan) -> plan` applied to what
    they planned with before (so variants compose), through a planning function of its own: no memo of
    either executor holds a plan of another variant."""
    from jsample import kernels

    @contextlib.contextmanager
    def context():
        current = kernels.plan_top_k_top_p_sample
        planner = getattr(current, "__wrapped__", current)  # (lru_cache's function, uncached)

        def changed(*args, **kwargs):
            return change(planner(*args, **kwargs))

        with _patched(kernels, "plan_top_k_top_p_sample", functools.lru_cache(maxsize=64)(changed)):
            yield
    return context


@contextlib.contextmanager
def _patched(module, name, value):
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def _constant(name, value):
    """A variant that plans with filtered.<name> = value."""
    from jsample.kernels import filtered

    @contextlib.contextmanager
    def context():
        with _patched(filtered, name, value), _with_plan_change(lambda plan: plan)():
            yield
    return context


def _config(change, many_rows=True):
    """A variant whose plans take change(config, vocab) in the large-batch tiling (filtered_launch_config's for
    B * V >= MANY_ROWS_ELEMENTS), or with many_rows=False in the others (small batches: the one-launch plan's
    base), but not the interpreter's (large programs)."""
    from jsample.kernels import filtered

    @contextlib.contextmanager
    def context():
        shipped = filtered.filtered_launch_config  # (what another variant entered before installed)

        def config(batch, vocab_size, *args, **kwargs):
            found = shipped(batch, vocab_size, *args, **kwargs)
            # filtered_launch_config's large-batch tiling (the launches' plan at many rows): what the variants change
            if kwargs.get("large_programs", False):
                return found
            return change(found, vocab_size) if (batch * vocab_size >= filtered.MANY_ROWS_ELEMENTS) == many_rows else found

        with _patched(filtered, "filtered_launch_config", config), _with_plan_change(lambda plan: plan)():
            yield
    return context


def _smaller_chunks(config, vocab, columns=2048):
    """Chunks of at most `columns` (at most MAX_CHUNKS a row) in the large-batch tiling: more programs for
    the few rows the searches have left (a program reads its chunk one tile after another)."""
    from jsample.kernels import filtered

    tile = config.threads * config.vec
    tiles = -(-vocab // tile)
    chunks = min(filtered.MAX_CHUNKS, -(-tiles * tile // columns))
    chunk = -(-tiles // chunks) * tile
    return dataclasses.replace(config, num_chunks=-(-vocab // chunk), chunk=chunk,
                               wide_sums=chunk > filtered.MAX_COLUMNS_PER_THREAD * config.threads)


def _sixteen_ways(config, vocab):
    """16 pivots a search launch in the large-batch tiling without lists too (top-p alone): fewer launches
    (4 a bfloat16 search, against 6), each comparing every column with twice the pivots."""
    from jsample.kernels import filtered

    return filtered._with_ways(config, 16)


def _items(plan, kernel_name, items=4):
    """The launches of `kernel_name` with `items` work items a program (_program_items: program p takes items
    p, p + P, p + 2P...), a grid of cdiv(items before, `items`) programs. Compacted launches (COMPACT: the
    listed rows' items, striding over COMPACT_PROGRAMS programs; ITEMS unread) stay as they are."""
    launches = []
    for step in plan.launches:
        if step.kernel.__name__ == kernel_name and not dict(step.constexprs).get("COMPACT", False):
            constexprs = dict(step.constexprs)
            total = step.grid[0] * constexprs["ITEMS"]  # (cdiv: at most ITEMS - 1 past the end)
            constexprs["ITEMS"] = items
            step = dataclasses.replace(step, grid=(-(-total // items),), constexprs=tuple(constexprs.items()))
        launches.append(step)
    return dataclasses.replace(plan, launches=tuple(launches))


def _sampling_launch(plan, num_warps=None, programs=None):
    """The compacted sampling launch (filtered_partial_kernel with COMPACT) with `num_warps` warps a program
    and `programs` programs (at most its items), where given."""
    launches = []
    for step in plan.launches:
        constexprs = dict(step.constexprs)
        if step.kernel.__name__ == "filtered_partial_kernel" and constexprs.get("COMPACT", False):
            if programs is not None:
                # items: every row's groups of BLOCKS_PER_PROGRAM blocks (the grid's bound before the cap)
                groups = plan.buffer("partial_index").shape
                items = groups[0] * -(-groups[1] // constexprs["BLOCKS_PER_PROGRAM"])
                step = dataclasses.replace(step, grid=(min(items, programs),))
            if num_warps is not None:
                step = dataclasses.replace(step, num_warps=num_warps)
        launches.append(step)
    return dataclasses.replace(plan, launches=tuple(launches))


def _resident(factor):
    """The one-launch plan counting on `factor` programs an SM instead of one (four-warp programs of at most 255
    registers fit twice in an SM's 64K registers, two-warp ones four times; gpu_main checks the compiled kernel
    first): at B = 1, chunks of 1 / factor the columns (down to one tile), more programs."""
    from torch_backend import _execute

    @contextlib.contextmanager
    def context():
        shipped = _execute.target

        def target(device):
            found = shipped(device)
            return dataclasses.replace(found, resident_programs=factor * found.resident_programs)

        with _patched(_execute, "target", target), _with_plan_change(lambda plan: plan)():
            yield
    return context


def _two_warps(config, vocab):
    """Two-warp programs (tiles of 64 threads) where the config has more: with _resident(4), the one-launch
    plan at B = 1 in 297 programs of one 512-column tile (gumbel_sample's B = 1 plan: 297 one-warp programs);
    compiled for sm_90 it takes 255 registers and spills (--sm90-check)."""
    from jsample.kernels import filtered

    if config.num_warps <= 2:
        return config
    return dataclasses.replace(config, num_warps=2, threads=64,
                               wide_sums=config.chunk > filtered.MAX_COLUMNS_PER_THREAD * 64)


def programs_per_sm(step, plan, logits_dtype):
    """How many programs of the launch `step` of `plan` an sm_90 SM holds at once, from its machine code
    (tests/compiled_kernels.py compiles it here, no GPU needed): registers (allocated 256 a warp at a time,
    64K an SM), shared memory (228 KB an SM, 1 KB of it reserved a program), 2048 threads and 32 programs."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
    import triton
    from compiled_kernels import compile_for_sm90, launch_arg_types

    types = launch_arg_types(step, plan, logits_dtype)
    compiled = compile_for_sm90(step.kernel, types, dict(step.constexprs), step.num_warps)
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([cuobjdump, "--dump-resource-usage", cubin.name], capture_output=True, text=True,
                               check=True).stdout
    thread_registers = int(re.search(r"REG:(\d+)", usage).group(1))
    warps = step.num_warps
    registers = -(-thread_registers * 32 // 256) * 256 * warps
    shared = max(compiled.metadata.shared, int(re.search(r"SHARED:(\d+)", usage).group(1))) + 1024
    return min(65536 // registers, 233472 // shared, 2048 // (32 * warps), 32), thread_registers, shared


def _composed(*contexts):
    """A variant made of others, entered in order."""
    @contextlib.contextmanager
    def context():
        with contextlib.ExitStack() as stack:
            for entered in contexts:
                stack.enter_context(entered())
            yield
    return context


def variant(name, table):
    """The context of a variant, or of several joined by '+' (e.g. chunks_2048+partial_items_4)."""
    return _composed(*(table[part] for part in name.split("+")))


def variants():
    """{name: a context manager factory}: the shipped plan, then each change on its own."""
    return {
        "shipped": _with_plan_change(lambda plan: plan),
        "resident_x2": _resident(2),
        "warps_2_resident_x4": _composed(_config(_two_warps, many_rows=False), _resident(4)),
        "chunks_2048": _config(_smaller_chunks),
        "chunks_1024": _composed(_constant("MAX_CHUNKS", 128),
                                 _config(functools.partial(_smaller_chunks, columns=1024))),
        # filtered_partial_kernel with 4 items a program where it is not compacted (plans without a search:
        # min-p alone; at B = 256 its 19200 programs mostly read a status)
        "partial_items_4": _with_plan_change(functools.partial(_items, kernel_name="filtered_partial_kernel")),
        # and a block a work item (4 before): the rows the filters search sample their blocks side by side
        "sample_blocks_1": _composed(_constant("SAMPLE_BLOCKS_PER_PROGRAM", 1), _with_plan_change(
            functools.partial(_items, kernel_name="filtered_partial_kernel"))),
        "listed_ways_64": _constant("LISTED_WAYS", 64),
        "ways_16": _config(_sixteen_ways),
        # the compacted launches (filter_compact_step_kernel, the sampling launch) on up to 2048 programs
        "compact_programs_2048": _constant("COMPACT_PROGRAMS", 2048),
        # the compacted sampling launch alone: more warps a program (its blocks' work is a chain of latencies:
        # loads, the kept test, Philox and logs for the blocks whose best column is dropped), more programs
        "partial_warps_2": _with_plan_change(functools.partial(_sampling_launch, num_warps=2)),
        "partial_warps_4": _with_plan_change(functools.partial(_sampling_launch, num_warps=4)),
        "partial_programs_2048": _with_plan_change(functools.partial(_sampling_launch, programs=2048)),
        "partial_programs_4096": _with_plan_change(functools.partial(_sampling_launch, programs=4096)),
        # top-p's histogram launch over fewer or more of the bracket's top keys
        "histogram_bins_256": _constant("HISTOGRAM_BINS", 256),
        "histogram_bins_4096": _constant("HISTOGRAM_BINS", 4096),
        "bracket_warps_2": _constant("HISTOGRAM_BRACKET_WARPS", 2),
        "bracket_warps_8": _constant("HISTOGRAM_BRACKET_WARPS", 8),
        "sample_blocks_2": _constant("SAMPLE_BLOCKS_PER_PROGRAM", 2),
    }


def resident_factor(name):
    """The programs an SM a variant name counts on (its resident_xN or ..._resident_xN part; 1: none)."""
    found = re.search(r"resident_x(\d+)", name)
    return int(found.group(1)) if found else 1


def check_resident(name, target):
    """Exits unless every one-launch plan of the B = 1 cells under variant `name` has programs of which as many
    fit an SM as the variant counts on (programs_per_sm): otherwise its programs could wait forever."""
    from jsample import kernels
    from jsample.kernels import plan as plans

    factor = resident_factor(name)
    with variant(name, variants())():
        for filters in FILTERS.values():
            flags = dict(has_top_k="top_k" in filters, has_top_p="top_p" in filters, has_min_p="min_p" in filters,
                         fp64=False)
            plan = kernels.plan_top_k_top_p_sample(plans.ArgSpec.contiguous((1, VOCAB), "bfloat16"),
                                                   plans.ArgSpec.contiguous((1,), "int64"), target(), **flags)
            fits, registers, shared = programs_per_sm(plan.launches[0], plan, "bfloat16")
            print(f"{name} {'+'.join(filters)}: {plan.variant}, grid {plan.launches[0].grid}, "
                  f"{plan.launches[0].num_warps} warps, {registers} registers, {shared} B shared: {fits} programs an "
                  f"SM", flush=True)
            if plan.variant == "one launch" and fits < factor:
                raise SystemExit(f"{name}: {factor} programs of the one-launch plan do not fit an SM")


def _target_of_torch():  # (the executor's target, as the variant in force changes it)
    import torch

    from torch_backend import _execute

    return _execute.target(torch.device("cuda"))


def gpu_main(names, one_draw, batches=(256, 1), families=None, filter_names=None):
    import torch

    import harness
    import logit_families
    import torch_backend

    table = variants()
    for name in names:  # the one-launch plan's programs wait for each other: they must all fit at once
        if resident_factor(name) > 1:
            check_resident(name, _target_of_torch)
    for batch in batches:
        for family in families or logit_families.FAMILIES:
            generator = torch.Generator(device="cuda").manual_seed(batch + (len(family) if one_draw else 0))
            rotate = 1 if one_draw else harness.copies_needed(batch * VOCAB * 2)
            logits = [logit_families.make_logits(family, batch, VOCAB, generator).to(torch.bfloat16)
                      for _ in range(rotate)]
            seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 1000003 + 17
            positions = torch.arange(batch, device="cuda", dtype=torch.int64) + 2**32
            temperature = torch.full((batch,), 0.8, device="cuda")
            gumbel_us = harness.time_graph_us(
                lambda i: torch_backend.gumbel_sample(logits[i], seeds, positions, temperature), rotate)
            print(f"{family:8s} B={batch:4d} gumbel_sample {gumbel_us:6.1f} us", flush=True)
            for filter_name, filters in FILTERS.items():
                if filter_names and filter_name not in filter_names:
                    continue
                per_row = {k: torch.full((batch,), v, device="cuda",
                                         dtype=torch.int32 if k == "top_k" else torch.float32)
                           for k, v in filters.items()}

                def call(i):
                    return torch_backend.top_k_top_p_sample(logits[i], seeds, positions, temperature, **per_row)

                expected = None
                row = [f"  {filter_name:12s}"]
                for name in names:
                    with variant(name, table)():
                        tokens = torch.stack([call(i) for i in range(rotate)]).cpu()
                        if expected is None:
                            expected = tokens
                        elif not torch.equal(tokens, expected):
                            raise SystemExit(f"{name}: tokens differ from {names[0]}'s at {family} B={batch} "
                                             f"{filter_name}")
                        us = harness.time_graph_us(call, rotate)
                    row.append(f"{name} {us:6.1f} ({us / gumbel_us:.2f}x)")
                print(" | ".join(row), flush=True)


def cpu_check(names):
    """Each variant's tokens through the interpreter in the GPU's large-batch tiling (small shapes) equal
    the shipped tiling's, for every filter set, bfloat16 and float32 (both frontends)."""
    import numpy as np

    import ml_dtypes

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
    # both_frontends asserts torch == JAX; its JAX call traces again under each variant's planning function
    from conftest import both_frontends
    from test_filtered import assert_tokens_match_reference

    from jsample import kernels
    from jsample._jax import _execute as jax_execute
    from jsample.kernels import filtered
    from torch_backend import _execute as torch_execute

    assert kernels.INTERPRETER, "--cpu-check runs the interpreter"
    table = variants()
    rng = np.random.default_rng(7)
    batch, vocab = 6, 2500
    x = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
    x[1, :300] += 6.0  # a row whose top-p set lies in a few chunks
    x[3] = np.round(x[3] * 2) / 2  # ties, at the thresholds too
    x[4, 1234] += 20.0  # one token far above the rest
    seeds = rng.integers(0, 2**62, size=batch)
    positions = rng.integers(0, 2**40, size=batch)
    temperature = np.float32([0.8, 1.0, 0.6, 1.3, 0.7, 1.0])
    # small top_p (winners dropped: the searches run), k above TOP_K_LIST (no list: searched)
    filter_sets = (dict(top_k=np.int32([5, 50, 2, 2000, 1, 700])),
                   dict(top_p=np.float32([0.9, 0.5, 0.99, 0.2, 0.05, 0.3])),
                   dict(min_p=np.float32([0.05, 0.2, 0.0, 0.5, 0.01, 0.1])),
                   dict(top_k=np.int32([50, 5, 200, 2000, 1500, 3]), top_p=np.float32([0.9, 0.8, 0.5, 0.2, 0.1, 0.95])))
    checked = 0
    changed = {}  # variant: how many of the calls it planned otherwise than the shipped plan
    torch_target, jax_target = torch_execute.target, jax_execute.TARGET
    large_batch = dict(large_programs=False, resident_programs=0)
    with _patched(filtered, "MANY_ROWS_ELEMENTS", 0), \
            _patched(torch_execute, "target", lambda device: dataclasses.replace(torch_target(device), **large_batch)), \
            _patched(jax_execute, "TARGET", dataclasses.replace(jax_target, **large_batch)):
        for dtype in ("bfloat16", "float32"):
            logits = x.astype(getattr(ml_dtypes, dtype, dtype))
            for filters in filter_sets:
                expected = shipped_launches = None
                spec = (kernels.ArgSpec.contiguous(logits.shape, dtype), kernels.ArgSpec.contiguous(seeds.shape, "int64"))
                flags = dict(has_top_k="top_k" in filters, has_top_p="top_p" in filters, has_min_p="min_p" in filters,
                             fp64=False)
                for name in names:
                    if resident_factor(name) > 1:
                        continue  # the one-launch plan: its programs wait for each other (a GPU only)
                    with variant(name, table)():
                        tokens = both_frontends("top_k_top_p_sample", logits, seeds, positions, temperature, **filters)
                        plan = kernels.plan_top_k_top_p_sample(*spec, jax_execute.TARGET, **flags)
                    launches = tuple((step.kernel, step.grid, step.constexprs) for step in plan.launches)
                    if shipped_launches is None:  # the first variant is the shipped plan
                        shipped_launches = launches
                    changed[name] = changed.get(name, 0) + (launches != shipped_launches)
                    if expected is None:
                        expected = tokens
                        assert_tokens_match_reference(tokens, logits, seeds, positions, temperature,
                                                      *(filters.get(f) for f in ("top_k", "top_p", "min_p")))
                    np.testing.assert_array_equal(tokens, expected, err_msg=f"{name} {dtype} {sorted(filters)}")
                    checked += 1
    # a variant that changed no plan would have checked nothing
    assert all(changed[name] > 0 for name in changed if name != "shipped"), changed
    print(f"{checked} variant calls gave the shipped plan's tokens (both frontends); calls planned otherwise: "
          f"{changed}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", default=",".join(variants()))
    parser.add_argument("--one-draw", action="store_true", help="B = 1: one draw (explore_filtered_ratios.py's)")
    parser.add_argument("--batches", default="256,1")
    parser.add_argument("--families", default="", help="comma-separated (default: all three)")
    parser.add_argument("--filters", default="", help=f"comma-separated, of {', '.join(FILTERS)} (default: all)")
    parser.add_argument("--cpu-check", action="store_true")
    parser.add_argument("--sm90-check", action="store_true",
                        help="no GPU: the resident_xN variants' one-launch programs, compiled for sm_90, fit N an SM")
    args = parser.parse_args()
    names = args.variants.split(",")
    if names[0] != "shipped":
        names = ["shipped"] + [n for n in names if n != "shipped"]
    if args.sm90_check:
        os.environ["TRITON_INTERPRET"] = "0"
        from jsample.kernels.plan import Target
        from torch_backend import _execute

        # the executor's target as on an H200 (132 SMs), which the variants then change
        with _patched(_execute, "target", lambda device: Target(interpreter=False, arrival_counters=True,
                                                                resident_programs=132)):
            for name in names:
                if resident_factor(name) > 1:
                    check_resident(name, lambda: _execute.target(None))
    elif args.cpu_check:
        cpu_check(names)
    else:
        gpu_main(names, args.one_draw, tuple(int(b) for b in args.batches.split(",")),
                 [f for f in args.families.split(",") if f], [f for f in args.filters.split(",") if f])


if __name__ == "__main__":
    main()
