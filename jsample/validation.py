"""Argument checks shared by both frontends, so both raise the same text for the same mistake.

Frontends describe each array as an `ArraySpec` (shape, dtype name such as "float32") and call the
op's check; messages read "<op>: <arg> must be <expected>, got <actual>." No framework imports here,
and no device data is ever read: checks see shapes, dtypes and Python scalars only.
"""

import math
import numbers
from typing import NamedTuple

LOGIT_DTYPES = ("float32", "bfloat16", "float16", "float64")  # float64: rounded to float32 by the frontends, whatever
# JAX's x64 flag (one rule: a float64 array from NumPy, torch or jax.random with x64 on is read as float32)
SEED_DTYPES = ("int32", "uint32", "int64")
SEED_WORD_DTYPES = ("uint32", "int32")  # [B, 2] (low, high) words of 64-bit seeds
POSITION_DTYPES = ("int32", "int64")
FLOAT_DTYPES = ("float32", "float64", "bfloat16", "float16")  # temperature, top_p, min_p: read as float32
INTEGER_DTYPES = ("int32", "int64", "int16", "int8", "uint8", "uint16", "uint32", "uint64")  # top_k: int64
FLOAT32_MAX = 3.4028234663852886e38
MAX_VOCAB = 2**30  # the kernels' column arithmetic is int32: 2**30 leaves room for a padded last block


class ArraySpec(NamedTuple):
    shape: tuple
    dtype: str  # NumPy-style name: "float32", "bfloat16", "int64", ...


def _or_list(names) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def check_flag(op: str, name: str, value) -> None:
    if not isinstance(value, bool):
        if "Tracer" in type(value).__name__:  # jax.jit traced a flag that must be a Python bool
            raise TypeError(f"{op}: {name} must be True or False, got a traced value: under jax.jit, make it static, "
                            f"e.g. jax.jit(jsample.{op}, static_argnames=(\"{name}\",)).")
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
    check_array(op, "seeds", seeds, "[B] or [B, 2]")
    if len(seeds.shape) == 2 and tuple(seeds.shape) == (batch, 2):  # (low, high) uint32 words
        check_dtype(op, "seeds", seeds, SEED_WORD_DTYPES, " Seeds of shape [B, 2] are the (low, high) 32-bit words "
                    "of 64-bit seeds.")
    else:
        check_dtype(op, "seeds", seeds, SEED_DTYPES,
                    " Seeds are integers; a 64-bit unsigned seed can be passed as int64 (same bits)."
                    if seeds.dtype == "uint64" else "")
        if tuple(seeds.shape) != (batch,):
            raise ValueError(f"{op}: seeds must be a 1-D array [B] or a 2-D array [B, 2] of (low, high) 32-bit words "
                             f"with B = {batch} (the batch size of the logits), got shape {tuple(seeds.shape)}.")
    check_array(op, "positions", positions, "[B]")
    check_dtype(op, "positions", positions, POSITION_DTYPES)
    check_batch_vector(op, "positions", positions, batch)


def _as_float(value) -> float:
    """float(value), or inf for an integer too large for a float (float(10**400) raises)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def check_temperature(op: str, temperature, batch: int) -> None:
    """A floating array of shape [B] or () (read as float32; values unchecked), or a number in
    [0, float32 max] (below 1e-5 means greedy)."""
    if isinstance(temperature, ArraySpec):
        check_dtype(op, "temperature", temperature, FLOAT_DTYPES, " It is read as float32.")
        if tuple(temperature.shape) not in ((batch,), ()):
            raise ValueError(f"{op}: temperature must be a number or an array of shape [B] with B = {batch}, "
                             f"got shape {tuple(temperature.shape)}.")
        return
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"{op}: temperature must be a float array [B] or (), or a number, "
                        f"got {type(temperature).__name__}.")
    value = _as_float(temperature)
    if not (0 <= value <= FLOAT32_MAX):
        raise ValueError(f"{op}: temperature must be finite, >= 0 and at most the float32 maximum 3.4028235e38 "
                         f"(below 1e-5 means greedy), got {temperature!r}.")


def check_logits(op: str, name: str, spec, expected_shape_text: str, allowed=LOGIT_DTYPES) -> None:
    check_array(op, name, spec, expected_shape_text)
    ndim = expected_shape_text.count(",") + 1
    if len(spec.shape) != ndim:
        raise ValueError(f"{op}: {name} must be a {ndim}-D array {expected_shape_text}, "
                         f"got shape {tuple(spec.shape)}.")
    check_dtype(op, name, spec, allowed, " float64 logits are read as float32." if "float64" in allowed else "")
    vocab = spec.shape[-1]
    if not 1 <= vocab <= MAX_VOCAB:
        raise ValueError(f"{op}: {name} must have a vocabulary size V in [1, 2**30], got V = {vocab}.")


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


REJECTION_METHODS = ("probabilistic", "strict")
TOKEN_DTYPES = ("int32",)
DRAFT_DTYPES = ("int32", "int64")  # draft tokens and their counts: int64 is read as int64, never narrowed
RATE_DTYPES = ("float32", "float64")  # float64 rates (and lists) are rounded to float32 by the frontends


def check_shape(op: str, name: str, spec: ArraySpec, expected: tuple, expected_text: str) -> None:
    """`spec` must have exactly the shape `expected`; the message shows `expected_text` and the values."""
    if tuple(spec.shape) != tuple(expected):
        raise ValueError(f"{op}: {name} must be a {len(expected)}-D array {expected_text} = "
                         f"{list(expected)}, got shape {tuple(spec.shape)}.")


def check_draft_tokens(op: str, spec, expected: tuple) -> None:
    check_array(op, "draft_tokens", spec, "[B, K]")
    check_dtype(op, "draft_tokens", spec, DRAFT_DTYPES)
    check_shape(op, "draft_tokens", spec, expected, "[B, K]")


def check_num_draft_tokens(op: str, spec, batch: int) -> None:
    check_array(op, "num_draft_tokens", spec, "[B]")
    check_dtype(op, "num_draft_tokens", spec, DRAFT_DTYPES)
    check_batch_vector(op, "num_draft_tokens", spec, batch)


def check_rejection_sample(op: str, target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature,
                           draft_logits, method, fp64) -> None:
    check_logits(op, "target_logits", target_logits, "[B, K+1, V]")
    batch, rows, vocab = target_logits.shape
    if rows < 1:
        raise ValueError(f"{op}: target_logits must have K+1 >= 1 rows per request, got shape "
                         f"{tuple(target_logits.shape)}.")
    k = rows - 1
    check_draft_tokens(op, draft_tokens, (batch, k))
    check_num_draft_tokens(op, num_draft_tokens, batch)
    check_seeds_positions(op, seeds, positions, batch)
    check_temperature(op, temperature, batch)
    if draft_logits is not None:
        check_array(op, "draft_logits", draft_logits, "[B, K, V] or None")
        check_dtype(op, "draft_logits", draft_logits, ("float32", "float64"),
                    " Draft logits are kept in float32 because the acceptance ratio p/q is precision-sensitive; "
                    "cast them to float32 (float64 is read as float32).")
        check_shape(op, "draft_logits", draft_logits, (batch, k, vocab), "[B, K, V]")
    if not isinstance(method, str) or method not in REJECTION_METHODS:
        raise ValueError(f"{op}: method must be {_or_list([repr(m) for m in REJECTION_METHODS])}, got {method!r}.")
    check_flag(op, "fp64", fp64)


def rates_from_list(op: str, rates):
    """`conditional_rates` given as a list or tuple (of numbers, or of lists of them) as a float32 NumPy
    array, which both frontends then take as an array; other values are returned as they are."""
    if not isinstance(rates, (list, tuple)):
        return rates
    import numpy as np

    try:
        array = np.asarray(rates, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: conditional_rates must be a float32 or float64 array [K] or [B, K], or a list of "
                        f"numbers, got {rates!r}.") from None
    # a list's values are on the host: check them (device arrays are not read back, STREAM.md clamps them)
    outside = array[~((array >= 0) & (array <= 1))]
    if outside.size:
        raise ValueError(f"{op}: conditional_rates must be acceptance probabilities in [0, 1], got {float(outside[0])!r} "
                         f"in {rates!r}.")
    return array.astype(np.float32)


def check_synthetic_rejection_sample(op: str, target_tokens, draft_tokens, num_draft_tokens, seeds, positions,
                                     conditional_rates, fp64) -> None:
    check_array(op, "target_tokens", target_tokens, "[B, K+1]")
    check_dtype(op, "target_tokens", target_tokens, DRAFT_DTYPES)  # int64 too (torch.argmax's), read as int64
    if len(target_tokens.shape) != 2 or target_tokens.shape[1] < 1:
        raise ValueError(f"{op}: target_tokens must be a 2-D array [B, K+1] with K+1 >= 1, "
                         f"got shape {tuple(target_tokens.shape)}.")
    batch, k = target_tokens.shape[0], target_tokens.shape[1] - 1
    check_draft_tokens(op, draft_tokens, (batch, k))
    check_num_draft_tokens(op, num_draft_tokens, batch)
    check_seeds_positions(op, seeds, positions, batch)
    check_array(op, "conditional_rates", conditional_rates, "[K] or [B, K]")
    check_dtype(op, "conditional_rates", conditional_rates, RATE_DTYPES)
    if tuple(conditional_rates.shape) not in ((k,), (batch, k)):
        raise ValueError(f"{op}: conditional_rates must be an array [K] = [{k}] (one schedule) or [B, K] = "
                         f"[{batch}, {k}] (one per request), got shape {tuple(conditional_rates.shape)}.")
    check_flag(op, "fp64", fp64)


def check_num_valid(op: str, value, batch: int) -> None:
    """num_valid: None, an int in [0, B], or an integer array of shape () or [1] (a device scalar, its value
    unchecked: no device reads; rows at or past it are padding, a value past B pads none)."""
    if value is None:
        return
    if isinstance(value, ArraySpec):
        check_dtype(op, "num_valid", value, ("int32", "int64"))
        if tuple(value.shape) not in ((), (1,)):
            raise ValueError(f"{op}: num_valid must be a scalar array of shape () or [1], got shape "
                             f"{tuple(value.shape)}.")
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}: num_valid must be None, an int or an int32 / int64 scalar array, got "
                        f"{type(value).__name__}.")
    if not 0 <= value <= batch:
        raise ValueError(f"{op}: num_valid must be in [0, B] = [0, {batch}], got {value}.")


def check_filter(op: str, name: str, value, batch: int) -> None:
    """top_k / top_p / min_p: None, a number in range, or an array [B] or () of any integer (top_k) or
    floating dtype, values unchecked (no device reads: out-of-range values are clamped, STREAM.md)."""
    if value is None:
        return
    integer = name == "top_k"
    dtype = "integer" if integer else "float"
    if isinstance(value, ArraySpec):
        check_dtype(op, name, value, INTEGER_DTYPES if integer else FLOAT_DTYPES,
                    " It is read as int64." if integer else " It is read as float32.")
        if tuple(value.shape) not in ((batch,), ()):
            raise ValueError(f"{op}: {name} must be a number or an array of shape [B] with B = {batch} (the batch "
                             f"size of the logits) or (), got shape {tuple(value.shape)}.")
        return
    kinds = (numbers.Integral,) if integer else (numbers.Real,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise TypeError(f"{op}: {name} must be None, {'an int' if integer else 'a number'} or {'an' if integer else 'a'} {dtype} array [B] "
                        f"or (), got {type(value).__name__}.")
    number = value if integer else _as_float(value)
    ranges = {"top_k": (0 <= number < 2**31, "an int in [0, 2**31) (0 keeps every token)"),
              "top_p": (0 < number <= 1, "in (0, 1] (1 keeps every token)"),
              "min_p": (0 <= number <= 1, "in [0, 1] (0 keeps every token)")}
    in_range, expected = ranges[name]
    if not in_range:
        raise ValueError(f"{op}: {name} must be {expected}, got {value!r}.")


def check_top_k_top_p_sample(op: str, logits, seeds, positions, temperature, top_k, top_p, min_p, fp64) -> None:
    check_logits(op, "logits", logits, "[B, V]")
    batch = logits.shape[0]
    check_seeds_positions(op, seeds, positions, batch)
    check_temperature(op, temperature, batch)
    check_filter(op, "top_k", top_k, batch)
    check_filter(op, "top_p", top_p, batch)
    check_filter(op, "min_p", min_p, batch)
    check_flag(op, "fp64", fp64)


MAX_NUM_TOP = 64  # top_ids / top_logprobs: at most this many a row (the logprobs kernel reads the count on the device)


def check_num_top(op: str, num_top) -> None:
    if isinstance(num_top, bool) or not isinstance(num_top, int):
        raise TypeError(f"{op}: num_top must be an int in [0, {MAX_NUM_TOP}], got {type(num_top).__name__}.")
    if not 0 <= num_top <= MAX_NUM_TOP:
        raise ValueError(f"{op}: num_top must be in [0, {MAX_NUM_TOP}], got {num_top}.")


def check_token_logprobs(op: str, logits, tokens, temperature, top_k, top_p, min_p, num_top, fp64) -> None:
    check_logits(op, "logits", logits, "[B, V]")
    batch = logits.shape[0]
    check_array(op, "tokens", tokens, "[B]")
    check_dtype(op, "tokens", tokens, DRAFT_DTYPES)
    check_batch_vector(op, "tokens", tokens, batch)
    check_temperature(op, temperature, batch)
    check_filter(op, "top_k", top_k, batch)
    check_filter(op, "top_p", top_p, batch)
    check_filter(op, "min_p", min_p, batch)
    check_num_top(op, num_top)
    check_flag(op, "fp64", fp64)


def check_token_values(op: str, tokens, vocab: int) -> None:
    """Tokens the host holds (NumPy, a list, a CPU tensor's values) must be -1 (a row without a finite logit:
    NaN logprobs) or in [0, V); device arrays are not read (an out-of-range value gives NaN, docs/LOGPROBS.md)."""
    import numpy as np

    values = np.asarray(tokens)
    bad = (values < -1) | (values >= vocab)
    if bad.any():
        raise ValueError(f"{op}: tokens must be -1 or in [0, V) = [0, {vocab}), got {int(values[bad][0])}.")


def check_logprobs_request(op: str, return_logprobs, num_top) -> None:
    """The samplers' `return_logprobs` and `num_top` (token_logprobs' count of top logprobs)."""
    check_flag(op, "return_logprobs", return_logprobs)
    check_num_top(op, num_top)
    if num_top and not return_logprobs:
        raise ValueError(f"{op}: num_top = {num_top} needs return_logprobs=True.")


def check_vocab_parallel(op: str, name: str, logits_shape, starts, rows: bool = False) -> None:
    """Vocab-parallel sampling (`vocab_axis` in JAX, `vocab_group` in torch): 2-D logits (`rows`: rejection_sample's
    target logits, whose 3-D shape check_rejection_sample made) whose shards start at multiples of 4 (`starts`:
    every shard's first global column; the stream draws four columns a call)."""
    if not rows and len(logits_shape) != 2:
        raise ValueError(f"{op}: {name} takes 2-D logits [B, V_shard], got {len(logits_shape)}-D.")
    if any(start % 4 for start in starts):
        raise ValueError(f"{op}: {name} needs every shard to start at a multiple of 4 columns, got shards starting at "
                         f"{list(starts)}.")
