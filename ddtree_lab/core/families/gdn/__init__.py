"""Gated DeltaNet (GDN) family: exact tree verification for every stock GDN mixer of the pinned
transformers (5.23.0): Qwen3.5, Qwen3.5-MoE, Qwen3-Next and OLMo-hybrid (the protocol of
``families/__init__.py``).

- ``naive.py``: the plain twin, the one-token ``step`` (and ``replay_gdn``), from which
  ``families.fork`` is the specification;
- ``wy.py``: the fast form, the one-pass tree WY (``tree`` / ``commit`` for one sequence), the
  layer over a batch of trees (``tree_layer_batch``: the decoding loop's) and the batch commit.
"""
from .naive import step
from .wy import BATCHED_CLASSES, CLASS_NAMES, IDX, commit, commit_batch_layers, tree, tree_layer_batch, zero_state

__all__ = ["BATCHED_CLASSES", "CLASS_NAMES", "IDX", "commit", "commit_batch_layers", "step", "tree", "tree_layer_batch",
           "zero_state"]
