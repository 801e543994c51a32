"""Recurrent layer families: one module each, one protocol (docs/background.md section 13).

A hybrid target mixes softmax attention (exact under a tree mask) with recurrent layers, whose
state would leak across a tree's branches if the flattened tree were read as a chain. Each
family module or folder (``gdn/``, ``kda``, ``mamba2``, ``short_conv``, ``lightning``, ``mamba1``) holds,
for ONE sequence (no batch dimension), from the stock layer's own weights:

- ``CLASS_NAMES``: the stock mixer classes it handles (matched along the MRO, so a subclass is
  handled too): the registry (``REGISTRY``) is built from them, and core routes a layer to its
  family by class, never by a family's name;
- ``step(m, h, state) -> (out, state)``: the plain one-token step, h [D] the stock mixer's
  input (``hidden_states`` as the decoder layer hands it), out [D] what it returns;
- ``tree(m, h, state, parents, anc) -> (out, record)``: the exact one-pass tree forward, h
  [n, D] the tree's nodes in topological order, parents LongTensor[n] (``parents[0] = -1``),
  anc BoolTensor[n, n] (node i sees node j iff j is i or an ancestor); out [n, D];
- ``commit(m, record, path) -> state``: the state after the last node of the accepted
  ``path`` (node indices from 0), from ``tree``'s record.

A state is a value: ``{"conv": {i: [C, K]}, "rec": {i: tensor}}``, the stock cache layer's
conv and recurrent states (transformers' ``LinearAttentionLayer``) without the batch dimension,
never written in place. ``read_state`` / ``write_state`` move it out of / into a stock cache;
a family whose stock cache differs (MiniMax's) defines its own.

``fork`` is every family's exact tree forward by its plain step, node by node from the parent's
state: the specification its fast ``tree`` is tested against, and the fallback where none
exists. ``chain`` runs the plain step over a sequence (what an AR prefill leaves).

Optionally, a family runs a batch of trees at once for some of its classes (``BATCHED_CLASSES``,
with ``tree_layer_batch``, ``zero_state`` and ``commit_batch_layers``: Gated DeltaNet's Qwen
layouts, ``gdn/wy.py``). Routing lives with the verify (``verify.family_of``,
``verify.TreeRoute``): this package holds the families and their registry, no routing code.
"""
from __future__ import annotations

import importlib
from types import ModuleType

import torch

FAMILY_NAMES = ("gdn", "kda", "mamba2", "short_conv", "lightning", "mamba1")


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:  # a family not written yet: no registry entry
        if e.name == f"{__name__}.{name}":
            return None
        raise


FAMILIES: dict[str, ModuleType] = {n: m for n in FAMILY_NAMES if (m := _load(n)) is not None}
# stock mixer class name -> its family module: the one registry core routes by
REGISTRY: dict[str, ModuleType] = {cls: fam for fam in FAMILIES.values() for cls in fam.CLASS_NAMES}


def name_of(fam: ModuleType) -> str:
    """A family module's name: 'gdn', 'kda', ..."""
    return fam.__name__.rsplit(".", 1)[-1]


# ----------------------------------------------------------------------------- stock cache <-> state

def read_state(cache, layer_idx: int, row: int = 0) -> dict:
    """The state of ``layer_idx`` in a stock cache (transformers' ``LinearAttentionLayer``),
    batch row ``row``: {"conv": {i: [C, K]}, "rec": {i: [...]}}, fresh tensors (a state the
    layer does not keep, None in the stock cache, is left out)."""
    layer = cache.layers[layer_idx]
    return {"conv": {i: t[row].clone() for i, t in layer.conv_states.items() if t is not None},
            "rec": {i: t[row].clone() for i, t in layer.recurrent_states.items() if t is not None}}


def write_state(cache, layer_idx: int, state: dict, row: int = 0) -> None:
    """Write ``state`` into batch row ``row`` of ``layer_idx`` of a stock cache, in place (the
    stock layer keeps its tensors at static addresses)."""
    layer = cache.layers[layer_idx]
    for i, t in state["conv"].items():
        layer.conv_states[i][row].copy_(t)
    for i, t in state["rec"].items():
        layer.recurrent_states[i][row].copy_(t)


def state_of(fam: ModuleType, cache, layer_idx: int, row: int = 0) -> dict:
    """``fam.read_state`` where the family defines one, else ``read_state``."""
    return getattr(fam, "read_state", read_state)(cache, layer_idx, row)


# ----------------------------------------------------------------------------- plain forms

def chain(fam: ModuleType, m, h: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
    """The plain step over a sequence: h [T, D] -> (out [T, D], the state after the last token)."""
    outs = []
    for t in range(h.shape[0]):
        o, state = fam.step(m, h[t], state)
        outs.append(o)
    return torch.stack(outs), state


def fork(fam: ModuleType, m, h: torch.Tensor, state: dict, parents: torch.Tensor) -> tuple[torch.Tensor, list]:
    """Every family's exact tree forward, the specification: node i steps from its parent's
    state (the root from ``state``). h [n, D], parents LongTensor[n] -> (out [n, D], the state
    after each node, a list of n)."""
    outs, states = [], []
    for i, p in enumerate(parents.tolist()):
        o, s = fam.step(m, h[i], state if p < 0 else states[p])
        outs.append(o)
        states.append(s)
    return torch.stack(outs), states


class ForkRecord(list):
    """``fork``'s record: the state after each node (what ``commit_state`` picks from)."""


def tree_forward(fam: ModuleType, m, h: torch.Tensor, state: dict, parents: torch.Tensor, anc: torch.Tensor,
                 fork_nodes: bool = False) -> tuple:
    """The family's one-pass ``tree`` (or, ``fork_nodes``, the plain ``fork``): h [n, D] -> (out
    [n, D], the record ``commit_state`` takes)."""
    if fork_nodes:
        out, states = fork(fam, m, h, state, parents)
        return out, ForkRecord(states)
    return fam.tree(m, h, state, parents, anc)


def commit_state(fam: ModuleType, m, record, path: list) -> dict:
    """The state after the last node of ``path`` from ``tree_forward``'s record."""
    return record[path[-1]] if isinstance(record, ForkRecord) else fam.commit(m, record, path)
