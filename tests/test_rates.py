"""The synthetic acceptance-rate helpers: values and every validation error (plain Python)."""

import math
import subprocess
import sys

import pytest

from jsample.rates import (
    acceptance_length_to_rates,
    resolve_synthetic_acceptance_rates,
    unconditional_to_conditional_rates,
)


@pytest.mark.parametrize("length, k, expected", [
    (1, 3, [0.0, 0.0, 0.0]),
    (2.5, 4, [1.0, 0.5, 0.0, 0.0]),
    (3, 4, [1.0, 1.0, 0.0, 0.0]),
    (3.25, 3, [1.0, 1.0, 0.25]),
    (4, 3, [1.0, 1.0, 1.0]),
    (1, 0, []),
    (1.75, 1, [0.75]),
])
def test_rates_acceptance_length_schedule(length, k, expected):
    rates = acceptance_length_to_rates(length, k)
    assert rates == pytest.approx(expected, abs=1e-15) and len(rates) == k
    assert 1 + sum(rates) == pytest.approx(length)
    assert all(isinstance(r, float) for r in rates)


def test_rates_minimum_variance():
    """Every request accepts F or F + 1 drafts: no other schedule with the same mean has less variance."""
    rates = acceptance_length_to_rates(2.4, 5)
    accepted_distribution = [a - b for a, b in zip([1.0] + rates, rates + [0.0])]  # P(exactly i accepted)
    assert accepted_distribution == pytest.approx([0, 0.6, 0.4, 0, 0, 0])


@pytest.mark.parametrize("rates, expected", [
    ([0.8, 0.4, 0.1], [0.8, 0.5, 0.25]),
    ([1.0, 1.0, 0.5, 0.0], [1.0, 1.0, 0.5, 0.0]),
    ([0.5, 0.0, 0.0], [0.5, 0.0, 0.0]),  # 0 after a zero
    ([0.0, 0.0], [0.0, 0.0]),
    ([], []),
])
def test_rates_unconditional_to_conditional(rates, expected):
    conditional = unconditional_to_conditional_rates(rates)
    assert conditional == pytest.approx(expected)
    product = 1.0
    for a, c in zip(rates, conditional):  # the product of conditionals recovers the unconditional rate
        product *= c
        assert product == pytest.approx(a)


def test_rates_resolve():
    assert resolve_synthetic_acceptance_rates(3, length=2.5) == [1.0, 0.5, 0.0]
    assert resolve_synthetic_acceptance_rates(3, rates=(0.9, 0.5, 0.5)) == [0.9, 0.5, 0.5]
    assert resolve_synthetic_acceptance_rates(2, rates=[1, 0]) == [1.0, 0.0]


@pytest.mark.parametrize("call, message", [
    (lambda: resolve_synthetic_acceptance_rates(3), "resolve_synthetic_acceptance_rates: exactly one of rates and "
     "length must be given, got neither."),
    (lambda: resolve_synthetic_acceptance_rates(3, rates=[0.5] * 3, length=2), "resolve_synthetic_acceptance_rates: "
     "exactly one of rates and length must be given, got both."),
    (lambda: resolve_synthetic_acceptance_rates(3, rates=[0.5, 0.4]), "resolve_synthetic_acceptance_rates: rates must "
     "have one rate per speculative token (3), got 2."),
    (lambda: resolve_synthetic_acceptance_rates(2, rates=[1.5, 0.4]), "resolve_synthetic_acceptance_rates: rates[0] "
     "must be in [0, 1], got 1.5."),
    (lambda: resolve_synthetic_acceptance_rates(2, rates=[0.5, -0.1]), "resolve_synthetic_acceptance_rates: rates[1] "
     "must be in [0, 1], got -0.1."),
    (lambda: resolve_synthetic_acceptance_rates(2, rates=[0.4, 0.5]), "resolve_synthetic_acceptance_rates: rates must "
     "be non-increasing (draft i is accepted only if draft i - 1 is), got rates[1] = 0.5 > rates[0] = 0.4."),
    (lambda: resolve_synthetic_acceptance_rates(2, rates=[math.nan, 0.5]), "resolve_synthetic_acceptance_rates: "
     "rates[0] must be a finite number, got nan."),
    (lambda: resolve_synthetic_acceptance_rates(2, rates=[0.5, "x"]), "resolve_synthetic_acceptance_rates: "
     "rates[1] must be a finite number, got 'x'."),
    (lambda: resolve_synthetic_acceptance_rates(2, rates=0.5), "resolve_synthetic_acceptance_rates: rates must be a "
     "sequence of numbers, got float."),
    (lambda: resolve_synthetic_acceptance_rates(-1, length=1), "resolve_synthetic_acceptance_rates: "
     "num_speculative_tokens must be an integer >= 0, got -1."),
    (lambda: resolve_synthetic_acceptance_rates(2.0, length=1), "resolve_synthetic_acceptance_rates: "
     "num_speculative_tokens must be an integer >= 0, got 2.0."),
    (lambda: resolve_synthetic_acceptance_rates(3, length=4.5), "resolve_synthetic_acceptance_rates: length must be in "
     "[1, K + 1] = [1, 4] (accepted drafts + 1), got 4.5."),
    (lambda: acceptance_length_to_rates(0.5, 3), "acceptance_length_to_rates: length must be in [1, K + 1] = [1, 4] "
     "(accepted drafts + 1), got 0.5."),
    (lambda: acceptance_length_to_rates(math.inf, 3), "acceptance_length_to_rates: length must be a finite number, "
     "got inf."),
    (lambda: acceptance_length_to_rates(True, 3), "acceptance_length_to_rates: length must be a finite number, "
     "got True."),
    (lambda: unconditional_to_conditional_rates([0.2, 0.3]), "unconditional_to_conditional_rates: rates must be "
     "non-increasing (draft i is accepted only if draft i - 1 is), got rates[1] = 0.3 > rates[0] = 0.2."),
    (lambda: unconditional_to_conditional_rates([2.0]), "unconditional_to_conditional_rates: rates[0] must be in "
     "[0, 1], got 2.0."),
    (lambda: unconditional_to_conditional_rates([math.inf]), "unconditional_to_conditional_rates: rates[0] must be "
     "a finite number, got inf."),
])
def test_rates_validation_errors(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == message


def test_rates_importable_without_jax():
    code = ("import sys; sys.modules['jax'] = None; import jsample; "
            "print(jsample.resolve_synthetic_acceptance_rates(2, length=2.5)); "
            "import torch_backend; assert torch_backend.acceptance_length_to_rates is jsample.acceptance_length_to_rates")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[1.0, 0.5]"
