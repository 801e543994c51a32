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
  (``nonzero``), a graph break per MoE layer. Every lab loop, eager or compiled, runs the
  experts as transformers' ``grouped_mm`` (one grouped matmul, no break; ``verify.loop_ready``),
  then the model's own setting comes back. The AR baseline of a compiled comparison is
  compiled the same way, so no ratio mixes a compiled loop with an eager one.
- Not bit-identical to eager: inductor fuses and reorders float32 sums (relative logit
  differences ~1e-7, ``data/results/bench_compile.csv``). At T = 0 a compiled speculative
  generation equals the compiled AR one token for token, as the eager ones do
  (``core/tests/test_compiled.py``).
"""
from __future__ import annotations

import functools

import torch

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
