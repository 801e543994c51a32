"""The DFlash block-diffusion drafter (DFlash, arXiv 2602.06036; docs/background.md section 2),
as the field ships it: ``dflash.DFlashDraftModel`` (z-lab's ``dflash`` package), driven by the lab.

The drafter predicts a whole block in one forward pass. Its input block is
``[last committed token, MASK, ..., MASK]`` (``block_size`` positions, bidirectional
attention inside the block); the hidden states of a few target layers (``target_layer_ids``)
for every committed token before it are concatenated, projected (``fc``, no bias) and
RMS-normalised (``hidden_norm``) into "context" rows. Every draft layer computes keys and
values on ``[context ; block]`` ("KV injection"); queries come from the block only. RoPE
positions are absolute: context row i sits at position i and block position j of a block
starting at P at P + j. Embedding and LM head are the target's, frozen and never part of the
drafter's weights (the published layout: ``save_pretrained`` / ``from_pretrained``).

``DFlashDrafter`` holds the published model (``.model``) and the target's embedding and head,
and gives the lab's two calls on it, both through ``DFlashDraftModel.forward``:

- ``draft_batch`` / ``draft`` (inference): B sequences in ONE block forward. Each
  sequence keeps its own context K/V (``DrafterState``); ``ContextCache`` is the cache object
  the model's attention layers update: it appends each sequence's new context rows to its
  state and returns the [context ; block] keys and values, masked per sequence.
  ``draft`` is the batch of one. -> one ``Draft`` per sequence, logits [block_size - 1, V],
  row d-1 = depth d. ``naive.propose`` is their plain twin (``dflash_generate``'s step);
- ``block_logits`` (training): all anchors of a sequence in one forward through an attention
  mask (block of anchor a sees context rows < a and its own block), used by ``drafter_loss``
  with the position weights exp(-(k-1)/gamma).

Decoding convention: the target has produced features for every committed token except the
newest one (the bonus token, ``last_token``); each round passes the features of the tokens
committed since the previous round as ``new_features``.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from dflash import DFlashDraftModel, extract_context_feature
from dflash.model import build_target_layer_ids
from torch import nn
from transformers import Qwen3Config

from .verify import append_rows, batch_of_rows, held_batch, hold_rows
from .conditional import from_selector, selector_scores

GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}  # DFlash loss decay per training block size


def default_target_layers(num_target_layers: int, n: int = 4) -> tuple[int, ...]:
    """n target layers spread evenly from layer 1 to layer L-3 (deduplicated, sorted)."""
    low = min(1, num_target_layers - 1)
    high = max(low, num_target_layers - 3)
    return tuple(sorted({int(round(x)) for x in np.linspace(low, high, n)}))


@dataclass(frozen=True)
class DrafterConfig:
    """The lab's view of a drafter's shape (``DFlashDrafter.cfg``); the model itself is
    configured by the ``Qwen3Config`` + ``dflash_config`` that ``qwen3_config`` writes and
    ``from_qwen3_config`` reads (the published layout)."""
    vocab_size: int
    hidden_size: int                  # = the target's (its embedding and LM head are shared)
    num_heads: int
    head_dim: int
    intermediate_size: int
    target_layer_ids: tuple[int, ...]  # target layers whose OUTPUT hidden states condition it
    target_hidden_size: int
    mask_token_id: int
    num_layers: int = 3
    block_size: int = 16              # training block size; draft accepts 2..block_size
    rope_theta: float = 10000.0
    gamma: float = 7.0                # loss weight of predicted position k: exp(-(k-1)/gamma)
    max_positions: int = 2048
    num_kv_heads: int | None = None   # None: = num_heads
    num_target_layers: int | None = None

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
                  max_positions=c.max_position_embeddings, num_target_layers=c.num_hidden_layers)
        return cls(**{**kw, **overrides})

    def qwen3_config(self) -> Qwen3Config:
        """The published configuration: a ``Qwen3Config`` with ``dflash_config``."""
        if self.target_hidden_size != self.hidden_size:
            raise ValueError(f"target_hidden_size ({self.target_hidden_size}) must equal hidden_size "
                             f"({self.hidden_size}): DFlashDraftModel projects len(layers) x hidden_size")
        return Qwen3Config(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads or self.num_heads, head_dim=self.head_dim,
            max_position_embeddings=self.max_positions, rms_norm_eps=1e-6, attention_bias=False,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta}, tie_word_embeddings=False,
            num_target_layers=self.num_target_layers or max(self.target_layer_ids) + 3,
            dflash_config={"block_size": self.block_size, "mask_token_id": self.mask_token_id,
                           "target_layer_ids": list(self.target_layer_ids), "loss_gamma": self.gamma})

    @classmethod
    def from_qwen3_config(cls, c) -> "DrafterConfig":
        """The lab's view of a published drafter config (``dflash_config`` or top-level keys)."""
        d = dict(getattr(c, "dflash_config", None) or {})
        get = lambda name, default=None: d.get(name, getattr(c, name, default))  # noqa: E731
        block_size = int(get("block_size", 16))
        layer_ids = get("target_layer_ids")
        if layer_ids is None:
            layer_ids = build_target_layer_ids(c.num_target_layers, c.num_hidden_layers)
        rope = getattr(c, "rope_parameters", None) or {}
        return cls(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_heads=c.num_attention_heads,
                   head_dim=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
                   intermediate_size=c.intermediate_size, target_layer_ids=tuple(int(i) for i in layer_ids),
                   target_hidden_size=c.hidden_size, mask_token_id=int(get("mask_token_id")),
                   num_layers=c.num_hidden_layers, block_size=block_size,
                   rope_theta=float(rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))),
                   gamma=float(get("loss_gamma", GAMMA.get(block_size, 7.0))),
                   max_positions=c.max_position_embeddings, num_kv_heads=c.num_key_value_heads,
                   num_target_layers=getattr(c, "num_target_layers", None))


def stack_features(hidden_states, layer_ids) -> torch.Tensor:
    """[..., T, len(layer_ids) * H] target features from HF ``output_hidden_states``
    (``dflash.extract_context_feature``: hidden_states[i + 1] is the output of decoder layer i)."""
    return extract_context_feature(hidden_states, list(layer_ids))


def position_weights(block_size: int, gamma: float) -> torch.Tensor:
    """[block_size - 1] loss weight of predicted position k = 1..bs-1: exp(-(k-1)/gamma)."""
    return torch.exp(-torch.arange(block_size - 1, dtype=torch.float32) / gamma)


@dataclass(frozen=True, eq=False)
class Draft:
    """One proposed block: logits [bs-1, V] (row d-1 = depth d) and, from a DFlash 2 drafter,
    ``conditional`` (``conditional.ConditionalDraft``: its candidate selector's view), else None."""
    logits: torch.Tensor
    conditional: object = None


@dataclass
class DrafterState:
    """One sequence's context K/V: per layer a buffer [1, H_kv, capacity, D] whose first
    ``length`` rows are the context (norm and RoPE applied); rows past ``length`` are scratch
    (finite: zeros or an old block's rows). In a batch each buffer is this sequence's row of
    one batch tensor per layer (``batch_context``): ``batch_rows`` {("keys" / "values",
    layer): (batch tensor [B, H_kv, capacity, D], b, buffer)}, stale once the buffer is
    another."""
    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    length: int = 0
    batch_rows: dict = field(default_factory=dict)


def batch_context(states: list[DrafterState], rows: int) -> tuple[list, list]:
    """B > 1 states -> (keys, values): per layer one batch tensor [B, H_kv, capacity >= rows,
    D] whose row b is state b's buffer (context first). Kept across rounds; built, every
    context copied in once, only when the batch changes or outgrows it, at twice the room
    needed (zeros past the contexts)."""
    return tuple([_batch_rows(states, name, i, rows) for i in range(len(states[0].keys))]
                 for name in ("keys", "values"))


def _batch_rows(states: list[DrafterState], name: str, layer: int, rows: int) -> torch.Tensor:
    key, bufs = (name, layer), [getattr(s, name) for s in states]
    held = held_batch([s.batch_rows.get(key) for s in states], [b[layer] for b in bufs], rows)
    if held is not None:
        return held
    out = batch_of_rows([b[layer][0, :, :s.length] for s, b in zip(states, bufs)], bufs[0][layer], 2 * rows)
    for buf, view in zip(bufs, hold_rows(out, [s.batch_rows for s in states], key)):
        buf[layer] = view
    return out


def new_context_rows(lengths: list[int], new_rows: list[int], device=None) -> tuple:
    """Where B sequences' new context rows go, made once per block forward for every layer:
    sequence b's ``new_rows[b]`` rows, left-padded to n_max = max(new_rows) in the forward's
    input, go after its ``lengths[b]`` context rows -> (seq, to, at) LongTensors [sum n_b]:
    row j of sequence seq[j] is input row at[j] and buffer row to[j]."""
    n = torch.tensor(new_rows)
    seq = torch.repeat_interleave(torch.arange(len(new_rows)), n)  # [N]
    j = torch.arange(seq.numel()) - (torch.cumsum(n, 0) - n)[seq]  # [N] each row's place among its sequence's
    to = torch.tensor(lengths)[seq] + j
    at = (max(new_rows) - n)[seq] + j
    return seq.to(device), to.to(device), at.to(device)


class ContextCache:
    """The cache object ``DFlashDraftModel``'s attention layers call (``update``) during one
    batched block forward of B sequences.

    The forward runs on ``[new context rows (left-padded to n_max) ; block]``; ``update`` gets
    their keys/values [B, H, n_max + bs, D] and writes, in the layer's batch tensors
    (``batch``: ``batch_context``, row b = sequence b's buffer), sequence b's new rows after
    its context (placed by ``rows``, ``new_context_rows``) and the block at columns ``width`` .. ``width + bs - 1`` of
    every row; -> a view [B, H, width + bs, D]: every context left-aligned in ``width`` rows,
    then the block. No context row is copied. Row b's rows past its context are its buffer's
    scratch, which the forward's mask hides (``DFlashDrafter._block_mask``). A batch of one
    appends to its own buffers (``verify.append_rows``)."""

    def __init__(self, states: list[DrafterState], block_size: int, width: int,
                 batch: tuple | None = None, rows: tuple | None = None):
        self.states, self.block_size, self.width, self.batch, self.rows = states, block_size, width, batch, rows

    def update(self, keys, values, layer_idx, cache_kwargs=None):
        if len(self.states) == 1:
            return self._update_one(keys, values, layer_idx)
        end = self.width + self.block_size
        seq, to, at = self.rows
        out = []
        for tensor, held in zip((keys, values), self.batch):
            batch = held[layer_idx]
            batch[seq, :, to] = tensor[seq, :, at]  # every sequence's new rows after its context
            batch[:, :, self.width:end] = tensor[:, :, -self.block_size:]
            out.append(batch[:, :, :end])
        return out[0], out[1]

    def _update_one(self, keys, values, layer_idx):
        """A batch of one: the new rows and the block appended after the context in the
        state's buffers (``verify.append_rows``: the block's rows become scratch); -> views
        [1, H, length + n + bs, D]. Under ``torch.compile``: [context ; new rows ; block] in
        one ``cat``, which becomes the state's buffer."""
        state, out = self.states[0], []
        for tensor, stored in ((keys, state.keys), (values, state.values)):
            buf, rows = append_rows(stored[layer_idx], stored[layer_idx], state.length, tensor)
            stored[layer_idx] = rows if buf is None else buf
            out.append(rows)
        return out[0], out[1]


FINAL_NORMS = ("norm", "final_layernorm", "norm_f", "embedding_norm")  # Qwen / Llama, Bamba / Jamba, Nemotron-H, LFM2


def final_norm(target) -> nn.Module:
    """The target's last norm before its head, under whichever name its class gives it."""
    for name in FINAL_NORMS:
        norm = getattr(target.model, name, None)
        if norm is not None:
            return norm
    raise ValueError(f"{type(target).__name__} has no final norm named one of {FINAL_NORMS}")


class DFlashDrafter(nn.Module):
    """The lab's handle on a published ``dflash.DFlashDraftModel`` (``.model``, the only
    trained weights) and the target's frozen embedding and LM head (borrowed, never saved)."""

    def __init__(self, model: DFlashDraftModel, target):
        super().__init__()
        self.model = model
        self.cfg = DrafterConfig.from_qwen3_config(model.config)
        self.attach_target(target)

    @classmethod
    def from_config(cls, cfg: DrafterConfig, target) -> "DFlashDrafter":
        """A fresh (random-init) published model; its output norm starts at the target's output
        scale (its final norm's gain)."""
        drafter = cls(DFlashDraftModel(cfg.qwen3_config()), target)
        norm = final_norm(target)
        with torch.no_grad():
            ones = torch.ones(1, cfg.hidden_size, dtype=norm.weight.dtype, device=norm.weight.device)
            drafter.model.norm.weight.copy_(norm(ones)[0].float())
        return drafter

    def attach_target(self, target) -> None:
        """Borrow the target's embedding and LM head (a plain tuple: not submodules)."""
        emb, head = target.get_input_embeddings(), target.get_output_embeddings()
        if tuple(emb.weight.shape) != (self.cfg.vocab_size, self.cfg.hidden_size) or \
                tuple(head.weight.shape) != (self.cfg.vocab_size, self.cfg.hidden_size):
            raise ValueError(f"target embedding/lm_head must be [{self.cfg.vocab_size}, "
                             f"{self.cfg.hidden_size}], got {tuple(emb.weight.shape)}, {tuple(head.weight.shape)}")
        self._target_io = (emb, head)

    @property
    def selector(self):
        """DFlash 2's ``CandidateSelector`` (``DFlash2DraftModel.candidate_selector``), else None."""
        return getattr(self.model, "candidate_selector", None)

    @property
    def device(self) -> torch.device:
        return self.model.fc.weight.device

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """[..., S] ids -> [..., S, hidden] block embeddings (the target's, times the published
        ``input_embedding_scale``, 1 by default)."""
        w = self._target_io[0].weight.detach()
        return (F.embedding(ids.to(w.device), w) * self._embedding_scale).to(self.model.fc.weight.dtype)

    @functools.cached_property
    def _embedding_scale(self) -> float:
        """The published ``input_embedding_scale`` (1 by default), read from the config once."""
        return float((getattr(self.model.config, "dflash_config", None) or {}).get("input_embedding_scale", 1.0))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Normed hidden [..., hidden] -> logits [..., V] (``compute_logits`` on the target's head)."""
        w = self._target_io[1].weight.detach()
        return self.model.compute_logits(hidden, lambda h: F.linear(h, w.to(h.dtype)))

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
        empty = self.model.fc.weight.new_zeros(1, self.model.config.num_key_value_heads, 0, self.cfg.head_dim)
        n = self.cfg.num_layers
        return DrafterState([empty] * n, [empty] * n, 0)

    @torch.no_grad()
    def draft(self, state: DrafterState, new_features: torch.Tensor, last_token: int, block_size: int,
              forward=None) -> "Draft":
        """One sequence: extend its context, draft one block -> ``Draft`` (logits [bs-1, V]);
        the batch of one of ``draft_batch``."""
        return self.draft_batch([state], [new_features], [last_token], block_size, forward)[0]

    @torch.no_grad()
    def draft_batch(self, states: list[DrafterState], new_features: list[torch.Tensor],
                    last_tokens: list[int], block_size: int, forward=None) -> list["Draft"]:
        """One ``Draft`` per sequence from ONE block forward (``_block_hidden_batch``): its
        logits [bs-1, V], and for a DFlash 2 drafter its parent-conditioned selector view.
        forward: the block forward to call (None: ``self.model``; or its compiled copy)."""
        hidden = self._block_hidden_batch(states, new_features, last_tokens, block_size, forward)  # [B, bs-1, H]
        logits = self.logits(hidden)
        if self.selector is None:
            return [Draft(row, None) for row in logits]
        return [Draft(lg, from_selector(self.selector, h, lg)) for h, lg in zip(hidden, logits)]

    @torch.no_grad()
    def _block_hidden_batch(self, states: list[DrafterState], new_features: list[torch.Tensor],
                           last_tokens: list[int], block_size: int, forward=None) -> torch.Tensor:
        """B sequences in ONE block forward: -> normed hidden states [B, bs-1, H] of depths 1..bs-1.

        new_features[b] [n_b, F]: the features of the tokens sequence b committed since its last
        round; they are left-padded to n_max and appended to b's context by ``ContextCache``.
        Block row j of sequence b sees b's own context (L_b rows after the append) and its whole
        block (bool mask [B, 1, bs, W + bs], W = max L_b) at position L_b + j. A batch of one
        has no padding: its rows are its positions, with no mask where the layers need none.
        """
        block_size = self._check_block_size(block_size)
        for f in new_features:
            if f.dim() != 2 or f.shape[1] != self.cfg.feature_size:
                raise ValueError(f"new_features must be [n, {self.cfg.feature_size}], got {tuple(f.shape)}")
        new_rows = [int(f.shape[0]) for f in new_features]
        width = max(s.length + n for s, n in zip(states, new_rows))
        if width + block_size > self.cfg.max_positions:
            raise ValueError(f"positions must stay below max_positions={self.cfg.max_positions}, "
                             f"block would end at {width + block_size}")
        rows = new_context_rows([s.length for s in states], new_rows, self.device) if len(states) > 1 else None
        feats, pos, mask = (self._inputs_one if len(states) == 1 else self._inputs_padded)(
            states, new_features, new_rows, rows, width, block_size)
        # a batch of one appends by ``verify.append_rows`` (``_update_one``)
        batch = batch_context(states, width + block_size) if len(states) > 1 else None
        cache = ContextCache(states, block_size, width, batch, rows)
        ids = self._block_ids(torch.tensor(last_tokens, device=self.device), block_size)  # [B, bs]
        hidden = (self.model if forward is None else forward)(position_ids=pos, attention_mask=mask, noise_embedding=self.embed(ids),
                                         target_hidden=feats, past_key_values=cache, use_cache=True)  # [B, bs, hidden]
        for state, n in zip(states, new_rows):
            state.length += n
        return hidden[:, 1:]

    def _inputs_one(self, states, new_features, new_rows, rows, width: int, block_size: int) -> tuple:
        """One sequence: (features [1, n, F], positions [1, n + bs], mask or None)."""
        dev, start = self.device, states[0].length
        mask = None if self._attends_all else self._block_mask(torch.tensor([width]), width, block_size)
        return (new_features[0].to(dev, self.model.fc.weight.dtype)[None],
                torch.arange(start, width + block_size, device=dev)[None], mask)

    def _inputs_padded(self, states, new_features, new_rows, rows, width: int, block_size: int) -> tuple:
        """B sequences, ``new_rows[b]`` new rows each, placed by ``rows`` (``new_context_rows``):
        (features [B, n_max, F] and context positions left-padded (position 0), positions
        [B, n_max + bs], the block mask)."""
        dev, (seq, to, at) = self.device, rows
        B, n_max = len(states), max(new_rows)
        lengths = torch.tensor([s.length + n for s, n in zip(states, new_rows)])  # [B] after the append
        feats = torch.zeros(B, n_max, self.cfg.feature_size, device=dev, dtype=self.model.fc.weight.dtype)
        feats[seq, at] = torch.cat(new_features).to(dev, feats.dtype)  # [B, n_max, F]
        ctx_pos = torch.zeros(B, n_max, dtype=torch.long, device=dev)
        ctx_pos[seq, at] = to  # [B, n_max]: a new row's position is its place in the context (padding at 0)
        pos = torch.cat([ctx_pos, lengths.to(dev)[:, None] + torch.arange(block_size, device=dev)], 1)  # [B, n_max + bs]
        return feats, pos, self._block_mask(lengths, width, block_size)

    def _block_mask(self, lengths: torch.Tensor, width: int, block_size: int) -> torch.Tensor:
        """bool [B, 1, bs, W + bs]: block rows see their own context (left-aligned in W) and the
        whole block."""
        visible = (torch.arange(width) < lengths[:, None]).to(self.device)  # [B, W]
        return torch.cat([visible[:, None, None].expand(-1, 1, block_size, width),
                          visible.new_ones(len(lengths), 1, block_size, block_size)], -1)

    @functools.cached_property
    def _attends_all(self) -> bool:
        """True when the published attention layers add no mask of their own to a None mask."""
        return all(not getattr(layer.self_attn, "is_causal", True) and getattr(layer.self_attn, "sliding_window", 1)
                   is None for layer in self.model.layers)

    # ------------------------------------------------------------------ training

    def block_hidden(self, tokens: torch.Tensor, features: torch.Tensor, anchors: torch.Tensor,
                     block_size: int | None = None) -> torch.Tensor:
        """Normed hidden states [B, A, bs, hidden] of the blocks starting at ``anchors`` [B, A].

        tokens [B, T], features [B, T, F]; block of anchor a = [tokens[a], MASK...] at
        positions a..a+bs-1, seeing context rows < a and its own block only. Every block is
        its own row of the forward's batch ([B*A, bs]): DFlash 2's causal convolutions run
        along the block, so blocks must not be packed into one sequence.
        """
        bs = self._check_block_size(block_size or self.cfg.block_size)
        (b, t), a = tokens.shape, anchors.shape[1]
        dev = self.device
        tokens, anchors = tokens.to(dev), anchors.to(dev).long()
        first = tokens.gather(1, anchors).flatten()  # [B*A]
        block_pos = anchors.flatten()[:, None] + torch.arange(bs, device=dev)  # [B*A, bs]
        pos = torch.cat([torch.arange(t, device=dev).expand(b * a, t), block_pos], 1)  # [B*A, T + bs]
        feats = features.to(dev, self.model.fc.weight.dtype)[:, None].expand(-1, a, -1, -1).flatten(0, 1)
        hidden = self.model(position_ids=pos, attention_mask=self.training_mask(anchors.flatten(), t, bs),
                            noise_embedding=self.embed(self._block_ids(first, bs)), target_hidden=feats)
        return hidden.unflatten(0, (b, a))  # [B, A, bs, hidden]

    def block_logits(self, tokens: torch.Tensor, features: torch.Tensor, anchors: torch.Tensor,
                     block_size: int | None = None) -> torch.Tensor:
        """Logits [B, A, bs-1, V] of the blocks at ``anchors`` [B, A] (``block_hidden``)."""
        return self.logits(self.block_hidden(tokens, features, anchors, block_size)[:, :, 1:])

    @staticmethod
    def training_mask(anchors: torch.Tensor, num_context: int, block_size: int) -> torch.Tensor:
        """bool [N, 1, bs, T + bs]: the block of anchor a (anchors [N]) sees context rows < a
        and its whole block."""
        ctx = torch.arange(num_context, device=anchors.device) < anchors[:, None]  # [N, T]
        ctx = ctx[:, None].expand(-1, block_size, -1)
        return torch.cat([ctx, ctx.new_ones(len(anchors), block_size, block_size)], -1)[:, None]


def block_labels(tokens: torch.Tensor, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """[B, A, bs-1] labels tokens[a+1 .. a+bs-1]; -100 beyond the sequence end."""
    t = tokens.shape[1]
    idx = anchors.long()[..., None] + torch.arange(1, block_size, device=anchors.device)  # [B, A, bs-1]
    labels = tokens.long().gather(1, idx.clamp(max=t - 1).flatten(1)).view_as(idx)
    return labels.masked_fill(idx >= t, -100)


def drafter_loss(drafter: DFlashDrafter, tokens: torch.Tensor, features: torch.Tensor,
                 anchors: torch.Tensor, weights: torch.Tensor | None = None,
                 soft: tuple[torch.Tensor, torch.Tensor] | None = None, *, selector_weight: float = 1.0) -> torch.Tensor:
    """Position-weighted cross entropy of the blocks at ``anchors`` [B, A] (+ ``selector_weight``
    x ``selector_loss`` for a DFlash 2 drafter).

    weights [bs-1]: per predicted position (default exp(-(k-1)/gamma)); labels past the end
    of the sequence are ignored; normalised by the total weight of the valid labels.
    soft: (ids int [B, T, K], probs [B, T, K]), the target's own next-token distribution after
    each position (its top K, renormalised): the label of the token at t is the distribution
    soft[:, t - 1] instead of the token (logit distillation, as SpecForge's option).
    """
    bs = drafter.cfg.block_size
    hidden = drafter.block_hidden(tokens, features, anchors, bs)[:, :, 1:]  # [B, A, bs-1, H]
    logits = drafter.logits(hidden)  # [B, A, bs-1, V]
    anchors = anchors.to(logits.device)
    labels = block_labels(tokens.to(logits.device), anchors, bs)  # [B, A, bs-1]
    if weights is None:
        weights = position_weights(bs, drafter.cfg.gamma)
    if soft is None:
        ce = F.cross_entropy(logits.flatten(0, 2).float(), labels.flatten(), ignore_index=-100,
                             reduction="none").view_as(labels)
    else:
        soft = tuple(_rows(t.to(logits.device), anchors, bs - 1) for t in soft)  # [B, A, bs-1, K] each
        ce = soft_cross_entropy(logits, *soft)
    if drafter.selector is not None and selector_weight:
        ce = ce + selector_weight * selector_loss(drafter.selector, hidden, logits,
                                                  block_predecessors(tokens.to(logits.device), anchors, bs),
                                                  soft if soft is not None else _one_hot_labels(labels))
    w = weights.to(logits.device) * (labels != -100)  # [B, A, bs-1]
    return (ce * w).sum() / w.sum().clamp_min(1e-9)


def _rows(x: torch.Tensor, anchors: torch.Tensor, n: int) -> torch.Tensor:
    """x [B, T, ...] -> [B, A, n, ...]: rows a .. a+n-1 of every anchor (clamped at the end)."""
    b, t = x.shape[:2]
    rows = (anchors.long()[..., None] + torch.arange(n, device=x.device)).clamp(max=t - 1)  # [B, A, n]
    flat = rows.flatten(1).view(b, -1, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:])
    return x.gather(1, flat).view(b, *rows.shape[1:], *x.shape[2:])


def block_predecessors(tokens: torch.Tensor, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """[B, A, bs-1]: the true predecessor of block position k = 1..bs-1, tokens[a + k - 1]."""
    return _rows(tokens.long(), anchors, block_size - 1)


def _one_hot_labels(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard labels [...] as a one-token distribution (ids [..., 1], probs [..., 1]); -100 -> 0."""
    return labels.clamp_min(0)[..., None], (labels != -100).float()[..., None]


def selector_loss(selector, hidden: torch.Tensor, logits: torch.Tensor, predecessors: torch.Tensor,
                  target: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """[...]: DFlash 2's candidate-selector loss, a K-way cross entropy over the unary top-K.

    hidden [..., H], logits [..., V] (the unary scores), predecessors [...] (the true previous
    token), target (ids [..., M], probs [..., M]): the target's next-token distribution. The
    candidates are the unary top-K; the target's top-1 replaces the last candidate when the
    top-K misses it (injected into the loss's candidate set only). The label is the target's
    distribution restricted to the candidates, renormalised: soft K-way cross entropy (with a
    one-token target it is the public hard K-way cross entropy; docs/background.md, 10).
    """
    ids, probs = target
    cand = torch.topk(logits.detach(), selector.top_k, dim=-1).indices  # [..., K]
    top1 = ids[..., :1].long()
    missing = ~(cand == top1).any(-1, keepdim=True)
    cand = torch.cat([cand[..., :-1], torch.where(missing, top1, cand[..., -1:])], -1)
    scores = selector_scores(logits.gather(-1, cand).float(), selector.hidden_projection(hidden).float(),
                             selector.predecessor_codebook(predecessors).float(),
                             selector.successor_codebook(cand).float())  # [..., K]
    p = ((cand[..., :, None] == ids[..., None, :].long()) * probs[..., None, :].float()).sum(-1)  # [..., K]
    return -(p * torch.log_softmax(scores, -1)).sum(-1) / p.sum(-1).clamp_min(1e-9)


def soft_cross_entropy(logits: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """[B, A, bs-1]: -sum_k p_k log q(ids_k), logits [B, A, bs-1, V] against the target's
    distribution (ids / probs [B, A, bs-1, K], ``_rows`` of the per-position labels)."""
    p = probs.float()
    logq = torch.log_softmax(logits.float(), -1).gather(-1, ids.long())  # [B, A, bs-1, K]
    return -(p * logq).sum(-1) / p.sum(-1).clamp_min(1e-9)


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
