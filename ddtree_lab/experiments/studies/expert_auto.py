"""The expert-aware ``auto`` budget measured on the MLA + MoE target (issue 61, item 4).

One interleaved run (``RUN``) on HumanEval prompts, T = 0, block 8 (the bench's): AR, DDTree at
fixed budgets, today's node-count ``auto`` (``cost`` "nodes": ``plumbing.costs.cost_model``)
and the expert-aware ``auto`` (``cost`` "experts": ``plumbing.expert_costs.expert_cost_model``,
the same measured curve moved by the tree's expected expert union, with the union-implied
routing correlation of ``expert_union``). Both ``auto`` rows keep the label budget "auto"; the
``cost`` column says which (the bench's node-count ``auto`` rows mean what they meant).

Every row stores tokens, so ``matches_ar`` says whether each config equals AR token for
token (both ``auto`` variants only choose the tree: lossless).
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from . import smoke_main
from ...common import RESULTS_DIR
from ...core.decode import generate
from ..plumbing.expert_costs import expert_cost_model
from ..plumbing.results import ResultsStore
from ..plumbing.sweep import AXES, cost_prompts, generation_metrics, run_config, run_sweep, spec_of
from ..plumbing.summary import summarize
from . import expert_union as eu
from ...train.pair import load_pair

RUN, STORE = "expert_auto", "expert_auto"
COST_AXES = AXES + ("cost",)


@dataclass(frozen=True)
class AutoGrid:
    """budgets: fixed DDTree budgets beside the two ``auto`` rows; prompts: HumanEval 0..n-1."""
    budgets: tuple = (4, 16, 32, 64)
    num_prompts: int = 10
    max_new_tokens: int = 128
    block_size: int = 8


SMOKE = AutoGrid(budgets=(16,), num_prompts=1, max_new_tokens=16)


def union_rhos(directory=RESULTS_DIR) -> dict[str, float]:
    """{"path", "sibling"}: the union-implied routing correlation stored by ``expert_union``."""
    pairs = pd.read_csv(directory / eu.PAIRS_CSV)
    return {k: round(float(v), 4) for k, v in eu.pooled_rho(pairs, "union").items()}


def configs(grid: AutoGrid, rhos: dict) -> list[dict]:
    """AR, fixed budgets, node-count auto, expert-aware auto (rhos in its config: its meaning)."""
    base = dict(arch="mla", gdn_mode="wy", block_size=grid.block_size, temperature=0.0,
                max_new_tokens=grid.max_new_tokens, accept_rule="rejection", cost="nodes")
    out = [dict(base, method="ar", budget=0, block_size=0)]
    out += [dict(base, method="ddtree", budget=b) for b in grid.budgets]
    out += [dict(base, method="ddtree", budget="auto"),
            dict(base, method="ddtree", budget="auto", cost="experts", rho_path=rhos["path"],
                 rho_sibling=rhos["sibling"])]
    return out


def run_priced(cfg: dict, prompt_id: int, pair) -> dict:
    """One row: ``sweep.run_config``, or with the expert-aware cost model for cost "experts"."""
    if cfg.get("cost") != "experts":
        return run_config(cfg, prompt_id, pair)
    ids = pair.prompt_ids(prompt_id)
    model = expert_cost_model(pair.target, pair.drafter, cost_prompts(pair), block_size=cfg["block_size"],
                              gdn_mode=cfg["gdn_mode"],
                              rhos={"path": cfg["rho_path"], "sibling": cfg["rho_sibling"]})
    g = generate(pair.target, pair.drafter, ids, spec_of(cfg, seed=prompt_id), cost_model=model)
    return generation_metrics(g, ids)


def run(pair, grid: AutoGrid = AutoGrid(), store: ResultsStore | None = None, rhos: dict | None = None) -> pd.DataFrame:
    """The interleaved run on ``pair`` (MLA) into ``store`` (resumable); its summary table."""
    store = store or ResultsStore(STORE)
    frame = run_sweep(configs(grid, rhos or union_rhos()), list(range(grid.num_prompts)), store, {"mla": pair},
                      runner=run_priced, run=RUN)
    return table(frame)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per config: tau, tokens/s, speedup over AR, matches_ar, mean tree size, cost."""
    frame = frame.assign(cost=frame["cost"].fillna("nodes")) if "cost" in frame else frame.assign(cost="nodes")
    out = summarize(frame, COST_AXES)
    return out[["method", "budget", "cost", "n_prompts", "tau", "tokens_per_s", "speedup", "matches_ar",
                "mean_tree_size"]]


def study(smoke: bool = False) -> None:
    """Measure (resumable) and print the table (smoke: one prompt, few tokens, into
    data/results/smoke/): the registry's step."""
    torch.set_num_threads(1)
    grid, store = (SMOKE, ResultsStore(STORE, RESULTS_DIR / "smoke")) if smoke else (AutoGrid(), ResultsStore(STORE))
    print(run(load_pair("mla"), grid, store).to_string(index=False))


def main(argv=None) -> None:
    smoke_main(study, __doc__, argv)


if __name__ == "__main__":
    main()
