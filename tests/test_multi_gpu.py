"""Multi-GPU use through the frameworks' own machinery, never a home-made engine.

A request's token depends only on its own logits, seed, position and temperature, so a batch split
across GPUs must give, bit for bit, the tokens of the whole batch on one GPU:

* JAX: `jax.shard_map` over a 1-D mesh of the GPUs with the batch axis sharded, under `jax.jit`
  (each GPU launches the same kernels on its own requests; no collective is needed), and plain
  `jax.jit` on batch-sharded inputs, which the ops' partitioning rule splits the same way;
* torch.distributed (NCCL): each rank samples an interleaved slice of the batch (requests r, r + W,
  ...) on its own GPU, and `all_gather` assembles the batch.

Needs two or more GPUs (benchmarks/results/gpu_tests_multi_gpu.txt: two H200s).
"""

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu
NUM_GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
needs_two_gpus = pytest.mark.skipif(NUM_GPUS < 2, reason="needs two or more GPUs")

BATCH, K, VOCAB = 64, 4, 151936
NAMES = ("target", "draft", "drafts", "num_drafts", "seeds", "positions", "temperature")


def _problem():
    """Realistic acceptance: the drafts are the draft model's argmax, the target is close to it."""
    rng = np.random.default_rng(7)
    target = rng.standard_normal((BATCH, K + 1, VOCAB), dtype=np.float32) * 3
    draft = target[:, :K] + rng.standard_normal((BATCH, K, VOCAB), dtype=np.float32) * 0.5
    drafts = draft.argmax(-1).astype(np.int32)
    num_drafts = rng.integers(0, K + 1, BATCH).astype(np.int32)
    seeds = rng.integers(-(2**63), 2**63 - 1, BATCH, dtype=np.int64)
    positions = rng.integers(0, 2**40, BATCH, dtype=np.int64)
    temperature = rng.choice(np.float32([0.0, 0.7, 1.0]), BATCH)
    return dict(zip(NAMES, (target, draft, drafts, num_drafts, seeds, positions, temperature)))


def _one_gpu(problem):
    """(tokens, num_sampled, bonus-row gumbel_sample tokens) of the whole batch on cuda:0."""
    import torch_backend

    t = {name: torch.from_numpy(value).to("cuda:0") for name, value in problem.items()}
    tokens, num_sampled = torch_backend.rejection_sample(t["target"], t["drafts"], t["num_drafts"], t["seeds"],
                                                         t["positions"], t["temperature"], draft_logits=t["draft"])
    bonus = torch_backend.gumbel_sample(t["target"][:, K], t["seeds"], t["positions"] + K, t["temperature"])
    return tuple(x.cpu().numpy() for x in (tokens, num_sampled, bonus))


@needs_two_gpus
def test_multi_gpu_jax_shard_map_equals_one_gpu():
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jsample

    try:
        shard_map = jax.shard_map
        no_check = dict(check_vma=False)  # jax-triton's primitive declares no varying-axes rule
    except AttributeError:  # older JAX
        from jax.experimental.shard_map import shard_map

        no_check = dict(check_rep=False)
    gpus = jax.devices("gpu")
    mesh = Mesh(np.array(gpus), ("batch",))
    batch_sharded = P("batch")

    def step(target, draft, drafts, num_drafts, seeds, positions, temperature):
        tokens, num_sampled = jsample.rejection_sample(target, drafts, num_drafts, seeds, positions, temperature,
                                                       draft_logits=draft)
        bonus = jsample.gumbel_sample(target[:, K], seeds, positions + K, temperature)
        return tokens, num_sampled, bonus

    sharded_step = jax.jit(shard_map(step, mesh=mesh, in_specs=(batch_sharded,) * len(NAMES),
                                     out_specs=(batch_sharded,) * 3, **no_check))
    problem = _problem()
    inputs = [jax.device_put(problem[name], NamedSharding(mesh, batch_sharded)) for name in NAMES]
    out = sharded_step(*inputs)
    assert len(out[0].sharding.device_set) == len(gpus)  # the tokens stay on the GPUs that made them
    for got, expected in zip(out, _one_gpu(problem)):
        np.testing.assert_array_equal(np.asarray(got), expected)


@needs_two_gpus
def test_multi_gpu_plain_jax_jit_partitions_the_batch_without_gathers():
    """Plain jax.jit on batch-sharded inputs (no shard_map): each GPU samples its own requests (the ops'
    partitioning rule), the compiled module has no all-gather of the logits, and the tokens are the
    one-GPU call's."""
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jsample

    gpus = jax.devices("gpu")
    mesh = Mesh(np.array(gpus), ("batch",))

    def step(target, draft, drafts, num_drafts, seeds, positions, temperature):
        tokens, num_sampled = jsample.rejection_sample(target, drafts, num_drafts, seeds, positions, temperature,
                                                       draft_logits=draft)
        bonus = jsample.gumbel_sample(target[:, K], seeds, positions + K, temperature)
        filtered = jsample.top_k_top_p_sample(target[:, 0], seeds, positions, temperature, top_k=50, top_p=0.9)
        return tokens, num_sampled, bonus, filtered

    problem = _problem()
    inputs = [jax.device_put(problem[name], NamedSharding(mesh, P("batch"))) for name in NAMES]
    jitted = jax.jit(step)
    compiled = jitted.lower(*inputs).compile().as_text()
    assert "all-gather" not in compiled and "all-to-all" not in compiled
    out = jitted(*inputs)
    assert len(out[0].sharding.device_set) == len(gpus)
    tokens, num_sampled, bonus = _one_gpu(problem)
    import torch_backend

    t = {name: torch.from_numpy(value).to("cuda:0") for name, value in problem.items()}
    filtered = torch_backend.top_k_top_p_sample(t["target"][:, 0], t["seeds"], t["positions"], t["temperature"],
                                                top_k=50, top_p=0.9).cpu().numpy()
    for got, expected in zip(out, (tokens, num_sampled, bonus, filtered)):
        np.testing.assert_array_equal(np.asarray(got), expected)


def _torch_rank(rank, world, problem_file, out_file):
    """One torch.distributed rank: requests rank, rank + world, ... on GPU `rank`."""
    import torch.distributed as dist

    import torch_backend

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{problem_file}.rendezvous", rank=rank, world_size=world)
    data = np.load(problem_file)
    t = {name: torch.from_numpy(np.ascontiguousarray(data[name][rank::world])).cuda() for name in NAMES}
    tokens, num_sampled = torch_backend.rejection_sample(t["target"], t["drafts"], t["num_drafts"], t["seeds"],
                                                         t["positions"], t["temperature"], draft_logits=t["draft"])
    bonus = torch_backend.gumbel_sample(t["target"][:, K], t["seeds"], t["positions"] + K, t["temperature"])
    gathered = []
    for local in (tokens, num_sampled, bonus):
        parts = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(parts, local)
        whole = torch.empty((BATCH,) + tuple(local.shape[1:]), dtype=local.dtype, device=local.device)
        for r, part in enumerate(parts):
            whole[r::world] = part
        gathered.append(whole.cpu().numpy())
    if rank == 0:
        np.savez(out_file, *gathered)
    dist.destroy_process_group()


@needs_two_gpus
def test_multi_gpu_torch_distributed_equals_one_gpu(tmp_path):
    import torch.multiprocessing as mp

    problem = _problem()
    problem_file, out_file = str(tmp_path / "problem.npz"), str(tmp_path / "out.npz")
    np.savez(problem_file, **problem)
    mp.spawn(_torch_rank, args=(NUM_GPUS, problem_file, out_file), nprocs=NUM_GPUS, join=True)
    out = np.load(out_file)
    for i, expected in enumerate(_one_gpu(problem)):
        np.testing.assert_array_equal(out[f"arr_{i}"], expected)


@needs_two_gpus
@pytest.mark.parametrize("sizes", ["75968,75968", "100000,51936"])
def test_multi_gpu_vocab_parallel_torch_nccl_equals_the_unsharded_call(sizes, tmp_path):
    """gumbel_sample and top_k_top_p_sample (vocab_group=...) over NCCL, a GPU a rank, even and uneven splits of
    real vocabularies: every rank's tokens are the unsharded call's on its own GPU (tests/test_vocab_parallel.py's
    script)."""
    from test_vocab_parallel import TORCH_SCRIPT, _run

    port = 29700 + sum(int(size) for size in sizes.split(",")) % 97
    out = _run(TORCH_SCRIPT, sizes, str(port), env=dict(VP_BACKEND="nccl"), tmp_path=tmp_path)
    assert "ranks 2 ok" in out, out


@needs_two_gpus
def test_multi_gpu_vocab_parallel_jax_shard_map_samplers_equal_the_unsharded_call(tmp_path):
    """gumbel_sample, token_logprobs and top_k_top_p_sample (vocab_axis=...) in shard_map and plain jit over two GPUs
    (V up to 262144): the unsharded call's tokens and numbers, and the compiled module all-gathers only O(B) records."""
    from test_vocab_parallel import JAX_SCRIPT, _run

    out = _run(JAX_SCRIPT, env=dict(VP_DEVICES="gpu", VP_PART="samplers"), tmp_path=tmp_path)
    assert all(f"shards 2 vocab {v} ok" in out for v in (808, 151936, 262144)) and "errors ok" in out, out
    assert out.count("filtered shards 2 ok") == 3 and out.count("logprobs shards 2 ok") == 3, out


@needs_two_gpus
def test_multi_gpu_vocab_parallel_jax_shard_map_filtered_logprobs_and_rejection_equal_the_unsharded_call(tmp_path):
    """token_logprobs with filters and rejection_sample (vocab_axis=...) over two GPUs at V = 151936: the unsharded
    call's numbers and tokens (the other half of the script above: its compiles alone take minutes on a GPU)."""
    from test_vocab_parallel import JAX_SCRIPT, _run

    out = _run(JAX_SCRIPT, env=dict(VP_DEVICES="gpu", VP_PART="rest"), tmp_path=tmp_path)
    assert "filtered logprobs shards 2 vocab 151936 ok" in out and "rejection shards 2 vocab 151936 ok" in out, out
