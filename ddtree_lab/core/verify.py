"""The target's side of a round, in one file: masked tree verification on the real
architectures, the cache between rounds and the commit (DDTree, arXiv 2604.12989, section 4;
docs/background.md section 4).

One target forward scores the root and every draft node: attention layers (Qwen3.5 full
attention, DeepSeek-V3 MLA) see the prefix plus the node's ancestors through an additive
ancestor mask, at position start + depth; recurrent layers run in the verification mode
(``spec.GdnMode``: "naive", "fork", "wy").

There is one verify, over a batch: ``verify_batch`` puts B sequences' trees into ONE stock
forward (docs/background.md section 7), and ``verify`` is its batch of one. Trees of one size
run as a batch of B rows of T tokens. Trees of different sizes run packed (issue 29 item 4):
the forward sees one row of N = sum N_b + B tokens, the trees side by side with no padding, so
every row-wise piece (embeddings, projections, MLP and experts, the head) costs N tokens, not
B x the largest tree; the attention (``packed_attention``, the module's own eager attention)
and the recurrent layers unpack them per sequence (``tree.unpack``) and pack their output back.

- attention layers: sequence b's committed rows sit LEFT-padded in a [B, h, Pmax, d] view of
  every attention cache (``TreeBatch``), its tree rows after them; the 4-D additive mask lets
  row i of sequence b see b's own committed rows and b's own ancestors of i only;
- recurrent layers: every stock mixer a family of ``core/families`` handles (found by the
  families' registry of classes, ``family_of``) is routed once per model (``route_recurrent``,
  ``TreeRoute``: a callback through transformers, because no stock route exists) to
  ``TreeBatch.recurrent_tree_layer``: a layer its family runs over a batch (Gated DeltaNet's,
  ``families/gdn/wy.py``) runs there for every tree at once, any other per sequence by its
  family's one-pass ``tree``. No module is patched per call: the forward is a function of
  (model, ``TreeBatch``), so ``torch.compile`` can capture it (``tree_forward``).

Each sequence keeps its own ``TreeCache``; ``verify_batch`` leaves every one with its tree rows
and a ``Pending`` record, so ``commit`` is the ragged commit: each sequence keeps its own
accepted rows, and each family commits its own layers' states.
"""
from __future__ import annotations

import itertools

import contextlib
import sys
import weakref
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable, Iterator

import torch
from transformers import AttentionInterface, DynamicCache

from . import families
from .spec import MODE_NAMES, GdnMode, gdn_mode as as_mode, token_ids  # noqa: F401  (verify.token_ids: its old name)
from .tree import (DraftTree, ancestor_mask, ancestor_mask_from_parents, batch_masks, chain_masks, chain_tree,
                   leading_rows, pack, packed_rows, position_ids, unpack)

GDN_MODES = MODE_NAMES


# ----------------------------------------------------------------------------- the cache and the commit

@dataclass(frozen=True, eq=False)
class Pending:
    """The round's pending state, a value: what one sequence's verify returns (``Forward.pending``)
    and ``commit`` takes. Its cache and that cache's ``serial`` at the verify (a commit checks
    both: the last verify of this cache, never committed), its tree, its mode (``spec.GdnMode``:
    the commit rule), the batched layers' records ({layer: ``wy.GdnRecord``}, the GDN
    snapshot: the pre-verify state S0 with the WY pass, or fork's per-node states) and their
    family, the other families' records, and ``rescore(model, cache, tree, path) -> (path,
    Pending)``, the chain re-verify a mode that leaked needs (``rescore_chain``)."""
    cache: "TreeCache"
    serial: int
    tree: DraftTree
    mode: object
    gdn: dict
    rescore: Callable
    recurrent: dict = field(default_factory=dict)  # {layer: (mixer, family, record)}: the other families' layers
    family: ModuleType | None = None  # the family module of the batched layers (``gdn``), None without any


@dataclass(eq=False)
class TreeCache:
    """The target's cache between rounds: committed rows plus the last verify's tree rows (its records travel in the returned ``Pending``).

    kv:   {attention layer: (keys, values)} [1, h, T(+N+1 pending), d] (MLA: latents)
    conv: {GDN layer: [C, K]}; rec: {GDN layer: [H, dk, dv]} (never written by verify)
    states: {layer: its family's state} for the recurrent layers of the other families
      (``core/families``: KDA, Mamba2, short conv, Mamba, OLMo's GDN), values never written
    serial: how many verifies and commits it has seen (a ``Pending`` is committed only while it
      is the cache's last: ``_check_path``)
    buffers: {(attention layer, 0 keys / 1 values): [1, h, capacity, d]}, this cache's own
      buffers; where one is held, ``kv``'s tensor of it is a view of its first rows, and a
      verify of this cache alone writes its tree rows after them in place (``appended``).
      A ``snapshot`` holds none, so it copies before it writes. In a batch a buffer is this
      sequence's row of one batch tensor (``verify.TreeBatch``; rows never overlap);
    batch_rows: {(attention layer, 0 / 1): (batch tensor [B, h, capacity, d], b, buffer)}
      for each buffer that is row b of a batch tensor (stale once ``buffers`` holds another).
    Implements the ``update`` call transformers' attention layers make on a cache.
    """
    model_key: tuple
    length: int = 0
    kv: dict = field(default_factory=dict)
    conv: dict = field(default_factory=dict)
    rec: dict = field(default_factory=dict)
    states: dict = field(default_factory=dict)
    serial: int = 0
    buffers: dict = field(default_factory=dict)
    batch_rows: dict = field(default_factory=dict)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if layer_idx in self.kv:
            k, v = self.kv[layer_idx]
            key_states = torch.cat([k[:, :, :self.length], key_states], dim=-2)
            value_states = torch.cat([v[:, :, :self.length], value_states], dim=-2)
        self.kv[layer_idx] = (key_states, value_states)
        for which in (0, 1):
            self.buffers.pop((layer_idx, which), None)  # its rows now live in these tensors
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def appended(self, layer: int, which: int, new: torch.Tensor) -> torch.Tensor:
        """[1, h, length + T, d]: the committed rows of ``layer``'s keys (``which`` 0) or values
        (1), then ``new`` [1, h, T, d], written after them into this cache's own buffer
        (``append_rows``); a view of it. Under ``torch.compile``: one ``cat``, no buffer."""
        held = self.kv[layer][which] if self.length else new
        buf, out = append_rows(self.buffers.get((layer, which)), held, self.length, new)
        if buf is None:
            self.buffers.pop((layer, which), None)
        else:
            self.buffers[(layer, which)] = buf
        return out

    def discard(self) -> None:
        """Forget the last verify: its tree rows (and, by bumping ``serial``, the ``Pending`` it returned); the committed rows and
        the buffers (their room) stay, so the next verify writes where this one did (a
        benchmark's steady round without a ``snapshot``'s copy)."""
        for i, (k, v) in self.kv.items():
            self.kv[i] = (k[:, :, :self.length], v[:, :, :self.length])
        self.serial += 1

    def snapshot(self) -> "TreeCache":
        """A copy to spend on one verify + commit, leaving this cache as it is. Cheap: it
        shares the committed tensors, which no one writes (a cache writes only past its own
        length, and only into buffers it holds; the copy holds none)."""
        return TreeCache(self.model_key, self.length, dict(self.kv), dict(self.conv), dict(self.rec), dict(self.states))


def grown(kept: torch.Tensor, capacity: int, rows: int) -> torch.Tensor:
    """A buffer [..., max(rows, 2 * capacity), d] whose first rows are ``kept`` [..., n, d]
    (zeros after them): a full buffer of ``capacity`` rows grown to hold ``rows``, at least
    doubling, so appends stay amortised O(new rows). ``append_rows`` grows its buffers by it."""
    out = kept.new_zeros(*kept.shape[:-2], max(rows, 2 * capacity), kept.shape[-1])
    out[..., :kept.shape[-2], :] = kept
    return out


def append_rows(buf: torch.Tensor | None, held: torch.Tensor, n: int, new: torch.Tensor) -> tuple:
    """Append ``new`` [..., T, d] after the first n rows of ``held`` [..., >= n, d]: ``buf``
    [..., capacity, d] (the caller's own buffer, whose first n rows they are) or, with ``buf``
    None, rows the caller must not write -> (buffer, view [..., n + T, d] of it): written in
    place, the buffer grown by ``grown`` when it is short (or absent). ``held`` is sliced only
    when its rows are copied (a growth), so an append in room is two views and one copy of
    ``new``. Under ``torch.compile`` -> (None, ``cat``): a buffer's growth would retrace the
    graph. The one append rule of the target's ``TreeCache`` and the drafter's
    ``ContextCache`` (a batch of one)."""
    if torch.compiler.is_compiling():
        return None, torch.cat([held.narrow(-2, 0, n), new], -2)
    end = n + new.shape[-2]
    if buf is None or buf.shape[-2] < end:
        buf = grown(held.narrow(-2, 0, n), 0 if buf is None else buf.shape[-2], end)
    buf.narrow(-2, n, new.shape[-2]).copy_(new)
    return buf, buf.narrow(-2, 0, end)


def held_batch(tags: list, buffers: list, rows: int) -> torch.Tensor | None:
    """The batch tensor [B, h, capacity, d] whose row b is holder b's buffer ``buffers[b]``,
    as ``hold_rows`` recorded it (``tags[b]`` = (tensor, b, view), or None), when every buffer
    is still that view and the tensor has ``rows`` columns of room -> that tensor; else None
    (the batch changed size or order, a buffer was replaced, or it lacks room). The one
    staleness rule of the target's ``TreeBatch`` and the drafter's ``batch_context``."""
    held = tags[0][0] if tags[0] is not None else None
    if held is None or held.shape[0] != len(buffers) or held.shape[2] < rows:
        return None
    for b, (buf, tag) in enumerate(zip(buffers, tags)):
        if tag is None or tag[0] is not held or tag[1] != b or buf is not tag[2]:
            return None
    return held


def batch_of_rows(kept: list, like: torch.Tensor, rows: int) -> torch.Tensor:
    """Committed rows ``kept[b]`` [h, n_b, d] (None: none) -> a new batch tensor [B, h, rows,
    d] (h, d, dtype and device of ``like`` [., h, ., d]) whose row b starts with ``kept[b]``,
    zeros after it: every kept row copied once."""
    out = like.new_zeros(len(kept), like.shape[1], rows, like.shape[3])
    for b, k in enumerate(kept):
        if k is not None:
            out[b, :, :k.shape[1]] = k
    return out


def hold_rows(out: torch.Tensor, tags: list[dict], key) -> list[torch.Tensor]:
    """Record row b of the batch tensor ``out`` [B, h, capacity, d] as holder b's (``tags[b][key]``
    = (out, b, view), read back by ``held_batch``) -> the row views [1, h, capacity, d], which
    each holder keeps as its buffer."""
    views = [out[b:b + 1] for b in range(out.shape[0])]
    for b, (tag, view) in enumerate(zip(tags, views)):
        tag[key] = (out, b, view)
    return views


def model_key(model) -> tuple:
    """What ties a cache to its model."""
    c = model.config
    return (id(model), type(model).__name__, c.vocab_size, c.hidden_size, c.num_hidden_layers)


def empty_cache(model) -> TreeCache:
    """A cache with no rows: zero conv windows and recurrent states for every GDN layer, and
    every other family's state zeroed (its shapes read from a stock step of one token)."""
    cache = TreeCache(model_key(model))
    p = next(model.parameters())
    for i, (m, fam) in batched_mixers(model).items():
        cache.conv[i], cache.rec[i] = fam.zero_state(m, p)
    cache.states = _zero_states(model)
    return cache


def _zero_states(model) -> dict:
    """{layer: the family's state, zeroed} for the ``family_modules`` layers (empty: none)."""
    mods = family_modules(model)
    if not mods:
        return {}
    hf = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.zeros(1, 1, dtype=torch.long, device=next(model.parameters()).device), past_key_values=hf,
              use_cache=True)
    zero = {i: families.state_of(fam, hf, i) for i, (_, fam) in mods.items()}
    return {i: {k: {j: torch.zeros_like(t) for j, t in part.items()} for k, part in s.items()} for i, s in zero.items()}


def check_cache(model, cache) -> None:
    if not isinstance(cache, TreeCache) or cache.model_key != model_key(model):
        raise ValueError("cache must be a TreeCache made by prefill() with this same model")


def _check_path(cache: TreeCache, pending: Pending, path) -> torch.Tensor:
    if not isinstance(pending, Pending) or pending.cache is not cache or pending.serial != cache.serial:
        raise ValueError("pending must be what the last verify() of this cache returned (its Forward's pending), "
                         "not yet committed")
    tree = pending.tree
    idx = torch.as_tensor(path, dtype=torch.long)
    if idx.numel() == 0 or int(idx[0]) != 0 or not bool(((idx >= 0) & (idx < len(tree))).all()) \
            or not bool((tree.parents[idx[1:]] == idx[:-1]).all()):
        raise ValueError(f"path must be a root path of the tree starting at node 0, got {list(path)}")
    return idx


def _rescore_if_leaked(model, cache: TreeCache, pending: Pending, idx: torch.Tensor) -> tuple:
    """A mode that leaked (naive) with a branched path: verify the accepted path again as a
    chain; -> (idx, pending), the chain's after a re-score."""
    if (pending.gdn or pending.recurrent) and pending.mode.needs_rescore(idx):
        return pending.rescore(model, cache, pending.tree, idx)
    return idx, pending


def _keep_rows(cache: TreeCache, idx: list[int]) -> None:
    """Keep the committed rows and the accepted tree rows ``idx`` (increasing, from 0): a
    slice when they are the first ones (a chain, or the main path of a tree: no copy), else
    the accepted rows gathered to the front of the tree rows, in place (the tree rows are this
    verify's own: no snapshot reads them)."""
    end = cache.length + len(idx)
    if not leading_rows(idx):
        rows = torch.tensor(idx) + cache.length
        for k, v in cache.kv.values():
            for t in (k, v):
                t[:, :, cache.length:end] = t.index_select(-2, rows.to(t.device))
    for i, (k, v) in cache.kv.items():
        cache.kv[i] = (k.narrow(2, 0, end), v.narrow(2, 0, end))


def _accept_rows(model, cache: TreeCache, pending: Pending, path, checked: bool = False) -> tuple:
    """The opening of every commit: check (unless ``checked``: the caller's accept walk made
    ``path``), re-score a leaked branched path, keep the accepted attention rows; -> (the
    accepted nodes' indices, the pending they index: after a re-score, the chain's 0 .. len - 1)."""
    if checked:
        idx = torch.as_tensor(path, dtype=torch.long)
    else:
        check_cache(model, cache)
        idx = _check_path(cache, pending, path)
    idx, pending = _rescore_if_leaked(model, cache, pending, idx)
    _keep_rows(cache, idx.tolist())
    return idx, pending


@torch.no_grad()
def commit(model, cache: TreeCache, pending: Pending, path, checked: bool = False) -> None:
    """Keep the accepted nodes ``path`` (root .. deepest accepted of ``pending.tree``, from
    ``tree.accept``) of the verify that returned ``pending`` (its ``Forward.pending``): the
    attention rows, and every recurrent layer's state after the path from the GDN snapshot
    (``Pending.gdn``) and the other families' records. checked: True when ``path`` comes from
    this round's own accept walk (the decoding loop), so nothing is re-validated.
    ``commit_batch`` of one."""
    commit_batch(model, [cache], [pending], [path], checked)


@torch.no_grad()
def commit_batch(model, caches: list[TreeCache], pendings: list[Pending], paths: list, checked: bool = False) -> None:
    """``commit`` of every sequence of one round (``verify.verify_batch``'s caches): the
    attention rows per sequence, then the new GDN states of every layer and sequence at once
    (the family's ``commit_batch_layers``). A batch of one takes the per-sequence closed form
    (``wy.commit_layer_each``, ``wy.state``); plain twin: ``naive.commit``."""
    accepted = [_accept_rows(model, c, p, path, checked) for c, p, path in zip(caches, pendings, paths)]
    idxs, pendings = [a[0] for a in accepted], [a[1] for a in accepted]
    family = pendings[0].family
    if family is not None:  # the GDN snapshot's commit: the state after each accepted path
        family.commit_batch_layers(caches, [p.gdn for p in pendings], idxs, pendings[0].mode)
    for c, p, idx in zip(caches, pendings, idxs):
        for i, (m, fam, record) in p.recurrent.items():
            c.states[i] = families.commit_state(fam, m, record, idx.tolist())
        c.length += idx.numel()
        c.serial += 1


# ----------------------------------------------------------------------------- routing

def family_of(module: torch.nn.Module) -> ModuleType | None:
    """The family module of a stock mixer (its class or a base class in the families' ``REGISTRY``),
    else None: core routes a layer by the registry of classes, never by a family's name."""
    registry = families.REGISTRY
    for cls in type(module).__mro__:
        if cls.__name__ in registry:
            return registry[cls.__name__]
    return None


@dataclass(frozen=True, eq=False)
class Routes:
    """A model's recurrent layers, found once (``routes``): each {decoder layer index: (its
    recurrent mixer, the mixer's family)}, in layer order. mixers: all of them (attention-only
    models: empty); batched: those their family runs over a batch of trees at once (their class
    in the family's ``BATCHED_CLASSES``: Gated DeltaNet's Qwen layouts, ``families/gdn/wy.py``),
    their states in ``TreeCache.conv`` / ``rec``; others: the rest, run per sequence by their
    family's one-pass ``tree``, their states in ``TreeCache.states``; conv_kernel: the batched
    layers' conv width K (None without any)."""
    mixers: dict
    batched: dict
    others: dict
    conv_kernel: int | None


def routes(model) -> Routes:
    """``model``'s ``Routes``: the walk over its modules runs once per model (every ``generate``,
    prefill and verify asks); later calls return what it found."""
    found = _ROUTES.get(model)
    if found is None:
        mixers = _walk_mixers(model)
        batched = {i: mf for i, mf in mixers.items() if isinstance(mf[0], getattr(mf[1], "BATCHED_CLASSES", ()))}
        others = {i: mf for i, mf in mixers.items() if i not in batched}
        kernel = next(iter(batched.values()))[0].conv_kernel_size if batched else None
        found = _ROUTES[model] = Routes(mixers, batched, others, kernel)
    return found


_ROUTES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its Routes


def recurrent_mixers(model) -> dict[int, tuple[torch.nn.Module, ModuleType]]:
    """{decoder layer index: (its recurrent mixer, the mixer's family)} of ``model`` (``Routes.mixers``)."""
    return routes(model).mixers


def _walk_mixers(model) -> dict:
    out = {}
    for i, layer in enumerate(model.model.layers):
        for m in layer.modules():
            fam = family_of(m)
            if fam is not None:
                out[i] = (m, fam)
                break
    return out


def batched_mixers(model) -> dict[int, tuple]:
    """The ``recurrent_mixers`` run over a batch of trees at once (``Routes.batched``)."""
    return routes(model).batched


def family_modules(model) -> dict[int, tuple]:
    """The other ``recurrent_mixers``, run per sequence (``Routes.others``)."""
    return routes(model).others


class TreeRoute:
    """A stock mixer with one more route: handed a cache that runs recurrent layers on trees (an
    object with ``recurrent_tree_layer(mixer, hidden_states) -> output``, ``TreeBatch``), the
    mixer runs there; with any other cache it is the stock forward. A callback through
    transformers, because no stock route exists: the stock mixers read and write their cache
    themselves, as a chain. Mixed in before a stock mixer class (``route_class``)."""

    def forward(self, hidden_states, *args, **kwargs):
        for value in (*args, *kwargs.values()):  # the cache comes as cache_params or past_key_values
            route = getattr(value, "recurrent_tree_layer", None)
            if route is not None:
                return route(self, hidden_states)
        return super().forward(hidden_states, *args, **kwargs)


_ROUTED_CLASSES: dict[type, type] = {}


def route_class(cls: type) -> type:
    """The routed twin of a stock mixer class (``TreeRoute`` mixed in before it), made once."""
    if issubclass(cls, TreeRoute):
        return cls
    if cls not in _ROUTED_CLASSES:
        _ROUTED_CLASSES[cls] = type(f"Tree{cls.__name__}", (TreeRoute, cls), {"__module__": __name__})
    return _ROUTED_CLASSES[cls]


def route_recurrent(model) -> dict[int, tuple]:
    """Give every recurrent mixer of ``model`` the tree route (``TreeRoute``), once: the weights,
    the stock behaviour and the state dict are unchanged; -> ``recurrent_mixers(model)``."""
    mods = recurrent_mixers(model)
    if model not in _ROUTED:
        for m, _ in mods.values():
            m.__class__ = route_class(type(m))
        _ROUTED[model] = True
    return mods


_ROUTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> routed


def runs_in_fast_loop(fam: ModuleType) -> bool:
    """Whether the fast loop can run ``fam``'s layers (a family says no with ``FAST_LOOP = False``)."""
    return getattr(fam, "FAST_LOOP", True)


def stock_output(fam: ModuleType, out: torch.Tensor):
    """``out`` [B, T, D] as the family's stock mixer returns it (``fam.stock_output``, else itself)."""
    return fam.stock_output(out) if hasattr(fam, "stock_output") else out


# ----------------------------------------------------------------------------- the loop's kernels

GROUPED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # what transformers' grouped_mm takes


def experts_setting(model) -> str | None:
    """The model's experts implementation (transformers' ``set_experts_implementation``), None
    when it has no mixture-of-experts layers."""
    has_experts = any(hasattr(type(m), "_apply_gate") for m in model.modules())
    return model.config._experts_implementation if has_experts else None


@contextlib.contextmanager
def loop_ready(model) -> Iterator[None]:
    """The kernels every lab loop runs its target on (AR, speculative, eager and compiled), the
    model's own settings restored on exit:
    - mixture-of-experts layers as transformers' ``grouped_mm`` (one grouped matmul over the
      routed tokens) instead of the eager loop over experts: at a verify of 9-65 tokens on the
      shipped MLA target it costs 0.85-0.88x, with the same logits bit for bit on this CPU
      (``core/tests/test_loop_ready.py``), and it has no data-dependent shapes, so a compiled
      forward has no graph break there;
    - recurrent layers take their tree route first (``route_recurrent``, once per model), so
      the AR step and the verify run (and compile) on the same layer classes.
    Other models, and float64 ones (``grouped_mm`` takes float32 and 16-bit floats only: the
    float64 proofs keep the eager experts), are left as they are."""
    route_recurrent(model)
    before = experts_setting(model)
    if before is None or before == "grouped_mm" or next(model.parameters()).dtype not in GROUPED_DTYPES:
        yield
        return
    model.set_experts_implementation("grouped_mm")
    try:
        yield
    finally:
        model.set_experts_implementation(before)


PACKED_ATTENTION = "ddtree_packed"


def packed_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, *, tree_rows, **kwargs):
    """The attention of a packed verify: the module's own eager attention, per sequence.

    query [1, h, N, d]: the N tree rows of B trees side by side; key, value [B, hk, S, d]: each
    sequence's committed rows then its tree rows (``verify.TreeBatch.update``); attention_mask
    [B, 1, T, S]; tree_rows LongTensor[N] (``packed_rows``). The query rows are
    unpacked to [B, h, T, d], attended as a padded batch and packed back: -> (out [1, N, h, dv],
    None)."""
    B, T = attention_mask.shape[0], attention_mask.shape[2]
    eager = sys.modules[type(module).__module__].eager_attention_forward
    out, _ = eager(module, unpack(query, tree_rows, B, T, 2), key, value, attention_mask, scaling, dropout)
    return pack(out, tree_rows, 1), None  # out [B, T, h, dv]


AttentionInterface.register(PACKED_ATTENTION, packed_attention)


@contextlib.contextmanager
def packed_attention_on(model, on: bool = True) -> Iterator[None]:
    """``model``'s attention layers run ``packed_attention`` inside the block (``on``), their
    own implementation restored on exit."""
    if not on:
        yield
        return
    before = model.config._attn_implementation
    model.config._attn_implementation = PACKED_ATTENTION
    try:
        yield
    finally:
        model.config._attn_implementation = before


def read_hf_cache(model, hf_cache, row: int = 0, first: int = 0) -> dict:
    """{'kv': {layer: (keys, values)}, 'conv': {layer: [C, K]}, 'rec': {layer: [H, dk, dv]},
    'states': {layer: a family's state}} of batch row ``row``, its attention rows from ``first``
    on (a left-padded row's own): kv of every cache layer holding keys (attention in
    ``self_attn``, Nemotron-H's ``mixer``, Zamba2's shared block, Falcon-H1's beside its Mamba),
    conv / rec of the ``GDN_CLASSES`` layers, states of the other families' layers."""
    out = {"kv": {}, "conv": {}, "rec": {}, "states": {}}
    for i, layer in enumerate(hf_cache.layers):
        if getattr(layer, "keys", None) is None or not getattr(layer, "is_initialized", False):
            continue
        out["kv"][i] = tuple(t[row:row + 1, :, first:] for t in (layer.keys, layer.values))  # [1, h, T, d] (MLA: latents, h = 1)
    for i, (_, fam) in family_modules(model).items():
        out["states"][i] = families.state_of(fam, hf_cache, i, row)
    for i in batched_mixers(model):
        out["conv"][i] = hf_cache.get_conv_state(i)[row].clone()       # [C, K]
        out["rec"][i] = hf_cache.get_recurrent_state(i)[row].clone()   # [H, dk, dv]
    return out

# ----------------------------------------------------------------------------- the trees' buffers

@dataclass(frozen=True, eq=False)
class TreeBuffers:
    """Everything consumers need from one tree, computed once per verify.

    positions LongTensor[N+1]; anc BoolTensor[N+1, N+1]; gdn_parents: the parents the GDN
    layers use (a chain in naive mode), gdn_anc their ancestor mask.
    """
    tree: DraftTree
    positions: torch.Tensor
    anc: torch.Tensor
    gdn_parents: torch.Tensor
    gdn_anc: torch.Tensor


def tree_buffers(tree: DraftTree, start: int, gdn_mode="wy") -> TreeBuffers:
    anc = ancestor_mask(tree)
    parents = tree.parents if gdn_mode is None else as_mode(gdn_mode).parents(tree)  # None: no recurrent layers
    gdn_anc = anc if parents is tree.parents else ancestor_mask_from_parents(parents)
    return TreeBuffers(tree, position_ids(tree, start), anc, parents, gdn_anc)


@dataclass(frozen=True, eq=False)
class BatchBuffers:
    """Everything one verify of B trees needs, from the trees and committed lengths, built once.

    sizes: N_b + 1 per tree; past: Pmax; tokens, positions LongTensor[B, T], T = max(sizes)
    (padding: token 0, position 0); allowed BoolTensor[B, T, Pmax + T] (attention), or None
    for one chain on an attention-only target (the causal mask after ``past`` rows, which
    ``attention_bias`` hands out as a view of a cached buffer);
    gdn_anc BoolTensor[B, T, T] (the GDN layers' ancestor masks, padding rows: diagonal) and
    windows LongTensor[B, T, K] (conv windows, rows into [conv_state.T ; x_b]): None on an
    attention-only target;
    per_tree: each sequence's ``TreeBuffers``;
    rows: the packed layout's rows LongTensor[N] (``packed_rows``), None when every
    tree has T nodes (the forward runs the padded layout, which then has no padding).
    """
    sizes: list[int]
    past: int
    tokens: torch.Tensor
    positions: torch.Tensor
    allowed: torch.Tensor
    gdn_anc: torch.Tensor | None
    windows: torch.Tensor | None
    per_tree: list[TreeBuffers]
    rows: torch.Tensor | None = None

    def spans(self) -> list[tuple[int, int, int]]:
        """(row of the output batch, first, end) of each sequence's rows in the forward's
        output: (b, 0, N_b + 1) padded, (0, offset, offset + N_b + 1) packed."""
        if self.rows is None:
            return [(b, 0, n) for b, n in enumerate(self.sizes)]
        ends = list(itertools.accumulate(self.sizes))
        return [(0, end - n, end) for n, end in zip(self.sizes, ends)]


def batch_buffers(trees: list[DraftTree], lengths: list[int], gdn_mode="wy",
                  conv_kernel: int | None = None, packed: bool = True) -> BatchBuffers:
    """Pack B trees on prefixes of ``lengths`` committed rows; gdn_mode: the recurrent layers'
    mode (None: an attention-only target, whose buffers keep the trees' own parents); ``conv_kernel``: the GDN conv
    width K (None for attention-only targets); packed: trees of different sizes run packed
    (``rows``; False: padded to the largest, packed's plain twin). Every mask and window is
    built for the batch at once (``batch_masks``); each ``per_tree`` entry is a view
    into the batch tensors.
    One chain on an attention-only target builds no mask (``chain_buffers``).
    Plain twin: ``naive.batch_buffers``."""
    if conv_kernel is None and len(trees) == 1 and trees[0].is_chain:
        return chain_buffers(trees[0], lengths[0])
    gdn_parents = [t.parents if gdn_mode is None else as_mode(gdn_mode).parents(t) for t in trees]
    m = batch_masks(trees, lengths, gdn_parents, conv_kernel)
    sizes = [len(t) for t in trees]
    per_tree = [TreeBuffers(t, m["positions"][b, :n], m["anc"][b, :n, :n], gdn_parents[b], m["gdn_anc"][b, :n, :n])
                for b, (t, n) in enumerate(zip(trees, sizes))]
    gdn = conv_kernel is not None
    return BatchBuffers(sizes, max(lengths), m["tokens"], m["positions"], m["allowed"],
                        m["gdn_anc"] if gdn else None, m["windows"] if gdn else None, per_tree,
                        packed_rows(sizes, max(sizes)) if packed else None)


def chain_buffers(chain: DraftTree, length: int) -> BatchBuffers:
    """``batch_buffers`` of one chain of n nodes after ``length`` committed rows on an
    attention-only target: no ``allowed`` (``attention_bias`` gives its causal mask);
    positions a view of ``arange`` [1, n], the chain's ancestor mask the lower triangle."""
    n = len(chain)
    positions = torch.arange(length, length + n)
    anc = chain_masks([n], n)[0]
    buffers = TreeBuffers(chain, positions, anc, chain.parents, anc)
    return BatchBuffers([n], length, chain.tokens[None], positions[None], None, None, None, [buffers])


def attention_bias(bufs: BatchBuffers, dtype, device=None) -> torch.Tensor:
    """The additive mask [B, 1, T, Pmax + T] the attention layers of a verify of ``bufs`` add:
    ``additive_mask(bufs.allowed)``; for one chain (``allowed`` None) a view of a cached
    buffer (``chain_bias``), or under ``torch.compile`` the same mask built in the graph."""
    if bufs.allowed is not None:
        return additive_mask(bufs.allowed, dtype, device)
    n, past = bufs.sizes[0], bufs.past
    if torch.compiler.is_compiling():
        causal = torch.ones(n, n, dtype=torch.bool, device=device).tril_()
        return additive_mask(torch.cat([causal.new_ones(n, past), causal], 1)[None], dtype, device)
    return chain_bias(n, past, dtype, device)


_CHAIN_BIAS: dict = {}


def chain_bias(n: int, past: int, dtype, device=None) -> torch.Tensor:
    """[1, 1, n, past + n] additive mask of a chain of n nodes after ``past`` committed rows:
    a view of one buffer per (n, dtype, device), kept for the process: zeros over the
    committed columns, the causal triangle last (-inf as ``finfo(dtype).min``, as
    ``additive_mask``). The buffer grows (at least doubling) when ``past`` outgrows it. Read
    only: the attention layers add it, never write it."""
    key = (n, dtype, torch.device(device or "cpu"))
    buf = _CHAIN_BIAS.get(key)
    if buf is None or buf.shape[-1] - n < past:
        cap = max(past, 256, 0 if buf is None else 2 * (buf.shape[-1] - n))
        buf = torch.zeros(1, 1, n, cap + n, dtype=dtype, device=device)
        buf[0, 0, :, cap:].masked_fill_(torch.ones(n, n, dtype=torch.bool, device=device).triu_(1),
                                        torch.finfo(dtype).min)
        _CHAIN_BIAS[key] = buf
    return buf[..., buf.shape[-1] - n - past:]


def additive_mask(allowed: torch.Tensor, dtype, device=None) -> torch.Tensor:
    """allowed [B, T, S] -> the additive mask [B, 1, T, S] the eager attention adds."""
    bias = torch.zeros(allowed.shape, dtype=dtype, device=device)
    return bias.masked_fill_(~allowed.to(device), torch.finfo(dtype).min)[:, None]


# ----------------------------------------------------------------------------- prefill

@dataclass(frozen=True, eq=False)
class Forward:
    """logits [T, V]; features [T, F] (hidden states of ``feature_layers``, concatenated);
    choice LongTensor[T]: the argmax of every row (a verify asked for it, ``greedy``), else None;
    pending: a verify's ``Pending``, what ``commit`` takes (a prefill's: None)."""
    logits: torch.Tensor
    features: torch.Tensor | None
    choice: torch.Tensor | None = None
    pending: Pending | None = None


def _features(hidden_states, feature_layers, b: int = 0, first: int = 0, end: int | None = None) -> torch.Tensor | None:
    """Rows first .. end of batch row b of every feature layer's hidden states [B, T, D],
    concatenated: [end - first, F]."""
    if not feature_layers:
        return None
    return torch.cat([hidden_states[i + 1][b, first:end] for i in feature_layers], dim=-1)


@torch.no_grad()
def prefill(model, ids, feature_layers: tuple = ()) -> tuple[TreeCache, Forward]:
    """Run the stock forward over ``ids`` [T] with transformers' own cache. T = 0 gives the
    empty cache and a Forward of no rows (logits [0, V], features [0, F] or None)."""
    ids = _check_ids(model, ids, "ids")
    if ids.numel() == 0:
        return empty_cache(model), _empty_forward(model, feature_layers)
    _check_positions(model, ids.numel() - 1)
    hf_cache = DynamicCache(config=model.config)
    out = model(ids[None].to(next(model.parameters()).device), past_key_values=hf_cache, use_cache=True,
                output_hidden_states=bool(feature_layers))
    return _cache_of(model, read_hf_cache(model, hf_cache), ids.numel()), \
        Forward(out.logits[0], _features(out.hidden_states, feature_layers))


def _cache_of(model, state: dict, length: int) -> TreeCache:
    """A ``TreeCache`` of ``length`` committed rows from ``read_hf_cache``'s state."""
    cache = empty_cache(model)
    cache.kv = state["kv"]
    cache.conv.update(state["conv"])
    cache.rec.update(state["rec"])
    cache.states.update(state["states"])
    cache.length = length
    return cache


def left_pad(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of any lengths -> ids [B, Pmax] (padding id 0 on the left), mask [B, Pmax] (1 = token)."""
    P = max(p.numel() for p in prompts)
    ids = torch.zeros(len(prompts), P, dtype=torch.long)
    mask = torch.zeros(len(prompts), P, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, P - p.numel():], mask[b, P - p.numel():] = p, 1
    return ids, mask


def padded_prefill(model, prompts: list[torch.Tensor], **kwargs) -> tuple:
    """ONE stock forward of B prompts (LongTensor [T_b] each, T_b >= 1) into transformers' own
    ``DynamicCache``: left-padded to the longest (``left_pad``), with a 2-D attention mask and
    per-row positions where the lengths differ; logits of the last row only -> (the model
    output, the cache, mask [B, P] (1 = token)). Batched AR and ``prefill_batch`` open with it;
    ``kwargs`` go to the forward."""
    device = next(model.parameters()).device
    ids, mask = (t.to(device) for t in left_pad(prompts))
    padded = not bool(mask.all())
    cache = DynamicCache(config=model.config)
    out = model(ids, attention_mask=mask if padded else None,
                position_ids=(mask.cumsum(-1) - 1).clamp(min=0) if padded else None,
                past_key_values=cache, use_cache=True, logits_to_keep=1, **kwargs)
    return out, cache, mask


@torch.no_grad()
def prefill_batch(model, prompts: list, feature_layers: tuple = ()) -> list[tuple[TreeCache, torch.Tensor | None]]:
    """``prefill`` of B prompts ``prompts[b]`` (LongTensor [T_b], T_b >= 0) in ONE stock forward
    -> per prompt (cache, features [T_b, F] or None); no logits (the forward computes the last
    row's only). Prompts of different lengths are left-padded, with a 2-D attention mask and
    per-row positions, as batched AR prefills (transformers zeroes a padding row's GDN inputs,
    so the recurrence starts from zero states at a prompt's first token); each cache keeps its
    own rows. A batch of one (and an empty prompt) is ``prefill`` itself. Its twin: ``prefill``
    per prompt (equal to float rounding; float64 under the harness)."""
    ids = [_check_ids(model, p, "ids") for p in prompts]
    full = [b for b, p in enumerate(ids) if p.numel()]
    if len(full) < 2:
        return [(c, f.features) for c, f in (prefill(model, p, feature_layers) for p in ids)]
    _check_positions(model, max(ids[b].numel() for b in full) - 1)
    out, hf_cache, mask = padded_prefill(model, [ids[b] for b in full], output_hidden_states=bool(feature_layers))
    opened = {}
    for row, b in enumerate(full):
        first = mask.shape[1] - ids[b].numel()
        state = read_hf_cache(model, hf_cache, row, first)
        opened[b] = (_cache_of(model, state, ids[b].numel()), _features(out.hidden_states, feature_layers, row, first))
    return [opened[b] if b in opened else (empty_cache(model), _empty_forward(model, feature_layers).features)
            for b in range(len(ids))]


def _empty_forward(model, feature_layers) -> Forward:
    p = next(model.parameters())
    width = len(feature_layers) * model.config.hidden_size
    return Forward(p.new_zeros(0, model.config.vocab_size),
                   p.new_zeros(0, width) if feature_layers else None)


def _check_ids(model, ids, name) -> torch.Tensor:
    return token_ids(ids, model.config.vocab_size, name)


def _check_positions(model, last_position: int) -> None:
    limit = model.config.max_position_embeddings
    if last_position >= limit:
        raise ValueError(f"tree positions must stay below max_position_embeddings={limit}, "
                         f"got last position {last_position}")


def check_verify_args(model, cache: TreeCache, tree: DraftTree, gdn_mode) -> None:
    as_mode(gdn_mode)
    check_cache(model, cache)
    _check_ids(model, tree.tokens, "tree.tokens")
    _check_positions(model, cache.length + int(tree.depths.max()))


# ----------------------------------------------------------------------------- the cache view

@dataclass(eq=False)
class TreeBatch:
    """What the target is handed as its cache in a verify: B per-sequence ``TreeCache``s as
    one batch, the trees' ``BatchBuffers`` and the GDN mode.

    Layout (B > 1): every sequence's rows left-aligned in one batch tensor per attention layer
    [B, h, capacity, d]: sequence b's committed rows at 0 .. L_b - 1, its tree rows from L_b
    (``BatchBuffers.allowed`` masks the rest). Each cache's buffer is its row of that tensor
    (``TreeCache.batch_rows``), so ``update`` (called by every attention layer) writes only
    the new rows [B, h, T, d] (or packed [1, h, N, d], ``bufs.rows``) to their places, copies
    no committed row, and hands each ``TreeCache`` its slice [1, h, L_b + T, d] (committed
    rows, then its pending tree rows), which ``verify.commit`` compacts in place. The batch
    tensor is built (every committed row copied once) only when the batch changes or
    outgrows it, at twice the room needed. Batch of one: the cache's own buffer
    (``TreeCache.appended``). ``recurrent_tree_layer`` (called by every routed recurrent layer)
    runs the layer on the trees and keeps each sequence's records, handed back in ``Forward.pending``.
    """
    caches: list[TreeCache]
    bufs: BatchBuffers
    mode: GdnMode
    routes: Routes  # the model's recurrent layers by decoder layer index, found once per model
    layer: Callable | None = None  # the family's ``tree_layer_batch`` (None) or its plain twin ``gdn.naive.tree_layer_batch``
    records: list[dict] = field(init=False)
    family: ModuleType | None = field(init=False, default=None)  # the family of the batched layers, once one ran
    recurrent: list[dict] = field(init=False)  # per sequence {layer: (mixer, family, record)}: the other families
    _where: tuple | None = field(init=False)  # B > 1: (sequence, column) LongTensor[M] each, M = B x T or N packed

    def __post_init__(self):
        self.records = [{} for _ in self.caches]
        self.recurrent = [{} for _ in self.caches]
        B, T = len(self.caches), max(self.bufs.sizes)
        self._where = None
        if B > 1:  # a batch of one appends to its own buffer (``TreeCache.appended``)
            rows = torch.arange(B * T) if self.bufs.rows is None else self.bufs.rows
            seq = rows // T
            col = torch.tensor([c.length for c in self.caches])[seq] + rows % T
            self._where = (seq, col)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if len(self.caches) == 1:
            kv = tuple(self.caches[0].appended(layer_idx, which, new)
                       for which, new in enumerate((key_states, value_states)))
            self.caches[0].kv[layer_idx] = kv
            return kv
        keys, values = (self._written(layer_idx, which, new) for which, new in enumerate((key_states, value_states)))
        T = max(self.bufs.sizes)
        for b, c in enumerate(self.caches):
            c.kv[layer_idx] = (keys[b:b + 1, :, :c.length + T], values[b:b + 1, :, :c.length + T])
        return keys[:, :, :self.bufs.past + T], values[:, :, :self.bufs.past + T]

    def _written(self, layer_idx: int, which: int, new: torch.Tensor) -> torch.Tensor:
        """The batch tensor [B, h, capacity, d] of ``layer_idx``'s keys (``which`` 0) or values
        (1) with the new rows ``new`` [B, h, T, d] (packed: [1, h, N, d]) written after each
        sequence's committed rows."""
        out = self._batch_tensor(layer_idx, which, new)
        seq, col = self._where
        rows = new.transpose(1, 2).reshape(-1, new.shape[1], new.shape[3])  # [M, h, d]
        out[seq.to(out.device), :, col.to(out.device)] = rows
        return out

    def _batch_tensor(self, layer_idx: int, which: int, new: torch.Tensor) -> torch.Tensor:
        """The caches' batch tensor of (layer_idx, which) when every cache's buffer is its row
        b of one with room for this verify; else a new one, every committed row copied in
        once (under ``torch.compile``: a fresh tensor per call, nothing kept)."""
        key, need = (layer_idx, which), self.bufs.past + max(self.bufs.sizes)
        held = held_batch([c.batch_rows.get(key) for c in self.caches], [c.buffers.get(key) for c in self.caches],
                          need)
        if held is not None:
            return held
        compiling = torch.compiler.is_compiling()
        out = batch_of_rows([c.kv[layer_idx][which][0, :, :c.length] if c.length else None for c in self.caches],
                            new, need if compiling else 2 * need)
        if not compiling:
            for c, view in zip(self.caches, hold_rows(out, [c.batch_rows for c in self.caches], key)):
                c.buffers[key] = view
        return out

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.bufs.past

    def recurrent_tree_layer(self, m, hidden_states: torch.Tensor):
        """Recurrent layer ``m`` on the trees (called by its ``TreeRoute``): hidden_states [B, T, D]
        (packed: [1, N, D]) -> the stock mixer's output for them. A layer its family runs over a
        batch (``BATCHED_CLASSES``) runs there at once (``self.layer``: the family's
        ``tree_layer_batch`` or its plain twin); any other, sequence by sequence (``_per_sequence``)."""
        i = m.layer_idx
        if i not in self.routes.batched:
            return self._per_sequence(m, self.routes.others[i][1], hidden_states)
        fam = self.routes.batched[i][1]
        conv = torch.stack([c.conv[i] for c in self.caches])  # [B, C, K]
        S0 = torch.stack([c.rec[i] for c in self.caches])  # [B, H, dk, dv]
        out, layer_records = (self.layer or fam.tree_layer_batch)(m, hidden_states, conv, S0, self.bufs, self.mode)
        for rec, layer_rec in zip(self.records, layer_records):
            rec[i] = layer_rec
        self.family = fam
        return out

    def _per_sequence(self, m, fam, hidden_states: torch.Tensor):
        """A recurrent layer of a family with no batched form for it (``core/families``), sequence by
        sequence: its one-pass ``tree`` form (fork mode: the plain fork) over the parents the
        mode gives (naive: a chain) -> the stock mixer's output for hidden_states [B, T, D]
        (packed: [1, N, D]); each sequence's record kept for ``commit``."""
        i = m.layer_idx
        B, T = len(self.caches), max(self.bufs.sizes)
        h = hidden_states if self.bufs.rows is None else unpack(hidden_states, self.bufs.rows, B, T, 1)
        out = torch.zeros_like(h)
        for b, (c, n, buf) in enumerate(zip(self.caches, self.bufs.sizes, self.bufs.per_tree)):
            out[b, :n], record = families.tree_forward(fam, m, h[b, :n], c.states[i], buf.gdn_parents, buf.gdn_anc,
                                                       fork_nodes=self.mode.forks)
            self.recurrent[b][i] = (m, fam, record)
        out = out if self.bufs.rows is None else pack(out, self.bufs.rows, 1)
        return stock_output(fam, out)


# ----------------------------------------------------------------------------- verify

def tree_forward(model, view: TreeBatch, hidden: bool = False):
    """The verify's one target forward over ``view`` (a ``TreeBatch``): -> the model output
    (logits [B, T, V], or [1, N, V] packed (``view.bufs.rows``); hidden states if ``hidden``).
    Its inputs are (model, view) only and no module is patched per call, so ``torch.compile``
    can capture it (scripts/bench_compile.py). A packed forward runs inside
    ``packed_attention_on(model)`` (``verify_batch_unchecked`` enters it) and hands its
    attention the packed rows (``tree_rows``). Not pure: through ``TreeBatch.update`` every
    sequence's cache takes its tree rows, pending until ``verify.commit``."""
    p, bufs = next(model.parameters()), view.bufs
    bias = attention_bias(bufs, p.dtype, p.device)
    mask = bias if bufs.gdn_anc is None else {"full_attention": bias, "linear_attention": None}
    tokens, positions, packed = bufs.tokens.to(p.device), bufs.positions.to(p.device), {}
    if bufs.rows is not None:
        tokens, positions = (pack(x, bufs.rows, 1) for x in (tokens, positions))
        packed = {"tree_rows": bufs.rows.to(p.device)}
    return model(tokens, attention_mask=mask, position_ids=positions, past_key_values=view, use_cache=True,
                 output_hidden_states=hidden, **packed)


@torch.no_grad()
def verify_batch(model, caches: list[TreeCache], trees: list[DraftTree], gdn_mode="wy",
                 feature_layers: tuple = (), gdn_layer=None, *, forward=tree_forward, packed: bool = True) -> list[Forward]:
    """Score B sequences' root + tree in ONE forward: -> per sequence Forward(logits [N_b+1, V],
    features [N_b+1, F] or None, pending: its ``Pending``, what ``commit`` takes); row i = next-token logits after committed + path(i).

    Checks its arguments, then ``verify_batch_unchecked`` (what the decoding loop calls every
    round, its arguments checked once per generation). Writes no committed row: every cache
    keeps its tree rows until ``commit``, which takes the ``Pending`` returned in ``Forward.pending``.
    gdn_layer: ``wy.tree_layer_batch`` (default) or its plain twin ``gdn.naive.tree_layer_batch``; forward:
    ``tree_forward`` or a compiled copy of it; packed: trees of different sizes run packed
    (False: padded to the largest tree, the layout packing is measured against).
    """
    mode = as_mode(gdn_mode)
    _check_batch(model, caches, trees, mode)
    return verify_batch_unchecked(model, caches, trees, mode, feature_layers, gdn_layer, forward=forward, packed=packed)


@torch.no_grad()
def verify_batch_unchecked(model, caches: list[TreeCache], trees: list[DraftTree], mode: GdnMode,
                           feature_layers: tuple = (), gdn_layer=None, *, forward=tree_forward,
                           packed: bool = True, greedy: bool = False) -> list[Forward]:
    """``verify_batch`` on arguments already checked (``mode``: a ``GdnMode``; the token ids and
    positions of every tree valid for its cache and the model). greedy: every Forward also
    carries the argmax of its rows (``choice``), one argmax over the batch's logits."""
    route_recurrent(model)
    found = routes(model)
    recurrent = mode if found.mixers else None  # an attention-only target runs no recurrent-layer code
    view = TreeBatch(caches, batch_buffers(trees, [c.length for c in caches], recurrent, found.conv_kernel, packed),
                     mode, found, gdn_layer)
    with packed_attention_on(model, view.bufs.rows is not None):
        out = forward(model, view, bool(feature_layers))
    pendings = []
    for c, tree, rec, other in zip(caches, trees, view.records, view.recurrent):
        c.serial += 1
        pendings.append(Pending(c, c.serial, tree, mode, rec, rescore_chain, other, view.family))
    choice = out.logits.argmax(-1) if greedy else None  # [B, T] (packed: [1, N])
    return [Forward(out.logits[b, first:end], _features(out.hidden_states, feature_layers, b, first, end),
                    None if choice is None else choice[b, first:end], pending)
            for (b, first, end), pending in zip(view.bufs.spans(), pendings)]


@torch.no_grad()
def verify(model, cache: TreeCache, tree: DraftTree, gdn_mode="wy", feature_layers: tuple = ()) -> Forward:
    """``verify_batch`` of one sequence: Forward(logits [N+1, V], features [N+1, F] or None, pending)."""
    return verify_batch(model, [cache], [tree], gdn_mode, feature_layers)[0]


def rescore_chain(model, cache: TreeCache, tree: DraftTree, path: torch.Tensor) -> tuple:
    """Naive mode, a branched accepted ``path``: verify its tokens again as a chain (exact in
    naive mode) so the commit keeps unleaked rows; -> (the chain's path 0 .. len - 1, its ``Pending``)."""
    out = verify(model, cache, chain_tree(tree.tokens[path[1:]], int(tree.tokens[0])), "naive")
    return torch.arange(path.numel()), out.pending


def _check_batch(model, caches, trees, mode) -> None:
    if not caches or len(caches) != len(trees):
        raise ValueError(f"caches and trees must be non-empty lists of the same length, "
                         f"got {len(caches)} caches and {len(trees)} trees")
    if len({id(c) for c in caches}) != len(caches):
        raise ValueError("caches must be distinct TreeCache objects (one per sequence)")
    for c, t in zip(caches, trees):
        check_verify_args(model, c, t, mode)



def tree_logits(model, prefix_ids, tree: DraftTree, gdn_mode: str = "wy") -> torch.Tensor:
    """[N+1, V]: row i = the target's next-token logits after prefix + path(root..i)."""
    cache, _ = prefill(model, prefix_ids)
    return verify(model, cache, tree, gdn_mode).logits


def full_forward_logits(model, ids) -> torch.Tensor:
    """The oracle: the stock forward without cache, last position's logits [V]."""
    with torch.no_grad():
        return model(torch.as_tensor(ids, dtype=torch.long)[None]).logits[0, -1]
