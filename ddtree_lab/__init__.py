"""ddtree_lab: DFlash drafting, DDTree trees and exact tree verification on real architectures.

The layers, each a folder: ``core`` (tree, GDN tree maths, cache + commit, verify, adapter,
drafter, decode, model presets), ``train`` (corpus, tokenizer, training loop, recipes,
checkpoints, ``load_pair``), ``experiments`` (results store, sweeps, analyses), ``app``
(plots, widgets, notebook helpers, CLI). The names below are the public API.
"""
from .core.cache import TreeCache, commit, commit_reference
from .core.decode import Generation, generate, generate_batch
from .core.models import load_target
from .core.reference import reference_generate
from .core.spec import GenerationSpec, Sampling
from .core.tree import DraftTree, build_tree, build_tree_reference, chain_tree
from .core.verify import GDN_MODES, prefill, tree_logits, verify
from .train.pair import Pair, load_pair

__all__ = ["DraftTree", "GDN_MODES", "Generation", "GenerationSpec", "Sampling", "Pair", "TreeCache", "build_tree", "build_tree_reference",
           "chain_tree", "commit", "commit_reference", "generate", "generate_batch", "load_pair", "load_target", "prefill",
           "reference_generate", "tree_logits", "verify"]
