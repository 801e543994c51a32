"""Tree verification on the real architectures == the stock full forward (docs/background.md
section 4).

Row i of ``tree_logits(model, prefix, tree, mode)`` must equal the stock forward's last logits
over prefix + tokens[path(i)], for MLA (DeepSeek-V3) and for the exact GDN modes ``fork`` and
``wy`` (Qwen3.5): in float32 stock classes up to rounding, and in float64 under
``harness.float64_harness()`` to 1e-12. ``naive`` is exact on chains only. Rounds of verify +
commit must leave the cache as a fresh prefill of the committed sequence would. Bad input
raises ValueError and leaves the cache untouched.
"""
from __future__ import annotations

import functools

import pytest
import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen35

from ddtree_lab.core import adapter, harness, naive
from ddtree_lab.core import adapter
from ddtree_lab.core.families.gdn import wy
from ddtree_lab.core import verify as verify_mod
from ddtree_lab.core.models import build_target
from ddtree_lab.core.tree import DraftTree, chain_tree
from ddtree_lab.core.verify import GDN_MODES, prefill, tree_logits, verify
from ddtree_lab.core.verify import commit
from helpers import (LOGIT_TOL, assert_close, assert_same_cache, generator, precision, random_prefix,
                     random_tree, root_path)

torch.set_num_threads(1)

# float32 tolerances ~10x the measured max (printed by the tests): |dlogit| 2.1e-7 on the toy
# presets (helpers.LOGIT_TOL), 1.8e-6 on the real-size ones (larger logits); cache states fork vs wy 4.8e-7
TOL_REAL_F32 = 2e-5
TOL_STATE = {torch.float32: 5e-6, torch.float64: 1e-12}
DTYPE_ID = {torch.float32: "f32", torch.float64: "f64"}
KINDS = ("chain", "star", "deep", "bushy")
BUDGETS = (1, 2, 7, 32, 128)
ARCH_MODES = (("mla", None), ("gdn", "fork"), ("gdn", "wy"))


# ----------------------------------------------------------------------------- helpers

@functools.lru_cache(maxsize=None)
def target(arch: str, dtype: torch.dtype, size: str = "toy"):
    """A randomly initialised target (seed 0), cached: "gdn-toy", "mla-toy", "gdn", "mla"."""
    return build_target(arch if size == "real" else f"{arch}-toy", dtype=dtype)


def snapshot(cache) -> dict:
    return {"length": cache.length, "serial": cache.serial,
            "kv": {i: (k.clone(), v.clone()) for i, (k, v) in cache.kv.items()},
            "conv": {i: t.clone() for i, t in cache.conv.items()},
            "rec": {i: t.clone() for i, t in cache.rec.items()}}


def assert_untouched(cache, before: dict) -> None:
    assert cache.length == before["length"] and cache.serial == before["serial"]
    assert cache.kv.keys() == before["kv"].keys()
    assert all(torch.equal(a, b) for i in cache.kv for a, b in zip(cache.kv[i], before["kv"][i]))
    for name in ("conv", "rec"):
        state = getattr(cache, name)
        assert state.keys() == before[name].keys()
        assert all(torch.equal(state[i], before[name][i]) for i in state)


# ----------------------------------------------------------------------------- tree == full forward

def _case_id(arch, mode, kind, budget, dtype, size="toy"):
    parts = [arch] + ([mode] if mode else []) + [f"{kind}{budget}"] + (["real"] if size == "real" else [])
    return "-".join(parts + [DTYPE_ID[dtype]])


EXACT_CASES = [pytest.param(arch, mode, kind, budget, dtype, "toy", id=_case_id(arch, mode, kind, budget, dtype))
               for dtype in (torch.float32, torch.float64) for arch, mode in ARCH_MODES
               for kind in KINDS for budget in BUDGETS]
EXACT_CASES += [pytest.param(arch, mode, kind, 32, torch.float32, "real",
                             id=_case_id(arch, mode, kind, 32, torch.float32, "real"))
                for arch, mode in ARCH_MODES for kind in ("bushy", "deep")]


@functools.lru_cache(maxsize=None)
def oracle_case(arch, kind, budget, dtype, size):
    """(prefix, tree, full-forward logits): shared by every mode of the same case."""
    model = target(arch, dtype, size)
    gen = generator(arch, kind, budget, size)
    V = model.config.vocab_size
    prefix, tree = random_prefix(V, gen), random_tree(kind, budget, V, gen)
    with precision(dtype):
        return prefix, tree, naive.tree_logits(model, prefix, tree)


@pytest.mark.parametrize("arch,mode,kind,budget,dtype,size", EXACT_CASES)
def test_tree_logits_equal_full_forward(arch, mode, kind, budget, dtype, size):
    prefix, tree, ref = oracle_case(arch, kind, budget, dtype, size)
    model = target(arch, dtype, size)
    with precision(dtype):
        out = tree_logits(model, prefix, tree, mode or "wy")
    assert out.shape == ref.shape == (budget + 1, model.config.vocab_size)
    tol = TOL_REAL_F32 if size == "real" else LOGIT_TOL[dtype]
    assert_close(_case_id(arch, mode, kind, budget, dtype, size), ref, out, tol)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=DTYPE_ID.get)
@pytest.mark.parametrize("arch,mode", ARCH_MODES, ids=lambda x: x or "")
def test_empty_prefix(arch, mode, dtype):
    model = target(arch, dtype)
    tree = random_tree("bushy", 7, model.config.vocab_size, generator("empty", arch))
    with precision(dtype):
        cache, first = prefill(model, [])
        assert cache.length == 0 and first.logits.shape == (0, model.config.vocab_size) and first.features is None
        ref = naive.tree_logits(model, [], tree)
        assert_close(f"{arch}-{mode}-empty-prefix-{DTYPE_ID[dtype]}", ref,
                     tree_logits(model, [], tree, mode or "wy"), LOGIT_TOL[dtype])


# ----------------------------------------------------------------------------- naive mode

@pytest.mark.parametrize("budget", (1, 7, 32))
def test_naive_exact_on_chains(budget):
    prefix, tree, ref = oracle_case("gdn", "chain", budget, torch.float32, "toy")
    assert_close(f"gdn-naive-chain{budget}-f32", ref, tree_logits(target("gdn", torch.float32), prefix, tree, "naive"),
                 LOGIT_TOL[torch.float32])


@pytest.mark.parametrize("kind,budget", [("star", 7), ("bushy", 32), ("deep", 32)])
def test_naive_wrong_on_branched_trees(kind, budget):
    prefix, tree, ref = oracle_case("gdn", kind, budget, torch.float64, "toy")
    model = target("gdn", torch.float64)
    with harness.float64_harness():
        err = {mode: (tree_logits(model, prefix, tree, mode) - ref).abs().max().item() for mode in GDN_MODES}
    print(f"gdn-{kind}{budget}-f64: naive max|d|={err['naive']:.3e}, fork {err['fork']:.3e}, wy {err['wy']:.3e}")
    assert err["naive"] > 1e3 * max(err["fork"], err["wy"]) and err["naive"] > 1e-6


# ----------------------------------------------------------------------------- verify + commit rounds

ROUND_CASES = [("gdn", mode) for mode in GDN_MODES] + [("mla", "wy")]
PICKS = ("root", "deepest", "random", "random")


def _commit_rounds(model, mode, committed: list[int], plan, checked: bool = False):
    """Prefill ``committed``, then verify + commit every (tree, pick) of ``plan`` (pick: tree ->
    root path) -> (cache, committed sequence); every round leaves no pending verify."""
    cache, _ = prefill(model, committed)
    for tree, pick in plan:
        pending = verify(model, cache, tree, mode).pending
        path = pick(tree)
        commit(model, cache, pending, path, checked=checked)
        committed = committed + tree.tokens[path].tolist()
        assert cache.length == len(committed)
    return cache, committed


@pytest.mark.parametrize("arch,mode", ROUND_CASES, ids=[f"{a}-{m}" for a, m in ROUND_CASES])
def test_chain_rounds_kept_by_a_slice_match_fresh_prefill(arch, mode):
    """Chains whose accepted rows come first (the commit keeps them by a slice, no gather) and
    a branch between them (a gather), committed as the loop does (``checked=True``): the cache
    == a fresh prefill of the committed sequence."""
    model = target(arch, torch.float64)
    V = model.config.vocab_size
    gen = generator("chain-rounds", arch, mode)
    chain = (lambda: chain_tree(torch.randint(0, V, (7,), generator=gen), 0),
             lambda t: list(range(int(torch.randint(1, 8, (), generator=gen)))))
    branch = (lambda: random_tree("bushy", 16, V, gen), lambda t: root_path(t, "random", gen))
    with harness.float64_harness():
        plan = ((make(), pick) for make, pick in (chain, chain, branch, chain))
        cache, committed = _commit_rounds(model, mode, random_prefix(V, gen), plan, checked=True)
        fresh, _ = prefill(model, committed)
        assert_same_cache(f"{arch}-{mode}-chain-rounds-f64", fresh, cache, 1e-12)


@pytest.mark.parametrize("arch,mode", ROUND_CASES, ids=[f"{a}-{m}" for a, m in ROUND_CASES])
def test_rounds_match_fresh_prefill(arch, mode):
    """After 4 rounds of verify + commit, the cache == a fresh prefill of the committed sequence."""
    model = target(arch, torch.float64)
    V = model.config.vocab_size
    gen = generator("rounds", arch, mode)
    with harness.float64_harness():
        plan = ((random_tree(("bushy", "deep")[r % 2], 16, V, gen), lambda t, p=pick: root_path(t, p, gen))
                for r, pick in enumerate(PICKS))
        cache, committed = _commit_rounds(model, mode, random_prefix(V, gen), plan)
        fresh, _ = prefill(model, committed)
        assert_same_cache(f"{arch}-{mode}-rounds-f64", fresh, cache, 1e-12)
        tree = random_tree("bushy", 16, V, gen)
        assert_close(f"{arch}-{mode}-next-round-f64", verify(model, fresh, tree, mode).logits,
                     verify(model, cache, tree, mode).logits, 1e-12)


@pytest.mark.parametrize("arch,mode", ROUND_CASES, ids=[f"{a}-{m}" for a, m in ROUND_CASES])
def test_a_cache_and_its_snapshot_decode_apart(arch, mode):
    """A verify of one cache writes its tree rows in place into that cache's own buffers
    (``TreeCache.appended``). A snapshot taken between rounds and the cache it came from then
    take turns, each its own trees and paths (gathers and slices): each stays equal to a fresh
    prefill of its own committed sequence, so neither ever wrote a row the other reads."""
    model = target(arch, torch.float64)
    V = model.config.vocab_size
    gen = generator("snapshot-apart", arch, mode)
    with harness.float64_harness():
        prefix = random_prefix(V, gen)
        first, committed = _commit_rounds(model, mode, prefix, [(random_tree("bushy", 16, V, gen),
                                                                 lambda t: root_path(t, "deepest", gen))])
        caches = {"first": (first, committed)}
        caches["second"] = (first.snapshot(), committed)
        for r in range(6):
            name = ("first", "second")[r % 2]
            cache, seq = caches[name]
            tree = random_tree(("bushy", "deep")[r % 3 == 0], 16, V, gen)
            pending = verify(model, cache, tree, mode).pending
            path = root_path(tree, ("random", "deepest", "root")[r % 3], gen)
            commit(model, cache, pending, path)
            caches[name] = (cache, seq + tree.tokens[path].tolist())
        for name, (cache, seq) in caches.items():
            fresh, _ = prefill(model, seq)
            assert_same_cache(f"{arch}-{mode}-snapshot-apart-{name}-f64", fresh, cache, 1e-12)
    assert caches["first"][1] != caches["second"][1]


def commit_case(tag: str, kind: str, pick: str, dtype):
    """(GDN model, prefix, 32-node tree of ``kind``, a root path picked by ``pick``)."""
    model = target("gdn", dtype)
    V = model.config.vocab_size
    gen = generator(tag, pick)
    prefix, tree = random_prefix(V, gen), random_tree(kind, 32, V, gen)
    return model, prefix, tree, root_path(tree, pick, gen)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=DTYPE_ID.get)
@pytest.mark.parametrize("pick", ("root", "deepest", "random"))
def test_fork_commit_equals_wy_commit(pick, dtype):
    model, prefix, tree, path = commit_case("fork-wy", "deep", pick, dtype)
    caches = {}
    with precision(dtype):
        for mode in ("fork", "wy"):
            caches[mode], _ = prefill(model, prefix)
            pending = verify(model, caches[mode], tree, mode).pending
            commit(model, caches[mode], pending, path)
    assert_same_cache(f"fork-vs-wy-{pick}-{DTYPE_ID[dtype]}", caches["wy"], caches["fork"], TOL_STATE[dtype])


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=DTYPE_ID.get)
@pytest.mark.parametrize("pick", ("root", "deepest", "random"))
def test_wy_closed_form_commit_equals_plain_replay(pick, dtype):
    """commit's state from the WY pass (W1) == the plain twin: replay the path from the snapshot."""
    from ddtree_lab.core.families.gdn.naive import replay_gdn
    model, prefix, tree, path = commit_case("wy-replay", "bushy", pick, dtype)
    with precision(dtype):
        cache, _ = prefill(model, prefix)
        pending = verify(model, cache, tree, "wy").pending
        mods = wy.gdn_modules(model)
        for i, rec in pending.gdn.items():
            conv, S = replay_gdn(mods[i], rec.x[path], rec.a[path], rec.b[path], cache.conv[i], cache.rec[i])
            assert_close(f"layer{i}-{pick}-{DTYPE_ID[dtype]}", S, wy.wy_state(rec.wy, rec.S0, path).to(S.dtype),
                         TOL_STATE[dtype])
            assert torch.equal(conv, wy.commit_conv_state(cache.conv[i], rec.x[path]))


# ----------------------------------------------------------------------------- bad input

@pytest.fixture(params=["gdn", "mla"])
def verified(request):
    """(model, cache after prefill + a verify, that verify's ``Pending``) in float32 (its tree:
    ``pending.tree``)."""
    model = target(request.param, torch.float32)
    gen = generator("bad", request.param)
    cache, _ = prefill(model, random_prefix(model.config.vocab_size, gen))
    tree = random_tree("bushy", 7, model.config.vocab_size, gen)
    return model, cache, verify(model, cache, tree).pending


def raises_untouched(cache, fn, match: str | None = None) -> str:
    before = snapshot(cache)
    with pytest.raises(ValueError, match=match) as info:
        fn()
    print(f"ValueError: {info.value}")
    assert_untouched(cache, before)
    return str(info.value)


def test_unknown_gdn_mode(verified):
    model, cache, pending = verified
    tree = pending.tree
    message = raises_untouched(cache, lambda: verify(model, cache, tree, "fast"))
    assert all(mode in message for mode in GDN_MODES) and "fast" in message


def test_positions_past_max_position_embeddings(verified):
    model, cache, _ = verified
    limit = model.config.max_position_embeddings
    V = model.config.vocab_size
    last_ok = limit - 1 - cache.length  # depth of a chain whose last node sits at position limit-1
    too_deep = chain_tree(torch.randint(V, (last_ok + 1,)), 0)
    raises_untouched(cache, lambda: verify(model, cache, too_deep), "max_position_embeddings")
    with pytest.raises(ValueError, match="max_position_embeddings"):
        prefill(model, torch.zeros(limit + 1, dtype=torch.long))


def test_fits_max_position_embeddings_exactly():
    model = target("gdn", torch.float32)
    limit = model.config.max_position_embeddings
    cache, _ = prefill(model, torch.randint(64, (limit - 8,)))
    logits = verify(model, cache, chain_tree(torch.randint(64, (7,)), 1)).logits  # last position limit-1
    assert logits.shape == (8, 64) and bool(torch.isfinite(logits).all())


@pytest.mark.parametrize("bad", (-1, "vocab"))
def test_token_ids_outside_vocabulary(verified, bad):
    model, cache, pending = verified
    tree = pending.tree
    V = model.config.vocab_size
    bad = V if bad == "vocab" else bad
    for node in (0, len(tree) - 1):  # the root, a draft node
        tokens = tree.tokens.clone()
        tokens[node] = bad
        broken = DraftTree(tokens, tree.parents, tree.depths, tree.log_weights)
        raises_untouched(cache, lambda: verify(model, cache, broken), "token ids")
    with pytest.raises(ValueError, match="token ids"):
        prefill(model, [0, bad, 1])


def test_cache_from_another_model(verified):
    model, cache, pending = verified
    tree = pending.tree
    arch = "gdn" if wy.gdn_modules(model) else "mla"
    twin = build_target(f"{arch}-toy")  # same preset, another model object
    other = target("mla" if arch == "gdn" else "gdn", torch.float32)
    for wrong in (twin, other):
        raises_untouched(cache, lambda: verify(wrong, cache, tree), "same model")
        raises_untouched(cache, lambda: commit(wrong, cache, pending, [0]), "same model")


def test_commit_bad_paths(verified):
    model, cache, pending = verified
    tree = pending.tree
    not_child = next(i for i in range(2, len(tree)) if int(tree.parents[i]) != 1)  # built trees: 1 is a child of 0
    bad_paths = ([], [1], [0, 0], [0, len(tree)], [0, -1], [0, 1, not_child], [0, not_child, not_child])
    for path in bad_paths:
        raises_untouched(cache, lambda: commit(model, cache, pending, path), "path")
    other = cache.snapshot()
    stranger = verify(model, other, random_tree("bushy", 7, model.config.vocab_size, generator("other"))).pending
    raises_untouched(cache, lambda: commit(model, cache, stranger, [0]), "verify")  # another cache's verify
    raises_untouched(cache, lambda: commit(model, cache, tree, [0]), "verify")  # a tree is not a pending
    commit(model, cache, pending, tree.path_to(len(tree) - 1))  # the cache still works
    raises_untouched(cache, lambda: commit(model, cache, pending, [0]), "verify")  # committed already
    older = verify(model, cache, tree).pending
    verify(model, cache, tree)
    raises_untouched(cache, lambda: commit(model, cache, older, [0]), "verify")  # not the last verify


def test_commit_without_verify():
    model = target("gdn", torch.float32)
    cache, _ = prefill(model, [1, 2, 3])
    raises_untouched(cache, lambda: commit(model, cache, None, [0]), "verify")


# ----------------------------------------------------------------------------- adapter

def test_check_internals_passes():
    adapter.check_internals()


def test_check_internals_catches_version_change(monkeypatch):
    # by dotted name: importing some model classes replaces sys.modules["transformers"] (a new
    # _LazyModule), so a module object imported at the top of this file may be stale
    monkeypatch.setattr("transformers.__version__", "9.9.9")
    with pytest.raises(RuntimeError, match="9.9.9") as info:
        adapter.check_internals()
    print(f"RuntimeError: {info.value}")


def test_check_internals_catches_lost_attribute(monkeypatch):
    init = qwen35.Qwen3_5GatedDeltaNet.__init__

    def init_without_a_log(self, *args, **kwargs):
        init(self, *args, **kwargs)
        del self.A_log

    monkeypatch.setattr(qwen35.Qwen3_5GatedDeltaNet, "__init__", init_without_a_log)
    with pytest.raises(RuntimeError, match="A_log") as info:
        adapter.check_internals()
    print(f"RuntimeError: {info.value}")


@pytest.mark.parametrize("mode", GDN_MODES)
@pytest.mark.parametrize("pick", ("root", "deepest", "random"))
def test_commit_equals_its_replay_twin(mode, pick):
    """commit (stored / closed-form GDN states) == naive.commit (token-by-token replay)."""
    model, prefix, tree, path = commit_case(f"twin-{mode}", "bushy", pick, torch.float64)
    with harness.float64_harness():
        fast, _ = prefill(model, prefix)
        plain = fast.snapshot()
        fast_pending = verify(model, fast, tree, mode).pending
        plain_pending = verify(model, plain, tree, mode).pending
        commit(model, fast, fast_pending, path)
        naive.commit(model, plain, plain_pending, path)
    assert_same_cache(f"twin-{mode}-{pick}", plain, fast, 1e-12)


def test_verify_patches_no_module_and_the_routed_layer_is_the_stock_one():
    """GDN layers are routed once (``verify.route_recurrent``): after a verify no module holds a
    per-call ``forward``, and with transformers' own cache the routed model is the stock one."""
    from transformers import DynamicCache
    model = target("gdn", torch.float32)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9]])
    before = model(ids, past_key_values=DynamicCache(config=model.config), use_cache=True).logits
    cache, _ = prefill(model, [3, 1, 4])
    verify(model, cache, random_tree("bushy", 5, model.config.vocab_size, generator("route")), "wy")
    mods = wy.gdn_modules(model)
    assert mods and all("forward" not in vars(m) for m in mods.values())
    assert all(type(m) is verify_mod.route_class(qwen35.Qwen3_5GatedDeltaNet) for m in mods.values())
    after = model(ids, past_key_values=DynamicCache(config=model.config), use_cache=True).logits
    assert torch.equal(before, after)
    assert {i: m for i, (m, _) in verify_mod.route_recurrent(model).items()} == mods  # idempotent


def test_gdn_mode_is_an_object_chosen_once():
    from ddtree_lab.core.spec import ForkMode, GdnMode, NaiveMode, gdn_mode
    assert isinstance(gdn_mode("fork"), ForkMode) and isinstance(gdn_mode("naive"), NaiveMode)
    assert gdn_mode(gdn_mode("wy")) is gdn_mode("wy") and type(gdn_mode("wy")) is GdnMode
    with pytest.raises(ValueError, match="gdn_mode must be one of"):
        gdn_mode("exact")
    chain = torch.arange(4)
    assert not gdn_mode("naive").needs_rescore(chain) and gdn_mode("naive").needs_rescore(torch.tensor([0, 2]))
    assert not gdn_mode("wy").needs_rescore(torch.tensor([0, 2]))
