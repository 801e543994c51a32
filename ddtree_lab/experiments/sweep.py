"""Sweeps: a grid over (arch, method, gdn_mode, budget, block size, temperature) x prompts,
every finished row appended to a ``ResultsStore`` (resumable, never stale).
"""
from __future__ import annotations

import itertools
from functools import lru_cache

import pandas as pd
from tqdm.auto import tqdm

from .results import ResultsStore

AXES = ("arch", "method", "gdn_mode", "budget", "block_size", "temperature", "max_new_tokens")


def normalise(cfg: dict) -> dict:
    """Canonical config: fields a method ignores are blanked, so equal runs share a key."""
    cfg = dict(cfg)
    if cfg["method"] == "ar":
        cfg.update(budget=0, block_size=0, gdn_mode="-")
    elif cfg["method"] == "dflash":
        cfg["budget"] = cfg["block_size"] - 1
    if cfg["arch"] == "mla":
        cfg["gdn_mode"] = "-"
    return {k: cfg[k] for k in AXES}


def expand_grid(**axes) -> list[dict]:
    """Cartesian product of the axes (each a list), normalised and deduplicated, in order."""
    missing = set(AXES) - set(axes)
    if missing:
        raise ValueError(f"expand_grid needs every axis {AXES}; missing {sorted(missing)}")
    seen, out = set(), []
    for combo in itertools.product(*(axes[a] for a in AXES)):
        cfg = normalise(dict(zip(AXES, combo)))
        key = tuple(cfg.values())
        if key not in seen:
            seen.add(key)
            out.append(cfg)
    return out


_PAIRS: dict = {}  # arch -> (target, drafter, tokenizer) registered by use_pair
_TAGS: dict = {}


def use_pair(arch: str, pair: tuple, tag: str) -> None:
    """Make sweeps of ``arch`` run on ``pair`` (e.g. a real checkpoint); ``tag`` names it in
    store names, so rows of different models never mix."""
    _PAIRS[arch] = pair
    _TAGS[arch] = tag
    _prompt_ids.cache_clear()


def pair_tag() -> str:
    """'' for the shipped models, else the registered tags (for store names)."""
    return "-".join(f"{a}_{t}" for a, t in sorted(_TAGS.items()) if t != "shipped")


def _pair(arch: str):
    if arch not in _PAIRS:
        from ..train.pair import load_pair
        use_pair(arch, load_pair(arch), "shipped")
    return _PAIRS[arch]


@lru_cache(maxsize=8)
def _prompt_ids(arch: str, prompt_id: int) -> tuple:
    from ..app.lab import prompt_tokens
    return tuple(prompt_tokens(_pair(arch)[2], prompt_id))


def run_config(cfg: dict, prompt_id: int, pair=None, prompt_ids=None) -> dict:
    """Generate one (config, prompt) row; returns its metrics."""
    from .costs import cost_model
    from ..core.decode import generate
    target, drafter, _ = pair or _pair(cfg["arch"])
    ids = list(prompt_ids or _prompt_ids(cfg["arch"], prompt_id))
    kwargs = {}
    if cfg["budget"] == "auto":
        kwargs["cost_model"] = cost_model(target, drafter, ids, block_size=cfg["block_size"],
                                          gdn_mode=_mode(cfg))
    g = generate(target, drafter, ids, method=cfg["method"], budget=cfg["budget"] or 1,
                 block_size=cfg["block_size"] or 2, max_new_tokens=cfg["max_new_tokens"],
                 temperature=cfg["temperature"], gdn_mode=_mode(cfg), seed=prompt_id, **kwargs)
    return {"tokens": g.tokens, "acceptance_lengths": g.acceptance_lengths, "tree_sizes": g.tree_sizes,
            "timings": g.timings, "tau": g.tau, "tokens_per_s": g.tokens_per_s,
            "rounds": len(g.acceptance_lengths), "prompt_len": len(ids)}


def _mode(cfg: dict) -> str:
    return "wy" if cfg["gdn_mode"] == "-" else cfg["gdn_mode"]


def run_sweep(configs: list[dict], prompt_ids: list[int], store: ResultsStore,
              progress: bool = True, runner=run_config) -> pd.DataFrame:
    """Run every (config, prompt) not yet in ``store``; returns the store's frame.

    Prompts are the outer loop, so configs compared in one run are timed side by side
    (machine noise hits them alike) and an interrupted run leaves whole prompts done.
    """
    from .results import row_key
    done = store.done_keys()
    todo = [(c, p) for p in prompt_ids for c in configs if row_key(c, p, store.code) not in done]
    for cfg, p in tqdm(todo, desc=f"sweep {store.path.stem}", disable=not progress or not todo):
        store.add(cfg, p, runner(cfg, p))
    return store.frame()
