"""The one-pass pieces of the batched round (``tree.batch_masks`` / ``pack`` / ``unpack``, the GDN
batch pieces of ``families/gdn/wy.py``, and the loop functions built on them) against their plain per-tree twins:

- ``verify.batch_buffers`` == ``naive.batch_buffers``, field by field, bit for bit
  (mixed tree kinds and sizes, chains only, one tree, an empty prefix; naive / fork / wy; GDN
  and attention-only);
- ``gated_delta_wy`` == ``gdn_naive.gated_delta_wy_batch`` (per tree) and
  ``wy.gated_delta_wy`` (no batch dim); ``tree_conv`` ==
  ``gdn_naive.tree_conv_batch``, bit for bit;
- ``packed_rows`` / ``pack`` / ``unpack``: the packed layout of trees of different sizes, its
  rows in tree order, ``unpack`` after ``pack`` the identity on real rows and zeros on padding;
- ``wy_states`` == ``wy.wy_state`` and ``conv_states_at`` == ``wy.commit_conv_state``
  per sequence; ``verify.commit_batch`` == ``verify.commit`` per sequence over two rounds of
  ``verify_batch`` (wy, fork, naive with branched paths re-scored; the wy states read from the
  batch's tensors), and over caches verified one by one;
- the loop equals the loop with every twin swapped in, round for round.
"""
from __future__ import annotations

import pytest
import torch

from ddtree_lab.core import decode, harness, naive, verify

from ddtree_lab.core.families.gdn import naive as gdn_naive
from ddtree_lab.core.families.gdn import wy
from ddtree_lab.core import spec
from ddtree_lab.core import tree as tree_mod
from ddtree_lab.core.verify import commit, commit_batch
from ddtree_lab.core.drafter import DFlashDrafter
from ddtree_lab.core.models import build_target
from ddtree_lab.core.verify import prefill, verify_batch
from helpers import (LOGIT_TOL, BatchHintedDrafter, assert_close, assert_identical, assert_same_cache, generator,
                     random_tree, root_path, toy_pair)

DTYPES = {"f32": torch.float32, "f64": torch.float64}
BATCHES = {  # (kind, budget) per tree, committed lengths
    "mixed": ((("bushy", 9), ("deep", 3), ("chain", 6), ("random", 16)), (0, 4, 2, 7)),
    "chains": ((("chain", 7), ("chain", 3), ("chain", 7)), (5, 0, 9)),
    "equal": ((("bushy", 16), ("bushy", 16)), (3, 3)),
    "one": ((("random", 12),), (6,)),
    "roots": ((("chain", 0), ("bushy", 4)), (2, 1)),
    "one chain": ((("chain", 7),), (300,)),  # attention-only: ``verify.chain_buffers``, past the bias's first 256 columns
    "root only": ((("chain", 0),), (0,)),
}


def _trees(name: str, gen) -> tuple[list, list]:
    kinds, lengths = BATCHES[name]
    return [random_tree(kind, budget, 64, gen) for kind, budget in kinds], list(lengths)


@pytest.mark.parametrize("dim", (1, 2))
def test_pack_and_unpack_are_inverse_on_the_real_rows(dim):
    sizes, T = [3, 1, 4], 4
    rows = tree_mod.packed_rows(sizes, T)
    assert rows.tolist() == [0, 1, 2, 4, 8, 9, 10, 11]  # tree b's node i at row b * T + i, in tree order
    assert tree_mod.packed_rows([4, 4], 4) is None  # no padding: the padded layout is the packed one
    x = torch.randn(3, T, 5) if dim == 1 else torch.randn(3, 2, T, 5)  # [B, T, d] or [B, h, T, d]
    packed = tree_mod.pack(x, rows, dim)
    assert packed.shape == ((1, 8, 5) if dim == 1 else (1, 2, 8, 5))
    back = tree_mod.unpack(packed, rows, 3, T, dim)
    real = tree_mod._real_rows(sizes, T)  # [B, T]
    real = real[:, :, None] if dim == 1 else real[:, None, :, None]
    assert_identical(f"unpack(pack) dim {dim}", torch.where(real, x, torch.zeros(())), back)


@pytest.mark.parametrize("conv_kernel", (4, None), ids=("gdn", "attention"))
@pytest.mark.parametrize("mode", spec.MODE_NAMES)
@pytest.mark.parametrize("name", BATCHES)
def test_batch_buffers_equal_the_per_tree_buffers(name, mode, conv_kernel):
    trees, lengths = _trees(name, generator("buffers", name, mode))
    ref = naive.batch_buffers(trees, lengths, mode, conv_kernel)
    out = verify.batch_buffers(trees, lengths, mode, conv_kernel)
    assert out.sizes == ref.sizes and out.past == ref.past
    for field in ("tokens", "positions", "gdn_anc", "windows", "rows"):
        a, b = getattr(ref, field), getattr(out, field)
        assert (a is None) == (b is None), field
        if a is not None:
            assert_identical(f"{name} {mode} {field}", a, b)
    assert (out.allowed is None) == (conv_kernel is None and len(trees) == 1 and trees[0].is_chain)
    if out.allowed is not None:
        assert_identical(f"{name} {mode} allowed", ref.allowed, out.allowed)
    for dtype in DTYPES.values():  # the mask the attention layers add, a view of a cached buffer for one chain
        assert_identical(f"{name} {mode} bias", verify.additive_mask(ref.allowed, dtype), verify.attention_bias(out, dtype))
    for r, o in zip(ref.per_tree, out.per_tree):
        assert o.tree is r.tree
        for field in ("positions", "anc", "gdn_parents", "gdn_anc"):
            assert_identical(f"{name} {mode} per tree {field}", getattr(r, field), getattr(o, field))


def test_chains_without_padding_share_one_triangle_that_no_round_writes():
    """``tree_mod.chain_masks`` of unpadded chains are views of one lower triangle per size,
    built once; verifying and committing chains on it leaves it the lower triangle."""
    one, two = tree_mod.chain_masks([6], 6), tree_mod.chain_masks([6, 6], 6)
    assert one.data_ptr() == two.data_ptr()
    target = build_target("mla-toy")
    cache, _ = prefill(target, torch.tensor([3, 1, 4]))
    tree = random_tree("chain", 5, 64, generator("shared triangle"))
    out = verify_batch(target, [cache], [tree])[0]
    commit(target, cache, out.pending, [0, 1, 2])
    assert torch.equal(tree_mod.chain_masks([6], 6)[0], torch.ones(6, 6, dtype=torch.bool).tril())


def test_chain_bias_in_the_graph_equals_the_cached_view(monkeypatch):
    """Under ``torch.compile`` a chain's bias is built in the graph (a cached buffer's growth
    would retrace); it equals the view eager rounds take, as does the view after the buffer
    grew (an earlier view keeps its values)."""
    tree = random_tree("chain", 5, 64, generator("chain bias"))
    first = verify.attention_bias(verify.batch_buffers([tree], [3]), torch.float32)
    grown_view = verify.attention_bias(verify.batch_buffers([tree], [5000]), torch.float32)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    for past, eager in ((3, first), (5000, grown_view)):
        assert_identical(f"chain bias past {past}", eager,
                         verify.attention_bias(verify.batch_buffers([tree], [past]), torch.float32))
    assert_identical("view before growth", verify.additive_mask(naive.batch_buffers([tree], [3]).allowed,
                                                                torch.float32), first)


def _wy_inputs(B: int, T: int, dtype, gen, H: int = 2, dk: int = 8, dv: int = 6):
    q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, dk, generator=gen), dim=-1).to(dtype) for _ in range(2))
    v = torch.randn(B, T, H, dv, generator=gen).to(dtype)
    g = -torch.rand(B, T, H, generator=gen).to(dtype)  # log gates <= 0
    beta = torch.rand(B, T, H, generator=gen).to(dtype)
    S0 = (0.1 * torch.randn(B, H, dk, dv, generator=gen)).to(dtype)
    return q, k, v, g, beta, S0


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", ("mixed", "one"))
def test_wy_over_leading_dims_equals_the_per_tree_pass(name, dtype):
    gen = generator("wy", name, str(dtype))
    trees, lengths = _trees(name, gen)
    bufs = verify.batch_buffers(trees, lengths, "wy", 4)
    q, k, v, g, beta, S0 = _wy_inputs(len(trees), max(bufs.sizes), dtype, gen)
    ref_o, ref_aux = gdn_naive.gated_delta_wy_batch(q, k, v, g, beta, S0, anc=bufs.gdn_anc)
    o, aux = wy.gated_delta_wy_batch(q, k, v, g, beta, S0, anc=bufs.gdn_anc)
    tol = LOGIT_TOL[dtype]
    for b, n in enumerate(bufs.sizes):
        assert_close(f"{name} seq{b} o", ref_o[b, :n], o[b, :n], tol)
        for key in ("U", "k"):
            assert_close(f"{name} seq{b} {key}", ref_aux[key][b][:, :n], aux[key][b][:, :n], tol)
        assert_close(f"{name} seq{b} G", ref_aux["G"][b, :n], aux["G"][b, :n], 1e-12)
        one = tuple(x[b, :n] for x in (q, k, v, g, beta))
        plain = wy.gated_delta_wy(*one, trees[b].parents, S0=S0[b], anc=bufs.per_tree[b].gdn_anc)
        unbatched, _ = wy.gated_delta_wy_batch(*one, S0[b], anc=bufs.per_tree[b].gdn_anc)
        assert_close(f"{name} seq{b} o, no batch dim", plain, unbatched, tol)


def test_tree_conv_by_index_select_is_the_advanced_index_bit_for_bit(threads):
    gen = generator("conv")
    trees, lengths = _trees("mixed", gen)
    bufs = verify.batch_buffers(trees, lengths, "wy", 4)
    B, T, C = len(trees), max(bufs.sizes), 12
    x, conv, weight = torch.randn(B, T, C, generator=gen), torch.randn(B, C, 4, generator=gen), torch.randn(C, 4, generator=gen)
    assert_identical("tree conv", gdn_naive.tree_conv_batch(x, conv, weight, bufs.windows),
                     wy.tree_conv_batch(x, conv, weight, bufs.windows))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_wy_states_equal_the_per_sequence_closed_form(dtype):
    gen = generator("states", str(dtype))
    trees, lengths = _trees("mixed", gen)
    bufs = verify.batch_buffers(trees, lengths, "wy", 4)
    q, k, v, g, beta, S0 = _wy_inputs(len(trees), max(bufs.sizes), dtype, gen)
    _, aux = wy.gated_delta_wy_batch(q, k, v, g, beta, S0, anc=bufs.gdn_anc)
    paths = [torch.tensor(root_path(t, pick, gen)) for t, pick in zip(trees, ("random", "deepest", "root", "random"))]
    out = wy.wy_states(aux["U"], aux["G"], aux["k"], S0, paths)
    for b, path in enumerate(paths):
        ref = wy.wy_state({key: t[b] for key, t in aux.items()}, S0[b], path.tolist())
        assert_close(f"state seq{b}", ref, out[b], LOGIT_TOL[dtype])


PAIRS = {preset: toy_pair(preset) for preset in ("gdn-toy", "mla-toy")}


@pytest.mark.parametrize("preset,mode", [("gdn-toy", "wy"), ("gdn-toy", "fork"), ("gdn-toy", "naive"),
                                         ("mla-toy", "wy")])
def test_commit_batch_equals_commit_per_sequence(preset, mode):
    """Two rounds of one ``verify_batch``: ``commit_batch`` == ``commit`` of every sequence."""
    model, _ = PAIRS[preset]
    V, gen = model.config.vocab_size, generator("commit-batch", preset, mode)
    prefixes = [torch.randint(V, (n,), generator=gen).tolist() for n in (0, 4, 10)]
    ref, out = ([prefill(model, p)[0] for p in prefixes] for _ in range(2))
    for rnd in range(2):
        trees = [random_tree(kind, budget, V, gen) for kind, budget in (("bushy", 7), ("deep", 12), ("chain", 5))]
        paths = [root_path(t, "random", gen) for t in trees]
        ref_pending = [o.pending for o in verify_batch(model, ref, trees, mode)]
        pendings = [o.pending for o in verify_batch(model, out, trees, mode)]
        for c, pending, p in zip(ref, ref_pending, paths):
            commit(model, c, pending, p)
        commit_batch(model, out, pendings, paths)
        for b in range(len(trees)):
            assert_same_cache(f"{preset}-{mode} round{rnd} seq{b}", ref[b], out[b], LOGIT_TOL[torch.float32])
        if mode == "wy":  # one WY pass: each new state is its row of the batch's tensor, nothing stacked
            for i in out[0].rec:
                assert len({c.rec[i].untyped_storage().data_ptr() for c in out}) == 1
                assert len({c.conv[i].untyped_storage().data_ptr() for c in out}) == 1


def test_commit_batch_of_separate_verifies_commits_each_sequence():
    """Caches verified one by one (no batch record joins them): ``commit_batch`` takes each
    sequence's own closed form and equals ``commit`` per sequence."""
    model, _ = PAIRS["gdn-toy"]
    V, gen = model.config.vocab_size, generator("commit-separate")
    prefixes = [torch.randint(V, (n,), generator=gen).tolist() for n in (3, 6)]
    ref, out = ([prefill(model, p)[0] for p in prefixes] for _ in range(2))
    trees = [random_tree("bushy", n, V, gen) for n in (6, 9)]
    paths = [root_path(t, "random", gen) for t in trees]
    pendings = [verify_batch(model, [c], [t], "wy")[0].pending for c, t in zip(ref + out, trees + trees)]
    for c, pending, p in zip(ref, pendings, paths):
        commit(model, c, pending, p)
    commit_batch(model, out, pendings[2:], paths)
    for b in range(2):
        assert_same_cache(f"separate seq{b}", ref[b], out[b], LOGIT_TOL[torch.float32])


def test_conv_states_equal_the_per_sequence_commit():
    """``wy.conv_states_at`` == ``wy.commit_conv_state`` per sequence, bit for bit
    (columns copied, nothing computed): paths of 1 .. T nodes, shorter and longer than K."""
    gen, B, T, C, K = generator("conv-states"), 4, 9, 6, 4
    conv, x = torch.randn(B, C, K, generator=gen), torch.randn(B, T, C, generator=gen)
    paths = [torch.tensor(p) for p in ([0], [0, 2, 5], [0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 3])]
    out = wy.conv_states_at(conv, x, wy.path_rows(paths))
    for b, p in enumerate(paths):
        assert torch.equal(wy.commit_conv_state(conv[b], x[b][p]), out[b])


def _f64_pair(preset: str):
    """``toy_pair``'s target and drafter rebuilt in float64 (exact comparisons, under the harness)."""
    _, drafter = toy_pair(preset)
    target = build_target(preset, dtype=torch.float64)
    torch.manual_seed(1)
    return target, DFlashDrafter.from_config(drafter.cfg, target).to(torch.float64).eval()


@pytest.mark.parametrize("preset,mode,method", [("gdn-toy", "wy", "ddtree"), ("gdn-toy", "naive", "ddtree"),
                                                ("gdn-toy", "wy", "dflash"), ("mla-toy", "wy", "ddtree")])
def test_the_loop_equals_the_loop_with_every_twin(monkeypatch, preset, mode, method):
    """The loop, then the loop with every plain twin swapped in where it calls a one-pass piece
    (buffers, WY pass, conv, commit), float64 under the harness, a drafter hinted per sequence
    so rounds accept and reject: every round's target logits are equal (the toy targets repeat
    one token, so tokens alone would not show a wrong state), and every sequence equals its AR
    output."""
    target, drafter = _f64_pair(preset)
    gen = generator("staged-loop", preset, mode, method)
    prompts = [torch.randint(target.config.vocab_size - 1, (n,), generator=gen) for n in (1, 9, 5)]
    kw = dict(method=method, budget=[12, 4, 16] if method == "ddtree" else 7, block_size=8,
              max_new_tokens=[14, 6, 11], gdn_mode=mode)
    with harness.float64_harness():
        ar = [decode.generate(target, None, p, method="ar", max_new_tokens=n).tokens
              for p, n in zip(prompts, kw["max_new_tokens"])]
        fast, rounds = _decode(target, drafter, prompts, ar, kw)
        monkeypatch.setattr(verify, "batch_buffers", naive.batch_buffers)
        monkeypatch.setattr(wy, "gated_delta_wy_batch", gdn_naive.gated_delta_wy_batch)
        monkeypatch.setattr(wy, "tree_conv_batch", gdn_naive.tree_conv_batch)
        monkeypatch.setattr(decode, "commit_batch", _commit_per_sequence)
        _, rounds_ref = _decode(target, drafter, prompts, ar, kw)
    assert len(rounds) == len(rounds_ref)
    for i, (r, ref) in enumerate(zip(rounds, rounds_ref)):
        assert r.sequence == ref.sequence and r.path == ref.path
        assert_close(f"round {i} seq{r.sequence} target logits", ref.target_logits, r.target_logits, 1e-12)
    assert [g.tokens for g in fast] == ar
    assert sum(sum(g.acceptance_lengths) - len(g.acceptance_lengths) for g in fast) > 0


def _decode(target, drafter, prompts, ar, kw) -> tuple[list, list]:
    """The batch decoded with a drafter hinted toward each prompt's AR output: (gens, every Round)."""
    rounds = []
    hinted = BatchHintedDrafter(drafter, [p.tolist() + a for p, a in zip(prompts, ar)])
    return decode.generate_batch(target, hinted, prompts, on_round=rounds.append, **kw), rounds


def _commit_per_sequence(model, caches, pendings, paths, checked=False):
    """``commit_batch``'s twin: ``commit`` per sequence (each a batch of one, ``wy.state``)."""
    for c, pending, p in zip(caches, pendings, paths):
        commit(model, c, pending, p, checked)
