"""Measured round-cost curves for ``budget="auto"`` (and the verify-cost figures).

A round costs one drafter pass plus one verify + commit whose time grows with the tree
size; the curve is measured once per (model, mode, block size) on a real prefix, stored as
JSON under ``data/results/costs/`` and interpolated in between measured budgets.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..core import tree as tree_mod
from ..common import RESULTS_DIR, stable_hash
from ..core.verify import prefill, verify
from ..core.cache import commit

COST_DIR = RESULTS_DIR / "costs"
DEFAULT_BUDGETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class CostModel:
    """budgets [n] ascending; verify_s [n] seconds of verify + commit at each budget;
    draft_s: seconds of one drafter pass + tree build."""
    budgets: tuple
    verify_s: tuple
    draft_s: float

    @property
    def max_budget(self) -> int:
        return int(self.budgets[-1])

    def round_seconds(self, budgets: torch.Tensor) -> torch.Tensor:
        """Predicted seconds of a round at each budget (linear interpolation) [n]."""
        v = np.interp(budgets.double().numpy(), self.budgets, self.verify_s)
        return torch.from_numpy(v) + self.draft_s


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


@torch.no_grad()
def measure_cost_model(target, drafter, prefix_ids, *, block_size: int, gdn_mode: str = "wy",
                       budgets=DEFAULT_BUDGETS, repeats: int = 5) -> CostModel:
    """Time drafter + tree build and verify + commit per budget on ``prefix_ids``."""
    layers = tuple(drafter.cfg.target_layer_ids)
    prefix = torch.as_tensor(prefix_ids, dtype=torch.long)
    cache, pre = prefill(target, prefix[:-1], feature_layers=layers)
    state = drafter.new_state()
    draft_logits = drafter.propose(state, pre.features, int(prefix[-1]), block_size)
    full = tree_mod.build_tree(draft_logits, int(prefix[-1]), max(budgets))

    def draft():
        s = drafter.new_state()
        tree_mod.build_tree(drafter.propose(s, pre.features[-64:], int(prefix[-1]), block_size),
                            int(prefix[-1]), 32)

    def round_at(b):
        t = tree_mod.truncate(full, min(b, full.num_nodes))
        verify(target, cache, t, gdn_mode, feature_layers=layers)
        commit(target, cache, t, [0])  # root only: the cache grows by one row per round
    verify_s = []
    for b in budgets:
        round_at(b)  # warm-up
        verify_s.append(_median_time(lambda: round_at(b), repeats))
    return CostModel(tuple(int(b) for b in budgets), tuple(verify_s), _median_time(draft, repeats))


def cost_key(target, drafter, block_size: int, gdn_mode: str) -> str:
    target_cfg = {k: v for k, v in target.config.to_dict().items() if k != "_name_or_path"}  # not where it lives
    cfg = {"target": target_cfg, "drafter": asdict(drafter.cfg), "block": block_size,
           "mode": gdn_mode, "threads": torch.get_num_threads()}
    return stable_hash(cfg)


def cost_model(target, drafter, prefix_ids, *, block_size: int, gdn_mode: str = "wy",
               directory: Path = COST_DIR, **kwargs) -> CostModel:
    """The stored cost model for this configuration, measured once if missing."""
    path = Path(directory) / f"cost-{cost_key(target, drafter, block_size, gdn_mode)}.json"
    if path.is_file():
        return CostModel(**{k: tuple(v) if isinstance(v, list) else v
                            for k, v in json.loads(path.read_text()).items()})
    cm = measure_cost_model(target, drafter, prefix_ids, block_size=block_size, gdn_mode=gdn_mode, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(cm)))
    tmp.replace(path)
    return cm
