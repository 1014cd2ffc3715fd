"""Turning torch tensors into kernel arguments (no maths here)."""

import numpy as np
import torch

from jsample import kernels
from jsample.ops import FILTER_DTYPES, output_shapes
from jsample.validation import ArraySpec, check_num_valid, check_same_device
from torch_backend import _fast_path


def spec(value):
    """An ArraySpec for a tensor, the value itself otherwise (the checks then name its type)."""
    if isinstance(value, torch.Tensor):
        return ArraySpec(tuple(value.shape), str(value.dtype).removeprefix("torch."))
    return value


_VALIDATED = set()


def call_key(op: str, arguments: dict, flags: tuple = ()):
    """What validation and planning of a call depend on: the op, its flags and, per argument, a
    tensor's type, shape, dtype, strides and device, or any other value itself (with its type: True is
    not 1). It keys the memo of validated calls and of eager calls to replay (_execute.replay). None
    while torch.compile traces (a memo would be a side effect the graph guards on)."""
    if torch.compiler.is_compiling():
        return None
    return (op, flags, *[(type(v), v.shape, v.dtype, v.stride(), v.device) if isinstance(v, torch.Tensor)
                         else (type(v), v) for v in arguments.values()])


def validate(op: str, check, arguments: dict, flags: tuple = (), key=None):
    """check(op, *specs of the arguments, *flags), the devices and whether they can run; once per
    distinct call_key (`key`, computed here if not given): a hot loop pays a set lookup. Returns that
    key, or None if an argument is unhashable (a list), which also memoises the call's plan
    (_execute.plan). Under torch.compile every trace checks."""
    if key is None:
        key = call_key(op, arguments, flags)
    try:
        if key is not None and key in _VALIDATED:
            return key
    except TypeError:  # an unhashable argument: check every time
        key = None
    for name, value in arguments.items():
        if isinstance(value, np.ndarray):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got a NumPy array; convert it with "
                            f"torch.from_numpy({name}).to(device) (jsample's JAX frontend takes NumPy arrays).")
    check(op, *(spec(value) for value in arguments.values()), *flags)
    reference = next(iter(arguments.values()))
    check_devices(op, reference, **arguments)
    check_runnable(op, reference.device)
    if key is not None:
        if len(_VALIDATED) > 4096:
            _VALIDATED.clear()
        _VALIDATED.add(key)
    return key


def check_devices(op: str, reference: torch.Tensor, **tensors) -> None:
    for name, tensor in tensors.items():
        if isinstance(tensor, torch.Tensor):
            check_same_device(op, name, tensor.device, reference.device)


def dense(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` with its own contiguous storage: the kernels index per-request arrays densely, so
    stride-0 (expanded), strided and offset views are copied first (a no-op for dense tensors).
    Unsigned 32-bit words are copied as int32 (same bits): torch copies few uint32 kernels."""
    if tensor.is_contiguous():
        return tensor
    if tensor.dtype == torch.uint32:
        return tensor.view(torch.int32).contiguous().view(torch.uint32)
    return tensor.contiguous()


_CONSTANTS = {}  # (number, its type, B, dtype, device) -> a [B] tensor of it, which no kernel writes


def per_row(value, batch: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A per-request value as a dense [B] tensor of `dtype`: a tensor [B] or () is converted (a float
    as float32, an integer that is neither int32 nor int64 as int64) and broadcast; a number is filled,
    once per (number, B, dtype, device) for eager GPU calls (no fill launch per call), else each call
    (a trace or a CUDA-graph capture records its own fill)."""
    if isinstance(value, torch.Tensor):
        if value.dtype != dtype and not (dtype == torch.int64 and value.dtype == torch.int32):
            value = value.to(dtype)
        return dense(value if value.shape == (batch,) else value.expand(batch))
    device = torch.device(device)
    if device.type != "cuda" or torch.compiler.is_compiling() or torch.cuda.is_current_stream_capturing():
        return torch.full((batch,), value, dtype=dtype, device=device)
    key = (value, type(value), batch, dtype, device)
    found = _CONSTANTS.get(key)
    if found is None:
        found = torch.full((batch,), value, dtype=dtype, device=device)
        torch.cuda.current_stream(device).synchronize()  # filled before a call on any stream reads it
        if len(_CONSTANTS) > 1024:
            _CONSTANTS.clear()
        _CONSTANTS[key] = found
    return found


def temperature_array(temperature, batch: int, device) -> torch.Tensor:
    """Per-row temperatures as a float32 device tensor [B] (a number is broadcast, never read back)."""
    if (isinstance(temperature, torch.Tensor) and temperature.dtype == torch.float32
            and temperature.shape == (batch,) and temperature.is_contiguous()):
        return temperature
    return per_row(temperature if isinstance(temperature, torch.Tensor) else float(temperature), batch,
                   torch.float32, device)


def temperature_value(temperature, batch: int, device):
    """For an eager call: a Python number as one float32 kernel argument on a GPU (no device array to
    fill: kernels.common.load_temperature), a per-row tensor otherwise (temperature_array)."""
    if not isinstance(temperature, torch.Tensor) and device.type == "cuda" and not kernels.INTERPRETER:
        return float(temperature)
    return temperature_array(temperature, batch, device)


def empty_outputs(op: str, like: torch.Tensor, batch: int, rows: int = 1):
    """`op`'s outputs (jsample.ops.output_shapes), uninitialised, on `like`'s device: a fake's result."""
    return tuple(like.new_empty(shape, dtype=getattr(torch, dtype)) for shape, dtype in output_shapes(op, batch, rows))


def row_logits(logits: torch.Tensor) -> torch.Tensor:
    """Logits as a row kernel reads them: float32_logits, columns contiguous (another column stride is copied)."""
    logits = float32_logits(logits)
    return logits if logits.stride(-1) == 1 else logits.contiguous()


def filter_rows(top_k, top_p, min_p, batch: int, device) -> tuple:
    """top_k (int64), top_p and min_p (float32) as [B] device tensors (None stays None: no such filter)."""
    return tuple(None if value is None else per_row(value, batch, getattr(torch, dtype), device)
                 for value, (_, dtype) in zip((top_k, top_p, min_p), FILTER_DTYPES))


def float32_logits(tensor):
    """Logits as the kernels read them: float64 rounded to float32 (the one rule of both frontends), others as
    they are; None stays None."""
    return tensor.float() if tensor is not None and tensor.dtype == torch.float64 else tensor


_COUNTS = {}  # (num_valid, device) -> an int64 [1] tensor holding num_valid


def kept_tensor(cache: dict, key, make, device: torch.device) -> torch.Tensor:
    """cache[key], made by make() the first time outside a CUDA-graph capture and kept (no launch a call
    after it; inside a first capture the tensor's fill is part of the graph, and it is not kept)."""
    found = cache.get(key)
    if found is None:
        found = make()
        if not (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            cache[key] = found
    return found


def row_valid(op: str, num_valid, batch: int, device):
    """`num_valid` (checked) as the kernels' `row_valid` (common.is_padding): the count itself, an int32 / int64
    [1] tensor read on the device (no read back, no kernel: a CUDA graph replays it with the tensor's new value), an
    int as an int32 tensor kept per value and device; or None."""
    if num_valid is None:
        return None
    check_num_valid(op, spec(num_valid), batch)
    device = torch.device(device)
    if isinstance(num_valid, torch.Tensor):
        check_same_device(op, "num_valid", num_valid.device, device)
        return num_valid.reshape(1)
    value = int(num_valid)
    return kept_tensor(_COUNTS, (value, device), lambda: torch.full((1,), value, dtype=torch.int64, device=device),
                       device)


def check_runnable(op: str, device) -> None:
    if device.type == "cpu" and not kernels.INTERPRETER:
        raise RuntimeError(f"{op}: CPU tensors run through the Triton interpreter, which jsample uses when no GPU is "
                           "present or when JSAMPLE_INTERPRET=1 is set before jsample is first imported.")


def traced(tensor: torch.Tensor) -> bool:
    """Whether this call is being traced (torch.compile, fake or wrapped tensors, a dispatch mode): then
    an op runs through its custom op, which tracing sees as one opaque call; eager calls skip the
    dispatcher and run their plan directly."""
    return (torch.compiler.is_compiling() or type(tensor) is not torch.Tensor
            or _fast_path.dispatch_modes() > 0)
