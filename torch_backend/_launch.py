"""Turning torch tensors into kernel arguments (no maths here)."""

import torch

from jsample import kernels
from jsample.validation import ArraySpec, check_same_device


def spec(value):
    """An ArraySpec for a tensor, the value itself otherwise (the checks then name its type)."""
    if isinstance(value, torch.Tensor):
        return ArraySpec(tuple(value.shape), str(value.dtype).removeprefix("torch."))
    return value


def check_devices(op: str, reference: torch.Tensor, **tensors) -> None:
    for name, tensor in tensors.items():
        if isinstance(tensor, torch.Tensor):
            check_same_device(op, name, tensor.device, reference.device)


def temperature_array(temperature, batch: int, device) -> torch.Tensor:
    """Per-row temperatures as a float32 device tensor [B] (a number is broadcast, never read back)."""
    if isinstance(temperature, torch.Tensor):
        return temperature.expand(batch).contiguous()
    return torch.full((batch,), float(temperature), dtype=torch.float32, device=device)


def check_runnable(op: str, device) -> None:
    if device.type == "cpu" and not kernels.INTERPRETER:
        raise RuntimeError(f"{op}: CPU tensors run through the Triton interpreter, which must be chosen "
                           "before triton is first imported: set TRITON_INTERPRET=1 at the start of the process.")
