"""State leakage of naive tree verification on a Gated DeltaNet hybrid (docs/background.md section 4;
TreeWY, arXiv 2608.20961).

A tree-unaware GDN layer reads the flattened tree as a chain: node i's conv window and
recurrent state then hold every node before it in flattened order, siblings and cousins
included. Node i is therefore exact iff all nodes before it are its ancestors, i.e. iff
``non_ancestors_before = i - depth_i`` is 0 (its ancestors are exactly depth_i nodes, all
earlier in topological order). This module measures the per-node logit error of ``naive``
and ``fork`` against ``wy`` (the exact oracle), and how often naive decoding diverges from AR.
"""
from __future__ import annotations

import pandas as pd
import torch

from ...core.tree import DraftTree, build_tree
from ...core.decode import first_draft
from ...core.verify import tree_logits
from ..plumbing.summary import first_divergence


def node_errors(model, prefix_ids, tree: DraftTree) -> pd.DataFrame:
    """Per-node logit error of naive and fork verification against wy (exact).

    Each mode verifies ``tree`` after a fresh prefill of ``prefix_ids`` (the root token is
    tree.tokens[0], not part of the prefix). One row per node (root included), columns:
    node, depth, flat_position (= node), non_ancestors_before (# j < i not ancestors of i),
    first_branch_before (bool, non_ancestors_before > 0), err_naive, err_fork
    (max |logits - logits_wy| over the vocabulary), argmax_flip (naive argmax != wy argmax).
    """
    exact, naive, fork = (tree_logits(model, prefix_ids, tree, mode).double()
                          for mode in ("wy", "naive", "fork"))  # [N+1, V] each
    node = torch.arange(len(tree))
    before = node - tree.depths  # [N+1] nodes j < i minus the depth_i ancestors
    return pd.DataFrame({
        "node": node.numpy(), "depth": tree.depths.numpy(), "flat_position": node.numpy(),
        "non_ancestors_before": before.numpy(), "first_branch_before": (before > 0).numpy(),
        "err_naive": (naive - exact).abs().amax(-1).numpy(),
        "err_fork": (fork - exact).abs().amax(-1).numpy(),
        "argmax_flip": (naive.argmax(-1) != exact.argmax(-1)).numpy(),
    })


def leakage_table(model, prompts, drafter, budgets, block_size: int = 8) -> pd.DataFrame:
    """``node_errors`` of the real DDTree tree at the end of each prompt, for each budget.

    drafter: a DFlashDrafter, or a callable ``prompt_ids -> draft logits [L, V]``.
    One tree per (prompt, budget), built from one drafter proposal per prompt. Columns:
    prompt (index into ``prompts``), budget, then those of ``node_errors``.
    """
    frames = []
    for p, prompt in enumerate(prompts):
        prompt = [int(t) for t in prompt]
        logits = (drafter(prompt) if not hasattr(drafter, "draft")
                  else first_draft(model, drafter, prompt, block_size).draft.logits)
        for budget in budgets:
            tree = build_tree(logits, prompt[-1], budget)
            frames.append(node_errors(model, prompt[:-1], tree).assign(prompt=p, budget=budget))
    frame = pd.concat(frames, ignore_index=True)
    return frame[["prompt", "budget"] + [c for c in frame.columns if c not in ("prompt", "budget")]]


def _token_lists(runs) -> tuple[list, list[list[int]]]:
    """(prompt keys, token lists) from a list of token lists or a ``ResultsStore.frame()``."""
    if isinstance(runs, pd.DataFrame):
        tokens = [m["tokens"] for m in runs["_metrics"]] if "_metrics" in runs else list(runs["tokens"])
        keys = list(runs["prompt"]) if "prompt" in runs else list(range(len(runs)))
        return keys, [list(t) for t in tokens]
    return list(range(len(runs))), [list(t) for t in runs]


def divergence_summary(runs_ar, runs_other) -> dict:
    """How often (and where) an other method's output departs from AR's.

    runs_*: lists of token lists (same prompt order), or results frames (``ResultsStore.frame()``:
    a ``prompt`` column and ``_metrics['tokens']``; each row of ``runs_other`` is matched to
    the AR row of the same prompt, so filter the frames to one config first).
    Returns {n, n_diverged, fraction_diverged, first_divergence: [int | None per other row],
    prompts: [prompt key per other row]}.
    """
    ar_keys, ar_tokens = _token_lists(runs_ar)
    if len(set(ar_keys)) != len(ar_keys):
        raise ValueError("runs_ar must hold one run per prompt, got repeated prompts")
    ar_by_key = dict(zip(ar_keys, ar_tokens))
    keys, tokens = _token_lists(runs_other)
    missing = [k for k in keys if k not in ar_by_key]
    if missing:
        raise ValueError(f"runs_other has prompts with no AR run: {missing[:5]}")
    firsts = [first_divergence(ar_by_key[k], t) for k, t in zip(keys, tokens)]
    n_div = sum(f is not None for f in firsts)
    return {"n": len(firsts), "n_diverged": n_div, "fraction_diverged": n_div / max(1, len(firsts)),
            "first_divergence": firsts, "prompts": keys}
