"""CPU timing of the GDN tree modes (TreeWY, arXiv 2608.20961; docs/background.md section 4) on random draft trees.

Trees of `budget` draft nodes plus the root: "bushy" (parent of i uniform in [0, i//4]: wide,
depth ~3) and "beam16" (budget/16 chains of depth 16 from the root: as deep as a 16-token
drafter block; the depth-level loop of fork is longest there).

Modes, one GDN layer, one sequence, float32, single thread, median of REPEATS runs:
  wy        gated_delta_wy on the tree (ancestor mask precomputed: it is a tree buffer)
  fork      gated_delta_fork (per-node states, one batched step per depth level)
  naive_hf  the flattened tree as a chain: transformers' torch_chunk_gated_delta_rule
  naive_wy  the flattened tree as a chain: gated_delta_wy with chain_parents
Usage: PYTHONPATH=. python scripts/bench_gdn_tree.py [--large]
"""
import argparse

import torch
import torch.nn.functional as F
from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

from ddtree_lab.core.tree import ancestor_mask_from_parents as ancestor_mask, tree_depths
from ddtree_lab.experiments.plumbing.measure import median_seconds
from ddtree_lab.core.tree import chain_parents
from ddtree_lab.core.families.gdn.wy import gated_delta_fork
from ddtree_lab.core.families.gdn.wy import gated_delta_wy, normalize_qk

REPEATS = 7
BUDGETS = (16, 64, 256)


def tree_parents(kind, budget, gen):
    """parents [budget+1] of a "bushy" or "beam16" tree (see module docstring)."""
    width = max(1, budget // 16)
    pick = {"bushy": lambda i: int(torch.randint(0, max(1, i // 4), (1,), generator=gen)),
            "beam16": lambda i: max(0, i - width)}[kind]
    return torch.tensor([-1] + [pick(i) for i in range(1, budget + 1)])


def median_ms(fn):
    return 1e3 * median_seconds(fn, REPEATS, warmup=1)


def bench_one(kind, budget, H, dk, dv, gen):
    n = budget + 1
    parents = tree_parents(kind, budget, gen)
    depths, anc, chain = tree_depths(parents), ancestor_mask(parents), chain_parents(budget)
    chain_anc = ancestor_mask(chain)
    q, k = normalize_qk(torch.randn(n, H, dk, generator=gen), torch.randn(n, H, dk, generator=gen), H)
    v, S0 = torch.randn(n, H, dv, generator=gen), 0.1 * torch.randn(H, dk, dv, generator=gen)
    g, beta = -F.softplus(torch.randn(n, H, generator=gen)), torch.sigmoid(torch.randn(n, H, generator=gen))
    args = (q, k, v, g, beta)
    return int(depths.max()), {
        "wy": median_ms(lambda: gated_delta_wy(*args, parents, S0=S0, anc=anc)),
        "fork": median_ms(lambda: gated_delta_fork(*args, parents, depths=depths, S0=S0)),
        "naive_hf": median_ms(lambda: torch_chunk_gated_delta_rule(
            *(x[None] for x in args), initial_state=S0[None], output_final_state=True)),
        "naive_wy": median_ms(lambda: gated_delta_wy(*args, chain, S0=S0, anc=chain_anc)),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--large", action="store_true", help="also H=32, dk=dv=128")
    configs = [(4, 64, 64)] + ([(32, 128, 128)] if parser.parse_args().large else [])
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    print(f"{'H,dk,dv':>12} {'tree':>6} {'budget':>6} {'depth':>5} {'wy ms':>8} {'fork ms':>8} {'naive_hf':>9} "
          f"{'naive_wy':>9} {'fork/wy':>8} {'wy/naive_hf':>11}")
    for H, dk, dv in configs:
        for kind, budget in [(kind, b) for kind in ("bushy", "beam16") for b in BUDGETS]:
            depth, ms = bench_one(kind, budget, H, dk, dv, gen)
            print(f"{f'{H},{dk},{dv}':>12} {kind:>6} {budget:>6} {depth:>5} {ms['wy']:>8.2f} {ms['fork']:>8.2f} "
                  f"{ms['naive_hf']:>9.2f} {ms['naive_wy']:>9.2f} {ms['fork'] / ms['wy']:>8.2f} "
                  f"{ms['wy'] / ms['naive_hf']:>11.2f}")


if __name__ == "__main__":
    main()
