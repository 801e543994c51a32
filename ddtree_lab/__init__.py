"""ddtree_lab: DFlash drafting, DDTree trees and exact tree verification on real architectures.

The layers, each a folder: ``core`` (tree, GDN tree maths, cache + commit, verify, adapter,
drafter, decode, model presets), ``train`` (corpus, tokenizer, training loop, recipes,
checkpoints, ``load_pair``), ``experiments`` (results store, sweeps, analyses), ``app``
(plots, widgets, notebook helpers, CLI). The names below are the public API: among them the
plug-in points, tree rules and acceptance walks (``core.rules``), ``check_lossless``, and
``naive`` (``core/naive.py``): the plain twins the fast functions are tested against.
"""
from .core import naive
from .core.cache import TreeCache, commit
from .core.decode import Generation, generate, generate_batch
from .core.lossless import LosslessReport, check_lossless
from .core.models import load_target
from .core.reference import reference_generate
from .core.rules import (TreeRule, Walk, best_first, check_tree, conditional, conditional_chain, dflash_chain,
                         rejection, target_matching, unary)
from .core.spec import GenerationSpec, Sampling
from .core.tree import DraftTree, build_tree, chain_tree
from .core.verify import GDN_MODES, prefill, tree_logits, verify
from .train.pair import Pair, load_pair

__all__ = ["DraftTree", "GDN_MODES", "Generation", "GenerationSpec", "LosslessReport", "Sampling", "Pair", "TreeCache",
           "TreeRule", "Walk", "best_first", "build_tree", "chain_tree", "check_lossless", "check_tree", "commit",
           "conditional", "conditional_chain", "dflash_chain", "generate", "generate_batch", "load_pair", "load_target",
           "naive", "prefill", "reference_generate", "rejection", "target_matching", "tree_logits", "unary", "verify"]
