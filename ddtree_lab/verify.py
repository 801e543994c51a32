"""Masked tree verification on the real architectures (DDTree section 4; RESEARCH.md 4).

One target forward scores the root and every draft node: attention layers (Qwen3.5 full
attention, DeepSeek-V3 MLA) see the prefix plus the node's ancestors through an additive
ancestor mask, at position start + depth; Gated DeltaNet layers run one of three modes:

- ``"naive"``: the flattened tree read as a chain (conv window and recurrent state leak
  across siblings), what a tree-unaware implementation does;
- ``"fork"``: per-node conv windows from ancestors and per-node states from the parent's;
- ``"wy"``: the single-pass tree WY form (no per-node states).

``commit`` then leaves the cache exactly as an AR prefill of the committed sequence would:
attention rows of the accepted nodes kept contiguous, GDN conv/recurrent state of the last
accepted node (fork: its stored state; wy: the closed form (W1) of ``gdn_tree.wy_state`` from
the pre-verify snapshot, which verify never modifies, with ``replay_gdn`` as its plain twin;
naive first re-scores the accepted path as a chain unless it is nodes 0..k, since its leaked
hidden states corrupt K/V and GDN inputs).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from . import adapter, gdn_tree
from .models import arch_of
from .tree import DraftTree, ancestor_mask, ancestor_mask_from_parents, chain_tree, position_ids

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


@dataclass(eq=False)
class TreeCache:
    """The target's cache between rounds: committed rows plus the pending verify.

    kv:   {attention layer: (keys, values)} [1, h, T(+N+1 pending), d] (MLA: latents)
    conv: {GDN layer: [C, K]}; rec: {GDN layer: [H, dk, dv]} (never written by verify)
    Implements the ``update`` call transformers' attention layers make on a cache.
    """
    model_key: tuple
    length: int = 0
    kv: dict = field(default_factory=dict)
    conv: dict = field(default_factory=dict)
    rec: dict = field(default_factory=dict)
    pending: dict | None = None

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if layer_idx in self.kv:
            k, v = self.kv[layer_idx]
            key_states = torch.cat([k[:, :, :self.length], key_states], dim=-2)
            value_states = torch.cat([v[:, :, :self.length], value_states], dim=-2)
        self.kv[layer_idx] = (key_states, value_states)
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length


def _model_key(model) -> tuple:
    c = model.config
    return (id(model), arch_of(model), c.vocab_size, c.hidden_size, c.num_hidden_layers)


def _empty_cache(model) -> TreeCache:
    cache = TreeCache(_model_key(model))
    p = next(model.parameters())
    for i, m in adapter.gdn_modules(model).items():
        cache.conv[i] = p.new_zeros(m.conv_dim, m.conv_kernel_size)
        cache.rec[i] = torch.zeros(m.num_v_heads, m.head_k_dim, m.head_v_dim, dtype=_state_dtype(p), device=p.device)
    return cache


def _state_dtype(p):
    return p.dtype if adapter._STATE["preserve_dtype"] else torch.float32


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
        return _empty_cache(model), None
    _check_positions(model, ids.numel() - 1)
    from transformers import DynamicCache
    hf_cache = DynamicCache(config=model.config)
    out = model(ids[None].to(next(model.parameters()).device), past_key_values=hf_cache, use_cache=True,
                output_hidden_states=bool(feature_layers))
    state = adapter.read_hf_cache(model, hf_cache)
    cache = _empty_cache(model)
    cache.kv = state["kv"]
    cache.conv.update(state["conv"])
    cache.rec.update(state["rec"])
    cache.length = ids.numel()
    return cache, Forward(out.logits[0], _features(out.hidden_states, feature_layers))


def _check_ids(model, ids, name) -> torch.Tensor:
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
    V = model.config.vocab_size
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):
        raise ValueError(f"{name} must hold token ids in [0, {V}), got min {int(ids.min())} max {int(ids.max())}")
    return ids


def _check_positions(model, last_position: int) -> None:
    limit = model.config.max_position_embeddings
    if last_position >= limit:
        raise ValueError(f"tree positions must stay below max_position_embeddings={limit}, "
                         f"got last position {last_position}")


def _check_verify_args(model, cache: TreeCache, tree: DraftTree, gdn_mode: str) -> None:
    if gdn_mode not in GDN_MODES:
        raise ValueError(f"gdn_mode must be one of {GDN_MODES}, got {gdn_mode!r}")
    if not isinstance(cache, TreeCache) or cache.model_key != _model_key(model):
        raise ValueError("cache must be a TreeCache made by prefill() with this same model")
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
    _check_verify_args(model, cache, tree, gdn_mode)
    buf = tree_buffers(tree, cache.length, gdn_mode)
    p = next(model.parameters())
    bias = attention_bias(buf, cache.length, p.dtype, p.device)
    mask = {"full_attention": bias, "linear_attention": None} if arch_of(model) == "gdn" else bias
    records: dict = {}
    with _tree_gdn(model, cache, buf, gdn_mode, records):
        out = model(tree.tokens[None].to(p.device), attention_mask=mask, position_ids=buf.positions[None].to(p.device),
                    past_key_values=cache, use_cache=True, output_hidden_states=bool(feature_layers))
    cache.pending = {"tree": tree, "mode": gdn_mode, "gdn": records}
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
    to replay any path: ``replay_gdn``, the plain twin), plus what commit uses directly: in
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


def replay_gdn(m, x_path, a_path, b_path, conv_state, S0):
    """Run a GDN layer's state along a committed chain: -> (conv_state [C, K], S [H, dk, dv])."""
    y = gdn_tree.tree_conv(x_path, conv_state, adapter.gdn_conv_weight(m),
                           gdn_tree.chain_parents(x_path.shape[0] - 1))
    q, k, v = adapter.gdn_qkv(m, y)
    g, beta = adapter.gdn_gates(m, a_path, b_path)
    _, S = gdn_tree.gated_delta_chain(q, k, v, g, beta, S0.to(v.dtype))
    return gdn_tree.commit_conv_state(conv_state, x_path), S.to(S0.dtype)


@torch.no_grad()
def commit(model, cache: TreeCache, tree: DraftTree, path) -> None:
    """Keep the accepted nodes ``path`` (root .. deepest accepted, from ``tree.accept``)."""
    if not isinstance(cache, TreeCache) or cache.model_key != _model_key(model):
        raise ValueError("cache must be a TreeCache made by prefill() with this same model")
    if cache.pending is None or cache.pending["tree"] is not tree:
        raise ValueError("commit needs the tree of the last verify() on this cache")
    idx = torch.as_tensor(path, dtype=torch.long)
    if idx.numel() == 0 or int(idx[0]) != 0 or not bool(((idx >= 0) & (idx < len(tree))).all()) \
            or not bool((tree.parents[idx[1:]] == idx[:-1]).all()):
        raise ValueError(f"path must be a root path of the tree starting at node 0, got {list(path)}")
    if cache.pending["mode"] == "naive" and cache.pending["gdn"] and not torch.equal(idx, torch.arange(idx.numel())):
        # naive verify leaked sibling state into the hidden states of every layer above the first
        # GDN layer (attention K/V and GDN inputs alike): re-score the accepted path as a chain,
        # where naive is exact, and commit that
        tree = chain_tree(tree.tokens[idx[1:]], int(tree.tokens[0]))
        verify(model, cache, tree, "naive")
        idx = torch.arange(idx.numel())
    rows = torch.cat([torch.arange(cache.length), cache.length + idx])
    for i, (k, v) in cache.kv.items():
        cache.kv[i] = (k.index_select(-2, rows.to(k.device)), v.index_select(-2, rows.to(k.device)))
    for i, rec in cache.pending["gdn"].items():
        cache.conv[i] = gdn_tree.commit_conv_state(cache.conv[i], rec["x"][idx.to(rec["x"].device)])
        S = rec["states"][idx[-1]] if "states" in rec else gdn_tree.wy_state(rec["wy"], rec["S0"], idx.tolist())
        cache.rec[i] = S.to(cache.rec[i].dtype).clone()
    cache.length += idx.numel()
    cache.pending = None


def tree_logits(model, prefix_ids, tree: DraftTree, gdn_mode: str = "wy") -> torch.Tensor:
    """[N+1, V]: row i = the target's next-token logits after prefix + path(root..i)."""
    cache, _ = prefill(model, prefix_ids)
    return verify(model, cache, tree, gdn_mode).logits


def full_forward_logits(model, ids) -> torch.Tensor:
    """The oracle: the stock forward without cache, last position's logits [V]."""
    with torch.no_grad():
        return model(torch.as_tensor(ids, dtype=torch.long)[None]).logits[0, -1]
