"""Vocab-parallel gumbel_sample (issue 42): logits split along the vocabulary, sampled without gathering them,
give the unsharded call's tokens bit for bit. JAX: shard_map, and plain jax.jit of logits with a NamedSharding
split along the vocabulary (the partitioning rule), over two forced host devices (a subprocess: the
device count is fixed when JAX starts), and the compiled module all-gathers only the B x 6 summaries (with four
host devices on a loaded 2-core machine the all-gather's rendezvous once waited for good: more shards are checked
by the in-process test, which stacks the summaries as the all-gather does); torch: ranks of a gloo group in
subprocesses, uneven splits; in one process, the shard and combine plans over every split."""

import os
import subprocess
import sys
import textwrap

import pytest

JAX_SCRIPT = textwrap.dedent('''
    import os, re, sys
    ON_GPU = os.environ.get("VP_DEVICES") == "gpu"  # tests/test_multi_gpu.py: two GPUs, a GPU-sized vocabulary too
    if not ON_GPU:
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import numpy as np, jax, jax.numpy as jnp, ml_dtypes
    jax.config.update("jax_enable_x64", True)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jsample
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:
        from jax.experimental.shard_map import shard_map

    # on two GPUs the run is split in two (each part's compiles take minutes): "samplers" (gumbel_sample, token_logprobs,
    # top_k_top_p_sample) and "rest" (filtered logprobs and rejection_sample, at V = 151936 only)
    PART = os.environ.get("VP_PART", "all")
    SAMPLERS, REST = PART != "rest", PART != "samplers"
    rng = np.random.default_rng(42)
    batch = 7
    vocabs = ((1, 301), (2, 808)) + (((2, 151936), (2, 262144)) if ON_GPU else ())
    for shards, vocab in (((2, 151936),) if ON_GPU and PART == "rest" else vocabs):
        mesh = Mesh(np.array(jax.devices()[:shards]), ("tp",))
        x = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
        x[1] = -np.inf  # no finite logit: -1
        x[2, vocab - 3] = 3e38  # overflows at T = 0.05: greedy, its largest logit on the last shard
        x[3, -vocab // 4:] = -np.inf  # a padded vocabulary: -inf columns
        x[4, 2], x[4, vocab - 1] = np.nan, np.inf  # non-finite logits: never chosen
        x[5, 0] = x[5, vocab - 1] = x[5].max() + 5  # a greedy tie across the first and last shards: the lowest
        seeds = rng.integers(-(2**62), 2**62, batch)
        positions = rng.integers(0, 2**40, batch)
        temperature = np.float32([1.0, 0.7, 0.05, 1.3, 2.0, 0.0, 0.9])
        # FP32 alone, then bfloat16, FP64 and the draft stream at 2 shards
        variants = [("float32", False, False)] + ([("bfloat16", False, False), ("float32", True, False),
                                                  ("bfloat16", False, True)] if shards == 2 else [])
        variants = variants if SAMPLERS else []
        for dtype, fp64, draft in variants:
            logits = x.astype(getattr(ml_dtypes, dtype, dtype))
            want = np.asarray(jsample.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64, draft=draft))
            call = lambda l, s, p, t: jsample.gumbel_sample(l, s, p, t, fp64=fp64, draft=draft, vocab_axis="tp")
            sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"), P(), P(), P()), out_specs=P()))
            got = np.asarray(sharded(logits, seeds, positions, temperature))
            assert np.array_equal(got, want), (shards, dtype, fp64, draft, got, want)
            assert want[1] == -1 and want[2] == vocab - 3 and want[5] == 0, want
            # plain jax.jit, the logits' NamedSharding split along the vocabulary: the same plan through the
            # partitioning rule
            jitted = jax.jit(lambda l, s, p, t: jsample.gumbel_sample(l, s, p, t, fp64=fp64, draft=draft))
            placed = jax.device_put(logits, NamedSharding(mesh, P(None, "tp")))
            assert np.array_equal(np.asarray(jitted(placed, seeds, positions, temperature)), want), (shards, dtype)
            if shards > 1 and dtype == "float32" and not fp64 and not draft:
                for compiled in (sharded, jitted):
                    args = (logits if compiled is sharded else placed, seeds, positions, temperature)
                    hlo = compiled.lower(*args).compile().as_text()
                    gathers = [line for line in hlo.splitlines() if "all-gather(" in line]
                    assert gathers and all(f"{vocab // shards}" not in line.split("all-gather(")[0]
                                           for line in gathers), gathers
                    assert all(f"[{shards},{batch},6]" in line.split("all-gather(")[0] for line in gathers), gathers
                    assert not [line for line in hlo.splitlines() if "all-reduce(" in line or "all-to-all(" in line]
        if shards == 2 and SAMPLERS:  # padding rows (num_valid, a device scalar): -1, their logits unread
            want = np.asarray(jsample.gumbel_sample(x, seeds, positions, temperature, num_valid=np.int32(4)))
            call = lambda l, s, p, t, n: jsample.gumbel_sample(l, s, p, t, num_valid=n, vocab_axis="tp")
            sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"), P(), P(), P(), P()), out_specs=P()))
            got = np.asarray(sharded(x, seeds, positions, temperature, np.int32(4)))
            assert np.array_equal(got, want) and (got[4:] == -1).all(), (got, want)
            placed = jax.device_put(x, NamedSharding(mesh, P(None, "tp")))
            jitted = jax.jit(lambda l, s, p, t, n: jsample.gumbel_sample(l, s, p, t, num_valid=n))
            assert np.array_equal(np.asarray(jitted(placed, seeds, positions, temperature, np.int32(4))), want)
            # return_logprobs: the tokens, then their vocab-parallel token_logprobs (no gather of the logits)
            want_tokens, want_numbers = jsample.gumbel_sample(x, seeds, positions, temperature, num_valid=np.int32(4),
                                                              return_logprobs=True, num_top=3)
            logprobs = jax.jit(lambda l, s, p, t, n: jsample.gumbel_sample(l, s, p, t, num_valid=n,
                                                                           return_logprobs=True, num_top=3))
            call = lambda l, s, p, t, n: jsample.gumbel_sample(l, s, p, t, num_valid=n, return_logprobs=True,
                                                               num_top=3, vocab_axis="tp")
            sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"),) + (P(),) * 4, out_specs=P()))
            for tokens, numbers in (logprobs(placed, seeds, positions, temperature, np.int32(4)),
                                    sharded(x, seeds, positions, temperature, np.int32(4))):
                assert np.array_equal(np.asarray(tokens), np.asarray(want_tokens))
                for got, want in zip(numbers, want_numbers):
                    assert np.array_equal(np.asarray(got), np.asarray(want), equal_nan=True), (got, want)
            assert np.isnan(np.asarray(want_numbers.raw)[4:]).all()
        if SAMPLERS:
            print("shards", shards, "vocab", vocab, "ok")
        tokens = np.int64([5, -1, vocab - 3, 7, 2, vocab // 2 + 1, vocab - 1])  # row 4: a NaN logit
        if shards == 2 and SAMPLERS:  # token_logprobs: two all-gathers of per-row records, the unsharded call's
            for dtype, num_top in (("float32", 0), ("bfloat16", 5)):
                logits = x.astype(getattr(ml_dtypes, dtype, dtype))
                want = jsample.token_logprobs(logits, tokens, temperature, num_top=num_top)
                call = lambda l, k, t: jsample.token_logprobs(l, k, t, num_top=num_top, vocab_axis="tp")
                sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"), P(), P()), out_specs=P()))
                jitted = jax.jit(lambda l, k, t: jsample.token_logprobs(l, k, t, num_top=num_top))
                placed = jax.device_put(logits, NamedSharding(mesh, P(None, "tp")))
                for compiled, logits_arg in ((sharded, logits), (jitted, placed)):
                    got = compiled(logits_arg, tokens, temperature)
                    for name, a, b in zip(want._fields, got, want):
                        assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), (dtype, name, a, b)
                    hlo = compiled.lower(logits_arg, tokens, temperature).compile().as_text()
                    gathers = [line.split("all-gather")[0] for line in hlo.splitlines()
                               if "all-gather(" in line or "all-gather-start(" in line]
                    shapes = [shape for g in gathers for shape in re.findall(r"[a-z0-9]+\\[[0-9,]*\\]", g)]
                    assert gathers and all(re.fullmatch(rf"s32\\[(2,)?{batch},[0-9]+\\]", shape) for shape in shapes)
                    assert all(int(shape.split(",")[-1][:-1]) < vocab // 2 for shape in shapes), shapes
                    if not ON_GPU:
                        assert len(gathers) == 2, shapes
                    assert not [line for line in hlo.splitlines() if "all-reduce(" in line or "all-to-all(" in line]
            assert np.isnan(np.asarray(want.raw)[[1, 4]]).all() and np.asarray(want.rank)[1] == 0
            print("logprobs shards", shards, "ok")
        if shards == 2 and REST and (not ON_GPU or vocab == 151936):  # (each dtype and flag set a compile on a GPU)
            # with filters: the kept set's searches first; top_k_top_p_sample's return_logprobs after its tokens
            rows = dict(top_k=np.int64([3, 50, 7, 1000, 2, 5, 9]),
                        top_p=np.float32([0.9, 0.5, 0.95, 0.3, 1, 0.8, 0.99]),
                        min_p=np.float32([0.01, 0.2, 0.0, 0.05, 0.5, 0.1, 0.0]))
            for dtype, given, num_top in (("float32", ("top_k", "top_p"), 0), ("bfloat16", ("top_p", "min_p"), 2),
                                          ("bfloat16", ("top_k=5", "top_p"), 0)):  # (a Python int: the lists)
                logits = x.astype(getattr(ml_dtypes, dtype, dtype))
                filters = {name: rows[name] for name in given if name in rows}
                ints = {name.split("=")[0]: int(name.split("=")[1]) for name in given if "=" in name}  # (traced: not)
                want = jsample.token_logprobs(logits, tokens, temperature, num_top=num_top, **filters, **ints)
                assert (np.asarray(want.log_kept_mass) < 0).any()
                call = lambda l, k, t, f: jsample.token_logprobs(l, k, t, num_top=num_top, vocab_axis="tp", **f,
                                                                 **ints)
                sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"), P(), P(), P()), out_specs=P()))
                jitted = jax.jit(lambda l, k, t, f: jsample.token_logprobs(l, k, t, num_top=num_top, **f, **ints))
                placed = jax.device_put(logits, NamedSharding(mesh, P(None, "tp")))
                for compiled, logits_arg in ((sharded, logits), (jitted, placed)):
                    got = compiled(logits_arg, tokens, temperature, filters)
                    for name, a, b in zip(want._fields, got, want):
                        assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), (dtype, name, a, b)
                    hlo = compiled.lower(logits_arg, tokens, temperature, filters).compile().as_text()
                    gathers = [line.split("all-gather")[0] for line in hlo.splitlines()
                               if "all-gather(" in line or "all-gather-start(" in line]
                    shapes = [shape for g in gathers for shape in re.findall(r"[a-z0-9]+\\[[0-9,]*\\]", g)]
                    assert gathers and all(int(shape.split(",")[-1][:-1]) < vocab // 2 for shape in shapes), shapes
                    if ints and not ON_GPU:  # the lists' record, then the logprobs' two records
                        assert len(gathers) == 3, shapes
            want = jsample.top_k_top_p_sample(x, seeds, positions, temperature, top_k=20, top_p=rows["top_p"],
                                              num_valid=np.int32(5), return_logprobs=True, num_top=3)
            call = lambda l, s, p, t, q, n: jsample.top_k_top_p_sample(l, s, p, t, top_k=20, top_p=q, num_valid=n,
                                                                      return_logprobs=True, num_top=3, vocab_axis="tp")
            sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"),) + (P(),) * 5, out_specs=P()))
            jitted = jax.jit(lambda l, s, p, t, q, n: jsample.top_k_top_p_sample(
                l, s, p, t, top_k=20, top_p=q, num_valid=n, return_logprobs=True, num_top=3))
            placed = jax.device_put(x, NamedSharding(mesh, P(None, "tp")))
            for got in (sharded(x, seeds, positions, temperature, rows["top_p"], np.int32(5)),
                        jitted(placed, seeds, positions, temperature, rows["top_p"], np.int32(5))):
                assert np.array_equal(np.asarray(got[0]), np.asarray(want[0]))
                for name, a, b in zip(want[1]._fields, got[1], want[1]):
                    assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), (name, a, b)
            assert np.isfinite(np.asarray(want[1].kept)[:5]).sum() >= 3 and np.isnan(np.asarray(want[1].raw)[5:]).all()
            # per-row top_k: the sampler's searches, whose last round gives the kept set to the logprobs' rounds
            want = jsample.top_k_top_p_sample(x, seeds, positions, temperature, top_k=rows["top_k"],
                                              min_p=rows["min_p"], return_logprobs=True)
            call = lambda l, s, p, t, k, m: jsample.top_k_top_p_sample(l, s, p, t, top_k=k, min_p=m,
                                                                      return_logprobs=True, vocab_axis="tp")
            sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"),) + (P(),) * 5, out_specs=P()))
            got = sharded(x, seeds, positions, temperature, rows["top_k"], rows["min_p"])
            assert np.array_equal(np.asarray(got[0]), np.asarray(want[0]))
            for name, a, b in zip(want[1]._fields, got[1], want[1]):
                assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), (name, a, b)
            print("filtered logprobs shards", shards, "vocab", vocab, "ok")
        # top_k_top_p_sample: the kept set's searches over the shards (a round an all-gather of integer sums)
        if shards == 2 and SAMPLERS:
            x[6] = x[6, 0]  # a row of equal logits: top-k's threshold tied across both shards, top-p keeps all
            top_k = np.int64([40, 3, 20, 1000, 2, 7, 5])
            top_p = np.float32([0.4, 0.5, 0.8, 0.2, 0.3, 0.6, 0.7])
            min_p = np.float32([0.6, 0.9, 0.5, 0.7, 0.8, 0.9, 0.95])
            for dtype, fp64, given in (("float32", False, "kp"), ("bfloat16", False, "kpm"), ("float32", True, "p"),
                                       ("bfloat16", False, "m")):
                logits = x.astype(getattr(ml_dtypes, dtype, dtype))
                filters = {name: value for letter, name, value in (("k", "top_k", top_k), ("p", "top_p", top_p),
                                                                   ("m", "min_p", min_p)) if letter in given}
                want = np.asarray(jsample.top_k_top_p_sample(logits, seeds, positions, temperature, fp64=fp64,
                                                             **filters))
                unfiltered = np.asarray(jsample.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64))
                assert (want != unfiltered).any(), (dtype, given)  # the filters matter here
                call = lambda l, s, p, t, f: jsample.top_k_top_p_sample(l, s, p, t, fp64=fp64, vocab_axis="tp", **f)
                sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"), P(), P(), P(), P()),
                                            out_specs=P()))
                got = np.asarray(sharded(logits, seeds, positions, temperature, filters))
                assert np.array_equal(got, want), (dtype, fp64, given, got, want)
                jitted = jax.jit(lambda l, s, p, t, f: jsample.top_k_top_p_sample(l, s, p, t, fp64=fp64, **f))
                placed = jax.device_put(logits, NamedSharding(mesh, P(None, "tp")))
                assert np.array_equal(np.asarray(jitted(placed, seeds, positions, temperature, filters)), want)
                if dtype == "bfloat16" and given == "kpm":  # O(B) crosses devices: 1 + 2 * 4 rounds + 1 gathers
                    for compiled, logits_arg in ((sharded, logits), (jitted, placed)):
                        hlo = compiled.lower(logits_arg, seeds, positions, temperature, filters).compile().as_text()
                        # every gathered array (sync, or async starts; XLA may combine gathers into one) is a
                        # per-row record: [2, B, 6] statistics, [2, B, 32] sums, [2, B, 6] summaries
                        gathers = [line.split("all-gather")[0] for line in hlo.splitlines()
                                   if "all-gather(" in line or "all-gather-start(" in line]
                        shapes = [shape for g in gathers for shape in re.findall(r"[a-z0-9]+\\[[0-9,]*\\]", g)]
                        allowed = ({f"s32[2,{batch},{w}]" for w in (6, 32)}
                                   | {f"s32[{batch},{w}]" for w in (6, 32)})
                        assert gathers and set(shapes) <= allowed, shapes
                        if not ON_GPU:  # (the CPU's module keeps each round's gather as it is)
                            assert sorted(shapes) == sorted([f"s32[2,{batch},6]"] + [f"s32[2,{batch},32]"] * 8
                                                            + [f"s32[2,{batch},6]"]), shapes
                        assert not [line for line in hlo.splitlines() if "all-reduce(" in line or "all-to-all(" in line]
            # top_k a Python int: the shards' lists, one all-gather (a [2, B, record] int32 record)
            for dtype, fp64, k, given in (("bfloat16", False, 3, "pm"), ("float32", True, 20, "p"),
                                          ("float32", False, 40, "")):
                logits = x.astype(getattr(ml_dtypes, dtype, dtype))
                filters = {name: value for letter, name, value in (("p", "top_p", top_p), ("m", "min_p", min_p))
                           if letter in given}
                want = np.asarray(jsample.top_k_top_p_sample(logits, seeds, positions, temperature, fp64=fp64,
                                                             top_k=k, **filters))
                unfiltered = np.asarray(jsample.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64))
                assert (want != unfiltered).any(), (dtype, k, given)
                call = lambda l, s, p, t, f: jsample.top_k_top_p_sample(l, s, p, t, fp64=fp64, top_k=k,
                                                                        vocab_axis="tp", **f)
                sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"), P(), P(), P(), P()),
                                            out_specs=P()))
                got = np.asarray(sharded(logits, seeds, positions, temperature, filters))
                assert np.array_equal(got, want), (dtype, fp64, k, given, got, want)
                jitted = jax.jit(lambda l, s, p, t, f: jsample.top_k_top_p_sample(l, s, p, t, fp64=fp64, top_k=k,
                                                                                  **f))
                placed = jax.device_put(logits, NamedSharding(mesh, P(None, "tp")))
                assert np.array_equal(np.asarray(jitted(placed, seeds, positions, temperature, filters)), want)
                for compiled, logits_arg in ((sharded, logits), (jitted, placed)):
                    hlo = compiled.lower(logits_arg, seeds, positions, temperature, filters).compile().as_text()
                    gathers = [line.split("all-gather")[0] for line in hlo.splitlines()
                               if "all-gather(" in line or "all-gather-start(" in line]
                    shapes = [shape for g in gathers for shape in re.findall(r"[a-z0-9]+\\[[0-9,]*\\]", g)]
                    # one record a row and shard: 2 * capacity slot words, 4 header words, 6 a chunk's ties
                    assert len(gathers) == 1 and re.fullmatch(rf"s32\\[(2,)?{batch},[0-9]+\\]", shapes[0]), shapes
                    assert int(shapes[0].split(",")[-1][:-1]) <= 2 * 64 + 4 + 6 * 64, shapes
                    assert not [line for line in hlo.splitlines() if "all-reduce(" in line or "all-to-all(" in line]
            # padding rows: -1, their logits unread on every shard
            want = np.asarray(jsample.top_k_top_p_sample(x, seeds, positions, temperature, top_k=top_k, top_p=top_p,
                                                         num_valid=np.int32(4)))
            call = lambda l, s, p, t, k, q, n: jsample.top_k_top_p_sample(l, s, p, t, top_k=k, top_p=q, num_valid=n,
                                                                         vocab_axis="tp")
            sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"),) + (P(),) * 6, out_specs=P()))
            got = np.asarray(sharded(x, seeds, positions, temperature, top_k, top_p, np.int32(4)))
            assert np.array_equal(got, want) and (got[4:] == -1).all(), (got, want)
            print("filtered shards", shards, "ok")
        if shards == 2 and REST and (not ON_GPU or vocab == 151936):
            # rejection_sample: [B, K+1, V / 2] shards, a block cut by the split (heads), return_logprobs after
            k = 3
            x3 = (rng.standard_normal((batch, k + 1, vocab)) * 2).astype(np.float32)
            x3[1::2] *= 4  # peaked rows: drafts accepted too
            x3[4, 0, 3] = 3e38  # an overflowing decision row: greedy
            y3 = x3[:, :k] + (rng.standard_normal((batch, k, vocab)) * 0.3).astype(np.float32)
            drafts = y3.argmax(2)
            num_drafts = np.int32([3, 2, 3, 1, 3, 0, 3])
            for dtype, method, with_draft, num_top in (("float32", "probabilistic", True, None),
                                                       ("bfloat16", "probabilistic", False, 2),
                                                       ("float32", "strict", False, None)):
                logits = x3.astype(getattr(ml_dtypes, dtype, dtype))
                options = dict(method=method, num_valid=np.int32(6))
                if num_top is not None:
                    options.update(return_logprobs=True, num_top=num_top)
                draft = y3 if with_draft else None
                want = jsample.rejection_sample(logits, drafts, num_drafts, seeds, positions, temperature,
                                                draft_logits=draft, **options)
                assert len(set(np.asarray(want[1]).tolist())) >= 3, want
                call = lambda l, d, s, p, t, y: jsample.rejection_sample(l, d, num_drafts, s, p, t, draft_logits=y,
                                                                         vocab_axis="tp", **options)
                draft_spec = P(None, None, "tp") if with_draft else P()
                sharded = jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, None, "tp"), P(), P(), P(), P(),
                                                                       draft_spec), out_specs=P()))
                # plain jax.jit, the logits' NamedSharding split along the vocabulary: the same plan
                jitted = jax.jit(lambda l, d, s, p, t, y: jsample.rejection_sample(l, d, num_drafts, s, p, t,
                                                                                   draft_logits=y, **options))
                vocab_split = NamedSharding(mesh, P(None, None, "tp"))
                placed = jax.device_put(logits, vocab_split)
                placed_draft = None if draft is None else jax.device_put(draft, vocab_split)
                for compiled, args in ((sharded, (logits, drafts, seeds, positions, temperature, draft)),
                                       (jitted, (placed, drafts, seeds, positions, temperature, placed_draft))):
                    got = compiled(*args)
                    assert np.array_equal(np.asarray(got[0]), np.asarray(want[0])), (dtype, method, got, want)
                    assert np.array_equal(np.asarray(got[1]), np.asarray(want[1])), (dtype, method, got, want)
                    if num_top is not None:
                        for name, a, b in zip(want[2]._fields, got[2], want[2]):
                            assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), (dtype, name, a, b)
                    hlo = compiled.lower(*args).compile().as_text()
                    gathers = [line.split("all-gather")[0] for line in hlo.splitlines()
                               if "all-gather(" in line or "all-gather-start(" in line]
                    shapes = [shape for g in gathers for shape in re.findall(r"[a-z0-9]+\\[[0-9,]*\\]", g)]
                    # per-request records only: none holds a row's vocabulary (the heads: a block's columns)
                    assert gathers and all(int(shape.split(",")[-1][:-1]) < vocab for shape in shapes), shapes
                    assert not [line for line in hlo.splitlines() if "all-reduce(" in line or "all-to-all(" in line]
            print("rejection shards", shards, "vocab", vocab, "ok")
    mesh = Mesh(np.array(jax.devices()[:2]), ("tp",))
    x = np.zeros((2, 802), np.float32)  # 401 columns a shard: the second starts at 401, not a multiple of 4
    call = lambda l: jsample.gumbel_sample(l, np.arange(2), np.arange(2), 1.0, vocab_axis="tp")
    try:
        jax.jit(shard_map(call, mesh=mesh, in_specs=(P(None, "tp"),), out_specs=P()))(x)
        raise SystemExit("no error")
    except ValueError as error:
        assert "gumbel_sample: vocab_axis needs every shard to start at a multiple of 4 columns" in str(error), error
    # under plain jax.jit such a split is gathered first (the partitioning rule takes equal shards whose width
    # is a multiple of 4): the unsharded call's tokens
    x = (rng.standard_normal((2, 802)) * 3).astype(np.float32)
    placed = jax.device_put(x, NamedSharding(mesh, P(None, "tp")))
    call = lambda l: jsample.gumbel_sample(l, np.arange(2), np.arange(2), 1.0)
    assert np.array_equal(np.asarray(jax.jit(call)(placed)), np.asarray(call(x)))
    print("errors ok")
''')

TORCH_SCRIPT = textwrap.dedent('''
    import os, sys
    import numpy as np
    import torch, torch.distributed as dist, torch.multiprocessing as mp

    def worker(rank, sizes, port, queue):
        try:
            queue.put(run(rank, sizes, port))
        except BaseException:  # reported to the parent at once (the other ranks may wait in a collective for good)
            import traceback
            queue.put((rank, None, traceback.format_exc()))

    def run(rank, sizes, port):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        backend = os.environ.get("VP_BACKEND", "gloo")  # tests/test_multi_gpu.py: nccl, a GPU a rank
        device = torch.device(f"cuda:{rank}" if backend == "nccl" else "cpu")
        if backend == "nccl":
            torch.cuda.set_device(device)
        dist.init_process_group(backend, rank=rank, world_size=len(sizes))
        import torch_backend
        rng = np.random.default_rng(len(sizes))
        batch, vocab = 6, sum(sizes)
        x = torch.from_numpy((rng.standard_normal((batch, vocab)) * 3).astype(np.float32))
        x[1] = -float("inf")
        x[2, vocab - 1] = 3e38
        x[3, vocab // 2:] = -float("inf")
        x = x.to(device)
        seeds, positions = torch.from_numpy(rng.integers(-(2**62), 2**62, batch)), torch.arange(batch)
        seeds, positions = seeds.to(device), positions.to(device)
        temperature = torch.tensor([1.0, 0.7, 0.05, 1.3, 0.0, 2.5], device=device)
        start = sum(sizes[:rank])
        results = []
        for dtype in (torch.float32, torch.bfloat16):
            logits = x.to(dtype)
            shard = logits[:, start:start + sizes[rank]]  # a view: rows vocab elements apart
            for fp64 in (False, True):
                want = torch_backend.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64)
                got = torch_backend.gumbel_sample(shard, seeds, positions, temperature, fp64=fp64,
                                                  vocab_group=dist.group.WORLD)
                results.append((want.tolist(), got.tolist()))
        # top_k_top_p_sample: the kept set's searches over the ranks, each round an all-gather of integer sums
        x[4] = x[4, 0]  # equal logits: top-k's threshold tied across every rank
        top_k = torch.tensor([40, 3, 20, 1000, 2, 7], device=device)
        top_p = torch.tensor([0.4, 0.5, 0.8, 0.2, 0.3, 0.6], device=device)
        min_p = torch.tensor([0.6, 0.9, 0.5, 0.7, 0.8, 0.9], device=device)
        for dtype, fp64, filters, num_valid in (
                (torch.float32, False, dict(top_k=top_k, top_p=top_p), None),
                (torch.bfloat16, False, dict(top_k=top_k, top_p=top_p, min_p=min_p), 5),
                (torch.float16, True, dict(top_p=top_p), None), (torch.bfloat16, False, dict(min_p=min_p), None),
                (torch.float32, False, dict(top_k=3), None),  # a Python int: the lists' one all-gather
                (torch.bfloat16, True, dict(top_k=20, top_p=top_p, min_p=min_p), 5)):
            logits = x.to(dtype)
            shard = logits[:, start:start + sizes[rank]]
            want = torch_backend.top_k_top_p_sample(logits, seeds, positions, temperature, fp64=fp64,
                                                    num_valid=num_valid, **filters)
            unfiltered = torch_backend.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64,
                                                     num_valid=num_valid)
            assert (want != unfiltered).any(), (dtype, list(filters))  # the filters matter here
            got = torch_backend.top_k_top_p_sample(shard, seeds, positions, temperature, fp64=fp64,
                                                   num_valid=num_valid, vocab_group=dist.group.WORLD, **filters)
            results.append((want.tolist(), got.tolist()))
        # token_logprobs (two all-gathers of per-row records), and gumbel_sample's return_logprobs after its tokens
        numbers = lambda lp: [torch.nan_to_num(v.float(), nan=12345.0).tolist() for v in lp]
        tokens = torch.tensor([5, -1, vocab - 1, 7, 0, vocab // 2 + 1], device=device)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            logits = x.to(dtype)
            shard = logits[:, start:start + sizes[rank]]
            num_top = {torch.float32: 0, torch.bfloat16: 4, torch.float16: 64}[dtype]
            want = torch_backend.token_logprobs(logits, tokens, temperature, num_top=num_top)
            got = torch_backend.token_logprobs(shard, tokens, temperature, num_top=num_top,
                                               vocab_group=dist.group.WORLD)
            results.append((numbers(want), numbers(got)))
            want = torch_backend.gumbel_sample(logits, seeds, positions, temperature, num_valid=5, return_logprobs=True,
                                               num_top=num_top // 2)
            got = torch_backend.gumbel_sample(shard, seeds, positions, temperature, num_valid=5, return_logprobs=True,
                                              num_top=num_top // 2, vocab_group=dist.group.WORLD)
            results.append(([want[0].tolist()] + numbers(want[1]), [got[0].tolist()] + numbers(got[1])))
        # with filters: token_logprobs (the kept set's searches, then the records), top_k_top_p_sample's return_logprobs
        top_p[5] = 0.999  # keeps most of the row
        for dtype, filters, num_top in ((torch.float32, dict(top_k=top_k, top_p=top_p), 2),
                                        (torch.bfloat16, dict(top_p=top_p, min_p=min_p), 0),
                                        (torch.float16, dict(min_p=min_p), 3),
                                        (torch.bfloat16, dict(top_k=7, top_p=top_p, min_p=min_p), 1)):  # lists
            logits = x.to(dtype)
            shard = logits[:, start:start + sizes[rank]]
            want = torch_backend.token_logprobs(logits, tokens, temperature, num_top=num_top, **filters)
            got = torch_backend.token_logprobs(shard, tokens, temperature, num_top=num_top,
                                               vocab_group=dist.group.WORLD, **filters)
            results.append((numbers(want), numbers(got)))
        for dtype, fp64, filters, num_valid, num_top in (
                (torch.bfloat16, False, dict(top_k=20, top_p=top_p), 5, 3),  # the lists' tokens
                (torch.float32, True, dict(top_k=top_k, min_p=min_p), None, 0)):  # the searches' tokens
            logits = x.to(dtype)
            shard = logits[:, start:start + sizes[rank]]
            want = torch_backend.top_k_top_p_sample(logits, seeds, positions, temperature, fp64=fp64,
                                                    num_valid=num_valid, return_logprobs=True, num_top=num_top,
                                                    **filters)
            assert torch.isfinite(want[1].kept[:num_valid]).sum() >= 3, want  # (rows without a finite logit: NaN)
            got = torch_backend.top_k_top_p_sample(shard, seeds, positions, temperature, fp64=fp64,
                                                   num_valid=num_valid, return_logprobs=True, num_top=num_top,
                                                   vocab_group=dist.group.WORLD, **filters)
            results.append(([want[0].tolist()] + numbers(want[1]), [got[0].tolist()] + numbers(got[1])))
        # rejection_sample: 3-D target (and draft) logits split along the vocabulary (the blocks' owners reduce the
        # normalisers; the shards' heads complete a block the split cuts), and return_logprobs after the tokens
        k = 3
        x3 = torch.from_numpy((rng.standard_normal((batch, k + 1, vocab)) * 2).astype(np.float32))
        x3[1::2] *= 4  # peaked rows: drafts accepted too
        x3[4, 0, vocab - 1] = 3e38  # an overflowing decision row: greedy
        y3 = x3[:, :k] + torch.from_numpy(rng.standard_normal((batch, k, vocab)).astype(np.float32) * 0.3)
        drafts = y3.argmax(2)
        drafts[0, 1] = vocab  # out of range: rejected
        # acceptances and rejections at any vocabulary size (the GPU's too): row 2's three drafts accepted (its target
        # peaked at each), row 1's first accepted and its second rejected, row 3's one draft rejected
        for row, position, shift in ((2, 0, 50), (2, 1, 50), (2, 2, 50), (1, 0, 50), (1, 1, -30), (3, 0, -30)):
            x3[row, position, drafts[row, position]] += shift
        x3, y3, drafts = x3.to(device), y3.to(device), drafts.to(device)
        num_drafts = torch.tensor([3, 2, 3, 1, 3, 0], device=device)
        for dtype, method, with_draft, num_valid, num_top in ((torch.float32, "probabilistic", True, None, None),
                                                              (torch.bfloat16, "probabilistic", False, 4, 2),
                                                              (torch.float16, "strict", False, None, None)):
            logits = x3.to(dtype)
            shard = logits[:, :, start:start + sizes[rank]]
            draft_logits = y3 if with_draft else None
            draft_shard = y3[:, :, start:start + sizes[rank]] if with_draft else None
            options = dict(method=method, num_valid=num_valid)
            if num_top is not None:
                options.update(return_logprobs=True, num_top=num_top)
            want = torch_backend.rejection_sample(logits, drafts, num_drafts, seeds, positions, temperature,
                                                  draft_logits=draft_logits, **options)
            got = torch_backend.rejection_sample(shard, drafts, num_drafts, seeds, positions, temperature,
                                                 draft_logits=draft_shard, vocab_group=dist.group.WORLD, **options)
            assert len(set(want[1].tolist())) >= 3, want  # acceptances and rejections
            flat = lambda out: [out[0].tolist(), out[1].tolist()] + (numbers(out[2]) if num_top is not None else [])
            results.append((flat(want), flat(got)))
        error = ""
        if len(sizes) == 2:
            group = dist.new_group([0, 1])
            try:  # shards of 5 and 3: the second starts at 5
                torch_backend.gumbel_sample(x[:, :5] if rank == 0 else x[:, 5:8], seeds, positions, temperature,
                                            vocab_group=group)
            except ValueError as e:
                error = str(e)
        dist.destroy_process_group()
        return rank, results, error

    if __name__ == "__main__":
        sizes = [int(v) for v in sys.argv[1].split(",")]
        context = mp.get_context("spawn")
        queue = context.Queue()
        workers = [context.Process(target=worker, args=(r, sizes, int(sys.argv[2]), queue)) for r in range(len(sizes))]
        for w in workers:
            w.start()
        outputs = []
        for _ in workers:
            outputs.append(queue.get(timeout=600))
            if outputs[-1][1] is None:
                for w in workers:
                    w.terminate()
                raise SystemExit(f"rank {outputs[-1][0]} failed: {outputs[-1][2]}")
        for w in workers:
            w.join()
        for rank, results, error in outputs:
            for want, got in results:
                assert want == got, (rank, want, got)
            if len(sizes) == 2:
                assert "gumbel_sample: vocab_group needs every shard to start at a multiple of 4 columns" in error, error
        print("ranks", len(sizes), "ok")
''')


def _run(script, *args, env=None, tmp_path=None):
    path = tmp_path / "script.py"  # a file: spawned workers import their function from it
    path.write_text(script)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=300, env=env,
                            cwd=root)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result.stdout


def test_jax_shard_map_tokens_equal_the_unsharded_call(tmp_path):
    out = _run(JAX_SCRIPT, env=dict(JAX_PLATFORMS="cpu", TRITON_INTERPRET="1"), tmp_path=tmp_path)
    assert "shards 1 vocab 301 ok" in out and "shards 2 vocab 808 ok" in out and "errors ok" in out, out
    assert "filtered shards 2 ok" in out and "logprobs shards 2 ok" in out, out
    assert "filtered logprobs shards 2 vocab 808 ok" in out and "rejection shards 2 vocab 808 ok" in out, out


@pytest.mark.parametrize("sizes, port", [("404,300", 29613), ("300,128,257", 29614)])
def test_torch_process_group_tokens_equal_the_unsharded_call(sizes, port, tmp_path):
    """Uneven splits (the last shard any size; the others multiples of 4)."""
    out = _run(TORCH_SCRIPT, sizes, str(port), env=dict(TRITON_INTERPRET="1"), tmp_path=tmp_path)
    assert f"ranks {len(sizes.split(','))} ok" in out, out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("fp64", [False, True])
@pytest.mark.parametrize("plan", ["one launch", "two launches"])
@pytest.mark.parametrize("num_valid", [None, 3])
def test_shard_kernels_in_one_process_equal_the_unsharded_call(dtype, fp64, plan, num_valid, force_target):
    """The shard and combine plans run on each shard's columns in turn (the all-gather as a stack), on the test
    device (compiled kernels on a GPU): every split, including shards of 4 columns and a shard of -inf columns;
    the one-launch plan (arrival counters) and the two launches, on the CPU in the GPU's tiling (blocks of
    256 columns) too."""
    import numpy as np
    import torch

    import torch_backend
    from conftest import TORCH_DEVICE
    from jsample import kernels
    from torch_backend import _execute as execute

    device = torch.device(TORCH_DEVICE)
    force_target(arrival_counters=plan == "one launch", **({} if device.type == "cuda" else dict(large_programs=False)))
    rng = np.random.default_rng(7)
    batch, vocab = 6, 1030
    x = torch.from_numpy((rng.standard_normal((batch, vocab)) * 3).astype(np.float32)).to(getattr(torch, dtype))
    x[1, 400:] = -float("inf")  # the shards from 400 on hold no finite logit of row 1
    x[2, 1029] = 3e38  # overflows at T = 0.05: greedy
    x[4, 3] = x[4, 1028] = x[4].max() + 2  # a greedy tie across shards: the lowest column
    # overflows at T = 0.05 by a large negative logit: the greedy argmax is a tie of three columns, two of them in
    # one block (the candidate's column is looked up in the block: its lowest) and in different 1024-column chunks
    x[5, 100] = -3e38
    x[5, [600, 1025, 1028]] = x[5].max() + 1
    x = x.to(device)
    seeds = torch.from_numpy(rng.integers(-(2**62), 2**62, batch)).to(device)
    positions = torch.arange(batch, device=device)
    temperature = torch.tensor([1.0, 0.8, 0.05, 2.0, 0.0, 0.05], device=device)
    want = torch_backend.gumbel_sample(x, seeds, positions, temperature, fp64=fp64, num_valid=num_valid)
    # (padding as JAX's uint8 row flags; the filtered tests below take torch's count: common.is_padding)
    flags = (torch.arange(batch, device=device) < num_valid).to(torch.uint8) if num_valid is not None else None
    padding = {} if num_valid is None else dict(row_valid=flags)
    for sizes in ([1030], [512, 518], [4, 1024, 2], [400, 400, 228, 2], [256] * 4 + [6]):
        starts = [sum(sizes[:r]) for r in range(len(sizes))]
        summaries = []
        for start, size in zip(starts, sizes):
            shard = x[:, start:start + size]
            shard_plan = execute.plan(kernels.plan_gumbel_shard, (shard, seeds), device, None, fp64=fp64,
                                      draft=False, start_align=kernels.start_alignment(starts),
                                      row_valid=num_valid is not None)
            assert shard_plan.variant == ("vocab shard, one launch" if plan == "one launch" else "vocab shard")
            summaries.append(execute.run(shard_plan, device, dict(
                logits=shard, seeds=seeds, positions=positions, temperature=temperature,
                vocab_start=torch.full((1,), start, dtype=torch.int32, device=device), **padding))[0])
        combine = execute.plan(kernels.plan_shard_combine, (), device, None, batch=batch, shards=len(sizes))
        got = execute.run(combine, device, dict(gathered_summary=torch.stack(summaries)))[0]
        assert torch.equal(got, want), (sizes, got, want)
    assert want[2] == 1029 and ((want[4], want[5]) == (3, 600) if num_valid is None else (want[3:] == -1).all())


def _filtered_grid(batch, vocab, rng):
    """Logits whose filters matter and whose thresholds fall across shards: heavy-tailed rows, a top-k boundary
    tied across shards, a flat row (top-p keeps most of it), a row of -inf past 600 columns, non-finite logits,
    overflowing rows (one by a large negative logit) and greedy ones."""
    import numpy as np

    x = (rng.standard_normal((batch, vocab)) * 2.5).astype(np.float32)
    x[0] = rng.gumbel(size=vocab).astype(np.float32) * 3  # language-model-like: a few large logits
    x[1, 600:] = -np.inf  # the shards past 600 hold no finite logit of row 1
    x[1, 300] = -3e38  # overflows at T = 0.8 (either sign counts): greedy, though that logit is far below any threshold
    x[1, 450:453] = (20.0, 19.9, 19.8)  # where the filters keep nothing of the columns below 400
    x[2, vocab - 1] = 3e38  # overflows at T = 0.05: greedy
    x[3] = np.float32(0.01) * rng.standard_normal(vocab)  # flat: top-p keeps about top_p of the tokens
    x[4, [5, 500, vocab - 2]] = 9.0  # top_k = 2 ends in a tie across three shards: all kept
    x[5, 7], x[5, 900] = np.nan, np.inf  # never chosen
    return x


def _filter_values(batch, rng):
    import numpy as np

    top_k = np.int64([40, 3, 20, 1000, 2, 7, 0, 1][:batch])
    top_p = np.float32([0.9, 0.5, 0.8, 0.3, 0.95, 0.6, 1.0, 0.0][:batch])
    min_p = np.float32([0.3, 0.5, 0.1, 0.9999, 0.2, 0.3, 0.5, 0.0][:batch])
    temperature = np.float32([1.0, 0.8, 0.05, 1.5, 1.2, 0.9, 0.0, 2.0][:batch])
    return top_k, top_p, min_p, temperature


def _shard_plans(x, sizes, inputs, device, **flags):
    """Each shard's vocab-parallel top_k_top_p_sample plan (plan_top_k_top_p_shard with `flags`) and inputs, for
    the split of `x` [B, V] into `sizes` columns: its columns (a view), `inputs` (seeds, positions, filters, ...)
    and its start column."""
    from jsample import kernels
    from torch_backend import _execute as execute

    starts = [sum(sizes[:r]) for r in range(len(sizes))]
    plans, envs = [], []
    for start, size in zip(starts, sizes):
        shard = x[:, start:start + size]
        plans.append(execute.plan(kernels.plan_top_k_top_p_shard, (shard, inputs["seeds"]), device, None,
                                  shards=len(sizes), start_align=kernels.start_alignment(starts), **flags))
        envs.append(dict(inputs, logits=shard, vocab_start=torch_int32_full(start, device)))
    return plans, envs


def torch_int32_full(value, device):
    import torch

    return torch.full((1,), value, dtype=torch.int32, device=device)


@pytest.mark.parametrize("dtype, fp64, num_valid, gpu_tiling", [
    ("float32", False, None, False), ("bfloat16", False, 5, True), ("float16", False, None, False),
    ("float32", True, None, False)])
def test_filtered_shard_rounds_in_one_process_equal_the_unsharded_call(dtype, fp64, num_valid, gpu_tiling,
                                                                        force_target):
    """Vocab-parallel top_k_top_p_sample's rounds on each shard's columns in turn (each all-gather a stack), on
    the test device: every filter combination, splits with shards of 2 and 4 columns, a shard without a
    finite logit in a row: the unsharded call's tokens."""
    import numpy as np
    import torch

    import torch_backend
    from conftest import TORCH_DEVICE
    from torch_backend import _execute as execute

    device = torch.device(TORCH_DEVICE)
    if gpu_tiling and device.type != "cuda":
        force_target(large_programs=False)
    rng = np.random.default_rng(11)
    batch, vocab = 8, 1030
    x = torch.from_numpy(_filtered_grid(batch, vocab, rng)).to(getattr(torch, dtype)).to(device)
    top_k, top_p, min_p, temperature = (torch.from_numpy(v).to(device) for v in _filter_values(batch, rng))
    seeds = torch.from_numpy(rng.integers(-(2**62), 2**62, batch)).to(device)
    positions = torch.arange(batch, device=device)
    padding = {} if num_valid is None else dict(row_valid=torch.full((1,), num_valid, dtype=torch.int64, device=device))
    unfiltered = torch_backend.gumbel_sample(x, seeds, positions, temperature, fp64=fp64, num_valid=num_valid)
    for flags in ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (1, 1, 1)):
        filters = {name: value for name, value, given in zip(("top_k", "top_p", "min_p"), (top_k, top_p, min_p), flags)
                   if given}
        want = torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, fp64=fp64, num_valid=num_valid,
                                                **filters)
        assert (want != unfiltered).any(), flags  # each filter changes some token here (no test of nothing)
        for sizes in ([vocab], [512, 518], [4, 1024, 2], [400, 400, 228, 2]):
            plans, envs = _shard_plans(x, sizes, dict(seeds=seeds, positions=positions, temperature=temperature,
                                                      **filters, **padding), device,
                                       has_top_k=flags[0], has_top_p=flags[1], has_min_p=flags[2], fp64=fp64,
                                       row_valid=num_valid is not None)
            # every shard's rounds in lock step (as run_rounds binds them), each all-gather the stack of the
            # shards' records of that round
            rounds = len(plans[0].rounds)
            assert rounds == 2 + (flags[0] + flags[1]) * {"float32": 8, "bfloat16": 4, "float16": 5}[dtype] + 1
            results = [list(execute.run(plan.rounds[0], device, env)) for plan, env in zip(plans, envs)]
            for i in range(1, rounds):
                gathered = torch.stack([r[0] for r in results])
                results = [_next_round(plan, i, env, r, gathered, device) for plan, env, r in zip(plans, envs, results)]
            for got in results:
                assert torch.equal(got[0], want), (flags, sizes, got[0], want)


@pytest.mark.parametrize("dtype, fp64, num_valid, gpu_tiling, slots", [
    ("float32", False, None, False, 1024), ("bfloat16", False, 5, True, 16), ("float16", False, None, True, 1024),
    ("float32", True, None, False, 16)])
def test_filtered_shard_lists_in_one_process_equal_the_unsharded_call(dtype, fp64, num_valid, gpu_tiling, slots,
                                                                       force_target):
    """The lists' two rounds (list_capacity: top_k a Python int) on each shard's columns in turn: the unsharded
    call's tokens with top-k alone and with top-p and min-p after it, splits of 1 to 4 shards; rows whose k-th
    largest logit is tied across three shards, 200 logits tied at a row's largest (k = 1: the Gumbel-max among
    them, across shards: the shards' tie slots), a greedy row whose largest logit is on two shards, a flat row,
    a row of fewer finite logits than k, non-finite and overflowing logits; with 16 candidate slots most rows'
    candidates overflow them (each such row searched and listed from its logits by one program)."""
    import numpy as np
    import torch

    import torch_backend
    from conftest import TORCH_DEVICE
    from torch_backend import _execute as execute

    device = torch.device(TORCH_DEVICE)
    if gpu_tiling and device.type != "cuda":
        force_target(large_programs=False)
    rng = np.random.default_rng(12)
    batch, vocab = 8, 1030
    grid = _filtered_grid(batch, vocab, rng)
    grid[6, [10, 700]] = 50.0  # greedy (T = 0): the lowest of the two columns
    grid[7, 100:300] = 12.0  # k = 1 keeps the 200 tied at the largest logit
    finite = [3, 400, 600, 1029]  # row 5: 4 finite logits (and its NaN, +inf) where k = 7: top-k keeps all 4
    grid[5, [c for c in range(vocab) if c not in finite + [7, 900]]] = -np.inf
    x = torch.from_numpy(grid).to(getattr(torch, dtype)).to(device)
    _, top_p, min_p, temperature = (torch.from_numpy(v).to(device) for v in _filter_values(batch, rng))
    top_k = torch.tensor([40, 3, 20, 50, 2, 7, 5, 1], device=device)
    seeds = torch.from_numpy(rng.integers(-(2**62), 2**62, batch)).to(device)
    positions = torch.arange(batch, device=device)
    padding = {} if num_valid is None else dict(row_valid=torch.full((1,), num_valid, dtype=torch.int64, device=device))
    unfiltered = torch_backend.gumbel_sample(x, seeds, positions, temperature, fp64=fp64, num_valid=num_valid)
    for flags in ((1, 0, 0), (1, 1, 0), (1, 1, 1), (1, 0, 1)):
        filters = {name: value for name, value, given in zip(("top_k", "top_p", "min_p"), (top_k, top_p, min_p), flags)
                   if given}
        want = torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, fp64=fp64, num_valid=num_valid,
                                                **filters)
        assert (want != unfiltered).any(), flags  # each filter changes some token here (no test of nothing)
        for sizes in ([vocab], [512, 518], [4, 1024, 2], [400, 400, 228, 2]):
            plans, envs = _shard_plans(x, sizes, dict(seeds=seeds, positions=positions, temperature=temperature,
                                                      **filters, **padding), device,
                                       has_top_k=True, has_top_p=flags[1], has_min_p=flags[2], fp64=fp64,
                                       row_valid=num_valid is not None, list_capacity=64, candidate_slots=slots)
            assert [len(plan.rounds) for plan in plans] == [2] * len(sizes)  # one all-gather
            records = torch.stack([execute.run(plan.rounds[0], device, env)[0] for plan, env in zip(plans, envs)])
            for plan, env in zip(plans, envs):
                got = execute.run(plan.rounds[1], device, dict(env, gathered_record=records))[0]
                assert torch.equal(got, want), (flags, sizes, got, want)
    if num_valid is None:
        assert want[6] == 10
        assert 100 <= want[7] < 300 and want[7] != 100  # (not the lowest tied column: the noise decides)


@pytest.mark.parametrize("sizes, slots", [([1030], 1024), ([512, 518], 1024), ([4, 1024, 2], 16),
                                          ([16, 400, 614], 1024), ([16, 400, 614], 16)])
def test_filtered_shard_lists_weigh_tied_keys(sizes, slots):
    """A shard's tie slot counts as many keys as it stands for: here the k-th largest (k = 7) of each row is the
    value of 8 tied logits (on one shard, or split over two), below one larger logit, above a flat rest that
    top-k drops; counting the tie slot once would keep some of the rest, which T = 1.5 samples often: the
    unsharded call's tokens in every row (32 rows, each its own seed)."""
    import numpy as np
    import torch

    import torch_backend
    from conftest import TORCH_DEVICE
    from torch_backend import _execute as execute

    device = torch.device(TORCH_DEVICE)
    rng = np.random.default_rng(3)
    batch, vocab, k = 32, 1030, 7
    x = rng.uniform(0.0, 0.04, (batch, vocab)).astype(np.float32)
    x[:, 10:18] = 0.05
    x[:, 600] = 0.06
    x = torch.from_numpy(x).to(device)
    seeds = torch.from_numpy(rng.integers(0, 2**62, batch)).to(device)
    positions = torch.zeros(batch, dtype=torch.int64, device=device)
    temperature = torch.full((batch,), 1.5, device=device)
    top_k = torch.full((batch,), k, device=device)
    want = torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, top_k=k)
    assert set(want.tolist()) == set(range(10, 18)) | {600}  # (the kept set: every one of its 9 tokens here)
    plans, envs = _shard_plans(x, sizes, dict(seeds=seeds, positions=positions, temperature=temperature,
                                              top_k=top_k), device, has_top_k=True, has_top_p=False,
                               has_min_p=False, fp64=False, list_capacity=16, candidate_slots=slots)
    records = torch.stack([execute.run(plan.rounds[0], device, env)[0] for plan, env in zip(plans, envs)])
    for plan, env in zip(plans, envs):
        got = execute.run(plan.rounds[1], device, dict(env, gathered_record=records))[0]
        assert torch.equal(got, want), (sizes, got, want)


def test_filtered_shard_top_k_search_starts_at_the_shards_bound(force_target):
    """Top-k's search starts at the largest of the shards' k-th largest tile maxima (shard_top_k_bound_kernel): here
    exactly the threshold (a row's k largest logits, nearly equal, each lead a tile of their shard), so a bound one
    key too high would drop the k-th token, which some rows sample; the GPU's tiling (tiles of 512 float32
    columns)."""
    import numpy as np
    import torch

    import torch_backend
    from conftest import TORCH_DEVICE
    from jsample import kernels
    from torch_backend import _execute as execute

    device = torch.device(TORCH_DEVICE)
    if device.type != "cuda":
        force_target(large_programs=False)
    rng = np.random.default_rng(5)
    batch, vocab, k = 8, 8192, 3
    x = (rng.standard_normal((batch, vocab)) * 0.5).astype(np.float32)
    for b in range(batch):  # the k largest, 10 - 1e-6 * i, one a tile, all on shard b % 2 (its bound: the k-th)
        tiles = (b % 2) * 8 + rng.choice(8, k, replace=False)
        x[b, tiles * 512 + rng.integers(0, 512, k)] = 10 - 1e-6 * np.arange(k)
    x = torch.from_numpy(x).to(device)
    seeds = torch.arange(batch, device=device) * 101
    positions = torch.zeros(batch, dtype=torch.int64, device=device)
    temperature = torch.ones(batch, device=device)
    top_k = torch.full((batch,), k, device=device)
    want = torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, top_k=top_k)
    third = np.float32(10 - 2e-6)
    assert (x[torch.arange(batch), want.long()].cpu().numpy() == third).any()  # some row samples the k-th
    width = vocab // 2
    plans, envs = [], []
    for start in (0, width):
        shard = x[:, start:start + width]
        plans.append(execute.plan(kernels.plan_top_k_top_p_shard, (shard, seeds), device, None, has_top_k=True,
                                  has_top_p=False, has_min_p=False, fp64=False, shards=2, start_align=16))
        envs.append(dict(logits=shard, seeds=seeds, positions=positions, temperature=temperature, top_k=top_k,
                         vocab_start=torch.full((1,), start, dtype=torch.int32, device=device)))
    results = [list(execute.run(plan.rounds[0], device, env)) for plan, env in zip(plans, envs)]
    bound = torch.stack([r[0] for r in results]).view(torch.int64)[..., 1].amax(0) - 2**31  # (the record's word 1)
    assert (bound == int(np.float32(third).view(np.int32))).all(), bound  # the key of the k-th largest logit
    for i in range(1, len(plans[0].rounds)):
        gathered = torch.stack([r[0] for r in results])
        results = [_next_round(plan, i, env, r, gathered, device) for plan, env, r in zip(plans, envs, results)]
    for got in results:
        assert torch.equal(got[0], want), (got[0], want)


def _same_numbers(got, want) -> bool:
    """Equal, bit for bit (NaN where the other has NaN)."""
    import torch

    if got.dtype.is_floating_point:
        return torch.equal(got.isnan(), want.isnan()) and torch.equal(got[~got.isnan()], want[~want.isnan()])
    return torch.equal(got, want)


@pytest.mark.parametrize("dtype, gpu_tiling, num_top", [("float32", True, 0), ("bfloat16", True, 5),
                                                        ("float16", False, 3), ("bfloat16", False, 64)])
def test_logprobs_shard_rounds_in_one_process_equal_the_unsharded_call(dtype, gpu_tiling, num_top, force_target):
    """Vocab-parallel token_logprobs' three rounds on each shard's columns in turn (each all-gather a stack): the
    unsharded call's Logprobs bit for bit, top lists included, for splits of 1 to 4 shards that cut the single
    read's blocks (in the GPU's tiling, blocks of 512 columns: a block cut by two shards, one over three shards,
    a split on a block's edge), tokens at +inf and NaN logits, -1, an out-of-range device token, a row without a
    finite logit, a row of two finite logits, a greedy and an overflowing row, a token tied with many larger
    ones, 30 tied largest logits across a shard's edge (the top list: the lowest columns first)."""
    import numpy as np
    import torch

    import torch_backend
    from conftest import TORCH_DEVICE
    from jsample import kernels
    from jsample.ops import Logprobs
    from torch_backend import _execute as execute

    device = torch.device(TORCH_DEVICE)
    if gpu_tiling and device.type != "cuda":
        force_target(large_programs=False)
    rng = np.random.default_rng(5)
    batch, vocab = 8, 2100
    x = (rng.standard_normal((batch, vocab)) * 3).astype(np.float32)
    x[1, :] = -np.inf
    x[1, [3, 1500]] = 2.0  # two finite logits on different shards
    x[2, 700], x[2, 900] = np.nan, np.inf  # the token at +inf: NaN logprobs, rank 1 (+inf is not above it)
    x[3, 1000:1030] = 30.0  # the token among 30 tied largest logits, across the cut block of [1000, 1100]
    x[4, :] = -np.inf  # no finite logit, token -1
    x[6, 2099] = 3e38  # overflows at T = 0.05: read at T = 1
    x[7] *= 0.3
    x[7, 1020:1041], x[7, 1030] = 6.0, 5.0  # 20 larger logits around the token, in a cut block
    logits = torch.from_numpy(x).to(getattr(torch, dtype)).to(device)
    tokens = torch.tensor([5, 1500, 900, 1010, -1, 5000, 2099, 1030], device=device)  # 5000: out of range
    temperature = torch.tensor([0.7, 1.0, 1.3, 0.0, 1.0, 2.0, 0.05, 0.9], device=device)
    # the unsharded plan run as the op runs it (the op refuses the out-of-range token where it can read it)
    count = torch.full((1,), num_top, dtype=torch.int32, device=device)
    want = Logprobs(*execute.run(execute.plan(kernels.plan_token_logprobs, (logits,), device, None, has_top_k=False,
                                              has_top_p=False, has_min_p=False, fp64=False, num_top=num_top), device,
                                 dict(logits=logits, tokens=tokens, temperature=temperature, num_top=count)))
    assert _same_numbers(want.raw[:5], torch_backend.token_logprobs(logits[:5], tokens[:5], temperature[:5]).raw)
    assert torch.isnan(want.raw[[2, 4, 5]]).all() and want.rank[[4, 5]].tolist() == [0, 0] and want.rank[7] == 21
    splits = ([2100], [1000, 1100], [4, 1024, 1072], [512, 8, 1580], [700, 700, 700], [1024, 1076],
              [500, 600, 400, 600])
    if num_top:  # (the interpreter runs the top lists slowly: the splits that matter to them)
        splits = ([1000, 1100], [4, 1024, 1072], [1024, 1076])
    for sizes in splits:
        starts = tuple(sum(sizes[:r]) for r in range(len(sizes)))
        plans, envs = [], []
        for start, size in zip(starts, sizes):
            shard = logits[:, start:start + size]
            plans.append(execute.plan(kernels.plan_token_logprobs_shard, (shard,), device, None, vocab=vocab,
                                      starts=starts, start_align=kernels.start_alignment(starts), num_top=num_top))
            envs.append(dict(logits=shard, tokens=tokens, temperature=temperature, num_top=count,
                             vocab_start=torch.full((1,), start, dtype=torch.int32, device=device)))
        assert [len(plan.rounds) for plan in plans] == [3] * len(sizes)  # two all-gathers
        results = [list(execute.run(plan.rounds[0], device, env)) for plan, env in zip(plans, envs)]
        for i in (1, 2):
            gathered = torch.stack([r[0] for r in results])
            results = [_next_round(plan, i, env, r, gathered, device) for plan, env, r in zip(plans, envs, results)]
        for got in results:
            for name, a, b in zip(want._fields, got, want):
                assert _same_numbers(a, b), (sizes, name, a, b)
    if num_top:
        assert want.top_ids[3, :min(num_top, 30)].tolist() == list(range(1000, 1000 + min(num_top, 30)))
        assert want.top_ids[1, :2].tolist() == [3, 1500] and (want.top_ids[4] == -1).all()


@pytest.mark.parametrize("dtype, gpu_tiling, filters, num_top", [
    ("float32", True, ("top_k", "top_p"), 0), ("bfloat16", True, ("top_p", "min_p"), 3),
    ("float16", False, ("top_k",), 0), ("bfloat16", False, ("top_k", "top_p", "min_p"), 2),
    ("float32", False, ("min_p",), 0)])
def test_filtered_logprobs_shard_rounds_in_one_process_equal_the_unsharded_call(dtype, gpu_tiling, filters, num_top,
                                                                                force_target):
    """Vocab-parallel token_logprobs with top_k / top_p / min_p: the filters' statistics and search rounds, then the
    logprobs' three rounds (kept terms summed per shard against the row's largest logit), each shard in turn: the
    unsharded call's Logprobs bit for bit (kept and log_kept_mass included) over splits that cut blocks, on rows the
    unsharded op decides from its list of 64 and rows its multi-pass kernel does (top-p keeping hundreds of
    logits, k = 100), tokens outside the kept set (kept = -inf), greedy and overflowing rows, p <= 0, NaN min_p."""
    import numpy as np
    import torch

    from conftest import TORCH_DEVICE
    from jsample import kernels
    from jsample.ops import Logprobs
    from torch_backend import _execute as execute

    device = torch.device(TORCH_DEVICE)
    if gpu_tiling and device.type != "cuda":
        force_target(large_programs=False)
    rng = np.random.default_rng(11)
    batch, vocab = 8, 2100
    x = (rng.standard_normal((batch, vocab)) * 2).astype(np.float32)
    x[1, :] = -np.inf
    x[1, [3, 1500, 1501]] = [2.0, 2.0, 1.0]  # three finite logits on two shards
    x[3] *= 0.05  # nearly flat: top-p keeps hundreds of logits (the multi-pass kernel's rows)
    x[4, 1000:1030] = 30.0  # 30 tied largest logits across a cut block
    x[6, 2099] = 3e38  # overflows at T = 0.05: greedy, every finite logit kept
    logits = torch.from_numpy(x).to(getattr(torch, dtype)).to(device)
    order = np.argsort(-x, axis=1, kind="stable")
    tokens = torch.tensor([order[0, 2], 1501, order[2, 40], order[3, 300], 1010, order[5, 0], 2099, order[7, 9]],
                          device=device)
    temperature = torch.tensor([0.7, 1.0, 1.3, 1.0, 0.9, 0.0, 0.05, 0.8], device=device)
    rows = dict(top_k=torch.tensor([5, 0, 3, 100, 40, 50, 2, 70], device=device),
                top_p=torch.tensor([0.9, 1.0, 0.5, 0.97, 0.0, 0.99, 0.3, 0.95], device=device),
                min_p=torch.tensor([0.05, 0.0, 0.2, 0.001, 0.0, float("nan"), 0.5, 0.0], device=device))
    given = {name: rows[name] for name in filters}
    flags = dict(has_top_k="top_k" in given, has_top_p="top_p" in given, has_min_p="min_p" in given, fp64=False)
    count = torch.full((1,), num_top, dtype=torch.int32, device=device)
    inputs = dict(tokens=tokens, temperature=temperature, num_top=count, **given)
    unsharded = execute.plan(kernels.plan_token_logprobs, (logits,), device, None, num_top=num_top, **flags)
    want = Logprobs(*execute.run(unsharded, device, dict(logits=logits, **inputs)))
    assert torch.isfinite(want.kept).sum() >= 3 and want.log_kept_mass[5] == 0  # a greedy row
    if "top_k" in given or "top_p" in given:
        assert (want.kept == float("-inf")).any() and (want.log_kept_mass < 0).any()
    for sizes in ([1000, 1100], [4, 1024, 1072], [512, 8, 1580], [500, 600, 400, 600]):
        starts = tuple(sum(sizes[:r]) for r in range(len(sizes)))
        plans, envs = [], []
        for start, size in zip(starts, sizes):
            shard = logits[:, start:start + size]
            plans.append(execute.plan(kernels.plan_token_logprobs_shard, (shard,), device, None, vocab=vocab,
                                      starts=starts, start_align=kernels.start_alignment(starts), num_top=num_top,
                                      **flags))
            envs.append(dict(logits=shard, vocab_start=torch.full((1,), start, dtype=torch.int32, device=device),
                             **inputs))
        results = [list(execute.run(plan.rounds[0], device, env)) for plan, env in zip(plans, envs)]
        for i in range(1, len(plans[0].rounds)):
            gathered = torch.stack([r[0] for r in results])
            results = [_next_round(plan, i, env, r, gathered, device) for plan, env, r in zip(plans, envs, results)]
        for got in results:
            for name, a, b in zip(want._fields, got, want):
                assert _same_numbers(a, b), (sizes, name, a, b)


def _next_round(plan, i, env, previous, gathered, device):
    """Round i of a shard's ShardedPlan, after round i - 1 gave `previous` and its all-gather `gathered`
    (run_rounds' bindings)."""
    from torch_backend import _execute as execute

    last = plan.rounds[i - 1]
    env["gathered_" + last.outputs[0]] = gathered
    env.update((name + "_in", value) for name, value in zip(last.outputs[1:], previous[1:]))
    return list(execute.run(plan.rounds[i], device, env))


def _rejection_grid(batch, k, vocab, dtype, rng, device):
    """rejection_sample's inputs for the in-process shard tests (batch 8): target logits N(0, 4) (peaked rows too)
    and draft logits near them (acceptances and rejections), drafts the draft's argmax, overflowing target rows
    (greedy: a decision row, a bonus row), a greedy request, an out-of-range draft, n_b from 0 to K."""
    import numpy as np
    import torch

    x = rng.normal(0, 2, (batch, k + 1, vocab)).astype(np.float32)
    x[3::2] *= 5  # peaked rows: one-hot drafts accepted too
    # decision rows whose scaled logits overflow (greedy: accept iff the draft is the argmax, the lowest column of
    # the largest finite logit): a tie within a block, the draft its first column (accepted); a tie across
    # blocks, the draft the later column (rejected: the emitted token is the earlier)
    x[4, 0, 70] = x[4, 0, 77] = 3e38
    x[4, 0, vocab - 7] = np.nan  # (the argmax: the largest finite logit, NaN never)
    x[7, min(1, k), 100] = x[7, min(1, k), vocab - 900] = 3.1e38
    x[1, 0, 300] = x[1, 0, 310] = 3e38  # a tie within a block, the draft its later column (rejected)
    x[6, 0, vocab - 10] = 3.3e38  # n_b = 0: a bonus row that overflows, its argmax on the last shard
    y = x[:, :k] + rng.normal(0, 0.3, (batch, k, vocab)).astype(np.float32)
    drafts = np.argmax(y, axis=2).astype(np.int64)
    if k:
        drafts[4, 0], drafts[7, min(1, k - 1)], drafts[1, 0] = 70, vocab - 900, 310  # (y's argmax at 4: the NaN)
    drafts[2] = np.argmax(x[2, :k], axis=1)  # the greedy request accepts them all
    if k:
        drafts[3, 0] = vocab + 3  # out of range: rejected
        drafts[5 % batch, k - 1] = vocab - 1  # on the last shard
    target = torch.from_numpy(x).to(getattr(torch, dtype)).to(device)
    values = dict(draft_tokens=torch.from_numpy(drafts).to(device),
                  num_draft_tokens=torch.tensor([k, 1, k, k, 1, k, 0, k][:batch]).clamp(max=k).to(device),
                  seeds=torch.from_numpy(rng.integers(-(2**62), 2**62, batch)).to(device),
                  positions=torch.from_numpy(rng.integers(0, 2**40, batch)).to(device),
                  temperature=torch.from_numpy(np.float32([1.0, 0.7, 0.0, 1.3, 0.5, 1.0, 0.3, 0.9][:batch])).to(device))
    return target, torch.from_numpy(y).to(device), values


def _rejection_shard_rounds(target, draft, values, sizes, device, extra=(), **flags):
    """Every shard's rounds of vocab-parallel rejection_sample in lock step (each all-gather the stack of the
    shards' records) for the split of the vocabulary into `sizes`: the last round's outputs of shard 0 (every
    shard's are checked equal), and the decision round's `extra` buffers of shard 0."""
    import dataclasses

    import torch

    from jsample import kernels
    from torch_backend import _execute as execute

    vocab = target.shape[2]
    starts = tuple(sum(sizes[:r]) for r in range(len(sizes)))
    plans, envs = [], []
    for start, size in zip(starts, sizes):
        shard = target[:, :, start:start + size].contiguous()
        draft_shard = None if draft is None else draft[:, :, start:start + size].contiguous()
        sharded = execute.plan(kernels.plan_rejection_sample_shard, (shard, draft_shard, values["seeds"]), device,
                               None, vocab=vocab, starts=starts, start_align=kernels.start_alignment(starts), **flags)
        rounds = list(sharded.rounds)
        decide = rounds[-2]
        rounds[-2] = dataclasses.replace(decide, outputs=decide.outputs + tuple(extra))
        plans.append(rounds)
        env = dict(values, target_logits=shard, vocab_start=torch_int32_full(start, device),
                   shard_starts=torch.tensor(starts + (vocab,), dtype=torch.int32, device=device))
        if draft_shard is not None:
            env["draft_logits"] = draft_shard
        envs.append(env)
    results = [list(execute.run(rounds[0], device, env)) for rounds, env in zip(plans, envs)]
    decided = None
    for i in range(1, len(plans[0])):
        gathered = torch.stack([r[0] for r in results])
        results = [_next_round(dataclasses.replace(sharded, rounds=tuple(rounds)), i, env, r, gathered, device)
                   for rounds, env, r in zip(plans, envs, results)]
        if i == len(plans[0]) - 2:
            decided = results[0][1:]
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(other, results[0]))
    return plans[0], results[0], decided


@pytest.mark.parametrize("dtype, fp64, method, draft_logits, k, num_valid", [
    ("float32", False, "probabilistic", True, 3, None), ("bfloat16", False, "probabilistic", False, 3, 6),
    ("float16", True, "probabilistic", True, 1, None), ("float32", False, "strict", False, 2, 5)])
def test_rejection_shard_rounds_in_one_process_equal_the_unsharded_call(dtype, fp64, method, draft_logits, k,
                                                                        num_valid):
    """Vocab-parallel rejection_sample's rounds on each shard in turn, splits that cut the vocabulary blocks
    (2048 columns; 1024 in FP64) anywhere, shards holding no block start, a shard of 4 columns: the unsharded
    call's tokens and num_sampled, and the decision's softmax partials and log-normalisers, bit for bit."""
    import numpy as np
    import torch

    import torch_backend
    from conftest import TORCH_DEVICE
    from jsample import kernels
    from torch_backend import _execute as execute

    device = torch.device(TORCH_DEVICE)
    rng = np.random.default_rng(k + 10 * fp64)
    batch, vocab = 8, 5000
    splits = [[vocab], [2500, 2500], [4, 4096, 900], [1024, 1000, 2976]]
    if device.type == "cuda":  # a GPU's vocabulary too: two equal shards, and an uneven three
        vocab = 151936
        splits = [[75968, 75968], [50000, 60004, 41932], [4, 151932]]
    target, draft, values = _rejection_grid(batch, k, vocab, dtype, rng, device)
    draft = draft if draft_logits else None
    strict = method == "strict"
    padding = {} if num_valid is None else dict(row_valid=torch.full((1,), num_valid, dtype=torch.int64,
                                                                      device=device))
    want = torch_backend.rejection_sample(target, *values.values(), draft_logits=draft, method=method, fp64=fp64,
                                          num_valid=num_valid)
    sampled, drafted = want[1][:num_valid], values["num_draft_tokens"][:num_valid]
    assert (sampled <= drafted).any() and (sampled[drafted > 0] == drafted[drafted > 0] + 1).any(), want  # both
    # the one-GPU decision's partials and normalisers (four launches: they are buffers of their own)
    one_gpu = execute.plan(kernels.plan_rejection_sample, (target, draft, values["seeds"]), device, strict=strict,
                           fp64=fp64, variant="four launches", row_valid=num_valid is not None)
    extra = ("emit_row", "emit_mode", "log_normalizer", "stats")
    import dataclasses

    inputs = dict(values, target_logits=target, **padding)
    if draft is not None:
        inputs["draft_logits"] = draft
    base = execute.run(dataclasses.replace(one_gpu, outputs=one_gpu.outputs + extra), device, inputs)
    assert torch.equal(base[0], want[0]) and torch.equal(base[1], want[1])
    words = 2 if fp64 else 1
    blocks = base[5].shape[1] // (4 * words)
    for sizes in splits:
        plans, got, decided = _rejection_shard_rounds(target, draft, dict(values, **padding), sizes, device,
                                                      extra=extra[2:], strict=strict, fp64=fp64,
                                                      row_valid=num_valid is not None)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (sizes, got, want)
        if not strict:
            assert len(plans) == 3 + (len(sizes) > 1), [plan.variant for plan in plans]  # the heads round
            emit_row, emit_mode, log_normalizer, stats = decided[0], decided[1], decided[2], decided[3]
            assert torch.equal(emit_row[:num_valid], base[2][:num_valid])
            resampled = (emit_mode == 1).nonzero().flatten().tolist()  # EMIT_RESIDUAL
            assert resampled and torch.equal(log_normalizer[resampled].view(torch.int32),
                                             base[4][resampled].view(torch.int32)), sizes
            # every probabilistic decision row's block partials: the owners' are the unsharded call's
            for b in range(num_valid or batch):
                if values["temperature"][b] >= 1e-5:
                    for j in range(int(values["num_draft_tokens"][b])):
                        row = (b * k + j)
                        written = stats.shape[1] if draft is not None else stats.shape[1] // 2  # (one-hot: no draft's)
                        assert torch.equal(stats[row, :written].view(torch.int32),
                                           base[5][row, :written].view(torch.int32)), (sizes, b, j)
    assert blocks == -(-vocab // (1024 if fp64 else 2048))


_COMPILE_SHARD_KERNELS = """
import compiled_kernels as ck
from jsample import kernels
from jsample.kernels.plan import ArgSpec
from torch_backend import _execute as torch_execute

target = torch_execute.compiled_target(132, 9)
inputs = {"seeds": "*i64", "positions": "*i64", "temperature": "*fp32", "vocab_start": "*i32",
          "gathered_summary": "*i32", "row_valid": "*i32"}
plans = [(kernels.plan_shard_combine(target, batch=256, shards=2), "*fp32")]
for batch in (1, 256):  # one launch, two launches
    for dtype, fp64 in (("bfloat16", False), ("float32", True)):
        plans.append((kernels.plan_gumbel_shard(ArgSpec.contiguous((batch, 131072), dtype),
                                                ArgSpec.contiguous((batch,), "int64"), target, fp64=fp64, draft=False,
                                                start_align=16), ck.POINTER_TYPES[dtype]))
    plans.append((kernels.plan_gumbel_shard(ArgSpec.contiguous((batch, 131072), "bfloat16"),  # padding rows
                                            ArgSpec.contiguous((batch,), "int64"), target, fp64=False, draft=False,
                                            start_align=16, row_valid=True), "*bf16"))
inputs.update({"top_k": "*i64", "top_p": "*fp32", "min_p": "*fp32", "gathered_stats": "*i32", "state_in": "*i32",
               "gathered_sums": "*i32", "tile_max_in": "*i32", "gathered_record": "*i32"})
for batch in (1, 256):  # vocab-parallel top_k_top_p_sample: the two tilings, every kind of round once
    for dtype, fp64, list_capacity in (("bfloat16", False, 0), ("float32", True, 0), ("bfloat16", False, 64),
                                       ("float32", True, 256)):
        sharded = kernels.plan_top_k_top_p_shard(ArgSpec.contiguous((batch, 131072), dtype),
                                                 ArgSpec.contiguous((batch,), "int64"), target, has_top_k=True,
                                                 has_top_p=True, has_min_p=True, fp64=fp64, shards=2, start_align=16,
                                                 list_capacity=list_capacity, store_threshold=list_capacity == 256)
        seen = set()
        for plan in sharded.rounds:
            kinds = tuple((step.kernel, step.constexprs) for step in plan.launches)
            if kinds not in seen:
                seen.add(kinds)
                plans.append((plan, ck.POINTER_TYPES[dtype]))
inputs.update({"tokens": "*i64", "num_top": "*i32", "shard_top_ids_in": "*i32", "shard_top_values_in": "*fp32",
               "gathered_stats_record": "*i32", "gathered_counts_record": "*i32"})
for batch, dtype, num_top, valid in ((1, "bfloat16", 0, False), (256, "float32", 5, True)):  # token_logprobs
    sharded = kernels.plan_token_logprobs_shard(ArgSpec.contiguous((batch, 75968), dtype), target, vocab=151936,
                                                starts=(0, 75968), start_align=16, num_top=num_top, row_valid=valid)
    plans.extend((plan, ck.POINTER_TYPES[dtype]) for plan in sharded.rounds)
inputs.update({"kept_threshold_in": "*i32", "kept_threshold": "*i32"})
for batch, dtype, given in ((1, "bfloat16", False), (256, "float32", True)):  # with filters: the kept sums
    sharded = kernels.plan_token_logprobs_shard(ArgSpec.contiguous((batch, 75968), dtype), target, vocab=151936,
                                                starts=(0, 75968), start_align=16, num_top=2, row_valid=True,
                                                has_top_k=True, has_top_p=True, has_min_p=True, threshold_given=given)
    plans.extend((plan, ck.POINTER_TYPES[dtype]) for plan in sharded.rounds[-3:])
for plan, logits in plans:
    for name in ck.compile_plan(plan, {"logits": logits, **inputs}):
        print("compiled", name)
inputs.update({"draft_tokens": "*i64", "num_draft_tokens": "*i64", "shard_starts": "*i32", "draft_logits": "*fp32",
               "gathered_heads": "*fp32", "gathered_emit_record": "*i32", "emit_row_in": "*i32",
               "emit_mode_in": "*i32"})
for batch, dtype, fp64, draft, strict, starts in ((1, "bfloat16", False, True, False, (0, 75968)),  # rejection_sample
                                                  (256, "float32", True, False, False, (0, 75968)),
                                                  (64, "bfloat16", False, False, True, (0, 75968)),
                                                  (64, "bfloat16", False, True, False, (0, 75964)),
                                                  (64, "bfloat16", False, True, False, (0, 75776))):  # no cut
    sharded = kernels.plan_rejection_sample_shard(
        ArgSpec.contiguous((batch, 5, 75968), dtype), ArgSpec.contiguous((batch, 4, 75968), "float32") if draft else None,
        ArgSpec.contiguous((batch,), "int64"), target, strict=strict, fp64=fp64, vocab=151936, starts=starts,
        start_align=16 if starts[1] % 16 == 0 else 4, row_valid=batch == 64)
    for plan in sharded.rounds:
        for name in ck.compile_plan(plan, {"target_logits": ck.POINTER_TYPES[dtype], **inputs}):
            print("compiled", name)
    if not strict:  # the normalisers' sums follow the layouts: the shards' stats and decision lay out as one GPU's
        one_gpu = kernels.plan_rejection_sample(
            ArgSpec.contiguous((batch, 5, 151936), dtype),
            ArgSpec.contiguous((batch, 4, 151936), "float32") if draft else None, ArgSpec.contiguous((batch,), "int64"),
            target, strict=False, fp64=fp64, variant="four launches")
        types = {"target_logits": ck.POINTER_TYPES[dtype], **inputs, "num_rows": "*i32"}
        config = kernels.rejection_launch_config(151936, 4, (5 * 151936, 151936, 4 * 151936, 151936), fp64)
        element = "f64" if fp64 else "f32"
        shapes = (f"{config.block_v}x{element}", f"{config.block_k}x{config.reduce_block}x{element}")
        for one, shard in (("rejection_stats_kernel", "shard_rejection_stats_kernel"),
                           ("rejection_decide_kernel", "shard_rejection_decide_kernel")):
            want = ck.launch_layouts(one_gpu, one, types, shapes)
            got = ck.launch_layouts(sharded.rounds[-3 if "stats" in one else -2], shard, types, shapes)
            print("layouts", shard, "equal" if got == want and any(want.values()) else f"differ {got} {want}")
"""


def test_the_shard_kernels_compile_for_sm90():
    """The shard and combine kernels as compiled for an H100/H200, in a process of compiled kernels (the
    interpreter runs what Triton's compiler may refuse: a plain global did, found on two GPUs)."""
    import pathlib

    pytest.importorskip("triton.backends.nvidia")
    tests = pathlib.Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "0", "JSAMPLE_INTERPRET": "0",
           "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", _COMPILE_SHARD_KERNELS], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    compiled = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("compiled ")]
    layouts = [line for line in result.stdout.splitlines() if line.startswith("layouts ")]
    assert compiled.count("shard_one_launch_kernel") == 3 and compiled.count("shard_partial_kernel") == 3, compiled
    assert compiled.count("shard_summary_kernel") == 3 + 4 and compiled.count("shard_combine_kernel") == 1 + 4, compiled
    # a stats round, the top-k search's first and later rounds, top-p's, the sampling round, in 4 plans; the
    # lists' 4 plans: statistics, candidates and record, then the merge
    assert compiled.count("shard_filter_stats_kernel") == 4 + 4, compiled
    assert compiled.count("shard_filter_search_kernel") == 4 * 4, compiled
    assert compiled.count("shard_filtered_partial_kernel") == 4, compiled
    assert [compiled.count(name) for name in ("shard_top_k_collect_kernel", "shard_top_k_record_kernel",
                                              "shard_list_merge_kernel")] == [4, 4, 4], compiled
    # token_logprobs: 2 plans without filters and 2 with them (the searches' threshold, or the lists' merge's)
    assert [compiled.count(name) for name in ("shard_threshold_kernel", "shard_logprobs_count_kernel",
                                              "shard_logprobs_merge_kernel")] == [1, 4, 4], compiled
    # rejection_sample: every round of 5 plans (the heads round where the shards' edges cut blocks; the last owned
    # block copied, target and draft, or every block where the shard's alignment is not the unsharded call's, or
    # none)
    assert [compiled.count(name) for name in ("shard_heads_kernel", "shard_owned_copy_kernel",
                                              "shard_rejection_stats_kernel", "shard_rejection_decide_kernel",
                                              "shard_rejection_emit_kernel", "shard_rejection_finish_kernel")] == \
        [3, 2 + 1 + 2, 5, 5, 5, 5], compiled
    assert len(layouts) == 8 and all(line.endswith(" equal") for line in layouts), layouts


if __name__ == "__main__":  # .ci/packaging.sh: the JAX check under the newest JAX, from an installed wheel
    exec(JAX_SCRIPT)
