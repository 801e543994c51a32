"""The target's cache between rounds, its snapshot, and the commit after acceptance.

``TreeCache`` holds the committed rows (attention K/V or MLA latents, GDN conv windows and
recurrent states) plus the record of the last verify. ``commit`` keeps the accepted path
(DDTree, arXiv 2604.12989, section 4: "keep the rows of the accepted nodes, contiguous") and
leaves every GDN layer exactly as an AR prefill of the committed sequence would:

- fork mode: the accepted node's stored state;
- wy / naive mode: the closed form (W1) of ``gdn_tree.wy_state`` from the pre-verify state,
  which verify never modifies;
- naive mode with a path that is not nodes 0..k: the leaked hidden states corrupt K/V and GDN
  inputs, so the accepted path is re-scored as a chain (exact in naive mode) first.

``naive.commit`` (``core/naive.py``) is the plain twin: the GDN state by replaying the accepted path one
token at a time from the pre-verify state (``replay_gdn``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from transformers import DynamicCache

from . import adapter, batched, families, gdn_tree
from .tree import DraftTree, leading_rows


@dataclass(frozen=True, eq=False)
class Pending:
    """What the last verify left on a cache for ``commit``: its tree, its GDN mode
    (``gdn_layer.GdnMode``: the commit rule), the per-layer ``gdn_layer.GdnRecord``s, and
    ``rescore(model, cache, tree, path) -> path``, the chain re-verify a mode that leaked
    needs (``verify.rescore_chain``)."""
    tree: DraftTree
    mode: object
    gdn: dict
    rescore: Callable
    recurrent: dict = field(default_factory=dict)  # {layer: (mixer, family, record)}: the other families' layers


@dataclass(eq=False)
class TreeCache:
    """The target's cache between rounds: committed rows plus the pending verify.

    kv:   {attention layer: (keys, values)} [1, h, T(+N+1 pending), d] (MLA: latents)
    conv: {GDN layer: [C, K]}; rec: {GDN layer: [H, dk, dv]} (never written by verify)
    states: {layer: its family's state} for the recurrent layers of the other families
      (``core/families``: KDA, Mamba2, short conv, Mamba, OLMo's GDN), values never written
    pending: what the last verify left for ``commit`` (a ``Pending``)
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
    pending: Pending | None = None
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
        """Forget the last verify: its pending tree rows and records; the committed rows and
        the buffers (their room) stay, so the next verify writes where this one did (a
        benchmark's steady round without a ``snapshot``'s copy)."""
        for i, (k, v) in self.kv.items():
            self.kv[i] = (k[:, :, :self.length], v[:, :, :self.length])
        self.pending = None

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
    state_dtype = adapter.kernel_dtype(p.dtype)  # the stock kernels keep their states in it
    for i, m in adapter.gdn_modules(model).items():
        cache.conv[i] = p.new_zeros(m.conv_dim, m.conv_kernel_size)
        cache.rec[i] = torch.zeros(m.num_v_heads, m.head_k_dim, m.head_v_dim, dtype=state_dtype, device=p.device)
    cache.states = _zero_states(model)
    return cache


def _zero_states(model) -> dict:
    """{layer: the family's state, zeroed} for the ``adapter.family_modules`` layers (empty: none)."""
    mods = adapter.family_modules(model)
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


def _check_path(cache: TreeCache, tree: DraftTree, path) -> torch.Tensor:
    if cache.pending is None or cache.pending.tree is not tree:
        raise ValueError("commit needs the tree of the last verify() on this cache")
    idx = torch.as_tensor(path, dtype=torch.long)
    if idx.numel() == 0 or int(idx[0]) != 0 or not bool(((idx >= 0) & (idx < len(tree))).all()) \
            or not bool((tree.parents[idx[1:]] == idx[:-1]).all()):
        raise ValueError(f"path must be a root path of the tree starting at node 0, got {list(path)}")
    return idx


def _rescore_if_leaked(model, cache: TreeCache, tree: DraftTree, idx: torch.Tensor) -> torch.Tensor:
    """A mode that leaked (naive) with a branched path: verify the accepted path again as a
    chain; -> new idx."""
    if (cache.pending.gdn or cache.pending.recurrent) and cache.pending.mode.needs_rescore(idx):
        return cache.pending.rescore(model, cache, tree, idx)
    return idx


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


def _accept_rows(model, cache: TreeCache, tree: DraftTree, path, checked: bool = False) -> torch.Tensor:
    """The opening of every commit: check (unless ``checked``: the caller's accept walk made
    ``path``), re-score a leaked branched path, keep the accepted attention rows; -> the
    accepted nodes' indices (after a re-score: 0 .. len - 1)."""
    if checked:
        idx = torch.as_tensor(path, dtype=torch.long)
    else:
        check_cache(model, cache)
        idx = _check_path(cache, tree, path)
    idx = _rescore_if_leaked(model, cache, tree, idx)
    _keep_rows(cache, idx.tolist())
    return idx


@torch.no_grad()
def commit(model, cache: TreeCache, tree: DraftTree, path, checked: bool = False) -> None:
    """Keep the accepted nodes ``path`` (root .. deepest accepted, from ``tree.accept``).
    checked: True when ``path`` comes from this round's own accept walk on this cache's
    pending tree (the decoding loop), so nothing is re-validated. ``commit_batch`` of one."""
    commit_batch(model, [cache], [tree], [path], checked)


@torch.no_grad()
def commit_batch(model, caches: list[TreeCache], trees: list[DraftTree], paths: list, checked: bool = False) -> None:
    """``commit`` of every sequence of one round (``verify.verify_batch``'s caches): the
    attention rows per sequence, then the new GDN states of every layer and sequence at once
    (``_commit_layers``). Its twin: ``commit`` per sequence (a batch of one takes the
    per-sequence closed form, ``GdnMode.state``)."""
    idxs = [_accept_rows(model, c, t, p, checked) for c, t, p in zip(caches, trees, paths)]
    layers = list(caches[0].pending.gdn)
    wholes = [_one_pass([c.pending.gdn[i] for c in caches]) for i in layers]
    if layers and all(w is not None for w in wholes):
        _commit_layers(caches, layers, wholes, idxs)
    else:
        for i in layers:
            _commit_layer_each(caches, i, [c.pending.gdn[i] for c in caches], idxs)
    for c, idx in zip(caches, idxs):
        for i, (m, fam, record) in c.pending.recurrent.items():
            c.states[i] = families.commit_state(fam, m, record, idx.tolist())
        c.length += idx.numel()
        c.pending = None


def _commit_layers(caches: list[TreeCache], layers: list[int], wholes: list, idxs: list[torch.Tensor]) -> None:
    """Every GDN layer's new conv and recurrent states for the whole batch in one pass: the
    layers' batch records (``wholes``, one WY pass each) side by side [layers x B, ...], the
    paths' one index (``batched.path_rows``) repeated per layer; each cache keeps its rows."""
    B = len(caches)
    rows = batched.path_rows(idxs, wholes[0].x.device).repeat(len(layers))

    def side_by_side(get) -> torch.Tensor:
        return torch.cat([get(w) for w in wholes])

    convs = batched.conv_states_at(torch.stack([c.conv[i] for i in layers for c in caches]),
                                   side_by_side(lambda w: w.x), rows)
    states = batched.wy_states_at(side_by_side(lambda w: w.wy["U"]), side_by_side(lambda w: w.wy["G"]),
                                  side_by_side(lambda w: w.wy["k"]), side_by_side(lambda w: w.S0), rows)
    states = states.to(caches[0].rec[layers[0]].dtype)
    for i, layer_convs, layer_states in zip(layers, convs.split(B), states.split(B)):
        for c, conv, state in zip(caches, layer_convs, layer_states):
            c.conv[i], c.rec[i] = conv, state  # rows of the batch's tensors: no one writes a state in place


def _one_pass(records: list):
    """The batch record (``gdn_layer.GdnRecord.batch``) whose row b is ``records[b]`` for every b
    of a batch of two or more (one WY pass over them all, in this order); else None (a batch of
    one, fork, a re-scored chain, or records of separate verifies)."""
    whole = records[0].batch[0] if records[0].batch is not None else None
    if len(records) < 2 or whole is None or whole.x.shape[0] != len(records):
        return None
    if any(r.batch is None or r.batch[0] is not whole or r.batch[1] != b for b, r in enumerate(records)):
        return None
    return whole


def _commit_layer_each(caches: list[TreeCache], i: int, records: list, idxs: list[torch.Tensor]) -> None:
    """GDN layer i's new conv and recurrent states per sequence (``GdnMode.state``)."""
    mode = caches[0].pending.mode
    for c, rec, idx in zip(caches, records, idxs):
        c.conv[i] = gdn_tree.commit_conv_state(c.conv[i], rec.x[idx.to(rec.x.device)])
        c.rec[i] = mode.state(rec, idx.tolist()).to(c.rec[i].dtype).clone()


def replay_gdn(m, x_path, a_path, b_path, conv_state, S0):
    """Run a GDN layer's state along a committed chain: -> (conv_state [C, K], S [H, dk, dv]).

    x_path [P, C] pre-conv inputs, a_path / b_path [P, H] raw gates of the path's nodes.
    """
    y = gdn_tree.tree_conv(x_path, conv_state, adapter.gdn_conv_weight(m),
                           gdn_tree.chain_parents(x_path.shape[0] - 1))
    q, k, v = adapter.gdn_qkv(m, y)
    g, beta = adapter.gdn_gates(m, a_path, b_path)
    _, S = gdn_tree.gated_delta_chain(q, k, v, g, beta, S0.to(v.dtype))
    return gdn_tree.commit_conv_state(conv_state, x_path), S.to(S0.dtype)
