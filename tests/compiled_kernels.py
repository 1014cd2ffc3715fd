"""Compile jsample's row kernels for an H100/H200 (sm_90) without a GPU, as jax-triton specialises
them (pointers 16-byte aligned, no facts about integer arguments), and print as JSON, per kernel,
its global-load PTX instructions and its SASS instructions per vocabulary column (ptxas and
cuobjdump ship with triton). Run in its own process: TRITON_INTERPRET must be 0 before triton loads.

    TRITON_INTERPRET=0 python tests/compiled_kernels.py [VOCAB_ALIGN] [--exact-math] [--decide-layouts]

`--exact-math` compiles with FAST_MATH=False (the interpreter's code path) as a control.
`--decide-layouts` prints instead the layouts of the rejection decision's tensors in both launch plans.
`--pdl-order` prints instead which arguments the global accesses of the PDL-chained launches (and of
rejection_one_launch_kernel) derive from, before and after they wait for the previous phase.
"""

import collections
import json
import os
import re
import subprocess
import sys
import tempfile

os.environ["TRITON_INTERPRET"] = "0"

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from jsample import kernels  # noqa: E402


def compile_for_sm90(kernel, arg_types, constexprs, num_warps):
    """`kernel` compiled for sm_90; arg_types maps every non-constexpr argument."""
    signature = {name: arg_types.get(name, "constexpr") for name in kernel.arg_names}
    # jax-triton: every array argument is 16-byte aligned; integer arguments carry no divisibility
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names)
             if signature[name].startswith("*")}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=num_warps, num_stages=1, enable_fp_fusion=False))


POINTER_TYPES = {"float32": "*fp32", "bfloat16": "*bf16", "float16": "*fp16", "int32": "*i32", "int64": "*i64", "uint8": "*u8"}


def launch_arg_types(step, plan, logits_dtype):
    """compile_for_sm90's arg_types for a launch of a plan (kernels.plan.Launch, Plan): the op's inputs as the
    frontends pass them (logits of `logits_dtype`, int64 seeds and positions, f32 temperature, top_p, min_p,
    int32 top_k), the plan's buffers by their dtype, integers as i32 (both sides of a comparison alike)."""
    inputs = {"logits": POINTER_TYPES[logits_dtype], "tokens": "*i32", "seeds": "*i64", "positions": "*i64", "temperature": "*fp32",
              "top_k": "*i32", "top_p": "*fp32", "min_p": "*fp32"}
    names = [name for name in step.kernel.arg_names if name not in dict(step.constexprs)]
    types = {}
    for name, value in zip(names, list(step.args) + list(step.outputs)):
        if isinstance(value, str):
            types[name] = inputs.get(value) or POINTER_TYPES[plan.buffer(value).dtype]
        else:
            types[name] = "i1" if isinstance(value, bool) else "i32"
    return types


def compile_plan(plan, inputs):
    """Compiles every launch of `plan` for sm_90 and yields each kernel's name: `inputs` maps the plan's input names
    to their pointer types (e.g. {"logits": "*bf16", "seeds": "*i64"}), its buffers take their dtypes, integers i32."""
    for step in plan.launches:
        names = [name for name in step.kernel.arg_names if name not in dict(step.constexprs)]
        types = {name: (inputs.get(value) or POINTER_TYPES[plan.buffer(value).dtype]) if isinstance(value, str)
                 else "i32" for name, value in zip(names, list(step.args) + list(step.outputs))}
        compile_for_sm90(step.kernel, types, dict(step.constexprs), step.num_warps)
        yield step.kernel.fn.__name__


def global_loads(compiled):
    """{load instruction: count} in the PTX."""
    return dict(collections.Counter(re.findall(r"ld\.global[\w.]*", compiled.asm["ptx"])))


def sass_instructions(compiled):
    """How many SASS instructions one thread's code holds (each counted once, whichever branches run)."""
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        sass = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, check=True).stdout
    return len(re.findall(r"/\*[0-9a-f]{4}\*/\s+\S", sass))


def launch_layouts(plan, kernel_name, inputs, shapes):
    """{shape: the sorted layouts of the tensors of that shape (e.g. "2048xf32")} in the sm_90 compile of `plan`'s
    launch of `kernel_name` (`inputs` as compile_plan's)."""
    step = next(step for step in plan.launches if step.kernel.fn.__name__ == kernel_name)
    names = [name for name in step.kernel.arg_names if name not in dict(step.constexprs)]
    types = {name: (inputs.get(value) or POINTER_TYPES[plan.buffer(value).dtype]) if isinstance(value, str) else "i32"
             for name, value in zip(names, list(step.args) + list(step.outputs))}
    ttgir = compile_for_sm90(step.kernel, types, dict(step.constexprs), step.num_warps).asm["ttgir"]
    layouts = dict(re.findall(r"^(#\w+) = (#ttg\.\w+<.*>)$", ttgir, re.M))
    return {shape: sorted({layouts[name] for name in re.findall(rf"tensor<{shape}, (#\w+)>", ttgir)})
            for shape in shapes}


def decide_layouts(types):
    """{K: [the layouts of the decision's [BLOCK_K, REDUCE_BLOCK] f32 tensors in rejection_decide_kernel,
    the same in rejection_decide_emit_kernel]}: the normalisers' sums follow the layout, so the two
    launch plans must agree on it."""
    report = {}
    for k in (1, 3, 4, 8):
        config = kernels.rejection_launch_config(151936, k, (5 * 151936, 151936, 4 * 151936, 151936), False)
        common = dict(STRICT=False, ONE_HOT=False, FP64=False, BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block)
        fused = dict(common, BLOCK_V=config.block_v, ROW_ALIGN=16, VOCAB_ALIGN=config.vocab_align, FAST_MATH=True)
        layouts = []
        for kernel, constexprs in ((kernels.rejection_decide_kernel, dict(common, BONUS_IN_STATS=config.bonus_in_stats)),
                                   (kernels.rejection_decide_emit_kernel, fused)):
            ttgir = compile_for_sm90(kernel, types, constexprs, config.decide_num_warps).asm["ttgir"]
            names = dict(re.findall(r"^(#\w+) = (#ttg\.\w+<.*>)$", ttgir, re.M))
            shape = rf"tensor<{config.block_k}x{config.reduce_block}xf32, (#\w+)>"
            layouts.append(sorted({names[name] for name in re.findall(shape, ttgir)}))
        report[k] = layouts
    return report


_REGISTER = re.compile(r"%[a-z]+\d+")


def global_access_sources(compiled, kernel):
    """The kernel arguments that the address of each global load or store in the PTX derives from,
    in text order -> [(instruction, "before wait" | "after wait", sorted argument names)], "before
    wait" meaning above the first griddepcontrol.wait or acquiring load or atomic (rejection_one_launch_kernel
    waits with those for the stats programs' arrivals; PTX registers are virtual, so a register's
    definitions are few: a backward walk over them finds every argument an address depends on,
    through arithmetic and through loaded values)."""
    arguments = [name for i, name in enumerate(kernel.arg_names) if i not in kernel.constexprs]  # PTX params
    definitions = collections.defaultdict(list)  # register -> [source registers or ("param", index)]
    accesses = []
    wait_seen = False
    for line in compiled.asm["ptx"].splitlines():
        code = line.split("//")[0].strip().rstrip(";")
        if "griddepcontrol.wait" in line or re.search(r"\b(ld|atom)\.global[\w.]*\.(acquire|acq_rel)\b", line):
            wait_seen = True
        if not code or code.startswith((".", "$", "{", "}")):
            continue
        if code.startswith("@"):
            code = code.split(None, 1)[1]  # the predicate decides whether, not where
        opcode, _, operands = code.partition(" ")
        param = re.search(r"_param_(\d+)\]", operands)
        registers = _REGISTER.findall(operands)
        if opcode.startswith(("ld.global", "st.global")):
            address = re.search(r"\[\s*(%\w+)", operands).group(1)
            accesses.append((opcode, "after wait" if wait_seen else "before wait", address))
        if opcode.startswith("st.") or not registers:
            continue
        if opcode.startswith("ld.global"):  # { dst, ... }, [ address ]: every value depends on the address
            destinations = _REGISTER.findall(operands.split("[")[0])
            sources = [address]
        else:
            destinations, sources = registers[:1], registers[1:]
        for destination in destinations:
            definitions[destination].extend([("param", int(param.group(1)))] if param else sources)

    def arguments_of(register, seen):
        names = set()
        for source in definitions.get(register, ()):
            if isinstance(source, tuple):
                names.add(arguments[source[1]])
            elif source not in seen:
                seen.add(source)
                names |= arguments_of(source, seen)
        return names

    return [(opcode, when, sorted(arguments_of(address, {address}))) for opcode, when, address in accesses]


def pdl_order(types):
    """{launch: {"before wait": arguments the pre-wait global accesses derive from, "after wait":
    the same after it}} for the chained launches of the small-batch rejection plan (PDL=True), and
    for `early_read_kernel`, a control that reads the previous launch's output before its wait."""
    import triton.language as tl
    from triton.language.extra.cuda import gdc_wait

    @triton.jit
    def early_read_kernel(seeds_ptr, stats_ptr, tokens_ptr):
        seed = tl.load(seeds_ptr)
        stat = tl.load(stats_ptr)  # wrong: the previous launch may still be writing it
        gdc_wait()
        tl.store(tokens_ptr, (seed + stat).to(tl.int32))

    launches = {"early_read_kernel (control)": (early_read_kernel, {}, 1)}
    for k in (1, 4):
        config = kernels.rejection_launch_config(151936, k, (5 * 151936, 151936, 4 * 151936, 151936), False)
        launches[f"rejection_decide_emit_kernel K={k}"] = (kernels.rejection_decide_emit_kernel, dict(
            STRICT=False, ONE_HOT=False, FP64=False, BLOCK_V=config.block_v, ROW_ALIGN=16,
            VOCAB_ALIGN=config.vocab_align, FAST_MATH=True, BLOCK_K=config.block_k,
            REDUCE_BLOCK=config.reduce_block, PDL=True), config.decide_num_warps)
        launches[f"rejection_finish_kernel K={k}"] = (kernels.rejection_finish_kernel, dict(
            FP64=False, BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block, STATS_ROW_IN_EMIT=True, PDL=True),
            config.per_request_num_warps)
    config = kernels.rejection_launch_config(151936, 1, (2 * 151936, 151936, 151936, 151936), False)
    launches["rejection_one_launch_kernel K=1"] = (kernels.rejection_one_launch_kernel, dict(
        STRICT=False, ONE_HOT=False, FP64=False, BLOCK_V=config.block_v, ROW_ALIGN=16, VOCAB_ALIGN=config.vocab_align,
        FAST_MATH=True, BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block), config.num_warps)
    report = {}
    for name, (kernel, constexprs, num_warps) in launches.items():
        compiled = compile_for_sm90(kernel, types, constexprs, num_warps)
        sides = {"loads before wait": set(), "stores before wait": set(), "after wait": set()}
        for instruction, when, names in global_access_sources(compiled, kernel):
            if when == "before wait":
                when = ("loads " if instruction.startswith("ld") else "stores ") + when
            sides[when] |= set(names)
        report[name] = {side: sorted(names) for side, names in sides.items()}
    return report


def main():
    vocab = 151936
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    fast_math = "--exact-math" not in sys.argv
    vocab_align = int(args[0]) if args else None
    gumbel = kernels.gumbel_launch_config(vocab, vocab, False)
    rejection = kernels.rejection_launch_config(vocab, 4, (5 * vocab, vocab, 4 * vocab, vocab), False)
    align = gumbel.vocab_align if vocab_align is None else vocab_align
    common = dict(FP64=False, ROW_ALIGN=16, VOCAB_ALIGN=align, FAST_MATH=fast_math)
    ints = {name: "i32" for name in ("V", "K", "B", "row_stride", "target_batch_stride", "target_row_stride",
                                     "draft_batch_stride", "draft_row_stride", "num_blocks")}
    pointers = {"logits_ptr": "*bf16", "target_logits_ptr": "*bf16", "draft_logits_ptr": "*fp32",
                "seeds_ptr": "*i64", "positions_ptr": "*i64", "temperature_ptr": "*fp32",
                "num_draft_tokens_ptr": "*i32", "draft_tokens_ptr": "*i32", "stats_ptr": "*fp32",
                "row_score_ptr": "*fp32", "row_index_ptr": "*i32", "emit_row_ptr": "*i32", "emit_mode_ptr": "*i32",
                "log_normalizer_ptr": "*fp32",
                "partial_score_ptr": "*fp32", "partial_index_ptr": "*i32"}
    types = {**ints, **pointers}
    launches = {  # name: (kernel, constexprs, config)
        "gumbel_partial_kernel": (kernels.gumbel_partial_kernel, dict(STREAM=0), gumbel),
        "rejection_stats_kernel": (kernels.rejection_stats_kernel,
                                   dict(STRICT=False, ONE_HOT=False, BONUS_IN_STATS=rejection.bonus_in_stats), rejection),
        "rejection_emit_kernel": (kernels.rejection_emit_kernel, dict(ONE_HOT=False), rejection),
    }
    if "--pdl-order" in sys.argv:
        print(json.dumps(pdl_order({**types, "emit_score_ptr": "*fp32", "emit_index_ptr": "*i32",
                                    "tokens_ptr": "*i32", "num_sampled_ptr": "*i32", "counters_ptr": "*i32"})))
        return
    if "--decide-layouts" in sys.argv:
        print(json.dumps(decide_layouts(types)))
        return
    report = {}
    for name, (kernel, constexprs, config) in launches.items():
        compiled = compile_for_sm90(kernel, types, dict(common, **constexprs, BLOCK_V=config.block_v),
                                    config.num_warps)
        columns_per_thread = config.block_v / (32 * config.num_warps)
        report[name] = {"loads": global_loads(compiled),
                        "sass_per_column": sass_instructions(compiled) / columns_per_thread}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
