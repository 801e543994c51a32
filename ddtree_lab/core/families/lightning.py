"""Lightning attention family (MiniMax's decayed linear attention): exact one-pass tree verification.

Conventions of transformers' ``MiniMaxLightningAttention`` (pinned by the tests), for one token
with hidden input h [D], H heads of size d, a constant decay rate s_h > 0 per head
(``slope_rate``, fixed by the layer index, not learned):

    q, k, v = act(qkv_proj(h)).view(H, 3d).split(d)                     [H, d] each (act = silu)
    S_t = exp(-s) S_{t-1} + k_t v_t^T;   o_t = q_t S_t                   S [H, d, d]     (R)
    out = out_proj(sigmoid(output_gate(h)) * norm(o_t.flatten()))         (RMSNorm over H d)

no feature map beyond ``act`` and no 1/sqrt(d) scale. The stock prefill evaluates (R) in blocks:
within a block, o_i = exp(-s (i+1)) q_i S_prev + sum_{j<=i} exp(-s (i-j)) (q_i . k_j) v_j and
S_next = exp(-s b) S_prev + sum_j exp(-s (b-1-j)) k_j v_j^T (b the block length); the decode
branch steps (R) with ``exp(-slope_rate)``: the same exponents. The stock cache is
``MiniMaxCache``: ``linear_cache[layer_idx]`` [B, H, d, d] (this module's read/write_state).

Tree form: with d_i the depth of node i below the root (root 0) and S0 the state before the
root, unrolling (R) along the path of node i gives

    S_i = exp(-s (d_i + 1)) S0 + sum_{j in path(i)} exp(-s (d_i - d_j)) k_j v_j^T,       (T1)
    o_i = exp(-s (d_i + 1)) q_i S0 + sum_{j in path(i)} exp(-s (d_i - d_j)) (q_i . k_j) v_j,  (T2)

decayed linear attention under the ancestor mask (the lightning attention of arXiv 2501.08313,
with its causal mask replaced by the tree's); commit forms S_i by (T1). Pure functions over one
sequence (no batch), computing in the dtype of the inputs; the stock ``norm`` is called as is
(it casts to float32 internally, mirrored so as to match the stock layer).
"""
from __future__ import annotations

import torch

CLASS_NAMES = ("MiniMaxLightningAttention",)
# the fast loop cannot route it: MiniMax's forward refuses every cache but its own ``MiniMaxCache``
FAST_LOOP = False


# ----------------------------------------------------------------------------- stock cache <-> state

def read_state(cache, layer_idx: int, row: int = 0) -> dict:
    """The state of ``layer_idx`` in a stock ``MiniMaxCache``, batch row ``row``:
    {"conv": {}, "rec": {0: [H, d, d]}} (a fresh tensor)."""
    return {"conv": {}, "rec": {0: cache.linear_cache[layer_idx][row].clone()}}


def write_state(cache, layer_idx: int, state: dict, row: int = 0) -> None:
    """Write ``state`` into batch row ``row`` of ``layer_idx`` of a ``MiniMaxCache``, in place
    (a cache with no state for that layer yet gets a one-row one)."""
    S = state["rec"][0]  # [H, d, d]
    held = cache.linear_cache[layer_idx] if layer_idx < len(cache.linear_cache) else []
    if isinstance(held, torch.Tensor):
        held[row].copy_(S)
    elif row == 0:
        cache.set_linear_cache(layer_idx, S[None].clone())
    else:
        raise ValueError(f"layer {layer_idx} holds no linear state to write row {row} into")


# ----------------------------------------------------------------------------- the layer's pieces

def _qkv(m, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """h [..., D] -> q, k, v [..., H, d] (the stock activation applied to all three)."""
    qkv = m.act_fn(m.qkv_proj(h)).unflatten(-1, (m.num_attention_heads, 3 * m.head_dim))
    return qkv.split(m.head_dim, dim=-1)


def _slope(m) -> torch.Tensor:
    """Per-head decay rate s [H] (the stock buffer ``slope_rate`` [H, 1, 1])."""
    return m.slope_rate.reshape(-1)


def _output(m, h: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """Gate, norm, project: h [..., D], o [..., H, d] -> [..., D]."""
    return m.out_proj(torch.sigmoid(m.output_gate(h)) * m.norm(o.flatten(-2)))


def _depths(anc: torch.Tensor) -> torch.Tensor:
    """Depth of every node below the root: anc [n, n] -> LongTensor[n]."""
    return anc.sum(1) - 1


# ----------------------------------------------------------------------------- protocol

def step(m, h: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
    """One token by (R): h [D], state {"rec": {0: [H, d, d]}} -> (out [D], new state)."""
    q, k, v = _qkv(m, h)  # [H, d] each
    decay = torch.exp(-_slope(m))[:, None, None]  # [H, 1, 1], as the stock decode's ``ratio``
    S = decay * state["rec"][0] + k[:, :, None] * v[:, None, :]  # [H, d, d], fresh
    o = (q[:, None, :] @ S).squeeze(1)  # [H, d]
    return _output(m, h, o), {"conv": {}, "rec": {0: S}}


def tree(m, h: torch.Tensor, state: dict, parents: torch.Tensor, anc: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Exact tree forward by (T2): h [n, D], anc [n, n] (``parents`` unused: depths and the
    mask come from ``anc``) -> (out [n, D], record)."""
    S0, s = state["rec"][0], _slope(m)  # [H, d, d], [H]
    anc = anc.to(h.device)
    q, k, v = (x.transpose(0, 1) for x in _qkv(m, h))  # [H, n, d]
    d = _depths(anc).to(s.dtype)  # [n]
    gap = (d[:, None] - d[None, :]).masked_fill(~anc, float("inf"))  # [n, n]: d_i - d_j on ancestors
    decay = torch.exp(-s[:, None, None] * gap)  # [H, n, n], 0 off the ancestor mask
    root = torch.exp(-s[:, None] * (d + 1))  # [H, n]: exp(-s (d_i + 1)), the S0 term
    o = root[..., None] * (q @ S0) + ((q @ k.transpose(1, 2)) * decay) @ v  # [H, n, d]
    return _output(m, h, o.transpose(0, 1)), {"k": k, "v": v, "d": d, "s": s, "S0": S0}


def commit(m, record: dict, path: list) -> dict:
    """State after the last node of ``path`` by (T1) -> {"rec": {0: [H, d, d]}}."""
    k, v, d, s = record["k"][:, path], record["v"][:, path], record["d"][path], record["s"]  # [H, L, d], [L]
    w = torch.exp(-s[:, None] * (d[-1] - d))  # [H, L]
    S = torch.exp(-s * (d[-1] + 1))[:, None, None] * record["S0"] + torch.einsum("hl,hlk,hlv->hkv", w, k, v)
    return {"conv": {}, "rec": {0: S}}


def stock_output(out: torch.Tensor) -> tuple:
    """out [1, n, D] -> the stock forward's ``(attn_output, attn_weights_inter)``; the decoder
    layer discards the second element (a single state has no meaning on a tree): None."""
    return out, None
