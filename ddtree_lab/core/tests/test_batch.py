"""The one decoding path (batch as a dimension): as lossless as batch 1, per sequence.

- ``generate`` (the batch of one) == the plain batch-1 loop ``helpers.generate_reference``
  round for round, unary and conditional trees, T = 0 and T > 0;
- ``verify_batch`` of B sequences == ``verify`` (its batch of one) of every sequence (logits, then the committed caches
  over two rounds), trees of different sizes on prefixes of different lengths (one empty);
- T = 0: every sequence of ``generate_batch`` (dflash, ddtree; GDN fork / wy, MLA; the batched
  AR baseline) equals its own batch-1 AR output: exactly in float64 under the harness; in
  float32 a difference must be a near-tie, reported with its margin;
- every accepted row of every round scores as a stock forward with no cache of its own sequence
  (float64): a wrong commit shows even where the toy's greedy output repeats one token;
- T > 0: the first two tokens of every sequence fit the target's exact distribution;
- finished sequences leave the batch; bad input raises ValueError naming the parameter.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from ddtree_lab.core import adapter, decode, harness, lossless, rules

from ddtree_lab.core.families.gdn import naive as gdn_naive
from ddtree_lab.core.families.gdn import wy
from ddtree_lab.core import spec
from ddtree_lab.core import tree as tree_mod
from ddtree_lab.core.verify import append_rows, batch_of_rows, commit, held_batch, hold_rows
from ddtree_lab.core.drafter import DFlashDrafter
from ddtree_lab.core.models import build_target
from ddtree_lab.core import verify as verify_mod
from ddtree_lab.core.verify import batch_buffers, full_forward_logits, prefill, verify, verify_batch
from helpers import (LOGIT_TOL, BatchHintedDrafter, assert_close, assert_same_cache, exact_first_two,
                     generate_reference, generator, no_residual, precision, random_tree, root_path, sharp_drafter,
                     toy_dflash2, toy_pair)

DTYPES = {"f32": torch.float32, "f64": torch.float64}
CASES = [("gdn-toy", "wy"), ("gdn-toy", "fork"), ("mla-toy", "wy")]
NEAR_TIE = 1e-4  # float32: a token may differ from AR only where AR's top-2 logits are this close
PROMPT_LENGTHS = (1, 5, 11, 3)  # 1: an empty committed prefix


def pair(preset: str, dtype: torch.dtype):
    """(target, drafter) in ``dtype``: the toy pair, float64 by rebuilding both from seed 0."""
    target, drafter = toy_pair(preset)
    if dtype == torch.float32:
        return target, drafter
    target = build_target(preset, dtype=dtype)
    torch.manual_seed(1)
    return target, DFlashDrafter.from_config(drafter.cfg, target).to(dtype).eval()


PAIRS = {(p, d): pair(p, d) for p in ("gdn-toy", "mla-toy") for d in DTYPES.values()}


def prompts_for(seed: int, vocab: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab - 1, (n,), generator=g) for n in PROMPT_LENGTHS]


# ----------------------------------------------------------------------------- prefill_batch

@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("preset", ("gdn-toy", "mla-toy"))
def test_prefill_batch_equals_prefill_per_prompt(preset, dtype):
    """Prompts of 0, 4, 10 and 2 tokens in ONE left-padded stock forward (``prefill_batch``):
    every cache (attention rows, GDN conv windows and recurrent states) and every prompt's
    features equal ``prefill`` of that prompt alone (float64 under the harness to 1e-12);
    prompts of one length run in one forward too; a batch of one is ``prefill`` itself."""
    model, drafter = PAIRS[preset, dtype]
    layers = tuple(drafter.cfg.target_layer_ids)
    prompts = [p[:-1] for p in prompts_for(13, model.config.vocab_size)]
    calls = []
    hook = model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        with precision(dtype):
            for batch, forwards in ((prompts, 1), ([prompts[2], prompts[2].flip(0)], 1), (prompts[1:2], 1)):
                calls.clear()
                opened = verify_mod.prefill_batch(model, batch, layers)
                assert len(calls) == forwards and len(opened) == len(batch)
                for b, (p, (cache, features)) in enumerate(zip(batch, opened)):
                    ref_cache, ref = prefill(model, p, layers)
                    assert_same_cache(f"{preset} prompt{b} ({p.numel()} tokens)", ref_cache, cache, LOGIT_TOL[dtype])
                    assert features.shape == ref.features.shape
                    assert_close(f"{preset} prompt{b} features", ref.features, features, LOGIT_TOL[dtype])
    finally:
        hook.remove()


def test_a_batched_generation_prefills_its_prompts_in_one_forward():
    """``generate_batch`` opens every sequence from one prefill forward (``decode.start_batch``)."""
    model, drafter = PAIRS["gdn-toy", torch.float32]
    prompts, shapes = prompts_for(5, model.config.vocab_size), []
    hook = model.register_forward_pre_hook(
        lambda mod, args, kwargs: shapes.append(tuple(args[0].shape if args else kwargs["input_ids"].shape))
        if not isinstance(kwargs.get("past_key_values"), verify_mod.TreeBatch) else None, with_kwargs=True)
    try:
        decode.generate_batch(model, drafter, prompts, method="ddtree", budget=4, block_size=4, max_new_tokens=3)
    finally:
        hook.remove()
    longest = max(p.numel() for p in prompts) - 1
    assert shapes == [(len(prompts) - 1, longest)]  # the 1-token prompt has nothing to prefill


# ----------------------------------------------------------------------------- verify_batch

def _caches(model, prefixes):
    return [prefill(model, p)[0] for p in prefixes]


@pytest.mark.parametrize("packed", (True, False), ids=("packed", "padded"))
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("preset,mode", CASES + [("gdn-toy", "naive")], ids=lambda x: x)
def test_verify_batch_equals_per_sequence_verify(preset, mode, dtype, packed):
    """Two rounds of verify + commit: batch == batch 1, logits and committed caches; trees of
    different sizes packed (the default) or padded to the largest."""
    model, _ = PAIRS[preset, dtype]
    V, gen = model.config.vocab_size, generator("batch-verify", preset, mode)
    prefixes = [torch.randint(V, (n - 1,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    with precision(dtype):
        ref, out = _caches(model, prefixes), _caches(model, prefixes)
        for rnd in range(2):
            trees = [random_tree(kind, budget, V, gen) for kind, budget in
                     zip(("bushy", "deep", "chain", "bushy"), (7, 32, 5, 1))]
            outs = verify_batch(model, out, trees, mode, packed=packed)
            for b, (tree, o) in enumerate(zip(trees, outs)):
                one = verify(model, ref[b], tree, mode)
                assert_close(f"{preset}-{mode} round{rnd} seq{b} logits", one.logits, o.logits, LOGIT_TOL[dtype])
                path = root_path(tree, "random", gen)
                commit(model, ref[b], one.pending, path)
                commit(model, out[b], o.pending, path)
                assert_same_cache(f"round{rnd} seq{b}", ref[b], out[b], LOGIT_TOL[dtype])


@pytest.mark.parametrize("preset", ("gdn-toy", "mla-toy"))
def test_a_batch_keeps_its_rows_in_one_tensor_across_rounds(preset):
    """Round after round a batch writes only its new K/V rows: every cache's buffer stays its
    row of ONE batch tensor per attention layer (built in round 1, never again while it has
    room), and every cache's committed rows are views of it (``TreeBatch``'s layout)."""
    model, _ = PAIRS[preset, torch.float32]
    V, gen = model.config.vocab_size, generator("one-tensor", preset)
    caches = _caches(model, [torch.randint(V, (n,), generator=gen).tolist() for n in (1, 5, 11, 3)])
    held = None
    for rnd in range(4):
        trees = [random_tree("bushy", n, V, gen) for n in (7, 3, 5, 1)]
        outs = verify_batch(model, caches, trees, "wy")
        tensors = {key: tag[0] for key, tag in caches[0].batch_rows.items()}
        assert tensors and all(c.batch_rows[key][0] is t and c.batch_rows[key][1] == b
                               for key, t in tensors.items() for b, c in enumerate(caches))
        if held is not None:
            assert all(tensors[key] is t for key, t in held.items()), f"round {rnd} built a new batch tensor"
        held = tensors
        for c, t, o in zip(caches, trees, outs):
            commit(model, c, o.pending, root_path(t, "random", gen))
        for (layer, which), t in tensors.items():
            assert all(c.kv[layer][which].untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
                       for c in caches)


@pytest.mark.parametrize("preset", ("gdn-toy", "mla-toy"))
def test_discard_forgets_the_verify(preset):
    """``TreeCache.discard`` after a batched verify: the caches as they were (the same
    logits from the same verify again, the same committed rows), their buffers kept."""
    model, _ = PAIRS[preset, torch.float32]
    V, gen = model.config.vocab_size, generator("discard", preset)
    prefixes = [torch.randint(V, (n,), generator=gen).tolist() for n in (4, 9)]
    caches, fresh = _caches(model, prefixes), _caches(model, prefixes)
    trees = [random_tree("bushy", n, V, gen) for n in (6, 2)]
    first = verify_batch(model, caches, trees, "wy")
    for c in caches:
        c.discard()
    for c, f, o in zip(caches, fresh, first):
        assert c.buffers and all(k.shape[-2] == c.length for k, _ in c.kv.values())
        with pytest.raises(ValueError, match="last verify"):
            commit(model, c, o.pending, [0])  # a discarded verify is never committed
        assert_same_cache("discarded", f, c, 1e-12)  # copied rows: equal to rounding
    again = verify_batch(model, caches, trees, "wy")
    for a, b in zip(first, again):
        assert torch.equal(a.logits, b.logits)


def test_verify_batch_features_match_batch_one():
    model, drafter = PAIRS["gdn-toy", torch.float32]
    layers, gen = tuple(drafter.cfg.target_layer_ids), generator("features")
    prefixes = [[1, 2, 3], [], [4] * 9]
    trees = [random_tree("bushy", b, 64, gen) for b in (3, 8, 1)]
    outs = verify_batch(model, _caches(model, prefixes), trees, "wy", layers)
    for b, (c, t) in enumerate(zip(_caches(model, prefixes), trees)):
        assert_close(f"features seq{b}", verify(model, c, t, "wy", layers).features, outs[b].features, 2e-6)


@pytest.mark.parametrize("preset", ("gdn-toy", "mla-toy"))
def test_trees_of_different_sizes_run_packed(preset):
    """Trees of 8, 2 and 5 rows run as ONE row of 15 tokens (no padding to 8), their attention
    through ``verify.packed_attention``; trees of one size run as B rows of T; afterwards,
    and after a failed forward, the model's attention is its own again."""
    model, _ = PAIRS[preset, torch.float32]
    own, gen, seen = model.config._attn_implementation, generator("packed", preset), []
    hook = model.register_forward_pre_hook(
        lambda mod, args, kwargs: seen.append((tuple(args[0].shape), mod.config._attn_implementation))
        if isinstance(kwargs["past_key_values"], verify_mod.TreeBatch) else None, with_kwargs=True)  # verifies only
    try:
        for budgets in ((7, 1, 4), (4, 4, 4)):
            trees = [random_tree("bushy", n, 64, gen) for n in budgets]
            verify_batch(model, _caches(model, [[1, 2], [3], [4, 5, 6]]), trees, "wy")
        with pytest.raises(RuntimeError, match="boom"):
            verify_mod.verify_batch_unchecked(model, _caches(model, [[1], [2]]), [trees[0], random_tree("chain", 2, 64, gen)],
                                          spec.gdn_mode("wy"), forward=lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    finally:
        hook.remove()
    assert seen == [((1, 15), verify_mod.PACKED_ATTENTION), ((3, 5), own)]
    assert model.config._attn_implementation == own


@pytest.mark.parametrize("budgets", ((7, 1, 4), (4, 4, 4)), ids=("packed", "padded"))
@pytest.mark.parametrize("preset", ("gdn-toy", "mla-toy"))
def test_a_greedy_verify_hands_each_sequence_the_argmax_of_its_rows(preset, budgets):
    """``greedy=True``: every Forward's ``choice`` is the argmax of its own logits (one argmax
    over the batch's output, packed or padded, cut like the logits); without it, None."""
    model, _ = PAIRS[preset, torch.float32]
    gen = generator("greedy", preset)
    trees = [random_tree("bushy", n, 64, gen) for n in budgets]
    outs = verify_mod.verify_batch_unchecked(model, _caches(model, [[1, 2], [3], [4, 5, 6]]), trees,
                                             spec.gdn_mode("wy"), greedy=True)
    for o, t in zip(outs, trees):
        assert o.choice.shape == (len(t),) and torch.equal(o.choice, o.logits.argmax(-1))
    plain = verify_mod.verify_batch_unchecked(model, _caches(model, [[1, 2], [3], [4, 5, 6]]), trees,
                                              spec.gdn_mode("wy"))
    assert all(o.choice is None for o in plain)


def test_batch_entropies_are_each_tensors_entropies_in_order():
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randn(n, 50, generator=gen) * 3 for n in (3, 1, 5)]
    for T in (0.0, 0.7):
        got = decode.batch_entropies(rows, T)
        want = [h for r in rows for h in decode.entropies(r, T)]
        assert got == pytest.approx(want, rel=1e-6, abs=1e-6)
        assert decode.batch_entropies(rows[:1], T) == decode.entropies(rows[0], T)
    assert decode._split(list(range(9)), [3, 1, 5]) == [[0, 1, 2], [3], [4, 5, 6, 7, 8]]


@pytest.mark.parametrize("layout", ("padded", "packed"))
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("mode", ("wy", "naive"))
def test_gdn_layer_batch_equals_its_reference_twin(mode, dtype, layout):
    """One GDN layer on 3 trees of different sizes, their rows padded [B, T, D] or packed
    [1, N, D]: outputs on real rows, conv, and the committed state (W1) of a random path per
    sequence, fast (one batched WY pass) vs the per-sequence loop."""
    model, _ = PAIRS["gdn-toy", dtype]
    m, gen = wy.gdn_modules(model)[0], generator("gdn-batch", mode)
    trees = [random_tree(kind, n, 64, gen) for kind, n in (("bushy", 9), ("deep", 3), ("chain", 6))]
    bufs = batch_buffers(trees, [0, 4, 2], mode, m.conv_kernel_size)
    assert bufs.rows is not None  # sizes differ: verify_batch packs them
    h = torch.randn(3, max(bufs.sizes), model.config.hidden_size, generator=gen).to(dtype)
    conv = torch.randn(3, m.conv_dim, m.conv_kernel_size, generator=gen).to(dtype)
    S0 = torch.randn(3, m.num_v_heads, m.head_k_dim, m.head_v_dim, generator=gen).to(dtype) * 0.1
    if layout == "packed":
        h, unpacked = tree_mod.pack(h, bufs.rows, 1), (lambda x: tree_mod.unpack(x, bufs.rows, 3, max(bufs.sizes), 1))
    else:
        bufs, unpacked = dataclasses.replace(bufs, rows=None), (lambda x: x)
    with precision(dtype):
        out, recs = wy.tree_layer_batch(m, h, conv, S0, bufs, spec.gdn_mode(mode))
        ref, ref_recs = gdn_naive.tree_layer_batch(m, h, conv, S0, bufs, spec.gdn_mode(mode))
    assert out.shape == h.shape and ref.shape == h.shape
    out, ref = unpacked(out), unpacked(ref)
    for b, (tree, n) in enumerate(zip(trees, bufs.sizes)):
        path = root_path(tree, "random", gen) if mode == "wy" else list(range(n))
        assert_close(f"{mode} seq{b} out", ref[b, :n], out[b, :n], LOGIT_TOL[dtype])
        assert_close(f"{mode} seq{b} x", ref_recs[b].x, recs[b].x, LOGIT_TOL[dtype])
        assert_close(f"{mode} seq{b} state", wy.wy_state(ref_recs[b].wy, ref_recs[b].S0, path),
                     wy.wy_state(recs[b].wy, recs[b].S0, path), LOGIT_TOL[dtype])


def test_draft_batch_equals_draft_per_sequence():
    """Contexts of 0, 3 and 9 rows, two rounds: one batched block forward == draft per state."""
    target, drafter = PAIRS["gdn-toy", torch.float32]
    gen, F = generator("propose"), drafter.cfg.feature_size
    one, many = [drafter.new_state() for _ in range(3)], [drafter.new_state() for _ in range(3)]
    for new_rows in ((0, 3, 9), (2, 1, 4)):
        feats = [torch.randn(n, F, generator=gen) for n in new_rows]
        roots = torch.randint(64, (3,), generator=gen).tolist()
        out = drafter.draft_batch(many, feats, roots, 6)
        for b in range(3):
            assert_close(f"draft seq{b}", drafter.draft(one[b], feats[b], roots[b], 6).logits, out[b].logits, 2e-6)


def test_a_drafter_batch_keeps_its_contexts_in_one_tensor_across_rounds():
    """Four batched rounds of 3 sequences: every state's context buffer of every layer stays
    row b of one batch tensor (``drafter.batch_context``), built in round 1 and never again,
    so no round copies a context; the drafts equal ``draft`` per state."""
    target, drafter = PAIRS["mla-toy", torch.float32]
    gen, F = generator("propose"), drafter.cfg.feature_size
    one, many = [drafter.new_state() for _ in range(3)], [drafter.new_state() for _ in range(3)]
    held = None
    for new_rows in ((4, 7, 2), (1, 3, 2), (2, 1, 1), (3, 2, 4)):
        feats = [torch.randn(n, F, generator=gen) for n in new_rows]
        roots = torch.randint(64, (3,), generator=gen).tolist()
        out = drafter.draft_batch(many, feats, roots, 6)
        tensors = [[s.batch_rows[(name, i)][0] for s in many] for name in ("keys", "values")
                   for i in range(drafter.cfg.num_layers)]
        assert all(len({id(t) for t in per_layer}) == 1 for per_layer in tensors)
        held = held or [per_layer[0] for per_layer in tensors]
        assert all(per_layer[0] is t for per_layer, t in zip(tensors, held)), "the batch tensors were rebuilt"
        for b, s in enumerate(many):
            for i, buf in enumerate(s.keys + s.values):  # the order of ``tensors``: keys, then values
                assert buf.data_ptr() == held[i][b:b + 1].data_ptr(), f"seq{b}: buffer {i} is not its row"
            assert_close(f"round draft seq{b}", drafter.draft(one[b], feats[b], roots[b], 6).logits, out[b].logits, 2e-6)


def test_a_held_batch_tensor_counts_only_while_every_buffer_is_still_its_row():
    """``verify.held_batch``, the one staleness rule of the target's and the drafter's batch
    tensors: the tensor ``hold_rows`` recorded is handed back only while every holder's buffer
    is still its row b, in the same order, with room; ``batch_of_rows`` copies the kept rows in."""
    kept = [torch.randn(2, n, 3) for n in (4, 0, 2)]
    out = batch_of_rows([k if k.shape[1] else None for k in kept], torch.empty(1, 2, 0, 3), 8)
    assert out.shape == (3, 2, 8, 3)
    for b, k in enumerate(kept):
        assert torch.equal(out[b, :, :k.shape[1]], k) and not out[b, :, k.shape[1]:].any()
    tags = [{} for _ in kept]
    bufs = hold_rows(out, tags, "k")
    assert all(buf.data_ptr() == out[b:b + 1].data_ptr() for b, buf in enumerate(bufs))
    recorded = [t.get("k") for t in tags]
    assert held_batch(recorded, bufs, 8) is out
    assert held_batch(recorded, bufs, 9) is None, "no room"
    assert held_batch(recorded[::-1], bufs[::-1], 8) is None, "another order"
    assert held_batch(recorded[:2], bufs[:2], 8) is None, "another batch size"
    assert held_batch(recorded, [bufs[0], out[1:2].clone(), bufs[2]], 8) is None, "a replaced buffer"
    assert held_batch([None] + recorded[1:], bufs, 8) is None, "a holder never recorded"


def test_an_append_in_room_writes_only_the_new_rows_and_a_growth_copies_the_first_n():
    """``verify.append_rows``, the one append rule of the target's and the drafter's caches:
    ``held``'s first n rows are kept, the rest of it is never read; in room the new rows are
    written after them in the same buffer (no copy of the kept rows), and a growth (or no
    buffer) copies only the first n rows of ``held`` into a new buffer, leaving ``held`` as
    it was."""
    held = torch.randn(1, 2, 5, 3)  # rows the caller must not write; only 3 are kept
    before = held.clone()
    new = torch.randn(1, 2, 2, 3)
    buf, rows = append_rows(None, held, 3, new)
    assert torch.equal(held, before), "rows the caller must not write stay as they were"
    assert buf.shape[2] >= 5 and rows.data_ptr() == buf.data_ptr()
    assert torch.equal(rows, torch.cat([held[:, :, :3], new], 2))
    newer = torch.randn(1, 2, 1, 3)
    buf2, rows2 = append_rows(buf, buf, 4, newer)  # the 5th row (scratch) is overwritten
    assert buf2 is buf and torch.equal(rows2, torch.cat([held[:, :, :3], new[:, :, :1], newer], 2))
    buf3, rows3 = append_rows(buf, buf, 5, torch.randn(1, 2, buf.shape[2], 3))  # no room: grown
    assert buf3 is not buf and buf3.shape[2] >= 2 * buf.shape[2]
    assert torch.equal(rows3[:, :, :5], rows2)


# ----------------------------------------------------------------------------- T = 0

def _first_difference(ref: list[int], out: list[int]) -> int | None:
    return next((t for t, (a, b) in enumerate(zip(ref, out)) if a != b), None)


def assert_equal_or_near_tie(name, target, prompt, ref: list[int], out: list[int], exact: bool) -> None:
    """out == ref token for token; in float32 a first difference must be a near-tie of the
    target at that step (its top-2 logit margin < NEAR_TIE, printed), and ``out`` must pick a top-2 token."""
    assert len(out) == len(ref), f"{name}: {len(out)} tokens, AR {len(ref)}"
    t = _first_difference(ref, out)
    if t is None:
        return
    logits = full_forward_logits(target, prompt.tolist() + ref[:t])
    top = logits.topk(2)
    margin = float(top.values[0] - top.values[1])
    print(f"{name}: differs from AR at token {t} ({ref[t]} vs {out[t]}), top-2 margin {margin:.2e}")
    assert not exact, f"{name}: float64 under the harness must equal AR exactly"
    assert margin < NEAR_TIE and out[t] in top.indices.tolist()


def _ar_outputs(target, prompts, max_new):
    return [decode.generate(target, None, p, method="ar", max_new_tokens=n).tokens for p, n in zip(prompts, max_new)]


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("method,budget,block", [("dflash", 7, 8), ("ddtree", [32, 4, 16, 8], 8)],
                         ids=["dflash", "ddtree-mixed-budgets"])
@pytest.mark.parametrize("preset,mode", CASES, ids=lambda x: x)
def test_greedy_batch_equals_ar(preset, mode, method, budget, block, dtype):
    """Prompts of lengths 1..11, each with its own max_new_tokens (sequences finish at
    different rounds), a drafter hinted per sequence so rounds accept and reject."""
    target, drafter = PAIRS[preset, dtype]
    prompts, max_new = prompts_for(7, target.config.vocab_size), [16, 5, 11, 9]
    with precision(dtype):
        ar = _ar_outputs(target, prompts, max_new)
        hinted = BatchHintedDrafter(drafter, [p.tolist() + a for p, a in zip(prompts, ar)])
        gens = decode.generate_batch(target, hinted, prompts, method=method, budget=budget, block_size=block,
                                    max_new_tokens=max_new, gdn_mode=mode)
        for b, (p, a, g) in enumerate(zip(prompts, ar, gens)):
            assert_equal_or_near_tie(f"{preset}-{mode}-{method} seq{b}", target, p, a, g.tokens,
                                     exact=dtype == torch.float64)
    accepted = sum(sum(g.acceptance_lengths) - len(g.acceptance_lengths) for g in gens)
    rounds = [len(g.acceptance_lengths) for g in gens]
    print(f"{preset} {mode} {method}: {accepted} draft tokens accepted, rounds {rounds}")
    assert accepted > 0 and all(len(g.acceptance_lengths) > 1 for g in gens)


@pytest.mark.parametrize("preset,mode,method", [("gdn-toy", "wy", "ddtree"), ("gdn-toy", "fork", "ddtree"),
                                                ("gdn-toy", "naive", "ddtree"), ("gdn-toy", "wy", "dflash"),
                                                ("mla-toy", "wy", "ddtree")], ids=lambda x: x)
def test_every_accepted_row_scores_as_a_cache_free_forward_of_its_sequence(preset, mode, method):
    """float64, a batch of three: in every round of every sequence, the target logits of each
    accepted node equal a stock forward with no cache of the sequence so far plus the path to
    that node (``full_forward_logits``). A wrong committed row or GDN state shows here even on a
    toy target whose greedy output repeats one token (where output == AR cannot show it)."""
    target, drafter = PAIRS[preset, torch.float64]
    prompts, max_new = prompts_for(11, target.config.vocab_size)[:3], [12, 7, 10]
    rounds = []
    with precision(torch.float64):
        ar = _ar_outputs(target, prompts, max_new)
        hinted = BatchHintedDrafter(drafter, [p.tolist() + a for p, a in zip(prompts, ar)])
        decode.generate_batch(target, hinted, prompts, method=method, budget=[12, 4, 16] if method == "ddtree" else 7,
                              block_size=8, max_new_tokens=max_new, gdn_mode=mode, on_round=rounds.append)
        seqs = [p.tolist() for p in prompts]
        for r in rounds:
            tokens = r.tree.tokens.tolist()
            for j, node in enumerate(r.path):
                ids = seqs[r.sequence] + [tokens[n] for n in r.path[1:j + 1]]
                assert_close(f"{preset}-{mode}-{method} seq{r.sequence} at {len(ids)} tokens",
                             full_forward_logits(target, ids), r.target_logits[node], LOGIT_TOL[torch.float64])
            seqs[r.sequence] += [tokens[n] for n in r.path[1:]] + [r.bonus]
    assert max(len(r.path) for r in rounds) > 2  # rounds that accept several draft tokens were checked


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("preset", ("gdn-toy", "mla-toy"))
def test_batched_ar_baseline_equals_ar(preset, dtype):
    target, _ = PAIRS[preset, dtype]
    prompts, max_new = prompts_for(11, target.config.vocab_size), [12, 3, 8, 12]
    with precision(dtype):  # the harness's GDN kernel runs each batch row on its own
        ar = _ar_outputs(target, prompts, max_new)
        gens = decode.generate_batch(target, None, prompts, method="ar", max_new_tokens=max_new)
        for b, (p, a, g) in enumerate(zip(prompts, ar, gens)):
            assert_equal_or_near_tie(f"{preset}-ar seq{b}", target, p, a, g.tokens, exact=dtype == torch.float64)


def test_finished_sequences_leave_the_batch(monkeypatch):
    target, drafter = PAIRS["gdn-toy", torch.float32]
    sizes, real = [], decode.verify_batch_unchecked

    def spy(model, caches, trees, *args, **kwargs):
        sizes.append(len(trees))
        return real(model, caches, trees, *args, **kwargs)
    monkeypatch.setattr(decode, "verify_batch_unchecked", spy)
    gens = decode.generate_batch(target, drafter, prompts_for(3, 64)[:3], method="ddtree", budget=8,
                                block_size=4, max_new_tokens=[2, 9, 5])
    print(f"batch size per round {sizes}")
    assert [len(g.tokens) for g in gens] == [2, 9, 5]
    assert sizes[0] == 3 and sizes[-1] == 1 and sizes == sorted(sizes, reverse=True)


REFERENCE_CASES = [("gdn-toy", "ddtree", "wy", 0.0), ("gdn-toy", "ddtree", "naive", 0.0),
                   ("gdn-toy", "dflash", "fork", 0.8), ("gdn-toy", "ddtree", "wy", 0.8),
                   ("mla-toy", "ddtree", "wy", 0.8), ("gdn-toy-dflash2", "ddtree", "wy", 0.8),
                   ("gdn-toy-dflash2", "dflash", "wy", 0.0)]  # conditional trees, the selector's path walk


@pytest.mark.parametrize("preset,method,mode,temperature", REFERENCE_CASES, ids=lambda x: str(x))
def test_generate_equals_its_batch_one_reference_twin(preset, method, mode, temperature):
    """``generate`` (the batch of one of the batched loop) == the plain batch-1 loop
    (``helpers.generate_reference``) round for round: tokens, acceptance lengths, tree sizes
    and entropies, at T = 0 and with the same seed at T > 0 (the same draws in the same order)."""
    target, drafter = toy_dflash2("gdn-toy") if preset == "gdn-toy-dflash2" else PAIRS[preset, torch.float32]
    kw = dict(method=method, budget=12, block_size=4, max_new_tokens=14, temperature=temperature, seed=5,
              gdn_mode=mode)
    one = decode.generate(target, drafter, [3, 1, 4, 1, 5], **kw)
    ref = generate_reference(target, drafter, [3, 1, 4, 1, 5], **kw)
    assert one.tokens == ref.tokens and one.acceptance_lengths == ref.acceptance_lengths
    assert one.tree_sizes == ref.tree_sizes and len(one.entropies) == len(one.tokens)
    assert_close("entropies", torch.tensor(ref.entropies), torch.tensor(one.entropies), 1e-5)


def test_every_path_records_entropies_and_rounds():
    """A batch records entropies and calls on_round for every sequence's every round."""
    target, drafter = PAIRS["gdn-toy", torch.float32]
    rounds = []
    gens = decode.generate_batch(target, drafter, prompts_for(4, 64)[:3], method="ddtree", budget=6, block_size=4,
                                 max_new_tokens=[5, 9, 3], on_round=rounds.append)
    for b, g in enumerate(gens):
        assert len(g.entropies) == len(g.tokens) and all(h >= 0 for h in g.entropies)
        assert sum(r.sequence == b for r in rounds) == len(g.acceptance_lengths)


# ----------------------------------------------------------------------------- T > 0

def _first_two_counts_batch(target, drafter, prompts, n, temperature, accept_rule) -> torch.Tensor:
    """counts [B, 2, V] of each sequence's first two tokens over n batched runs."""
    counts = torch.zeros(len(prompts), 2, target.config.vocab_size)
    for run in range(n):
        gens = decode.generate_batch(target, drafter, prompts, method="ddtree", budget=[6, 3], block_size=4,
                                    max_new_tokens=2, temperature=temperature, seed=run * len(prompts),
                                    accept_rule=accept_rule)
        for b, g in enumerate(gens):
            counts[b, 0, g.tokens[0]] += 1
            counts[b, 1, g.tokens[1]] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("accept_rule", ["rejection", "target"])
def test_sampling_is_lossless_per_sequence_and_the_test_has_power(monkeypatch, accept_rule):
    """T > 0, both acceptance rules, a batch of two prompts with their own budgets: each
    sequence's first two tokens fit its own exact distribution (``check_lossless``'s
    chi-square, ``lossless.chi_square``); a deliberately biased rule is rejected by the same
    test (target-only: ``lossless.biased_walk``; rejection: no residual update)."""
    target, drafter = PAIRS["gdn-toy", torch.float32]
    drafter = sharp_drafter(drafter)
    prompts, T = [torch.tensor([5, 9, 2]), torch.tensor([7])], 0.5
    exact = [exact_first_two(target, p, T) for p in prompts]
    fair = _first_two_counts_batch(target, drafter, prompts, 200, T, accept_rule)
    if accept_rule == "target":
        accept_rule = lossless.biased_walk(1.0)
    else:
        monkeypatch.setattr(rules, "_renormalised", no_residual)
    biased = _first_two_counts_batch(target, drafter, prompts, 200, T, accept_rule)
    p_fair = [lossless.chi_square(fair[b, i].double(), 200 * exact[b][i])[2] for b in range(2) for i in range(2)]
    p_biased = [lossless.chi_square(biased[b, i].double(), 200 * exact[b][i])[2] for b in range(2) for i in range(2)]
    print(f"p-values fair {p_fair}, biased {p_biased}")
    assert min(p_fair) > 1e-3
    assert all(min(p_biased[2 * b:2 * b + 2]) < 1e-3 for b in range(len(prompts)))  # every sequence


# ----------------------------------------------------------------------------- bad input

BAD = [
    (dict(prompts=[]), "prompts"),
    (dict(prompts=[1, 2, 3]), "prompts\\[0\\]"),
    (dict(prompts=[[1, 2], []]), "prompts\\[1\\]"),
    (dict(prompts="abc"), "prompts"),
    (dict(budget=[4, 4, 4]), "budget"),
    (dict(budget="auto"), "budget"),
    (dict(budget=[4, 0]), "budget"),
    (dict(max_new_tokens=[4]), "max_new_tokens"),
    (dict(max_new_tokens=[4, 0]), "max_new_tokens"),
    (dict(method="beam"), "method"),
    (dict(gdn_mode="exactish"), "gdn_mode"),
    (dict(temperature=-1.0), "temperature"),
]


@pytest.mark.parametrize("override,name", BAD, ids=[f"{n.strip('[]0123456789')}{i}" for i, (_, n) in enumerate(BAD)])
def test_bad_input_is_refused_before_work(override, name):
    target, drafter = PAIRS["gdn-toy", torch.float32]
    kwargs = dict(prompts=[[1, 2, 3], [4]], method="ddtree", budget=8, block_size=4, max_new_tokens=4)
    kwargs.update(override)
    with pytest.raises(ValueError, match=name) as err:
        decode.generate_batch(target, drafter, **kwargs)
    print(err.value)


def test_verify_batch_refuses_mismatched_lists():
    target, _ = PAIRS["gdn-toy", torch.float32]
    cache, tree = prefill(target, [1, 2])[0], random_tree("chain", 2, 64, generator("bad"))
    with pytest.raises(ValueError, match="caches and trees"):
        verify_batch(target, [cache], [tree, tree])
    with pytest.raises(ValueError, match="distinct"):
        verify_batch(target, [cache, cache], [tree, tree])
