"""Time the DDTree tree core (DDTree arXiv 2604.12989, sections 3-4) on one CPU thread.

For budgets 16..1024 and random [16, 4096] drafter logits: ``build_tree`` (median of
RUNS, split into the torch part, topk + logsumexp, and the Python heap part), then
``ancestor_mask`` and ``accept`` on the built tree. Goal: build_tree < 5 ms at budget 1024.
Results -> data/results/bench_tree.csv (the build_tree table of docs/results.md).

    PYTHONPATH=. python scripts/bench_tree.py
"""
from __future__ import annotations


import pandas as pd
import torch

from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.plumbing.results import write_timing_table
from ddtree_lab.experiments.plumbing.measure import median_seconds
from ddtree_lab.core.tree import (_best_first, _top_ranks, accept,
                             ancestor_mask, build_tree)

DEPTH, VOCAB = 16, 4096  # block size L, vocabulary V
BUDGETS = (16, 64, 256, 1024)
WARMUP, RUNS = 5, 50
GOAL_MS = 5.0
OUT = RESULTS_DIR / "bench_tree.csv"


def median_ms(fn, *args) -> float:
    """Median wall time of fn(*args) in milliseconds over RUNS calls, after WARMUP calls."""
    return 1e3 * median_seconds(lambda: fn(*args), RUNS, WARMUP)


def torch_part(logits: torch.Tensor, budget: int) -> list[list[float]]:
    """The torch share of build_tree: topk ranks, log-probs of the kept tokens -> lists."""
    return _top_ranks(logits, min(budget, logits.shape[1]))[1].tolist()  # [L, K]


def first_child_tokens(tree) -> torch.Tensor:
    """LongTensor[N+1]: each node's first child's token (0 at leaves), so accept walks
    the rank-0 chain, the deepest path of the tree."""
    return torch.tensor([tree.tokens[kids[0]].item() if kids else 0 for kids in tree.children])


def bench_row(logits: torch.Tensor, budget: int) -> dict[str, float]:
    """Timings (ms) for one budget."""
    tree = build_tree(logits, 0, budget)
    top_log_probs = torch_part(logits, budget)
    target_choice = first_child_tokens(tree)  # [N+1]
    return {
        "build": median_ms(build_tree, logits, 0, budget),
        "torch": median_ms(torch_part, logits, budget),
        "heap": median_ms(_best_first, top_log_probs, min(budget, VOCAB), budget),
        "mask": median_ms(ancestor_mask, tree),
        "accept": median_ms(accept, tree, target_choice),
    }


def run() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    logits = 3.0 * torch.randn(DEPTH, VOCAB)  # [L, V]
    print(f"build_tree on [{DEPTH}, {VOCAB}] logits, 1 thread, median of {RUNS} runs (ms)")
    print("(torch = topk + log-probs -> lists, heap = best-first search, rest = checks,"
          " token lookup and output tensors)")
    print(f"{'budget':>6} {'build':>7} {'torch':>7} {'heap':>7} {'rest':>7} {'mask':>7} {'accept':>7}")
    cols, rows = ("build", "torch", "heap", "rest", "mask", "accept"), []
    for budget in BUDGETS:
        row = bench_row(logits, budget)
        row["rest"] = row["build"] - row["torch"] - row["heap"]
        print(f"{budget:>6} " + " ".join(f"{row[k]:7.3f}" for k in cols))
        rows.append({"budget": budget, **{f"{k}_ms": row[k] for k in cols}})
    verdict = "met" if rows[-1]["build_ms"] < GOAL_MS else "MISSED"
    print(f"goal build < {GOAL_MS} ms at budget {BUDGETS[-1]}: {verdict}")
    write_timing_table(pd.DataFrame(rows).assign(depth=DEPTH, vocab=VOCAB, runs=RUNS), OUT)
    print(f"saved {OUT}")


def main() -> None:
    run()


if __name__ == "__main__":
    main()
