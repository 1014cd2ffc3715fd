"""Every kernel and device function of jsample reads only globals that Triton's compiler accepts.

The interpreter (this machine, CI) runs a kernel as Python, so a kernel that reads a plain module
constant works here and fails only when Triton compiles it ("Cannot access global variable ... from
within @jit'ed function"): vocab_parallel.py's SUMMARY_WORDS did, and the two-GPU run found it. The
compiler accepts constexpr globals, other @jit functions, its builtins and modules (tl, triton); this reads
each function's source and checks every global name it loads, without compiling anything."""

import ast
import importlib
import inspect
import pkgutil
import textwrap
import types

import triton.language as tl

import jsample.kernels


def _jsample_jit_functions():
    for info in pkgutil.walk_packages(jsample.kernels.__path__, "jsample.kernels."):  # filtered/'s modules too
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            fn = getattr(value, "fn", None)
            if inspect.isfunction(fn) and fn.__module__ == module.__name__:
                yield f"{info.name.removeprefix('jsample.kernels.')}.{name}", fn


def _global_loads(source):
    """The names the function defined by `source` loads that are neither its parameters nor assigned in it."""
    function = ast.parse(textwrap.dedent(source)).body[0]
    local = {arg.arg for arg in function.args.args + function.args.kwonlyargs}
    loads = set()
    for node in (node for statement in function.body for node in ast.walk(statement)):  # not the decorators
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else local).add(node.id)
    return loads - local


def _accepted(value):
    """A constexpr, a module, a @jit function or one of Triton's builtins (e.g. extra.cuda's gdc_wait)."""
    return (isinstance(value, (tl.constexpr, types.ModuleType)) or inspect.isfunction(getattr(value, "fn", None))
            or tl.core.is_builtin(value))


def test_kernels_read_only_globals_the_compiler_accepts():
    functions = dict(_jsample_jit_functions())
    assert len(functions) > 150 and "vocab_parallel.shard_partial_kernel" in functions, sorted(functions)
    assert "filtered.one_launch.filtered_one_launch_kernel" in functions, sorted(functions)
    refused = {name: sorted(g for g in _global_loads(inspect.getsource(fn))
                            if g in fn.__globals__ and not _accepted(fn.__globals__[g]))
               for name, fn in functions.items()}
    assert not {name: globals_ for name, globals_ in refused.items() if globals_}


def test_the_check_finds_a_plain_global():
    """The check's teeth: a plain int read by a kernel is refused, its constexpr twin accepted, locals ignored."""
    namespace = {"tl": tl, "PLAIN": 6, "WORDS": tl.constexpr(6), "offset": 3}
    source = "@jit\ndef kernel(out_ptr, n):\n    offset = n + 1\n    tl.store(out_ptr + PLAIN + offset, WORDS)\n"
    loads = _global_loads(source)
    assert loads == {"tl", "PLAIN", "WORDS"}
    assert [name for name in sorted(loads) if name in namespace and not _accepted(namespace[name])] == ["PLAIN"]
