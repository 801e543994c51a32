"""Tree construction on real drafts (notebook 01; DDTree, arXiv 2604.12989, sections 3-4):
the best-first heap against brute force, the surrogate's expected acceptance against the
budget, and the shape of a tree against the drafter's confidence."""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import pandas as pd
import torch

from ...core import naive
from ...core.tree import build_tree, expected_acceptance_prefixes


def heap_vs_brute_force(rows=(1, 2, 3), vocabs=(2, 3, 5), scales=(0.0, 1.0, 5.0), seed: int = 0) -> tuple[int, int]:
    """(mismatches, cases): ``build_tree`` against ``naive.build_tree`` (every prefix
    scored and sorted) on random drafts [L, V] of every (rows, vocabs, scales) combination, at
    every budget up to all prefixes; a case matches when tokens, parents and depths are equal."""
    gen = torch.Generator().manual_seed(seed)
    mismatches, cases = 0, 0
    for L, V, scale in itertools.product(rows, vocabs, scales):
        logits = torch.randn(L, V, generator=gen) * scale
        for budget in range(1, sum(V ** d for d in range(1, L + 1)) + 1):
            fast, ref = build_tree(logits, 0, budget), naive.build_tree(logits, 0, budget)
            mismatches += not all(torch.equal(getattr(fast, f), getattr(ref, f)) for f in ("tokens", "parents", "depths"))
            cases += 1
    return mismatches, cases


def expected_acceptance_curve(drafts: Sequence[tuple], max_budget: int) -> tuple[torch.Tensor, float]:
    """(curve [max_budget]: the surrogate's expected accepted draft tokens of the best tree of
    1..max_budget nodes, mean over ``drafts``; the DFlash chain's, mean). drafts: (draft
    logits [bs-1, V], root token) pairs. One build per draft: pop order makes every prefix
    of the largest tree the best tree of its size."""
    curve = torch.stack([expected_acceptance_prefixes(build_tree(d, r, max_budget)) for d, r in drafts]).mean(0)
    chain = torch.stack([d.softmax(-1).max(-1).values.cumprod(0).sum() for d, _ in drafts]).mean()
    return curve, float(chain)


def shape_by_temperature(drafts: Sequence[tuple], temperatures=(0.25, 0.5, 1.0, 2.0, 4.0),
                         budget: int = 64) -> pd.DataFrame:
    """Mean max depth, root children and mean depth of the best ``budget``-node tree of each
    draft with its logits divided by each temperature (<1 sharper, >1 flatter); index temperature."""
    rows = []
    for temp in temperatures:
        for d, r in drafts:
            t = build_tree(d / temp, r, budget)
            rows.append({"temperature": temp, "max_depth": int(t.depths.max()),
                         "root_children": int((t.parents == 0).sum()), "mean_depth": float(t.depths[1:].float().mean())})
    return pd.DataFrame(rows).groupby("temperature").mean()
