"""One Gated DeltaNet layer on draft trees: the GDN mode, chosen once, and the layer forwards.

A ``GdnMode`` (``gdn_mode("naive" | "fork" | "wy")``) carries everything that differs
between the three ways of running a GDN layer on a tree (docs/background.md section 4):

- ``parents``: the tree the layer sees (naive: the flattened tree read as a chain, so conv
  window and recurrent state leak across siblings; fork / wy: the real tree);
- ``core`` / ``core_batch``: the recurrence over it (fork: per-node states from the
  parent's, ``gdn_tree.gated_delta_fork``; wy / naive: the single-pass tree WY form);
- ``state``: the commit rule, the accepted node's recurrent state from the verify's record
  (fork: its stored state; wy / naive: the closed form W1, ``gdn_tree.wy_state``);
- ``needs_rescore``: naive mode with a branched accepted path leaked into the K/V and GDN
  inputs, so the commit re-verifies the path as a chain first.

``tree_layer`` / ``tree_layer_batch`` run one layer (``Qwen3_5GatedDeltaNet``'s weights,
through ``adapter``) on one tree / on B padded trees; ``tree_layer_per_tree`` runs
``tree_layer`` per sequence (what a mode with no batched form, fork, runs; also the body of
the plain twin ``naive.tree_layer_batch``). Each returns the layer output and one
``GdnRecord`` per sequence, what ``cache.commit`` needs.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import ClassVar

import torch

from . import adapter, batched, gdn_tree
from .batched import gated_delta_wy as gated_delta_wy_batch, tree_conv as tree_conv_batch

MODE_NAMES = ("naive", "fork", "wy")


@dataclass(frozen=True, eq=False)
class GdnRecord:
    """What one GDN layer's tree forward leaves for the commit: pre-conv inputs x [N+1, C] and
    raw gates a, b [N+1, H] (enough to replay any path, ``cache.replay_gdn``), plus either the
    per-node states [N+1, H, dk, dv] (fork) or the WY pass's {U, G, k} and S0 (wy / naive).
    batch: (the batch's record, i) when this is row i of one batched WY pass (``row``), whose
    fields hold every sequence's at once (x [B, T, C], U [B, H, T, dv], ..., S0 [B, H, dk, dv]):
    ``cache.commit_batch`` reads the batch's tensors, with no stacking."""
    x: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    states: torch.Tensor | None = None
    wy: dict | None = None
    S0: torch.Tensor | None = None
    batch: tuple | None = None

    def row(self, i: int, n: int) -> "GdnRow":
        """Sequence i's record (its first n rows) of this batch record of a WY pass."""
        return GdnRow(self, i, n)


@dataclass(frozen=True, eq=False)
class GdnRow:
    """Sequence i's ``GdnRecord`` (its first n rows) of a batch record ``whole`` of one WY pass:
    the same fields, each cut from the batch's tensors when first read (a batched commit reads
    none of them: ``cache.commit_batch`` takes the batch's tensors, ``batch``)."""
    whole: GdnRecord
    i: int
    n: int
    states: None = None

    @property
    def batch(self) -> tuple:
        return self.whole, self.i

    @functools.cached_property
    def x(self) -> torch.Tensor:
        return self.whole.x[self.i, :self.n]

    @functools.cached_property
    def a(self) -> torch.Tensor:
        return self.whole.a[self.i, :self.n]

    @functools.cached_property
    def b(self) -> torch.Tensor:
        return self.whole.b[self.i, :self.n]

    @functools.cached_property
    def wy(self) -> dict:
        return {name: t[self.i] for name, t in self.whole.wy.items()}

    @functools.cached_property
    def S0(self) -> torch.Tensor:
        return self.whole.S0[self.i]


@dataclass(frozen=True)
class GdnMode:
    """The single-pass tree WY form over the real tree ("wy", the default and exact mode).

    exact: the mode's tree outputs equal per-path forwards (naive's do not past a branch);
    batched: it has a form over B padded trees (``core_batch``); fork has none, and its layer
    runs ``tree_layer`` per sequence (measured as such)."""
    name: str = "wy"
    exact: ClassVar[bool] = True
    batched: ClassVar[bool] = True
    forks: ClassVar[bool] = False  # every node's state from its parent's by the plain step (the other families too)

    def parents(self, tree) -> torch.Tensor:
        """The parents [N+1] the GDN layers use for ``tree``."""
        return tree.parents

    def needs_rescore(self, path: torch.Tensor) -> bool:
        return False

    def core(self, q, k, v, g, beta, parents, *, depths, S0, anc) -> tuple[torch.Tensor, dict]:
        """q, k [N+1, H, dk], v [N+1, H, dv], g, beta [N+1, H], S0 [H, dk, dv], anc [N+1, N+1]
        -> (o [N+1, H, dv], the record's mode fields)."""
        o, aux = gdn_tree.gated_delta_wy(q, k, v, g, beta, parents, S0=S0, anc=anc, return_aux=True)
        return o, {"wy": aux, "S0": S0}

    def core_batch(self, q, k, v, g, beta, S0, *, anc):
        """``core`` over B padded trees (q [B, T, H, dk] ..., S0 [B, H, dk, dv], anc [B, T, T])
        -> (o [B, T, H, dv], the batch's mode fields: ``GdnRecord.row`` cuts each sequence's);
        only for a ``batched`` mode."""
        o, aux = gated_delta_wy_batch(q, k, v, g, beta, S0, anc=anc)
        return o, {"wy": aux, "S0": S0}

    def state(self, rec: GdnRecord, path: list) -> torch.Tensor:
        """The recurrent state [H, dk, dv] after the last node of the accepted ``path``."""
        return gdn_tree.wy_state(rec.wy, rec.S0, path)


@dataclass(frozen=True)
class NaiveMode(GdnMode):
    """The flattened tree read as a chain: what a tree-unaware implementation does."""
    name: str = "naive"
    exact: ClassVar[bool] = False

    def parents(self, tree) -> torch.Tensor:
        return gdn_tree.chain_parents(tree.num_nodes)

    def needs_rescore(self, path: torch.Tensor) -> bool:
        return not torch.equal(path, torch.arange(path.numel()))


@dataclass(frozen=True)
class ForkMode(GdnMode):
    """Per-node conv windows from ancestors and per-node states from the parent's; no batched
    form (``batched`` False: ``tree_layer`` per sequence)."""
    name: str = "fork"
    batched: ClassVar[bool] = False
    forks: ClassVar[bool] = True

    def core(self, q, k, v, g, beta, parents, *, depths, S0, anc):
        o, states = gdn_tree.gated_delta_fork(q, k, v, g, beta, parents, depths=depths, S0=S0)
        return o, {"states": states}

    def state(self, rec: GdnRecord, path: list) -> torch.Tensor:
        return rec.states[path[-1]]


MODES = {"naive": NaiveMode(), "fork": ForkMode(), "wy": GdnMode()}


def gdn_mode(mode) -> GdnMode:
    """The ``GdnMode`` named ``mode`` (one of ``MODE_NAMES``), or ``mode`` itself if it is one."""
    if isinstance(mode, GdnMode):
        return mode
    if mode not in MODES:
        raise ValueError(f"gdn_mode must be one of {MODE_NAMES}, got {mode!r}")
    return MODES[mode]


# ----------------------------------------------------------------------------- layer forwards

def tree_layer(m, h, conv_state, S0, buf, mode: GdnMode) -> tuple[torch.Tensor, GdnRecord]:
    """One GDN layer on one tree. h [N+1, D], conv_state [C, K], S0 [H, dk, dv], buf: the tree's
    ``verify.TreeBuffers`` -> (out [N+1, D], its ``GdnRecord``)."""
    x, z, a, b = adapter.gdn_project(m, h)
    y = gdn_tree.tree_conv(x, conv_state, adapter.gdn_conv_weight(m), buf.gdn_parents)
    q, k, v = adapter.gdn_qkv(m, y)
    g, beta = adapter.gdn_gates(m, a, b)
    o, fields = mode.core(q, k, v, g, beta, buf.gdn_parents, depths=buf.tree.depths, S0=S0.to(v.dtype), anc=buf.gdn_anc)
    return adapter.gdn_output(m, o, z, h.dtype), GdnRecord(x, a, b, **fields)


def tree_layer_batch(m, h, conv_state, S0, bufs, mode: GdnMode) -> tuple[torch.Tensor, list[GdnRecord]]:
    """One GDN layer on B trees. h [B, T, D] padded, or [1, N, D] packed (``bufs.rows``),
    conv_state [B, C, K], S0 [B, H, dk, dv], bufs: ``verify.BatchBuffers`` -> (out shaped as h
    (padding rows: never read), a record per sequence, as ``tree_layer`` makes it).
    Projections, gates and the output norm over all rows of h at once; the conv and the
    recurrence over the padded [B, T] (``batched.unpack``). A mode without a batched form (fork:
    ``GdnMode.batched``) runs ``tree_layer`` per sequence (``tree_layer_per_tree``) before any batched work."""
    if not mode.batched:
        return tree_layer_per_tree(m, h, conv_state, S0, bufs, mode)
    B, T, D = len(bufs.sizes), max(bufs.sizes), h.shape[-1]
    padded = (lambda t: t) if bufs.rows is None else (
        lambda t: batched.unpack(t[None], bufs.rows, B, T, 1).reshape(B * T, *t.shape[1:]))
    x, z, a, b = adapter.gdn_project(m, h.reshape(-1, D))  # [rows, C], [rows, H, dv], [rows, H] x2
    x, a, b = padded(x), padded(a), padded(b)  # [B*T, ...]; z stays on h's rows, for the output
    y = tree_conv_batch(x.view(B, T, -1), conv_state, adapter.gdn_conv_weight(m), bufs.windows)
    q, k, v = adapter.gdn_qkv(m, y.reshape(B * T, -1))
    g, beta = adapter.gdn_gates(m, a, b)
    o, fields = mode.core_batch(*(t.view(B, T, *t.shape[1:]) for t in (q, k, v, g, beta)),
                                S0.to(v.dtype), anc=bufs.gdn_anc.to(h.device))
    o = o.reshape(B * T, *o.shape[2:]) if bufs.rows is None else batched.pack(o, bufs.rows, 1)[0]
    out = adapter.gdn_output(m, o, z, h.dtype).view(h.shape)
    whole = GdnRecord(*(t.view(B, T, -1) for t in (x, a, b)), **fields)
    return out, [whole.row(i, n) for i, n in enumerate(bufs.sizes)]


def tree_layer_per_tree(m, h, conv_state, S0, bufs, mode: GdnMode):
    """``tree_layer_batch`` by ``tree_layer`` per sequence (h packed: unpacked first, the output
    packed back): the fast layer's path for a mode with no batched form (fork), and the body of
    its plain twin ``naive.tree_layer_batch`` (kept here: ``naive`` imports this module)."""
    if bufs.rows is not None:
        B, T = len(bufs.sizes), max(bufs.sizes)
        out, records = tree_layer_per_tree(m, batched.unpack(h, bufs.rows, B, T, 1), conv_state, S0,
                                           dataclasses.replace(bufs, rows=None), mode)
        return batched.pack(out, bufs.rows, 1), records
    out, records = torch.zeros_like(h), []
    for i, n in enumerate(bufs.sizes):
        out[i, :n], rec = tree_layer(m, h[i, :n], conv_state[i], S0[i], bufs.per_tree[i], mode)
        records.append(rec)
    return out, records
