"""Argument checks shared by both frontends, so both raise the same text for the same mistake.

Frontends describe each array as an `ArraySpec` (shape, dtype name such as "float32") and call the
op's check; messages read "<op>: <arg> must be <expected>, got <actual>." No framework imports here,
and no device data is ever read: checks see shapes, dtypes and Python scalars only.
"""

import math
import numbers
from typing import NamedTuple

LOGIT_DTYPES = ("float32", "bfloat16", "float16")
SEED_DTYPES = ("int32", "uint32", "int64")
POSITION_DTYPES = ("int32", "int64")


class ArraySpec(NamedTuple):
    shape: tuple
    dtype: str  # NumPy-style name: "float32", "bfloat16", "int64", ...


def _or_list(names) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def check_flag(op: str, name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be True or False, got {value!r} ({type(value).__name__}).")


def check_array(op: str, name: str, value, expected_shape_text: str) -> None:
    """`value` must be an ArraySpec (the frontend passes the raw object when it was not an array)."""
    if not isinstance(value, ArraySpec):
        raise TypeError(f"{op}: {name} must be an array {expected_shape_text}, got {type(value).__name__}.")


def check_dtype(op: str, name: str, spec: ArraySpec, allowed, hint: str = "") -> None:
    if spec.dtype not in allowed:
        raise TypeError(f"{op}: {name} must have dtype {_or_list(allowed)}, got {spec.dtype}.{hint}")


def check_batch_vector(op: str, name: str, spec: ArraySpec, batch: int) -> None:
    if tuple(spec.shape) != (batch,):
        raise ValueError(f"{op}: {name} must be a 1-D array [B] with B = {batch} (the batch size of the "
                         f"logits), got shape {tuple(spec.shape)}.")


def check_seeds_positions(op: str, seeds, positions, batch: int) -> None:
    check_array(op, "seeds", seeds, "[B]")
    check_dtype(op, "seeds", seeds, SEED_DTYPES,
                " Seeds are integers; a 64-bit unsigned seed can be passed as int64 (same bits)."
                if seeds.dtype == "uint64" else "")
    check_batch_vector(op, "seeds", seeds, batch)
    check_array(op, "positions", positions, "[B]")
    check_dtype(op, "positions", positions, POSITION_DTYPES)
    check_batch_vector(op, "positions", positions, batch)


def check_temperature(op: str, temperature, batch: int) -> None:
    """A float32 array of shape [B] or (), or a finite Python/NumPy number >= 0."""
    if isinstance(temperature, ArraySpec):
        check_dtype(op, "temperature", temperature, ("float32",))
        if tuple(temperature.shape) not in ((batch,), ()):
            raise ValueError(f"{op}: temperature must be a number or an array of shape [B] with B = {batch}, "
                             f"got shape {tuple(temperature.shape)}.")
        return
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"{op}: temperature must be a float32 array [B] or a number, "
                        f"got {type(temperature).__name__}.")
    if not (math.isfinite(float(temperature)) and float(temperature) >= 0):
        raise ValueError(f"{op}: temperature must be finite and >= 0 (0 means greedy), got {temperature!r}.")


def check_logits(op: str, name: str, spec, expected_shape_text: str, allowed=LOGIT_DTYPES) -> None:
    check_array(op, name, spec, expected_shape_text)
    ndim = expected_shape_text.count(",") + 1
    if len(spec.shape) != ndim:
        raise ValueError(f"{op}: {name} must be a {ndim}-D array {expected_shape_text}, "
                         f"got shape {tuple(spec.shape)}.")
    check_dtype(op, name, spec, allowed)
    vocab = spec.shape[-1]
    if not 1 <= vocab < 2**31:
        raise ValueError(f"{op}: {name} must have a vocabulary size V in [1, 2**31), got V = {vocab}.")


def check_gumbel_sample(op: str, logits, seeds, positions, temperature, fp64, draft) -> None:
    check_logits(op, "logits", logits, "[B, V]")
    batch = logits.shape[0]
    check_seeds_positions(op, seeds, positions, batch)
    check_temperature(op, temperature, batch)
    check_flag(op, "fp64", fp64)
    check_flag(op, "draft", draft)


def check_same_device(op: str, name: str, device, expected) -> None:
    if device != expected:
        raise ValueError(f"{op}: {name} must be on the same device as the logits ({expected}), got {device}.")
