"""The loop's forwards under ``torch.compile`` (``GenerationSpec.compile``).

A compiled generation runs the same loop on compiled copies of its three per-round forwards:
the verify (``verify.tree_forward``), the drafter's block forward and the AR step. Prefills stay
eager (one per prompt, any length).

- Shapes: dynamo's automatic dynamic shapes. The first call compiles for its shapes; the first
  call with another committed length recompiles once with that length symbolic, after which
  every round reuses the graph. A target and a block size give about 3 graphs per forward
  (``torch._dynamo.utils.counters["stats"]["unique_graphs"]``), built once per process and
  shared by every later generation with the same models.
- Mixture-of-experts targets: transformers' eager experts loop has data-dependent shapes
  (``nonzero``), a graph break per MoE layer. While a compiled generation runs, the experts
  run as transformers' ``grouped_mm`` (one grouped matmul, no break), then the model's own
  setting comes back (``compile_ready``). The AR baseline of a compiled comparison is
  compiled the same way, so no ratio mixes a compiled loop with an eager one.
- Not bit-identical to eager: inductor fuses and reorders float32 sums (relative logit
  differences ~1e-7, ``data/results/bench_compile.csv``). At T = 0 a compiled speculative
  generation equals the compiled AR one token for token, as the eager ones do
  (``core/tests/test_compiled.py``).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import torch

from . import adapter
from .verify import tree_forward


@functools.cache
def compiled_tree_forward():
    """``verify.tree_forward`` under ``torch.compile`` (one wrapper per process: its graphs are
    reused by every generation)."""
    return torch.compile(tree_forward)


def compiled_module(module: torch.nn.Module):
    """``module``'s forward under ``torch.compile``, kept on the module (one per module): the
    drafter's block forward or the target's AR step."""
    fn = module.__dict__.get("_ddtree_compiled")
    if fn is None:
        fn = torch.compile(module)
        module.__dict__["_ddtree_compiled"] = fn
    return fn


def _experts_setting(model) -> str | None:
    """The model's experts implementation, None when it has no experts."""
    has_experts = any(hasattr(type(m), "_apply_gate") for m in model.modules())
    return model.config._experts_implementation if has_experts else None


@contextlib.contextmanager
def compile_ready(model) -> Iterator[None]:
    """While open, a mixture-of-experts ``model`` runs its experts as ``grouped_mm`` (no graph
    break); its own setting is restored on exit. Other models are left as they are. A GDN
    model's layers take their tree route first (``adapter.route_gdn_trees``, once per model),
    so the AR step and the verify are compiled on the same layer classes (a graph guards on
    them: routing after an AR compile would rebuild it)."""
    adapter.route_gdn_trees(model)
    before = _experts_setting(model)
    if before is None or before == "grouped_mm":
        yield
        return
    model.set_experts_implementation("grouped_mm")
    try:
        yield
    finally:
        model.set_experts_implementation(before)
