"""Measured round-cost curves for ``budget="auto"`` (and the verify-cost figures).

A round costs one drafter pass plus one verify + commit whose time grows with the tree
size; the curve is measured once per (model, mode, block size) on a real prefix, on the
loop's own rounds (a greedy generation per budget and one of the DFlash chain: issue 69, an
isolated verify priced a GDN tree of 16 like the chain's round, which the loop runs 1.3x
faster), stored as JSON under ``data/results/costs/`` and interpolated in between measured
budgets.

Batched rounds (issue 13 item 3): ``BatchCostModel`` holds the seconds of a batched round
(one ``draft_batch`` + the batch's tree builds, one ``verify_batch`` + the commits) over a
grid of batch x per-sequence budget, i.e. batch x verify tokens (B equal trees of b nodes:
B b tokens; the packed verify of trees of different sizes processes their sum), measured by
``measure_batch_cost_model`` and stored as ``batchcost-<key>.json`` beside the batch-1 curves;
``generate_batch(budget="auto")`` reads it through ``batch_round_seconds``.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ...core import tree as tree_mod
from ...common import RESULTS_DIR, stable_hash
from ...core.allocate import Calibration
from ...core.decode import first_draft, generate
from ...core.verify import commit, verify, verify_batch
from .measure import interleaved, median_seconds

COST_DIR = RESULTS_DIR / "costs"
CALIBRATION_JSON = "auto_calibration.json"
DEFAULT_BUDGETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_BATCHES = (1, 2, 4, 8, 16)
BATCH_BUDGETS = (1, 4, 16, 64, 128)  # per sequence; the largest is auto's per-sequence maximum


@dataclass(frozen=True)
class CostModel:
    """budgets [n] ascending; verify_s [n] seconds of verify + commit at each budget;
    draft_s: seconds of one drafter pass + tree build; chain_s: seconds of a DFlash chain round
    (drafter pass, the linear draft, its verify + commit), which makes the chain one of
    ``auto``'s candidates (``core.allocate.auto_with_chain``; None: trees only); acceptance: the
    pair's calibration of the drafter's q, which ``auto`` weighs the chain and the trees by (None:
    q; attached by the reader, ``acceptance_for``: a measured curve carries none)."""
    budgets: tuple
    verify_s: tuple
    draft_s: float
    chain_s: float | None = None
    acceptance: object = None  # a ``core.allocate.Calibration`` auto weighs candidates by (``acceptance_for``)

    @property
    def chain_seconds(self) -> float | None:
        return self.chain_s

    @property
    def max_budget(self) -> int:
        return int(self.budgets[-1])

    def round_seconds(self, budgets: torch.Tensor) -> torch.Tensor:
        """Predicted seconds of a round at each budget (linear interpolation) [n]."""
        v = np.interp(budgets.double().numpy(), self.budgets, self.verify_s)
        return torch.from_numpy(v) + self.draft_s

    def batch_round_seconds(self, totals: torch.Tensor, batch: int) -> torch.Tensor:
        """The batched interface ``allocate.auto_trees`` reads, for the batch of one this
        model measured (a batch of more needs ``BatchCostModel``)."""
        if batch != 1:
            raise ValueError(f"a CostModel predicts batch 1 only, got batch={batch}: use batch_cost_model")
        return self.round_seconds(totals)


@torch.no_grad()
def measure_cost_model(target, drafter, prefixes, *, block_size: int, gdn_mode: str = "wy",
                       budgets=DEFAULT_BUDGETS, repeats: int = 3, tokens: int = 48) -> CostModel:
    """Time the loop's own rounds (``loop_round_seconds``) at every budget and for the DFlash
    chain, pooled over ``prefixes`` (token-id lists; one list of ints: one prefix), interleaved
    (every config in turn, each repeat; the median of ``repeats``): what ``auto`` chooses between
    is priced as the loop runs it, over several prompts (a round's cost moves with what it
    accepts: a looping prompt's chain rounds accept whole blocks and cost up to 1.2x more).
    draft_s: the median draft + tree phases of the budgets' rounds; verify_s: the rest of a round
    at each budget (a larger one never predicted cheaper); chain_s: the chain's whole round."""
    prefixes = as_prefixes(prefixes)
    runs = {int(b): ("ddtree", int(b)) for b in budgets} | {"chain": ("dflash", 1)}
    pooled = {name: [] for name in runs}

    def timed(name, method, budget):
        def run():
            parts = [loop_round_seconds(target, drafter, p, method=method, budget=budget, block_size=block_size,
                                        gdn_mode=gdn_mode, tokens=tokens) for p in prefixes]
            rounds = sum(r["rounds"] for r in parts)
            pooled[name].append({k: sum(r[k] for r in parts) / rounds for k in ("round", "draft")})
        return run
    interleaved({name: timed(name, *run) for name, run in runs.items()}, repeats)
    med = {name: {k: statistics.median(r[k] for r in rs[1:]) for k in ("round", "draft")}  # rs[0]: the warm-up
           for name, rs in pooled.items()}
    draft_s = statistics.median(med[int(b)]["draft"] for b in budgets)
    verify_s = np.maximum.accumulate([med[int(b)]["round"] - draft_s for b in budgets])
    return CostModel(tuple(int(b) for b in budgets), tuple(float(v) for v in verify_s), float(draft_s),
                     float(med["chain"]["round"]))


def as_prefixes(prefixes) -> list[list[int]]:
    """Token-id lists from one prefix (ints, or a 1-d tensor) or several (a list of them)."""
    if isinstance(prefixes, torch.Tensor) or (len(prefixes) and not isinstance(prefixes[0], (list, tuple, torch.Tensor))):
        prefixes = [prefixes]
    if not len(prefixes) or any(len(p) == 0 for p in prefixes):
        raise ValueError("prefixes must be one or more non-empty token-id lists")
    return [[int(t) for t in torch.as_tensor(p).reshape(-1)] for p in prefixes]


def loop_round_seconds(target, drafter, prefix: list, *, method: str, budget: int, block_size: int, gdn_mode: str,
                       tokens: int) -> dict:
    """One greedy generation of ``tokens`` after ``prefix`` -> {"round": its seconds less the
    prefill, "draft": its draft and tree phases, "rounds": its rounds}: this thread's CPU time
    (which other jobs on a shared machine inflate far less than the wall clock), shared out
    among the phases as the loop's own clock (``Generation.timings``) shares its seconds."""
    start = time.thread_time()
    g = generate(target, drafter, prefix, method=method, budget=budget, block_size=block_size, gdn_mode=gdn_mode,
                 max_new_tokens=tokens)
    cpu, t = time.thread_time() - start, g.timings
    share = cpu / max(t["total"], 1e-12)
    return {"round": (t["total"] - t["prefill"]) * share, "draft": (t["draft"] + t["tree"]) * share,
            "rounds": max(1, len(g.acceptance_lengths))}


def acceptance_for(pair, directory: Path = RESULTS_DIR) -> Calibration | None:
    """The stored calibration of ``pair``'s drafter (``CALIBRATION_JSON``, fitted by
    ``studies.auto_calibration`` on the shipped pairs' calibration store), or None for a pair
    it was not fitted on (matched by the pair's tag: the exact models)."""
    path = Path(directory) / CALIBRATION_JSON
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    if stored.get("models", {}).get(pair.arch) != pair.tag:
        return None
    fits = stored["fits"][pair.arch]
    return Calibration(tuple(fits["top1"]), tuple(fits["off"]))


def cost_key(target, drafter, block_size: int, gdn_mode: str) -> str:
    target_cfg = {k: v for k, v in target.config.to_dict().items() if k != "_name_or_path"}  # not where it lives
    cfg = {"target": target_cfg, "drafter": asdict(drafter.cfg), "block": block_size,
           "mode": gdn_mode, "threads": torch.get_num_threads(), "chain": True,
           "loop_rounds": "pooled"}  # chain_s measured; the loop's own rounds over prompts, interleaved
    return stable_hash(cfg)


def cost_model(target, drafter, prefixes, *, block_size: int, gdn_mode: str = "wy",
               directory: Path = COST_DIR, refresh: bool = False, **kwargs) -> CostModel:
    """The stored cost model for this configuration, measured once if missing (on ``prefixes``:
    ``measure_cost_model``, ``kwargs`` its repeats and tokens; a sweep passes its pair's
    ``cost_prompts``). refresh: measure it again and store it (a study that needs a finer
    measurement than the default's, ``studies.auto_chain``)."""
    path = Path(directory) / f"cost-{cost_key(target, drafter, block_size, gdn_mode)}.json"
    if path.is_file() and not refresh:
        return CostModel(**{k: tuple(v) if isinstance(v, list) else v
                            for k, v in json.loads(path.read_text()).items()})
    cm = measure_cost_model(target, drafter, prefixes, block_size=block_size, gdn_mode=gdn_mode, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(cm)))  # acceptance None: a calibration is attached when read
    tmp.replace(path)
    return cm


# ----------------------------------------------------------------------------- batched rounds

def _interp_extended(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Linear interpolation of (xs, ys) at x, clamped left of xs[0], continued past xs[-1]
    with the last segment's slope (never negative): a total beyond the grid costs more."""
    y = np.interp(x, xs, ys)
    if len(xs) > 1:
        slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
        y = np.where(x > xs[-1], ys[-1] + slope * (x - xs[-1]), y)
    return y


@dataclass(frozen=True)
class BatchCostModel:
    """A batched round's seconds over a measured grid.

    batches [m] ascending; budgets [n] ascending, per sequence (grid point (i, j) verifies
    batches[i] x budgets[j] draft nodes in all); verify_s [m][n]: seconds of one batched
    verify + commit; draft_s [m]: seconds of one batched drafter pass + the batch's tree builds.
    """
    batches: tuple
    budgets: tuple
    verify_s: tuple
    draft_s: tuple

    @property
    def max_budget(self) -> int:
        """The largest per-sequence budget measured: ``auto``'s per-sequence maximum."""
        return int(self.budgets[-1])

    def batch_round_seconds(self, totals: torch.Tensor, batch: int) -> torch.Tensor:
        """Predicted seconds [n] of a round of ``batch`` trees whose verify processes ``totals``
        [n] draft-node tokens in all: per measured batch linear in the total (``_interp_extended``),
        then linear in the batch between the two nearest measured batches (clamped outside them)."""
        x = totals.double().numpy()
        rows = np.stack([_interp_extended(x, b * np.asarray(self.budgets, float), np.asarray(v, float)) + d
                         for b, v, d in zip(self.batches, self.verify_s, self.draft_s)])  # [m, n]
        where = float(np.interp(batch, self.batches, np.arange(len(self.batches))))
        lo = int(np.floor(where))
        hi, frac = min(lo + 1, len(self.batches) - 1), where - lo
        return torch.from_numpy((1 - frac) * rows[lo] + frac * rows[hi])

    def round_seconds(self, budgets: torch.Tensor) -> torch.Tensor:
        """Batch 1: the ``CostModel`` interface (so batch-1 ``generate`` can use it too)."""
        return self.batch_round_seconds(budgets, 1)


def _measure_sequence(target, drafter, prefix: torch.Tensor, layers: tuple, block_size: int, budget: int) -> tuple:
    """(cache, features [<=64, F], root, tree of ``budget`` nodes) for one prefilled prefix."""
    o = first_draft(target, drafter, prefix, block_size)
    return o.cache, o.features[-64:], o.root, tree_mod.build_tree(o.draft.logits, o.root, budget)


@torch.no_grad()
def measure_batch_cost_model(target, drafter, prefixes, *, block_size: int, gdn_mode: str = "wy",
                             batches=DEFAULT_BATCHES, budgets=BATCH_BUDGETS, repeats: int = 3) -> BatchCostModel:
    """Time a batched round at every (batch, per-sequence budget) of the grid; sequence i
    uses ``prefixes[i % len(prefixes)]`` (token ids), its own drafter tree cut to the budget."""
    layers = tuple(drafter.cfg.target_layer_ids)
    prefixes = [torch.as_tensor(p, dtype=torch.long) for p in prefixes]
    seqs = [_measure_sequence(target, drafter, prefixes[i % len(prefixes)], layers, block_size, max(budgets))
            for i in range(max(batches))]

    def draft(B):
        drafts = drafter.draft_batch([drafter.new_state() for _ in range(B)], [s[1] for s in seqs[:B]],
                                     [s[2] for s in seqs[:B]], block_size)  # logits [bs-1, V] each
        for d, s in zip(drafts, seqs[:B]):
            tree_mod.build_tree(d.logits, s[2], max(budgets))

    def round_at(B, b):
        trees = [tree_mod.truncate(s[3], min(b, s[3].num_nodes)) for s in seqs[:B]]
        outs = verify_batch(target, [s[0] for s in seqs[:B]], trees, gdn_mode, layers)
        for s, out in zip(seqs[:B], outs):
            commit(target, s[0], out.pending, [0])  # root only: every cache grows by one row per round
    verify_s = []
    for B in batches:
        round_at(B, budgets[0])  # warm-up
        verify_s.append(tuple(median_seconds(lambda: round_at(B, b), repeats) for b in budgets))
    draft_s = tuple(median_seconds(lambda: draft(B), repeats) for B in batches)
    return BatchCostModel(tuple(int(b) for b in batches), tuple(int(b) for b in budgets), tuple(verify_s), draft_s)


def batch_cost_model(target, drafter, prefixes, *, block_size: int, gdn_mode: str = "wy",
                     directory: Path = COST_DIR, batches=DEFAULT_BATCHES, budgets=BATCH_BUDGETS,
                     **kwargs) -> BatchCostModel:
    """The stored batched cost model for this configuration and grid, measured once if missing."""
    key = stable_hash({"cost": cost_key(target, drafter, block_size, gdn_mode), "batches": list(batches),
                       "budgets": list(budgets)})
    path = Path(directory) / f"batchcost-{key}.json"
    if path.is_file():
        raw = json.loads(path.read_text())
        return BatchCostModel(tuple(raw["batches"]), tuple(raw["budgets"]), tuple(map(tuple, raw["verify_s"])),
                              tuple(raw["draft_s"]))
    cm = measure_batch_cost_model(target, drafter, prefixes, block_size=block_size, gdn_mode=gdn_mode,
                                  batches=batches, budgets=budgets, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(cm)))
    tmp.replace(path)
    return cm
