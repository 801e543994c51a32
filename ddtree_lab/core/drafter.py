"""DFlash block-diffusion drafter (DFlash, arXiv 2602.06036; docs/background.md section 2).

The drafter predicts a whole block in one forward pass. Its input block is
``[last committed token, MASK, ..., MASK]`` (``block_size`` positions, bidirectional
attention inside the block); the hidden states of a few target layers (``target_layer_ids``)
for every committed token before it are concatenated, projected (``fc``, no bias) and
RMS-normalised into "context" rows. Every draft layer computes keys and values on
``[context ; block]`` with its own ``k_proj``/``v_proj`` ("KV injection"); queries come from
the block only. RoPE positions are absolute: context row i sits at position i and block
position j of a block starting at P at P + j. Embedding and LM head are the target's, frozen
and never part of the drafter's ``state_dict``.

Two forwards share every layer:

- ``propose`` (inference): appends new context rows to a per-layer K/V cache
  (``DrafterState``) and runs one block; returns ``[block_size - 1, V]`` logits, row d-1
  scoring depth d, the input of ``tree.build_tree`` / ``tree.chain_tree``;
- ``block_logits`` (training): all anchors of a sequence in one forward through an
  attention mask (block of anchor a sees context rows < a and its own block), used by
  ``drafter_loss`` with the position weights exp(-(k-1)/gamma).

Decoding convention: the target has produced features for every committed token except the
newest one (the bonus token, ``last_token``); each round passes the features of the tokens
committed since the previous round as ``new_features``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}  # DFlash loss decay per training block size


def default_target_layers(num_target_layers: int, n: int = 4) -> tuple[int, ...]:
    """n target layers spread evenly from layer 1 to layer L-3 (deduplicated, sorted)."""
    low = min(1, num_target_layers - 1)
    high = max(low, num_target_layers - 3)
    return tuple(sorted({int(round(x)) for x in np.linspace(low, high, n)}))


@dataclass(frozen=True)
class DrafterConfig:
    vocab_size: int
    hidden_size: int                  # = the target's (its embedding and LM head are shared)
    num_heads: int
    head_dim: int
    intermediate_size: int
    target_layer_ids: tuple[int, ...]  # target layers whose OUTPUT hidden states condition it
    target_hidden_size: int
    mask_token_id: int
    num_layers: int = 3
    block_size: int = 16              # training block size; propose accepts 2..block_size
    rope_theta: float = 10000.0
    gamma: float = 7.0                # loss weight of predicted position k: exp(-(k-1)/gamma)
    max_positions: int = 2048

    @property
    def feature_size(self) -> int:
        return len(self.target_layer_ids) * self.target_hidden_size

    @classmethod
    def for_target(cls, target, mask_token_id: int, **overrides) -> "DrafterConfig":
        """A drafter sized like the target's attention (heads, head dim, MLP width)."""
        c = target.config
        block_size = overrides.pop("block_size", 16)
        kw = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_heads=c.num_attention_heads,
                  head_dim=c.hidden_size // c.num_attention_heads, intermediate_size=c.intermediate_size,
                  target_layer_ids=default_target_layers(c.num_hidden_layers),
                  target_hidden_size=c.hidden_size, mask_token_id=mask_token_id,
                  block_size=block_size, gamma=GAMMA.get(block_size, 7.0),
                  max_positions=c.max_position_embeddings)
        return cls(**{**kw, **overrides})


def stack_features(hidden_states, layer_ids) -> torch.Tensor:
    """[..., T, len(layer_ids) * H] target features from HF ``output_hidden_states``.

    hidden_states[i + 1] is the output of decoder layer i (hidden_states[0]: embeddings).
    """
    return torch.cat([hidden_states[i + 1] for i in layer_ids], dim=-1)


def position_weights(block_size: int, gamma: float) -> torch.Tensor:
    """[block_size - 1] loss weight of predicted position k = 1..bs-1: exp(-(k-1)/gamma)."""
    return torch.exp(-torch.arange(block_size - 1, dtype=torch.float32) / gamma)


# ----------------------------------------------------------------------------- layers

def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (rotate-half) of x [B, H, S, D] at integer positions [B, S]."""
    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)  # [D/2]
    angles = positions.to(torch.float32)[..., None] * inv_freq  # [B, S, D/2]
    cos = torch.cat([angles.cos(), angles.cos()], -1)[:, None].to(x.dtype)  # [B, 1, S, D]
    sin = torch.cat([angles.sin(), angles.sin()], -1)[:, None].to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class DrafterLayer(nn.Module):
    """Pre-norm block: KV-injected attention (qk-norm, RoPE) + SwiGLU MLP."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        h, inner = cfg.hidden_size, cfg.num_heads * cfg.head_dim
        self.cfg = cfg
        self.input_norm = nn.RMSNorm(h, eps=1e-6)
        self.q_proj = nn.Linear(h, inner, bias=False)
        self.k_proj = nn.Linear(h, inner, bias=False)
        self.v_proj = nn.Linear(h, inner, bias=False)
        self.o_proj = nn.Linear(inner, h, bias=False)
        self.q_norm = nn.RMSNorm(cfg.head_dim, eps=1e-6)
        self.k_norm = nn.RMSNorm(cfg.head_dim, eps=1e-6)
        self.mlp_norm = nn.RMSNorm(h, eps=1e-6)
        self.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # [B, S, H*D] -> [B, H, S, D]
        return x.unflatten(-1, (self.cfg.num_heads, self.cfg.head_dim)).transpose(1, 2)

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor):
        """K, V [B, H, S, D] (K normed and rotated) of rows x [B, S, hidden] at positions [B, S]."""
        k = rope(self.k_norm(self._heads(self.k_proj(x))), positions, self.cfg.rope_theta)
        return k, self._heads(self.v_proj(x))

    def forward(self, x, positions, ctx_k, ctx_v, mask=None):
        """x [B, Q, hidden] block rows at positions [B, Q]; ctx_k/ctx_v [B, H, C, D];
        mask: bool [B, 1, Q, C + Q] (True = attend) or None (all visible)."""
        h = self.input_norm(x)
        q = rope(self.q_norm(self._heads(self.q_proj(h))), positions, self.cfg.rope_theta)
        k, v = self.keys_values(h, positions)
        k, v = torch.cat([ctx_k, k], 2), torch.cat([ctx_v, v], 2)  # [B, H, C+Q, D]
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, Q, D]
        x = x + self.o_proj(att.transpose(1, 2).flatten(2))
        h = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


@dataclass
class DrafterState:
    """Context K/V cache: per layer [1, H, length, D], RoPE already applied."""
    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    length: int = 0


class DFlashDrafter(nn.Module):
    """The drafter; ``target`` lends its (frozen) embedding and LM head, never saved."""

    def __init__(self, cfg: DrafterConfig, target):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(cfg.feature_size, cfg.hidden_size, bias=False)
        self.context_norm = nn.RMSNorm(cfg.hidden_size, eps=1e-6)
        self.layers = nn.ModuleList(DrafterLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=1e-6)
        self.attach_target(target)
        with torch.no_grad():  # start at the target's output scale: its final norm's gain
            ones = torch.ones(1, cfg.hidden_size, dtype=target.model.norm.weight.dtype,
                              device=target.model.norm.weight.device)
            self.norm.weight.copy_(target.model.norm(ones)[0].float())

    def attach_target(self, target) -> None:
        """Borrow the target's embedding and LM head (a plain tuple: not submodules)."""
        emb, head = target.get_input_embeddings(), target.get_output_embeddings()
        if tuple(emb.weight.shape) != (self.cfg.vocab_size, self.cfg.hidden_size) or \
                tuple(head.weight.shape) != (self.cfg.vocab_size, self.cfg.hidden_size):
            raise ValueError(f"target embedding/lm_head must be [{self.cfg.vocab_size}, "
                             f"{self.cfg.hidden_size}], got {tuple(emb.weight.shape)}, {tuple(head.weight.shape)}")
        self._target_io = (emb, head)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        w = self._target_io[0].weight.detach()
        return F.embedding(ids.to(w.device), w).to(self.fc.weight.dtype)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        w = self._target_io[1].weight.detach()
        return F.linear(self.norm(x), w.to(x.dtype))

    def project_context(self, features: torch.Tensor) -> torch.Tensor:
        """[B, C, F] target features -> [B, C, hidden] context rows."""
        return self.context_norm(self.fc(features.to(self.fc.weight.dtype)))

    def _block_ids(self, first: torch.Tensor, block_size: int) -> torch.Tensor:
        """[..., block_size]: the first token then MASK x (block_size - 1)."""
        masks = torch.full((*first.shape, block_size - 1), self.cfg.mask_token_id,
                           dtype=torch.long, device=first.device)
        return torch.cat([first[..., None].long(), masks], -1)

    def _check_block_size(self, block_size: int) -> int:
        if not isinstance(block_size, int) or not 2 <= block_size <= self.cfg.block_size:
            raise ValueError(f"block_size must be an int in [2, {self.cfg.block_size}], got {block_size!r}")
        return block_size

    # ------------------------------------------------------------------ inference

    def new_state(self) -> DrafterState:
        empty = self.fc.weight.new_zeros(1, self.cfg.num_heads, 0, self.cfg.head_dim)
        return DrafterState([empty] * self.cfg.num_layers, [empty] * self.cfg.num_layers, 0)

    @torch.no_grad()
    def extend(self, state: DrafterState, new_features: torch.Tensor) -> None:
        """Append context rows [n, F] at positions state.length .. state.length + n - 1."""
        if new_features.dim() != 2 or new_features.shape[1] != self.cfg.feature_size:
            raise ValueError(f"new_features must be [n, {self.cfg.feature_size}], got {tuple(new_features.shape)}")
        n = new_features.shape[0]
        ctx = self.project_context(new_features.to(self.fc.weight.device)[None])  # [1, n, hidden]
        pos = torch.arange(state.length, state.length + n, device=ctx.device)[None]  # [1, n]
        for i, layer in enumerate(self.layers):
            k, v = layer.keys_values(ctx, pos)
            state.keys[i] = torch.cat([state.keys[i], k], 2)
            state.values[i] = torch.cat([state.values[i], v], 2)
        state.length += n

    @torch.no_grad()
    def propose(self, state: DrafterState, new_features: torch.Tensor, last_token: int,
                block_size: int) -> torch.Tensor:
        """Extend the context cache, draft one block; logits [block_size - 1, V], row d-1 = depth d."""
        block_size = self._check_block_size(block_size)
        end = state.length + new_features.shape[0] + block_size
        if end > self.cfg.max_positions:
            raise ValueError(f"positions must stay below max_positions={self.cfg.max_positions}, "
                             f"block would end at {end}")
        self.extend(state, new_features)
        ids = self._block_ids(torch.tensor([last_token], device=self.fc.weight.device), block_size)  # [1, bs]
        pos = torch.arange(state.length, state.length + block_size, device=ids.device)[None]  # [1, bs]
        x = self.embed(ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, pos, state.keys[i], state.values[i])
        return self.logits(x)[0, 1:]  # [bs-1, V]

    # ------------------------------------------------------------------ training

    def block_logits(self, tokens: torch.Tensor, features: torch.Tensor, anchors: torch.Tensor,
                     block_size: int | None = None) -> torch.Tensor:
        """Logits [B, A, bs-1, V] of the blocks starting at ``anchors`` [B, A], in one forward.

        tokens [B, T], features [B, T, F]; block of anchor a = [tokens[a], MASK...] at
        positions a..a+bs-1, seeing context rows < a and its own block only.
        """
        bs = self._check_block_size(block_size or self.cfg.block_size)
        (b, t), a = tokens.shape, anchors.shape[1]
        dev = self.fc.weight.device
        tokens, anchors = tokens.to(dev), anchors.to(dev).long()
        ctx = self.project_context(features.to(dev))  # [B, T, hidden]
        ctx_pos = torch.arange(t, device=dev).expand(b, t)  # [B, T]
        first = tokens.gather(1, anchors)  # [B, A]
        x = self.embed(self._block_ids(first, bs).flatten(1))  # [B, A*bs, hidden]
        offsets = torch.arange(bs, device=dev)
        pos = (anchors[..., None] + offsets).flatten(1)  # [B, A*bs]
        mask = self.training_mask(anchors, t, bs)  # [B, 1, A*bs, T + A*bs]
        for layer in self.layers:
            ctx_k, ctx_v = layer.keys_values(ctx, ctx_pos)
            x = layer(x, pos, ctx_k, ctx_v, mask)
        return self.logits(x).unflatten(1, (a, bs))[:, :, 1:]  # [B, A, bs-1, V]

    @staticmethod
    def training_mask(anchors: torch.Tensor, num_context: int, block_size: int) -> torch.Tensor:
        """bool [B, 1, A*bs, T + A*bs]: block of anchor a sees context rows < a and itself."""
        b, a = anchors.shape
        dev = anchors.device
        ctx = torch.arange(num_context, device=dev) < anchors[..., None]  # [B, A, T]
        ctx = ctx.repeat_interleave(block_size, 1)  # [B, A*bs, T]
        block_of = torch.arange(a, device=dev).repeat_interleave(block_size)  # [A*bs]
        own = (block_of[:, None] == block_of[None, :]).expand(b, -1, -1)  # [B, A*bs, A*bs]
        return torch.cat([ctx, own], -1)[:, None]


def block_labels(tokens: torch.Tensor, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """[B, A, bs-1] labels tokens[a+1 .. a+bs-1]; -100 beyond the sequence end."""
    t = tokens.shape[1]
    idx = anchors.long()[..., None] + torch.arange(1, block_size, device=anchors.device)  # [B, A, bs-1]
    labels = tokens.long().gather(1, idx.clamp(max=t - 1).flatten(1)).view_as(idx)
    return labels.masked_fill(idx >= t, -100)


def drafter_loss(drafter: DFlashDrafter, tokens: torch.Tensor, features: torch.Tensor,
                 anchors: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Position-weighted cross entropy of the blocks at ``anchors`` [B, A].

    weights [bs-1]: per predicted position (default exp(-(k-1)/gamma)); labels past the end
    of the sequence are ignored; normalised by the total weight of the valid labels.
    """
    bs = drafter.cfg.block_size
    logits = drafter.block_logits(tokens, features, anchors, bs)  # [B, A, bs-1, V]
    labels = block_labels(tokens.to(logits.device), anchors.to(logits.device), bs)  # [B, A, bs-1]
    if weights is None:
        weights = position_weights(bs, drafter.cfg.gamma)
    ce = F.cross_entropy(logits.flatten(0, 2).float(), labels.flatten(), ignore_index=-100,
                         reduction="none").view_as(labels)
    w = weights.to(logits.device) * (labels != -100)  # [B, A, bs-1]
    return (ce * w).sum() / w.sum().clamp_min(1e-9)


@torch.no_grad()
def greedy_matches(drafter: DFlashDrafter, tokens: torch.Tensor, features: torch.Tensor,
                   anchors: torch.Tensor, block_size: int):
    """(match, valid), bool [B, A, bs-1]: drafter argmax == tokens[a+k], label exists."""
    logits = drafter.block_logits(tokens, features, anchors, block_size)
    labels = block_labels(tokens.to(logits.device), anchors.to(logits.device), block_size)
    return logits.argmax(-1) == labels, labels != -100


def acceptance_length(match: torch.Tensor) -> float:
    """Mean linear-verification tau = 1 + leading matches, over blocks match [N, bs-1]."""
    leading = match.long().cumprod(-1).sum(-1)  # [N]
    return 1.0 + leading.float().mean().item() if match.numel() else math.nan
