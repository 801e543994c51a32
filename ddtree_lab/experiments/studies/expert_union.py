"""The expert union of MoE trees, measured on the MLA + MoE target (issue 61, item 1).

Every token routes to its own top-k of n routed experts; a verify loads the union of its rows'
experts per MoE layer (MoE-Spec, arXiv 2602.16052, section 1; EVICT, arXiv 2605.00342,
section 2). Tokens routed independently would load, in expectation,

    U(t) = n (1 - (1 - k/n)^t)                                     t tokens, per layer

This module measures what the target's real routing loads, per verify and MoE layer:

- ``tree``: the drafter's DDTree tree of B nodes (root + B rows, pop order: every prefix of
  the tree built at the largest budget is the tree of that budget, and a node's routing depends
  on its ancestors only, so one verify gives every budget);
- ``chain``: B + 1 consecutive tokens of the same real text (the root and the next B tokens);
- ``token``: one row (budget 0, an AR step): always k;
- ``independent``: U(B + 1).

Cases are positions of the held-out corpus (the validation split of ``train.data``: real code,
no decoding loop): the prefix before the position is the context, its last token the root.

Routing correlation, scale free (what a projection can carry to another n and k): for pairs of
rows, the experts they share, s = E|E_u ∩ E_v| (independent: k^2 / n), and

    rho = (s / k - k / n) / (1 - k / n)                 0: independent, 1: identical experts

over sibling pairs (same parent), path pairs (parent and child), random pairs of one tree, and
unrelated pairs (the roots of two different cases). The union model carries a correlation to
any n, k: a node adds 1 - rho(u) effective tokens (rho_sibling if it has an earlier sibling,
else rho_path), and U = n (1 - (1 - k/n)^t_eff) (``expected_union``). Its rho_path and
rho_sibling are fitted on the measured unions before they saturate (the chain's, then the
tree's: ``fit_rhos``, the union-implied correlation); ``model_check`` holds the model against
every measured budget, and the pair rhos sit beside it as the direct measure. With n = 8,
k = 2 the union saturates within a few rows: the tables say where (``saturation``).
"""
from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch

from ...common import RESULTS_DIR
from ...core.decode import first_draft
from ...core.tree import DraftTree, build_tree
from ...core.verify import verify
from ..plumbing.expert_costs import effective_tokens, expected_union, independent_union  # noqa: F401  (the union model)
from ..plumbing.results import ResultsStore
from .precision import record_routing
from ...train.data import tokenized_corpus
from ...train.pair import load_pair

BUDGETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
PAIRS = ("sibling", "path", "random", "unrelated")
UNION_CSV, PAIRS_CSV, STORE = "expert_union.csv", "expert_pairs.csv", "expert_union"


@dataclass(frozen=True)
class UnionConfig:
    """cases: positions of the held-out corpus (``first`` + i x ``stride``); context: tokens
    before the root; max_budget: the tree verified (and the chain's length - 1); pair_budget:
    the tree prefix whose node pairs give the correlation; random_pairs per case."""
    cases: int = 48
    context: int = 192
    max_budget: int = 512
    block_size: int = 16
    first: int = 1000
    stride: int = 3001
    budgets: tuple = BUDGETS
    pair_budget: int = 64
    random_pairs: int = 256
    seed: int = 0


SMOKE = UnionConfig(cases=2, context=64, max_budget=32, budgets=(1, 2, 4, 8, 16, 32), pair_budget=16,
                    random_pairs=32)


def rho(shared, n: int, k: int):
    """Routing correlation of a pair sharing ``shared`` experts on average (0: independent)."""
    return (np.asarray(shared, dtype=float) / k - k / n) / (1.0 - k / n)


def shared_of(rho_value, n: int, k: int):
    """``rho``'s inverse: mean shared experts of a pair with correlation ``rho_value``."""
    return k * (k / n + np.asarray(rho_value, dtype=float) * (1.0 - k / n))


# ----------------------------------------------------------------------------- one case

def union_sizes(experts: torch.Tensor, budgets) -> list[int]:
    """Distinct experts among rows 0..b of ``experts`` [T, k], for every b of ``budgets``."""
    return [len(set(experts[:b + 1].flatten().tolist())) for b in budgets]


def shared_experts(experts: torch.Tensor, pairs: torch.Tensor) -> float:
    """Sum over ``pairs`` [P, 2] of the experts the two rows share (``experts`` [T, k])."""
    if not len(pairs):
        return 0.0
    a, b = experts[pairs[:, 0]], experts[pairs[:, 1]]  # [P, k] each
    return float((a[:, :, None] == b[:, None, :]).any(-1).sum())


def tree_pairs(parents: torch.Tensor, count: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Row pairs [P, 2] of a tree (``parents`` [N+1], root's -1): every sibling pair (same
    parent, the first child against each later one), every parent-child pair, and ``count``
    random pairs of distinct rows."""
    nodes = torch.arange(1, len(parents))
    path = torch.stack([parents[1:], nodes], 1)
    first = {}
    sib = []
    for u, p in zip(nodes.tolist(), parents[1:].tolist()):
        if p in first:
            sib.append((first[p], u))
        else:
            first[p] = u
    rand = torch.randint(len(parents), (count, 2), generator=gen)
    rand = rand[rand[:, 0] != rand[:, 1]]
    return {"sibling": torch.tensor(sib, dtype=torch.long).reshape(-1, 2), "path": path, "random": rand}


@torch.no_grad()
def routed_rows(target, drafter, context: torch.Tensor, following: torch.Tensor, cfg: UnionConfig):
    """(tree, {layer: tree experts [N+1, k]}, {layer: chain experts [max_budget+1, k]}):
    the drafter's tree at ``cfg.max_budget`` verified on ``context`` (its last token the root),
    and one forward over context + ``following`` (the real next tokens)."""
    o = first_draft(target, drafter, context, cfg.block_size)
    tree = build_tree(o.draft.logits, o.root, cfg.max_budget)
    with record_routing(target) as rec:
        verify(target, o.cache, tree, "wy", feature_layers=tuple(drafter.cfg.target_layer_ids))
        tree_rows = {layer: idx.clone() for layer, (_, idx) in rec.items()}
        target(torch.cat([context, following])[None])
        chain_rows = {layer: idx[len(context) - 1:].clone() for layer, (_, idx) in rec.items()}
    return tree, tree_rows, chain_rows


def case_metrics(tree: DraftTree, tree_rows: dict, chain_rows: dict, cfg: UnionConfig, case: int) -> dict:
    """What one case stores: unions per layer and budget, pair sums, the root's experts, and
    the tree (parents, node marginals) the projection reuses."""
    layers = sorted(tree_rows)
    gen = torch.Generator().manual_seed(cfg.seed * 100003 + case)
    cut = tree.parents[:cfg.pair_budget + 1]
    pairs = tree_pairs(cut, cfg.random_pairs, gen)
    return {"layers": layers,
            "tree": [union_sizes(tree_rows[layer], cfg.budgets) for layer in layers],
            "chain": [union_sizes(chain_rows[layer], cfg.budgets) for layer in layers],
            "pairs": {kind: [[shared_experts(tree_rows[layer], p), len(p)] for layer in layers]
                      for kind, p in pairs.items()},
            "root": [tree_rows[layer][0].tolist() for layer in layers],
            "parents": tree.parents.tolist(),
            "gains": [round(float(q), 5) for q in tree.log_weights[1:].exp()]}


# ----------------------------------------------------------------------------- the sweep

def case_positions(cfg: UnionConfig, length: int) -> list[int]:
    """Root positions in the held-out token array: room for the context before, the chain after."""
    span = length - cfg.context - cfg.max_budget - 2
    return [cfg.context + (cfg.first + i * cfg.stride) % span for i in range(cfg.cases)]


def measure(pair, cfg: UnionConfig = UnionConfig(), store: ResultsStore | None = None, val=None) -> pd.DataFrame:
    """Every case of ``cfg`` on ``pair`` (an MLA ``Pair``) into ``store`` (resumable: stored
    cases are skipped); returns the store's rows of this config as a frame."""
    store = store or ResultsStore(STORE)
    config = {"study": STORE, **asdict(cfg)}
    done = store.done_keys()
    val = tokenized_corpus()["val"] if val is None else val
    for case, p in enumerate(case_positions(cfg, len(val))):
        if store.key(config, case, pair.digests) in done:
            continue
        context = torch.as_tensor(val[p - cfg.context:p + 1].astype(np.int64))
        following = torch.as_tensor(val[p + 1:p + 1 + cfg.max_budget].astype(np.int64))
        tree, tree_rows, chain_rows = routed_rows(pair.target, pair.drafter, context, following, cfg)
        store.add(config, case, case_metrics(tree, tree_rows, chain_rows, cfg, case), pair.digests)
        print(f"case {case + 1}/{cfg.cases} (position {p}) stored", flush=True)
    return cases_frame(store, cfg, pair.digests)


def cases_frame(store: ResultsStore, cfg: UnionConfig, models: dict) -> pd.DataFrame:
    """One row per stored case of ``cfg`` and ``models`` (``Pair.digests``): case, _metrics."""
    config = {"study": STORE, **asdict(cfg)}
    keys = {store.key(config, case, models): case for case in range(cfg.cases)}
    rows = [(keys[r["key"]], r["metrics"]) for r in store.current_rows() if r["key"] in keys]
    return pd.DataFrame(sorted(rows, key=lambda r: r[0]), columns=["case", "_metrics"])


# ----------------------------------------------------------------------------- tables

def union_table(cases: pd.DataFrame, cfg: UnionConfig, n: int, k: int) -> pd.DataFrame:
    """budget, kind (tree / chain / token / independent), layer, experts (mean over cases),
    experts_sd, cases: the stored ``expert_union.csv``."""
    rows = []
    layers = cases["_metrics"].iloc[0]["layers"]
    for kind in ("tree", "chain"):
        sizes = np.array([m[kind] for m in cases["_metrics"]], dtype=float)  # [cases, layers, budgets]
        for li, layer in enumerate(layers):
            for bi, b in enumerate(cfg.budgets):
                col = sizes[:, li, bi]
                rows.append({"budget": b, "kind": kind, "layer": layer, "experts": col.mean(),
                             "experts_sd": col.std(ddof=1) if len(col) > 1 else 0.0, "cases": len(col)})
    for layer in layers:
        rows.append({"budget": 0, "kind": "token", "layer": layer, "experts": float(k), "experts_sd": 0.0,
                     "cases": len(cases)})
        rows += [{"budget": b, "kind": "independent", "layer": layer, "experts": float(independent_union(n, k, b + 1)),
                  "experts_sd": 0.0, "cases": 0} for b in cfg.budgets]
    return pd.DataFrame(rows)


def _unrelated(cases: pd.DataFrame) -> list[list[float]]:
    """[shared sum, pairs] per layer over the roots of every two different cases."""
    roots = [m["root"] for m in cases["_metrics"]]  # [cases][layers][k]
    out = []
    for li in range(len(roots[0])):
        sets = [set(r[li]) for r in roots]
        pairs = [(a, b) for i, a in enumerate(sets) for b in sets[i + 1:]]
        out.append([float(sum(len(a & b) for a, b in pairs)), len(pairs)])
    return out


def pair_table(cases: pd.DataFrame, n: int, k: int) -> pd.DataFrame:
    """layer, pair (sibling / path / random / unrelated / independent), shared (mean experts
    two rows share), rho, pairs: the stored ``expert_pairs.csv``."""
    layers = cases["_metrics"].iloc[0]["layers"]
    sums = {kind: np.array([m["pairs"][kind] for m in cases["_metrics"]], dtype=float).sum(0) for kind in PAIRS[:3]}
    sums["unrelated"] = np.array(_unrelated(cases), dtype=float)  # [layers, 2]
    rows = []
    for li, layer in enumerate(layers):
        for kind in PAIRS:
            total, count = sums[kind][li]
            shared = total / count if count else math.nan
            rows.append({"measure": "pairs", "layer": layer, "pair": kind, "shared": shared,
                         "rho": float(rho(shared, n, k)), "pairs": int(count)})
        rows.append({"measure": "pairs", "layer": layer, "pair": "independent", "shared": k * k / n, "rho": 0.0,
                     "pairs": 0})
    return pd.DataFrame(rows)


def pooled_rho(pairs: pd.DataFrame, measure: str = "pairs") -> dict[str, float]:
    """{pair kind: rho} of ``measure`` ("pairs": averaged over the MoE layers; "union": the
    union-implied fit, ``fit_rhos``, stored with layer -1)."""
    return pairs[pairs.measure == measure].groupby("pair")["rho"].mean().to_dict()


def union_fit_rows(rhos: dict, n: int, k: int) -> pd.DataFrame:
    """The union-implied correlation as rows of the pairs table (measure "union", layer -1)."""
    return pd.DataFrame([{"measure": "union", "layer": -1, "pair": kind, "shared": float(shared_of(r, n, k)),
                          "rho": r, "pairs": 0} for kind, r in rhos.items()])


# ----------------------------------------------------------------------------- the union model

def chain_parents(length: int) -> list[int]:
    """Parents of a chain of ``length`` rows (root first)."""
    return [-1] + list(range(length - 1))


def _model_union(metrics: list, budget: int, kind: str, rhos: dict, n: int, k: int) -> float:
    """The union model's mean experts per layer at ``budget`` over the cases' trees (or a chain)."""
    if kind == "chain":
        return float(expected_union(n, k, effective_tokens(chain_parents(budget + 1), rhos["path"], 0.0)[-1]))
    return float(np.mean([expected_union(n, k, effective_tokens(m["parents"][:budget + 1], rhos["path"],
                                                                 rhos["sibling"])[-1]) for m in metrics]))


def measured_union(cases: pd.DataFrame, kind: str) -> np.ndarray:
    """[budgets]: mean experts per layer over layers and cases."""
    return np.array([m[kind] for m in cases["_metrics"]], dtype=float).mean((0, 1))


def fit_budgets(cases: pd.DataFrame, cfg: UnionConfig, n: int, kind: str, below: float = 0.75) -> list[int]:
    """The budgets whose measured mean union stays under ``below`` x n (before saturation)."""
    return [b for b, u in zip(cfg.budgets, measured_union(cases, kind)) if u <= below * n]


def fit_rhos(cases: pd.DataFrame, cfg: UnionConfig, n: int, k: int, grid: int = 1000) -> dict[str, float]:
    """The union-implied correlation: rho_path from the chain's measured union, then rho_sibling
    from the tree's (rho_path fixed), each the grid value with the least squared error over the
    budgets before saturation (``fit_budgets``)."""
    metrics, values = list(cases["_metrics"]), np.arange(grid) / grid

    def fit(kind, key, rhos):
        budgets = fit_budgets(cases, cfg, n, kind)
        want = dict(zip(cfg.budgets, measured_union(cases, kind)))
        err = [sum((_model_union(metrics, b, kind, {**rhos, key: r}, n, k) - want[b]) ** 2 for b in budgets)
               for r in values]
        return float(values[int(np.argmin(err))]) if budgets else math.nan
    path = fit("chain", "path", {"sibling": 0.0})
    return {"path": path, "sibling": fit("tree", "sibling", {"path": path})}


def model_check(cases: pd.DataFrame, cfg: UnionConfig, rhos: dict, n: int, k: int) -> pd.DataFrame:
    """budget, kind (tree / chain), measured (mean experts over layers and cases), predicted
    (the union model with ``rhos``: {"path", "sibling"}), error (predicted / measured - 1)."""
    rows = []
    metrics = list(cases["_metrics"])
    for kind in ("tree", "chain"):
        for b, measured in zip(cfg.budgets, measured_union(cases, kind)):
            pred = _model_union(metrics, b, kind, rhos, n, k)
            rows.append({"budget": b, "kind": kind, "measured": measured, "predicted": pred,
                         "error": pred / measured - 1})
    return pd.DataFrame(rows)


def union_by_budget(union: pd.DataFrame, budgets=(1, 4, 16, 64, 256, 512)) -> pd.DataFrame:
    """A short wide table: budget, then the mean experts per MoE layer of each kind."""
    wide = union[union.budget.isin(budgets)].pivot_table(index="budget", columns="kind", values="experts", aggfunc="mean")
    return wide[[k for k in ("tree", "chain", "independent") if k in wide]].reset_index()


def saturation(union: pd.DataFrame, n: int, share: float = 0.9) -> dict[str, int | None]:
    """{kind: the smallest budget whose mean union (over layers) reaches ``share`` of n}."""
    out = {}
    for kind in ("tree", "chain", "independent"):
        mean = union[union.kind == kind].groupby("budget")["experts"].mean()
        hit = mean[mean >= share * n]
        out[kind] = int(hit.index.min()) if len(hit) else None
    return out


def expert_counts(model) -> tuple[int, int]:
    """(n routed experts, top-k) of an MLA + MoE model's config."""
    return int(model.config.n_routed_experts), int(model.config.num_experts_per_tok)


def tables(cases: pd.DataFrame, cfg: UnionConfig, n: int, k: int) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(union table, pairs table with the union-implied fit rows, the fitted rhos)."""
    rhos = fit_rhos(cases, cfg, n, k)
    pairs = pd.concat([pair_table(cases, n, k), union_fit_rows(rhos, n, k)], ignore_index=True)
    return union_table(cases, cfg, n, k), pairs, rhos


def write_tables(cases: pd.DataFrame, cfg: UnionConfig, n: int, k: int, directory=RESULTS_DIR) -> tuple:
    """Write ``expert_union.csv`` and ``expert_pairs.csv`` under ``directory``; returns both."""
    union, pairs, _ = tables(cases, cfg, n, k)
    directory.mkdir(parents=True, exist_ok=True)
    union.round(4).to_csv(directory / UNION_CSV, index=False)
    pairs.round(5).to_csv(directory / PAIRS_CSV, index=False)
    return union, pairs


def study(smoke: bool = False) -> None:
    """Measure (resumable) and write the two tables (smoke: two small cases into
    data/results/smoke/): the registry's step."""
    torch.set_num_threads(1)
    cfg, directory = (SMOKE, RESULTS_DIR / "smoke") if smoke else (UnionConfig(), RESULTS_DIR)
    pair = load_pair("mla")
    cases = measure(pair, cfg, ResultsStore(STORE, directory))
    n, k = expert_counts(pair.target)
    union, pairs = write_tables(cases, cfg, n, k, directory)
    print(union[union.layer == union.layer.min()].to_string(index=False))
    print(pairs.to_string(index=False))


def main(argv=None) -> None:
    """``python -m ddtree_lab.experiments.studies.expert_union [--smoke]``."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="two small cases into data/results/smoke/")
    study(p.parse_args(argv).smoke)


if __name__ == "__main__":
    main()
