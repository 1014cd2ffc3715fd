"""Acceptance-rate schedules for synthetic rejection sampling (plain Python, shared by both frontends).

Two ways to describe how often drafts are accepted, for K speculative tokens:

* unconditional rates a_0 >= a_1 >= ... >= a_{K-1}: a_i = P(draft i is accepted) = P(at least i + 1
  drafts are accepted). The mean acceptance length (accepted drafts + the emitted token) is
  L = 1 + sum_i a_i.
* conditional rates c_i = P(draft i accepted | drafts 0..i-1 accepted) = a_i / a_{i-1} (c_0 = a_0),
  which is what `synthetic_rejection_sample` consumes: it accepts draft i iff u_i < c_i.

No framework imports: `jsample.rates` is importable without jax or torch.
"""

import math
import numbers

__all__ = ["acceptance_length_to_rates", "resolve_synthetic_acceptance_rates", "unconditional_to_conditional_rates"]


def _check_count(op: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{op}: {name} must be an integer >= 0, got {value!r}.")
    return int(value)


def _check_number(op: str, name: str, value) -> float:
    """A finite real number: a Python or NumPy number, or a one-element array of any framework
    (the elements of a jax.Array or torch.Tensor of rates are 0-d arrays)."""
    if getattr(value, "shape", None) is not None and tuple(value.shape) in ((), (1,)) and not isinstance(value, bool):
        dtype = str(getattr(value, "dtype", ""))
        if "float" in dtype or "int" in dtype:
            value = float(value.item() if hasattr(value, "item") else value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ValueError(f"{op}: {name} must be a finite number, got {value!r}.")
    return float(value)


def _check_unconditional_rates(op: str, rates, expected_count=None) -> list:
    try:
        rates = list(rates)
    except TypeError:
        raise ValueError(f"{op}: rates must be a sequence of numbers, got {type(rates).__name__}.") from None
    if expected_count is not None and len(rates) != expected_count:
        raise ValueError(f"{op}: rates must have one rate per speculative token ({expected_count}), "
                         f"got {len(rates)}.")
    values = [_check_number(op, f"rates[{i}]", r) for i, r in enumerate(rates)]
    for i, r in enumerate(values):
        if not 0.0 <= r <= 1.0:
            raise ValueError(f"{op}: rates[{i}] must be in [0, 1], got {r!r}.")
    for i in range(1, len(values)):
        if values[i] > values[i - 1]:
            raise ValueError(f"{op}: rates must be non-increasing (draft i is accepted only if draft i - 1 is), "
                             f"got rates[{i}] = {values[i]!r} > rates[{i - 1}] = {values[i - 1]!r}.")
    return values


def acceptance_length_to_rates(length, num_speculative_tokens) -> list:
    """The minimum-variance unconditional rates with mean acceptance length `length`.

    With F = floor(L - 1): a = [1] * F + [L - 1 - F] + [0] * (K - F - 1) (just [1] * K when L = K + 1),
    so sum(a) = L - 1 and every request accepts F or F + 1 drafts.

    Args:
        length: L in [1, K + 1], the mean number of tokens per step (accepted drafts + 1).
        num_speculative_tokens: K >= 0.

    Returns:
        K unconditional rates (floats).

    Raises:
        ValueError: K is not an integer >= 0, or L is not a finite number in [1, K + 1].
    """
    return _length_to_rates("acceptance_length_to_rates", length, num_speculative_tokens)


def _length_to_rates(op: str, length, num_speculative_tokens) -> list:
    k = _check_count(op, "num_speculative_tokens", num_speculative_tokens)
    length = _check_number(op, "length", length)
    if not 1.0 <= length <= k + 1:
        raise ValueError(f"{op}: length must be in [1, K + 1] = [1, {k + 1}] (accepted drafts + 1), got {length!r}.")
    full = min(int(math.floor(length - 1.0)), k)
    rates = [1.0] * full
    if full < k:
        rates.append(length - 1.0 - full)
        rates.extend([0.0] * (k - full - 1))
    return rates


def unconditional_to_conditional_rates(rates) -> list:
    """c_0 = a_0, c_i = a_i / a_{i-1}; c_i = 0 once some a_{i-1} is 0 (nothing is left to accept).

    Args:
        rates: unconditional rates, each a finite number in [0, 1], non-increasing.

    Returns:
        The conditional rates (floats, each in [0, 1]), as many as `rates`.

    Raises:
        ValueError: a rate is not a finite number in [0, 1], or the rates increase.
    """
    values = _check_unconditional_rates("unconditional_to_conditional_rates", rates)
    conditional = []
    previous = 1.0
    for a in values:
        conditional.append(0.0 if previous == 0.0 else min(1.0, a / previous))
        previous = a
    return conditional


def resolve_synthetic_acceptance_rates(num_speculative_tokens, rates=None, length=None) -> list:
    """The unconditional rates from exactly one of `rates` (validated) or `length` (the schedule above).

    Pass the result through `unconditional_to_conditional_rates` to get `synthetic_rejection_sample`'s
    `conditional_rates`.

    Args:
        num_speculative_tokens: K >= 0.
        rates: K unconditional rates in [0, 1], non-increasing; or None.
        length: the mean acceptance length L in [1, K + 1]; or None.

    Returns:
        K unconditional rates (floats).

    Raises:
        ValueError: both or neither of `rates` and `length` given, the wrong number of rates, a rate
            outside [0, 1] or not finite, increasing rates, or L outside [1, K + 1].
    """
    op = "resolve_synthetic_acceptance_rates"
    k = _check_count(op, "num_speculative_tokens", num_speculative_tokens)
    if (rates is None) == (length is None):
        raise ValueError(f"{op}: exactly one of rates and length must be given, got "
                         f"{'both' if rates is not None else 'neither'}.")
    if length is not None:
        return _length_to_rates(op, length, k)
    return _check_unconditional_rates(op, rates, k)
