"""The examples in the public ops' docstrings run and print what they say (CPU arrays: the interpreter)."""

import doctest

import pytest

import jsample
import torch_backend
from jsample import kernels

OPS = ("gumbel_sample", "top_k_top_p_sample", "rejection_sample", "synthetic_rejection_sample")
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
