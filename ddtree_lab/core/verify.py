"""Masked tree verification on the real architectures (DDTree, arXiv 2604.12989, section 4;
docs/background.md section 4).

One target forward scores the root and every draft node: attention layers (Qwen3.5 full
attention, DeepSeek-V3 MLA) see the prefix plus the node's ancestors through an additive
ancestor mask, at position start + depth; Gated DeltaNet layers run one of three modes:

- ``"naive"``: the flattened tree read as a chain (conv window and recurrent state leak
  across siblings), what a tree-unaware implementation does;
- ``"fork"``: per-node conv windows from ancestors and per-node states from the parent's;
- ``"wy"``: the single-pass tree WY form (no per-node states).

``cache.commit`` then keeps the accepted path (see ``cache.py``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from . import adapter, gdn_tree
from .cache import TreeCache, check_cache, empty_cache
from .models import arch_of
from .tree import DraftTree, ancestor_mask, ancestor_mask_from_parents, position_ids

GDN_MODES = ("naive", "fork", "wy")


@dataclass(frozen=True, eq=False)
class TreeBuffers:
    """Everything consumers need from one tree, computed once per verify.

    parents, depths, positions LongTensor[N+1]; anc BoolTensor[N+1, N+1];
    gdn_parents: the parents the GDN layers use (a chain in naive mode).
    """
    tree: DraftTree
    positions: torch.Tensor
    anc: torch.Tensor
    gdn_parents: torch.Tensor
    gdn_anc: torch.Tensor


def tree_buffers(tree: DraftTree, start: int, gdn_mode: str = "wy") -> TreeBuffers:
    anc = ancestor_mask(tree)
    if gdn_mode == "naive":
        chain = gdn_tree.chain_parents(tree.num_nodes)
        return TreeBuffers(tree, position_ids(tree, start), anc, chain, ancestor_mask_from_parents(chain))
    return TreeBuffers(tree, position_ids(tree, start), anc, tree.parents, anc)


@dataclass(frozen=True, eq=False)
class Forward:
    """logits [T, V]; features [T, F] (hidden states of ``feature_layers``, concatenated)."""
    logits: torch.Tensor
    features: torch.Tensor | None


def _features(hidden_states, feature_layers) -> torch.Tensor | None:
    if not feature_layers:
        return None
    return torch.cat([hidden_states[i + 1][0] for i in feature_layers], dim=-1)


@torch.no_grad()
def prefill(model, ids, feature_layers: tuple = ()) -> tuple[TreeCache, Forward]:
    """Run the stock forward over ``ids`` [T] with transformers' own cache; T may be 0."""
    ids = _check_ids(model, ids, "ids")
    if ids.numel() == 0:
        return empty_cache(model), None
    _check_positions(model, ids.numel() - 1)
    from transformers import DynamicCache
    hf_cache = DynamicCache(config=model.config)
    out = model(ids[None].to(next(model.parameters()).device), past_key_values=hf_cache, use_cache=True,
                output_hidden_states=bool(feature_layers))
    state = adapter.read_hf_cache(model, hf_cache)
    cache = empty_cache(model)
    cache.kv = state["kv"]
    cache.conv.update(state["conv"])
    cache.rec.update(state["rec"])
    cache.length = ids.numel()
    return cache, Forward(out.logits[0], _features(out.hidden_states, feature_layers))


def token_ids(ids, vocab_size: int, name: str = "ids") -> torch.Tensor:
    """``ids`` (a list, array or tensor of integers) as LongTensor[T]; refuses floats and bools
    (a float prompt is not token ids) and ids outside [0, vocab_size)."""
    t = torch.as_tensor(ids)
    if t.numel() and (t.dtype == torch.bool or t.is_floating_point() or t.is_complex()):
        raise ValueError(f"{name} must be integer token ids, got dtype {t.dtype}")
    t = t.to(torch.long).reshape(-1)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= vocab_size):
        raise ValueError(f"{name} must hold token ids in [0, {vocab_size}), got min {int(t.min())} max {int(t.max())}")
    return t


def _check_ids(model, ids, name) -> torch.Tensor:
    return token_ids(ids, model.config.vocab_size, name)


def _check_positions(model, last_position: int) -> None:
    limit = model.config.max_position_embeddings
    if last_position >= limit:
        raise ValueError(f"tree positions must stay below max_position_embeddings={limit}, "
                         f"got last position {last_position}")


def check_verify_args(model, cache: TreeCache, tree: DraftTree, gdn_mode: str) -> None:
    if gdn_mode not in GDN_MODES:
        raise ValueError(f"gdn_mode must be one of {GDN_MODES}, got {gdn_mode!r}")
    check_cache(model, cache)
    _check_ids(model, tree.tokens, "tree.tokens")
    _check_positions(model, cache.length + int(tree.depths.max()))


def attention_bias(buf: TreeBuffers, past: int, dtype, device=None) -> torch.Tensor:
    """Additive mask [1, 1, N+1, past+N+1]: prefix visible, inside the tree ancestors only."""
    n = buf.anc.shape[0]
    allowed = torch.cat([torch.ones(n, past, dtype=torch.bool), buf.anc], dim=1).to(device)
    bias = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    return bias[None, None]


@torch.no_grad()
def verify(model, cache: TreeCache, tree: DraftTree, gdn_mode: str = "wy",
           feature_layers: tuple = ()) -> Forward:
    """Score root + tree in one forward: row i = next-token logits after committed + path(i).

    Leaves the committed cache untouched (attention rows of the tree are held as pending
    until ``commit``). Returns Forward(logits [N+1, V], features [N+1, F] or None).
    """
    check_verify_args(model, cache, tree, gdn_mode)
    buf = tree_buffers(tree, cache.length, gdn_mode)
    p = next(model.parameters())
    bias = attention_bias(buf, cache.length, p.dtype, p.device)
    mask = {"full_attention": bias, "linear_attention": None} if arch_of(model) == "gdn" else bias
    records: dict = {}
    with _tree_gdn(model, cache, buf, gdn_mode, records):
        out = model(tree.tokens[None].to(p.device), attention_mask=mask, position_ids=buf.positions[None].to(p.device),
                    past_key_values=cache, use_cache=True, output_hidden_states=bool(feature_layers))
    cache.pending = {"tree": tree, "mode": gdn_mode, "gdn": records,
                     "rescore": lambda chain: verify(model, cache, chain, "naive")}
    return Forward(out.logits[0], _features(out.hidden_states, feature_layers))


@contextlib.contextmanager
def _tree_gdn(model, cache: TreeCache, buf: TreeBuffers, mode: str, records: dict):
    """Route every GDN layer of ``model`` through ``gdn_tree_forward`` for one forward."""
    mods = adapter.gdn_modules(model)
    try:
        for i, m in mods.items():
            m.forward = _bound_gdn(m, i, cache, buf, mode, records)
        yield
    finally:
        for m in mods.values():
            del m.forward


def _bound_gdn(m, layer_idx, cache, buf, mode, records):
    def forward(hidden_states, cache_params=None, attention_mask=None, **kwargs):
        out, records[layer_idx] = gdn_tree_forward(m, hidden_states[0], cache.conv[layer_idx],
                                                   cache.rec[layer_idx], buf, mode)
        return out[None]
    return forward


def gdn_tree_forward(m, h, conv_state, S0, buf: TreeBuffers, mode: str):
    """One GDN layer on a tree. h [N+1, D] -> (out [N+1, D], record for commit).

    The record holds the pre-conv inputs x [N+1, C] and the raw gates a, b [N+1, H] (enough
    to replay any path: ``cache.replay_gdn``, the plain twin), plus what commit uses directly: in
    fork mode every node's state [N+1, H, dk, dv], in wy/naive mode the WY pass's U, G, k
    from which ``gdn_tree.wy_state`` forms the accepted node's state in one einsum.
    """
    x, z, a, b = adapter.gdn_project(m, h)
    y = gdn_tree.tree_conv(x, conv_state, adapter.gdn_conv_weight(m), buf.gdn_parents)
    q, k, v = adapter.gdn_qkv(m, y)
    g, beta = adapter.gdn_gates(m, a, b)
    S0 = S0.to(v.dtype)
    record = {"x": x, "a": a, "b": b}
    if mode == "fork":
        o, record["states"] = gdn_tree.gated_delta_fork(q, k, v, g, beta, buf.gdn_parents,
                                                        buf.tree.depths, S0)
    else:
        o, record["wy"] = gdn_tree.gated_delta_wy(q, k, v, g, beta, buf.gdn_parents, S0,
                                                  anc=buf.gdn_anc, return_aux=True)
        record["S0"] = S0
    return adapter.gdn_output(m, o, z, h.dtype), record


def tree_logits(model, prefix_ids, tree: DraftTree, gdn_mode: str = "wy") -> torch.Tensor:
    """[N+1, V]: row i = the target's next-token logits after prefix + path(root..i)."""
    cache, _ = prefill(model, prefix_ids)
    return verify(model, cache, tree, gdn_mode).logits


def tree_logits_reference(model, prefix_ids, tree: DraftTree) -> torch.Tensor:
    """``tree_logits``' plain twin [N+1, V]: row i = a stock forward (no cache, no mask) of
    prefix + the tokens of root .. i, one forward per node."""
    prefix, tokens = [int(t) for t in prefix_ids], tree.tokens.tolist()
    return torch.stack([full_forward_logits(model, prefix + [tokens[j] for j in tree.path_to(i)])
                        for i in range(len(tree))])


def full_forward_logits(model, ids) -> torch.Tensor:
    """The oracle: the stock forward without cache, last position's logits [V]."""
    with torch.no_grad():
        return model(torch.as_tensor(ids, dtype=torch.long)[None]).logits[0, -1]
