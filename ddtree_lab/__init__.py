"""ddtree_lab: DFlash drafting, DDTree trees and exact tree verification on real architectures.

The layers, each a folder: ``core`` (tree, spec, rules, drafter, verify + cache + commit,
decode, the recurrent families, model presets), ``train`` (corpus, tokenizer, training loop, recipes,
checkpoints, ``load_pair``), ``experiments`` (results store, sweeps, analyses), ``app``
(plots, widgets, notebook helpers, CLI). The names below are the public API: among them the
plug-in points, tree rules and acceptance walks (``core.rules``), ``check_lossless``, and
``naive`` (``core/naive.py``): the plain twins the fast functions are tested against.

Each name is imported from its module on first use (PEP 562 ``__getattr__``): ``from ddtree_lab
import generate`` works as before, while ``import ddtree_lab`` alone loads no torch, so the CLI
(``python -m ddtree_lab``) answers ``--help`` and an argument error at once.
"""
import importlib

_API = {  # module: the public names it defines
    ".core": ("naive",),
    ".core.decode": ("Generation", "generate", "generate_batch"),
    ".core.lossless": ("LosslessReport", "check_lossless"),
    ".core.models": ("load_target",),
    ".core.reference": ("reference_generate",),
    ".core.rules": ("TreeRule", "Walk", "best_first", "check_tree", "conditional", "conditional_chain", "dflash_chain",
                    "rejection", "target_matching", "unary"),
    ".core.spec": ("GenerationSpec", "Sampling"),
    ".core.tree": ("DraftTree", "build_tree", "chain_tree"),
    ".core.verify": ("GDN_MODES", "TreeCache", "commit", "prefill", "tree_logits", "verify"),
    ".train.pair": ("Pair", "load_pair"),
}
_HOME = {name: module for module, names in _API.items() for name in names}

__all__ = ["DraftTree", "GDN_MODES", "Generation", "GenerationSpec", "LosslessReport", "Sampling", "Pair", "TreeCache",
           "TreeRule", "Walk", "best_first", "build_tree", "chain_tree", "check_lossless", "check_tree", "commit",
           "conditional", "conditional_chain", "dflash_chain", "generate", "generate_batch", "load_pair", "load_target",
           "naive", "prefill", "reference_generate", "rejection", "target_matching", "tree_logits", "unary", "verify"]


def __getattr__(name: str):
    """A public name, imported from its module (``_API``) the first time it is asked for, then kept."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_HOME[name], __name__)
    try:
        value = getattr(module, name)
    except AttributeError:   # a submodule (``naive``), as ``from .core import naive`` reads it
        value = importlib.import_module(f"{_HOME[name]}.{name}", __name__)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
