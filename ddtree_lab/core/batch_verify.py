"""Batched tree verification: B sequences' draft trees in ONE target forward (issue 13 item 1).

The batch-B twin of ``verify.verify`` (DDTree, arXiv 2604.12989, section 4;
docs/background.md sections 4 and 7):

- attention layers (Qwen3.5 full attention, DeepSeek-V3 MLA): sequence b's committed rows sit
  LEFT-padded in a [B, h, Pmax, d] view of every attention cache (``BatchCache``), its tree
  rows after them; the 4-D additive mask lets row i of sequence b see b's own committed rows
  and b's own ancestors of i only (padding columns masked; padding rows see themselves);
  positions are b's committed length + depth;
- Gated DeltaNet layers (``gdn_tree_forward_batch``): projections, gates and the output norm
  over all B x T rows at once; the ancestor-window conv as one gather over every sequence's
  own conv state (``tree_conv_batch``); the tree WY pass (W1-W3 of ``gdn_tree``) for all
  sequences in one ``torch.vmap`` of ``gdn_tree.gated_delta_wy`` over padded trees (padding
  nodes are isolated roots: no real node sees them). ``fork`` mode loops over sequences.
  ``gdn_tree_forward_batch_reference`` is the plain twin: batch-1 ``verify.gdn_tree_forward``
  per sequence.

Each sequence keeps its own ``TreeCache``; ``verify_batch`` leaves every one of them exactly as
batch-1 ``verify`` would (tree rows pending), so ``cache.commit`` is the ragged commit: each
sequence keeps its own accepted rows.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import adapter, gdn_tree
from .cache import TreeCache
from .drafter import left_padded
from .models import arch_of
from .tree import DraftTree
from .verify import Forward, TreeBuffers, check_verify_args, gdn_tree_forward, tree_buffers, verify


# ----------------------------------------------------------------------------- batch buffers

@dataclass(frozen=True, eq=False)
class BatchBuffers:
    """Everything one batched verify needs, from the trees and committed lengths, built once.

    sizes: N_b + 1 per tree; past: Pmax; tokens, positions LongTensor[B, T], T = max(sizes)
    (padding: token 0, position 0); allowed BoolTensor[B, T, Pmax + T] (attention);
    gdn_anc BoolTensor[B, T, T] (the GDN layers' ancestor masks, padding rows: diagonal);
    windows LongTensor[B, T, K] (conv windows, rows into [conv_state.T ; x_b]) or None;
    per_tree: each sequence's batch-1 ``TreeBuffers``.
    """
    sizes: list[int]
    past: int
    tokens: torch.Tensor
    positions: torch.Tensor
    allowed: torch.Tensor
    gdn_anc: torch.Tensor
    windows: torch.Tensor | None
    per_tree: list[TreeBuffers]


def batch_buffers(trees: list[DraftTree], lengths: list[int], gdn_mode: str = "wy",
                  conv_kernel: int | None = None) -> BatchBuffers:
    """Pack B trees on prefixes of ``lengths`` committed rows; ``conv_kernel``: the GDN conv
    width K (None for attention-only targets)."""
    per_tree = [tree_buffers(t, n, gdn_mode) for t, n in zip(trees, lengths)]
    sizes = [len(t) for t in trees]
    tokens, positions = _padded([t.tokens for t in trees]), _padded([buf.positions for buf in per_tree])
    gdn_anc = _padded_masks([buf.gdn_anc for buf in per_tree], max(sizes))
    windows = None if conv_kernel is None else conv_windows(per_tree, conv_kernel)
    return BatchBuffers(sizes, max(lengths), tokens, positions, batch_allowed(per_tree, lengths),
                        gdn_anc, windows, per_tree)


def _padded(rows: list[torch.Tensor]) -> torch.Tensor:
    """1-D LongTensors of lengths n_b -> [B, max n_b], zeros after each row."""
    out = torch.zeros(len(rows), max(r.numel() for r in rows), dtype=torch.long)
    for b, r in enumerate(rows):
        out[b, :r.numel()] = r
    return out


def _padded_masks(masks: list[torch.Tensor], T: int) -> torch.Tensor:
    """[n_b, n_b] bool masks -> [B, T, T]; padding rows see themselves only."""
    out = torch.eye(T, dtype=torch.bool).repeat(len(masks), 1, 1)
    for b, m in enumerate(masks):
        out[b, :m.shape[0], :m.shape[0]] = m
    return out


def batch_allowed(per_tree: list[TreeBuffers], lengths: list[int]) -> torch.Tensor:
    """BoolTensor[B, T, Pmax + T]: row i of sequence b sees b's committed rows (the last
    lengths[b] of the Pmax prefix columns) and b's ancestors of i; padding rows see themselves."""
    T, P = max(buf.anc.shape[0] for buf in per_tree), max(lengths)
    allowed = torch.zeros(len(per_tree), T, P, dtype=torch.bool)
    for b, buf in enumerate(per_tree):
        allowed[b, :buf.anc.shape[0], P - lengths[b]:] = True
    return torch.cat([allowed, _padded_masks([buf.anc for buf in per_tree], T)], dim=2)


def conv_windows(per_tree: list[TreeBuffers], K: int) -> torch.Tensor:
    """LongTensor[B, T, K]: ``gdn_tree.ancestor_windows`` of every tree (over the GDN parents),
    padded; a padding node's window is itself K times."""
    T = max(buf.gdn_parents.numel() for buf in per_tree)
    out = (K + torch.arange(T))[None, :, None].repeat(len(per_tree), 1, K)
    for b, buf in enumerate(per_tree):
        out[b, :buf.gdn_parents.numel()] = gdn_tree.ancestor_windows(buf.gdn_parents.cpu(), K)
    return out


def additive_mask(allowed: torch.Tensor, dtype, device=None) -> torch.Tensor:
    """allowed [B, T, S] -> the additive mask [B, 1, T, S] the eager attention adds."""
    bias = torch.zeros(allowed.shape, dtype=dtype, device=device)
    return bias.masked_fill_(~allowed.to(device), torch.finfo(dtype).min)[:, None]


# ----------------------------------------------------------------------------- the cache view

@dataclass(eq=False)
class BatchCache:
    """B per-sequence ``TreeCache``s seen by the target as one left-padded batch.

    ``update`` (called by every attention layer) stacks each sequence's committed rows
    left-padded to [B, h, Pmax, d], appends the new rows [B, h, T, d] and hands each
    ``TreeCache`` its own slice [1, h, L_b + T, d] (committed rows, then its pending tree rows),
    which ``cache.commit`` then compacts exactly as after a batch-1 verify.
    """
    caches: list[TreeCache]
    past: int = 0

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        keys = torch.cat([self._stacked(layer_idx, 0, key_states), key_states], dim=-2)
        values = torch.cat([self._stacked(layer_idx, 1, value_states), value_states], dim=-2)
        for b, c in enumerate(self.caches):
            c.kv[layer_idx] = (keys[b:b + 1, :, self.past - c.length:], values[b:b + 1, :, self.past - c.length:])
        return keys, values

    def _stacked(self, layer_idx: int, which: int, new: torch.Tensor) -> torch.Tensor:
        """[B, h, Pmax, d]: each sequence's committed rows, right-aligned (left padding zeros)."""
        return left_padded([c.kv[layer_idx][which][:, :, :c.length] if c.length else new[:1, :, :0]
                            for c in self.caches], self.past)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.past


# ----------------------------------------------------------------------------- verify

@torch.no_grad()
def verify_batch(model, caches: list[TreeCache], trees: list[DraftTree], gdn_mode: str = "wy",
                 feature_layers: tuple = (), gdn_layer=None) -> list[Forward]:
    """``verify`` for B sequences in ONE forward: -> per sequence Forward(logits [N_b+1, V],
    features [N_b+1, F] or None). Each cache is left as batch-1 ``verify`` leaves it
    (committed rows untouched, tree rows pending), so ``cache.commit`` works per sequence.
    gdn_layer: ``gdn_tree_forward_batch`` (default) or its ``_reference`` twin."""
    _check_batch(model, caches, trees, gdn_mode)
    gdn = adapter.gdn_modules(model)
    K = next(iter(gdn.values())).conv_kernel_size if gdn else None
    bufs = batch_buffers(trees, [c.length for c in caches], gdn_mode, K)
    p = next(model.parameters())
    bias = additive_mask(bufs.allowed, p.dtype, p.device)
    mask = {"full_attention": bias, "linear_attention": None} if arch_of(model) == "gdn" else bias
    records: list[dict] = [{} for _ in caches]
    with _batch_tree_gdn(gdn, caches, bufs, gdn_mode, records, gdn_layer or gdn_tree_forward_batch):
        out = model(bufs.tokens.to(p.device), attention_mask=mask, position_ids=bufs.positions.to(p.device),
                    past_key_values=BatchCache(caches, bufs.past), use_cache=True,
                    output_hidden_states=bool(feature_layers))
    for c, tree, rec in zip(caches, trees, records):
        c.pending = {"tree": tree, "mode": gdn_mode, "gdn": rec,
                     "rescore": lambda chain, c=c: verify(model, c, chain, "naive")}
    return [Forward(out.logits[b, :n], _batch_features(out.hidden_states, feature_layers, b, n))
            for b, n in enumerate(bufs.sizes)]


def _batch_features(hidden_states, feature_layers, b: int, n: int) -> torch.Tensor | None:
    """Sequence b's features [n, F] from the batched hidden states [B, T, D] per layer."""
    if not feature_layers:
        return None
    return torch.cat([hidden_states[i + 1][b, :n] for i in feature_layers], dim=-1)


def _check_batch(model, caches, trees, gdn_mode) -> None:
    if not caches or len(caches) != len(trees):
        raise ValueError(f"caches and trees must be non-empty lists of the same length, "
                         f"got {len(caches)} caches and {len(trees)} trees")
    if len({id(c) for c in caches}) != len(caches):
        raise ValueError("caches must be distinct TreeCache objects (one per sequence)")
    for c, t in zip(caches, trees):
        check_verify_args(model, c, t, gdn_mode)


@contextlib.contextmanager
def _batch_tree_gdn(gdn: dict, caches, bufs: BatchBuffers, mode: str, records: list[dict], layer):
    """Route every GDN layer through ``layer`` (a ``gdn_tree_forward_batch`` twin) for one forward."""
    try:
        for i, m in gdn.items():
            m.forward = _bound_batch_gdn(m, i, caches, bufs, mode, records, layer)
        yield
    finally:
        for m in gdn.values():
            del m.forward


def _bound_batch_gdn(m, layer_idx, caches, bufs: BatchBuffers, mode, records, layer):
    def forward(hidden_states, cache_params=None, attention_mask=None, **kwargs):
        conv = torch.stack([c.conv[layer_idx] for c in caches])  # [B, C, K]
        S0 = torch.stack([c.rec[layer_idx] for c in caches])  # [B, H, dk, dv]
        out, layer_records = layer(m, hidden_states, conv, S0, bufs, mode)
        for rec, layer_rec in zip(records, layer_records):
            rec[layer_idx] = layer_rec
        return out
    return forward


# ----------------------------------------------------------------------------- GDN layers

def gdn_tree_forward_batch(m, h, conv_state, S0, bufs: BatchBuffers, mode: str):
    """One GDN layer on B padded trees. h [B, T, D], conv_state [B, C, K], S0 [B, H, dk, dv]
    -> (out [B, T, D] (padding rows: values never read), per-sequence records as
    ``verify.gdn_tree_forward`` makes them). fork mode: the per-sequence loop."""
    if mode == "fork":
        return gdn_tree_forward_batch_reference(m, h, conv_state, S0, bufs, mode)
    B, T, D = h.shape
    x, z, a, b = adapter.gdn_project(m, h.reshape(B * T, D))  # [B*T, C], [B*T, H, dv], [B*T, H] x2
    y = tree_conv_batch(x.view(B, T, -1), conv_state, adapter.gdn_conv_weight(m), bufs.windows)
    q, k, v = adapter.gdn_qkv(m, y.reshape(B * T, -1))
    g, beta = adapter.gdn_gates(m, a, b)
    S0 = S0.to(v.dtype)
    o, aux = gated_delta_wy_batch(*(t.view(B, T, *t.shape[1:]) for t in (q, k, v, g, beta)), S0, bufs.gdn_anc)
    out = adapter.gdn_output(m, o.reshape(B * T, *o.shape[2:]), z, h.dtype).view(B, T, D)
    x, a, b = (t.view(B, T, -1) for t in (x, a, b))
    return out, [{"x": x[i, :n], "a": a[i, :n], "b": b[i, :n], "S0": S0[i],
                  "wy": {"U": aux["U"][i], "G": aux["G"][i], "k": aux["k"][i]}} for i, n in enumerate(bufs.sizes)]


def gdn_tree_forward_batch_reference(m, h, conv_state, S0, bufs: BatchBuffers, mode: str):
    """Plain twin of ``gdn_tree_forward_batch``: batch-1 ``verify.gdn_tree_forward`` per sequence."""
    out, records = torch.zeros_like(h), []
    for i, n in enumerate(bufs.sizes):
        out[i, :n], rec = gdn_tree_forward(m, h[i, :n], conv_state[i], S0[i], bufs.per_tree[i], mode)
        records.append(rec)
    return out, records


def tree_conv_batch(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                    windows: torch.Tensor) -> torch.Tensor:
    """``gdn_tree.tree_conv`` of B sequences at once: x [B, T, C], conv_state [B, C, K],
    weight [C, K], windows [B, T, K] (``conv_windows``) -> silu(conv) [B, T, C]."""
    rows = torch.cat([conv_state.transpose(1, 2), x], dim=1)  # [B, K+T, C]
    batch_idx = torch.arange(x.shape[0], device=x.device)[:, None, None]
    picked = rows[batch_idx, windows.to(x.device)]  # [B, T, K, C]
    return F.silu((picked * weight.T).sum(2))  # a multiply-sum: einsum's bmm is ~5x slower at this shape


def _wy_one(q, k, v, g, beta, S0, anc):
    return gdn_tree.gated_delta_wy(q, k, v, g, beta, None, S0, anc=anc, return_aux=True)


def gated_delta_wy_batch(q, k, v, g, beta, S0, anc):
    """``gdn_tree.gated_delta_wy`` over B padded trees in one vmapped pass.

    q, k [B, T, H, dk], v [B, T, H, dv], g, beta [B, T, H], S0 [B, H, dk, dv], anc [B, T, T]
    -> (o [B, T, H, dv], aux {"U": [B, H, T, dv], "G": [B, T, H] float64, "k": [B, H, T, dk]}).
    """
    return torch.vmap(_wy_one)(q, k, v, g, beta, S0, anc.to(q.device))
