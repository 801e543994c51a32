"""A round's cost priced by the expected expert union of the tree, not by its node count
(issue 61, item 4): the expert-aware ``auto`` budget.

A verify of a MoE target loads, per MoE layer, the union of its rows' routed experts; a bushy
tree and a chain of the same size load different unions (``studies.expert_union``). The
node-count ``CostModel`` (``plumbing.costs``) was measured on the loop's rounds, whose trees
are the drafter's best-first trees; this model moves it by the experts a given tree is
expected to load beyond such a tree (``ref``: the first drafter tree of the first prefix):

    seconds(tree, n) = base(n) + per_expert_s x moe_layers x (U(tree[:n]) - U(ref[:n]))

with U the union model below (``effective_tokens``, ``expected_union``, used by ``studies.expert_union``:
the measured routing correlation carried by rho_path, rho_sibling) and ``ref`` the tree the
base curve was measured on. ``allocate.auto_trees`` reads ``tree_round_seconds`` and cuts the
tree at the prefix of the most expected tokens per predicted second, as EVICT (arXiv
2605.00342, section 3) truncates a draft tree by its verification cost; it only chooses the
prefix, so decoding stays lossless. ``per_expert_s`` is measured on the target's own experts
module (``measure_per_expert_seconds``: one MoE layer's experts at a growing number of
distinct experts, the least-squares slope).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ...common import stable_hash
from ...core.decode import first_draft
from ...core.tree import build_tree
from .costs import COST_DIR, CostModel, as_prefixes, cost_key, cost_model


def independent_union(n: int, k: int, tokens) -> np.ndarray:
    """n (1 - (1 - k/n)^tokens): expected distinct experts of ``tokens`` independent rows."""
    return n * (1.0 - (1.0 - k / n) ** np.asarray(tokens, dtype=float))


def effective_tokens(parents, rho_path: float, rho_sibling: float) -> np.ndarray:
    """[N+1]: effective independent tokens of every prefix (1..N+1 rows) of a tree in pop order.

    The root counts 1; node u adds 1 - rho(u), rho(u) = max(rho_path, rho_sibling) when an
    earlier row shares its parent, else rho_path (a chain: every node rho_path)."""
    parents = list(parents)
    seen, add = set(), [1.0]
    for p in parents[1:]:
        add.append(1.0 - (max(rho_path, rho_sibling) if p in seen else rho_path))
        seen.add(p)
    return np.cumsum(add)


def expected_union(n: int, k: int, t_eff) -> np.ndarray:
    """n (1 - (1 - k/n)^t_eff): experts per layer of rows worth ``t_eff`` independent tokens."""
    return independent_union(n, k, t_eff)


def _union(parents, n_experts: int, top_k: int, rho_path: float, rho_sibling: float) -> np.ndarray:
    """[N]: expected experts per layer of the tree's prefixes of 1..N draft nodes (root included)."""
    return expected_union(n_experts, top_k, effective_tokens(parents, rho_path, rho_sibling))[1:]


@dataclass(frozen=True)
class ExpertCostModel:
    """base: the node-count ``CostModel`` (seconds by draft nodes, measured on ``ref_parents``);
    per_expert_s: seconds per distinct expert per MoE layer of a verify; moe_layers, n_experts,
    top_k: the target's; rho_path, rho_sibling: the routing correlation of the union model."""
    base: CostModel
    per_expert_s: float
    moe_layers: int
    n_experts: int
    top_k: int
    rho_path: float
    rho_sibling: float
    ref_parents: tuple

    @property
    def max_budget(self) -> int:
        return self.base.max_budget

    def tree_round_seconds(self, tree) -> torch.Tensor:
        """[N]: predicted seconds of a round verifying the first n draft nodes of ``tree``."""
        n = tree.num_nodes
        union = _union(tree.parents.tolist(), self.n_experts, self.top_k, self.rho_path, self.rho_sibling)
        ref = _union(self.ref_parents, self.n_experts, self.top_k, self.rho_path, self.rho_sibling)
        ref = np.concatenate([ref, np.full(max(0, n - len(ref)), ref[-1])])[:n]
        extra = torch.from_numpy(self.per_expert_s * self.moe_layers * (union - ref))
        return (self.base.round_seconds(torch.arange(1, n + 1)) + extra).clamp_min(1e-9)

    def batch_round_seconds(self, totals: torch.Tensor, batch: int) -> torch.Tensor:
        """The node-count interface (what a batch would read): the base curve."""
        return self.base.batch_round_seconds(totals, batch)


@torch.no_grad()
def measure_per_expert_seconds(target, rows: int = 16, repeats: int = 7) -> float:
    """Seconds one more distinct expert adds to one MoE layer's experts forward over ``rows``
    tokens: the least-squares slope of the median time against the number of distinct
    experts the rows are routed to (k .. n)."""
    moe = next(m for m in target.modules() if hasattr(m, "experts") and hasattr(m, "gate"))
    n, k = moe.experts.num_experts, target.config.num_experts_per_tok
    hidden = torch.randn(rows, target.config.hidden_size, dtype=next(target.parameters()).dtype)
    weights = torch.full((rows, k), 1.0 / k, dtype=hidden.dtype)
    counts, times = [], []
    for used in range(k, n + 1):
        index = (torch.arange(rows * k).reshape(rows, k) % used)  # every row k distinct experts of the first `used`
        moe.experts(hidden, index, weights)  # warm-up
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            moe.experts(hidden, index, weights)
            runs.append(time.perf_counter() - start)
        counts.append(used)
        times.append(float(np.median(runs)))
    return max(0.0, float(np.polyfit(counts, times, 1)[0]))


def reference_parents(target, drafter, prefix_ids, block_size: int, budget: int) -> tuple:
    """Parents of a tree like those ``costs.measure_cost_model`` times (the prefix's first drafter tree)."""
    o = first_draft(target, drafter, torch.as_tensor(prefix_ids, dtype=torch.long), block_size)
    return tuple(build_tree(o.draft.logits, o.root, budget).parents.tolist())


def expert_cost_model(target, drafter, prefixes, *, block_size: int, rhos: dict, gdn_mode: str = "wy",
                      directory: Path = COST_DIR) -> ExpertCostModel:
    """The node-count cost model (stored, measured once if missing) moved by the expected expert
    union; ``rhos``: {"path", "sibling"} (``expert_union.pooled_rho(pairs, "union")``). The
    per-expert seconds are measured once per configuration and stored beside the curves."""
    base = cost_model(target, drafter, prefixes, block_size=block_size, gdn_mode=gdn_mode, directory=directory)
    path = Path(directory) / f"per_expert-{stable_hash(cost_key(target, drafter, block_size, gdn_mode))}.json"
    if path.is_file():
        per_expert = json.loads(path.read_text())["per_expert_s"]
    else:
        per_expert = measure_per_expert_seconds(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"per_expert_s": per_expert}))
    cfg = target.config
    moe_layers = cfg.num_hidden_layers - cfg.first_k_dense_replace
    ref = reference_parents(target, drafter, as_prefixes(prefixes)[0], block_size, base.max_budget)
    return ExpertCostModel(base, per_expert, moe_layers, int(cfg.n_routed_experts), int(cfg.num_experts_per_tok),
                           float(rhos["path"]), float(rhos["sibling"]), ref)


def describe(model: ExpertCostModel) -> dict:
    """The model's numbers without the base curve's arrays (for a stored row's config)."""
    out = asdict(model)
    out.pop("base")
    out.pop("ref_parents")
    return out
