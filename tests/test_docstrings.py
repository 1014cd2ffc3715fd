"""The examples in the public ops' docstrings run and print what they say (CPU arrays: the interpreter)."""

import doctest

import pytest

import jsample
import torch_backend
from jsample import kernels

OPS = ("gumbel_sample", "top_k_top_p_sample", "rejection_sample", "synthetic_rejection_sample", "token_logprobs")
DOCUMENTED = [getattr(frontend, name) for frontend in (torch_backend, jsample) for name in OPS]
DOCUMENTED += [jsample.seed_words, jsample.seeds_from_key]


@pytest.mark.skipif(not kernels.INTERPRETER, reason="the examples use CPU arrays, which need the interpreter")
@pytest.mark.parametrize("function", DOCUMENTED, ids=[f"{f.__module__}.{f.__name__}" for f in DOCUMENTED])
def test_docstring_example_runs(function):
    tests = doctest.DocTestFinder(recurse=False).find(function, function.__name__, globs={})
    assert tests and tests[0].examples, f"{function.__module__}.{function.__name__} has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


@pytest.mark.parametrize("op", OPS)
def test_each_op_is_declared_once_for_both_frontends(op):
    """Both frontends show the one text of jsample.ops, each its own side of the frontend-specific passages;
    the outputs' shapes come from there too (the torch fakes, JAX's empty batch)."""
    from jsample import ops

    for name, frontend in (("torch", torch_backend), ("jax", jsample)):
        assert getattr(frontend, op).__doc__ == ops.docstring(op, name)
    assert "{{" not in ops.docstring(op, "torch") and "||" not in ops.docstring(op, "jax")
    assert ops.docstring(op, "torch") != ops.docstring(op, "jax")  # (the examples differ)
    dtypes = [dtype for _, dtype in ops.output_shapes(op, 3, 5)]
    if op == "token_logprobs":  # raw, scaled, kept, log_kept_mass, rank, top_ids [B, num_top], top_logprobs
        assert dtypes == ["float32"] * 4 + ["int32", "int32", "float32"]
        assert ops.output_shapes(op, 3, 5)[5][0] == (3, 5)
    else:
        assert dtypes == ["int32"] * len(dtypes)
