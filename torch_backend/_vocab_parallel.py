"""What the vocab-parallel calls (`vocab_group`) share: every rank's shard size, the shard's first column as a
device tensor, the all-gather of a round's per-row records, and the run of an op's rounds."""

import torch

from jsample import kernels
from jsample.kernels.plan import ShardedPlan, run_rounds
from jsample.validation import check_vocab_parallel
from torch_backend import _execute as execute
from torch_backend._launch import kept_tensor

_SHARD_SIZES = {}  # (group, this rank's shard size) -> every rank's shard size, in rank order
_VOCAB_STARTS = {}  # (start column, device) -> that start as a [1] int32 device tensor


def shard_sizes(group, size: int) -> list:
    """Every rank's vocabulary shard size: asked of the group once (a host all-gather), then remembered, so
    that later calls (and CUDA-graph captures after a first call) make no host round trip."""
    import torch.distributed as dist

    key = (group, size)
    sizes = _SHARD_SIZES.get(key)
    if sizes is None:
        sizes = [None] * dist.get_world_size(group)
        dist.all_gather_object(sizes, size, group=group)
        _SHARD_SIZES[key] = sizes
    return sizes


def vocab_start(start: int, device):
    """The shard's first global column as a [1] int32 device tensor, made once per value and device
    (kept_tensor: no fill launch a call)."""
    return kept_tensor(_VOCAB_STARTS, (start, device),
                       lambda: torch.full((1,), start, dtype=torch.int32, device=device), torch.device(device))


def all_gather(tensor: torch.Tensor, group, shards: int) -> torch.Tensor:
    """[shards, *tensor.shape]: every rank's `tensor`, in rank order (one collective)."""
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        gathered = torch.empty((shards, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
        dist.all_gather_into_tensor(gathered, tensor.contiguous(), group=group)
        return gathered
    parts = [torch.empty_like(tensor) for _ in range(shards)]
    dist.all_gather(parts, tensor.contiguous(), group=group)
    return torch.stack(parts)


def run_sharded(sharded: ShardedPlan, device, inputs: dict, group, shards: int) -> tuple:
    """The outputs of a vocab-parallel op's rounds on this rank's shard (plan.run_rounds), each round's record
    all-gathered over `group`; at the first run on a device, every round's kernels compiled side by side first
    (execute.compile_rounds_ahead)."""
    execute.compile_rounds_ahead(sharded.rounds, shards, device, inputs)
    return run_rounds(sharded.rounds, lambda plan, env: execute.run(plan, device, env),
                      lambda record: all_gather(record, group, shards), inputs)


def shard_layout(op: str, group, logits: torch.Tensor) -> tuple:
    """(shards, start_align, vocab_start) of this rank's shard `logits` [B, V_r] of a split over `group`: the
    number of ranks, the largest power of two dividing every shard's first column, and this shard's first column
    as a device tensor; checked (check_vocab_parallel) as every vocab-parallel op checks it."""
    import torch.distributed as dist

    starts, _ = shard_starts(group, logits)
    check_vocab_parallel(op, "vocab_group", logits.shape, starts)
    return len(starts), kernels.start_alignment(starts), vocab_start(starts[dist.get_rank(group)], logits.device)


def shard_starts(group, logits: torch.Tensor) -> tuple:
    """(every rank's first global column, in rank order; the whole vocabulary's size) of the split of `logits`."""
    sizes = shard_sizes(group, logits.shape[1])
    return tuple(sum(sizes[:r]) for r in range(len(sizes))), sum(sizes)
