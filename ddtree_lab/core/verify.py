"""Masked tree verification on the real architectures (DDTree, arXiv 2604.12989, section 4;
docs/background.md section 4).

One target forward scores the root and every draft node: attention layers (Qwen3.5 full
attention, DeepSeek-V3 MLA) see the prefix plus the node's ancestors through an additive
ancestor mask, at position start + depth; Gated DeltaNet layers run one of three modes (``gdn_layer.GdnMode``: "naive", "fork", "wy").

There is one verify, over a batch: ``verify_batch`` puts B sequences' trees into ONE stock
forward (docs/background.md section 7), and ``verify`` is its batch of one. Trees of one size
run as a batch of B rows of T tokens. Trees of different sizes run packed (issue 29 item 4):
the forward sees one row of N = sum N_b + B tokens, the trees side by side with no padding, so
every row-wise piece (embeddings, projections, MLP and experts, the head) costs N tokens, not
B x the largest tree; the attention (``adapter.packed_attention``, the module's own eager
attention) and the GDN layers unpack them per sequence (``batched.unpack``) and pack their
output back.

- attention layers (Qwen3.5 full attention, DeepSeek-V3 MLA): sequence b's committed rows sit
  LEFT-padded in a [B, h, Pmax, d] view of every attention cache (``TreeBatch``), its tree
  rows after them; the 4-D additive mask lets row i of sequence b see b's own committed rows
  and b's own ancestors of i only (padding columns masked; padding rows see themselves);
  positions are b's committed length + depth;
- Gated DeltaNet layers: the stock layer, routed once per model (``adapter.route_gdn_trees``)
  to ``gdn_layer.tree_layer_batch`` whenever the cache it is handed is a ``TreeBatch``. No
  module is patched per call: the forward is a function of (model, ``TreeBatch``), so
  ``torch.compile`` can capture it (``tree_forward``).

Each sequence keeps its own ``TreeCache``; ``verify_batch`` leaves every one of them with its
tree rows pending (``cache.Pending``), so ``cache.commit`` is the ragged commit: each sequence
keeps its own accepted rows.
"""
from __future__ import annotations

import itertools

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from . import adapter, batched, families
from .cache import Pending, TreeCache, batch_of_rows, check_cache, empty_cache, held_batch, hold_rows
from .gdn_layer import MODE_NAMES, GdnMode, gdn_mode as as_mode, tree_layer_batch
from .spec import token_ids  # noqa: F401  (verify.token_ids: its old name)
from .tree import DraftTree, ancestor_mask, ancestor_mask_from_parents, chain_tree, position_ids

GDN_MODES = MODE_NAMES

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
    anc, parents = ancestor_mask(tree), as_mode(gdn_mode).parents(tree)
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
    rows: the packed layout's rows LongTensor[N] (``batched.packed_rows``), None when every
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
    """Pack B trees on prefixes of ``lengths`` committed rows; ``conv_kernel``: the GDN conv
    width K (None for attention-only targets); packed: trees of different sizes run packed
    (``rows``; False: padded to the largest, packed's plain twin). Every mask and window is
    built for the batch at once (``batched.batch_masks``); each ``per_tree`` entry is a view
    into the batch tensors.
    One chain on an attention-only target builds no mask (``chain_buffers``).
    Plain twin: ``naive.batch_buffers``."""
    if conv_kernel is None and len(trees) == 1 and trees[0].is_chain:
        return chain_buffers(trees[0], lengths[0])
    gdn_parents = [as_mode(gdn_mode).parents(t) for t in trees]
    m = batched.batch_masks(trees, lengths, gdn_parents, conv_kernel)
    sizes = [len(t) for t in trees]
    per_tree = [TreeBuffers(t, m["positions"][b, :n], m["anc"][b, :n, :n], gdn_parents[b], m["gdn_anc"][b, :n, :n])
                for b, (t, n) in enumerate(zip(trees, sizes))]
    gdn = conv_kernel is not None
    return BatchBuffers(sizes, max(lengths), m["tokens"], m["positions"], m["allowed"],
                        m["gdn_anc"] if gdn else None, m["windows"] if gdn else None, per_tree,
                        batched.packed_rows(sizes, max(sizes)) if packed else None)


def chain_buffers(chain: DraftTree, length: int) -> BatchBuffers:
    """``batch_buffers`` of one chain of n nodes after ``length`` committed rows on an
    attention-only target: no ``allowed`` (``attention_bias`` gives its causal mask);
    positions a view of ``arange`` [1, n], the chain's ancestor mask the lower triangle."""
    n = len(chain)
    positions = torch.arange(length, length + n)
    anc = batched.chain_masks([n], n)[0]
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


@dataclass(frozen=True, eq=False)
class Forward:
    """logits [T, V]; features [T, F] (hidden states of ``feature_layers``, concatenated);
    choice LongTensor[T]: the argmax of every row (a verify asked for it, ``greedy``), else None."""
    logits: torch.Tensor
    features: torch.Tensor | None
    choice: torch.Tensor | None = None


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
    return _cache_of(model, adapter.read_hf_cache(model, hf_cache), ids.numel()), \
        Forward(out.logits[0], _features(out.hidden_states, feature_layers))


def _cache_of(model, state: dict, length: int) -> TreeCache:
    """A ``TreeCache`` of ``length`` committed rows from ``adapter.read_hf_cache``'s state."""
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
        state = adapter.read_hf_cache(model, hf_cache, row, first)
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
    rows, then its pending tree rows), which ``cache.commit`` compacts in place. The batch
    tensor is built (every committed row copied once) only when the batch changes or
    outgrows it, at twice the room needed. Batch of one: the cache's own buffer
    (``TreeCache.appended``). ``gdn_tree_layer`` (called by every routed GDN layer) runs the
    layer on the trees and keeps each sequence's ``GdnRecord``.
    """
    caches: list[TreeCache]
    bufs: BatchBuffers
    mode: GdnMode
    layer: object = tree_layer_batch  # or its plain twin ``naive.tree_layer_batch``
    records: list[dict] = field(init=False)
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

    def gdn_tree_layer(self, m, hidden_states: torch.Tensor) -> torch.Tensor:
        """GDN layer ``m`` on the trees: hidden_states [B, T, D] -> [B, T, D] (packed: [1, N, D]
        -> [1, N, D], ``gdn_layer.tree_layer_batch``)."""
        i = m.layer_idx
        conv = torch.stack([c.conv[i] for c in self.caches])  # [B, C, K]
        S0 = torch.stack([c.rec[i] for c in self.caches])  # [B, H, dk, dv]
        out, layer_records = self.layer(m, hidden_states, conv, S0, self.bufs, self.mode)
        for rec, layer_rec in zip(self.records, layer_records):
            rec[i] = layer_rec
        return out


    def recurrent_tree_layer(self, m, hidden_states: torch.Tensor):
        """A recurrent layer of another family (``core/families``) on the trees, sequence by
        sequence: its one-pass ``tree`` form (fork mode: the plain fork) over the parents the
        mode gives (naive: a chain) -> the stock mixer's output for hidden_states [B, T, D]
        (packed: [1, N, D]); each sequence's record kept for ``cache.commit``."""
        fam, i = families.family_of(m), m.layer_idx
        B, T = len(self.caches), max(self.bufs.sizes)
        h = hidden_states if self.bufs.rows is None else batched.unpack(hidden_states, self.bufs.rows, B, T, 1)
        out = torch.zeros_like(h)
        for b, (c, n, buf) in enumerate(zip(self.caches, self.bufs.sizes, self.bufs.per_tree)):
            out[b, :n], record = families.tree_forward(fam, m, h[b, :n], c.states[i], buf.gdn_parents, buf.gdn_anc,
                                                       fork_nodes=self.mode.forks)
            self.recurrent[b][i] = (m, fam, record)
        out = out if self.bufs.rows is None else batched.pack(out, self.bufs.rows, 1)
        return families.stock_output(fam, out)


# ----------------------------------------------------------------------------- verify

def tree_forward(model, view: TreeBatch, hidden: bool = False):
    """The verify's one target forward over ``view`` (a ``TreeBatch``): -> the model output
    (logits [B, T, V], or [1, N, V] packed (``view.bufs.rows``); hidden states if ``hidden``).
    Its inputs are (model, view) only and no module is patched per call, so ``torch.compile``
    can capture it (scripts/bench_compile.py). A packed forward runs inside
    ``adapter.packed_attention_on(model)`` (``verify_batch_unchecked`` enters it) and hands its
    attention the packed rows (``tree_rows``). Not pure: through ``TreeBatch.update`` every
    sequence's cache takes its tree rows, pending until ``cache.commit``."""
    p, bufs = next(model.parameters()), view.bufs
    bias = attention_bias(bufs, p.dtype, p.device)
    mask = bias if bufs.gdn_anc is None else {"full_attention": bias, "linear_attention": None}
    tokens, positions, packed = bufs.tokens.to(p.device), bufs.positions.to(p.device), {}
    if bufs.rows is not None:
        tokens, positions = (batched.pack(x, bufs.rows, 1) for x in (tokens, positions))
        packed = {"tree_rows": bufs.rows.to(p.device)}
    return model(tokens, attention_mask=mask, position_ids=positions, past_key_values=view, use_cache=True,
                 output_hidden_states=hidden, **packed)


@torch.no_grad()
def verify_batch(model, caches: list[TreeCache], trees: list[DraftTree], gdn_mode="wy",
                 feature_layers: tuple = (), gdn_layer=None, *, forward=tree_forward, packed: bool = True) -> list[Forward]:
    """Score B sequences' root + tree in ONE forward: -> per sequence Forward(logits [N_b+1, V],
    features [N_b+1, F] or None); row i = next-token logits after committed + path(i).

    Checks its arguments, then ``verify_batch_unchecked`` (what the decoding loop calls every
    round, its arguments checked once per generation). Writes no committed row: every cache
    keeps its tree rows as pending (``cache.Pending``) until ``commit``.
    gdn_layer: ``gdn_layer.tree_layer_batch`` (default) or its plain twin ``naive.tree_layer_batch``; forward:
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
    gdn = adapter.route_gdn_trees(model)
    adapter.route_family_trees(model)
    K = next(iter(gdn.values())).conv_kernel_size if gdn else None
    view = TreeBatch(caches, batch_buffers(trees, [c.length for c in caches], mode, K, packed), mode,
                     gdn_layer or tree_layer_batch)
    with adapter.packed_attention_on(model, view.bufs.rows is not None):
        out = forward(model, view, bool(feature_layers))
    for c, tree, rec, other in zip(caches, trees, view.records, view.recurrent):
        c.pending = Pending(tree, mode, rec, rescore_chain, other)
    choice = out.logits.argmax(-1) if greedy else None  # [B, T] (packed: [1, N])
    return [Forward(out.logits[b, first:end], _features(out.hidden_states, feature_layers, b, first, end),
                    None if choice is None else choice[b, first:end]) for b, first, end in view.bufs.spans()]


@torch.no_grad()
def verify(model, cache: TreeCache, tree: DraftTree, gdn_mode="wy", feature_layers: tuple = ()) -> Forward:
    """``verify_batch`` of one sequence: Forward(logits [N+1, V], features [N+1, F] or None)."""
    return verify_batch(model, [cache], [tree], gdn_mode, feature_layers)[0]


def rescore_chain(model, cache: TreeCache, tree: DraftTree, path: torch.Tensor) -> torch.Tensor:
    """Naive mode, a branched accepted ``path``: verify its tokens again as a chain (exact in
    naive mode) so the commit keeps unleaked rows; -> the chain's path (0 .. len - 1)."""
    verify(model, cache, chain_tree(tree.tokens[path[1:]], int(tree.tokens[0])), "naive")
    return torch.arange(path.numel())


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
