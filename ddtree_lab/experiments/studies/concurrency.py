"""Budget x concurrency sweeps: batched AR, DFlash and DDTree (fixed budgets and the
load-aware ``auto``) at concurrency 1..16, into the resumable store "concurrency" (issue 13
items 2-3; docs/background.md section 7). Published: the best tree budget shrinks as the
batch grows (16 -> 8 -> 4 at batch 1 -> 4 -> 16 in one vLLM DDTree port, vLLM PR 42910).

At concurrency c the same ``num_prompts`` HumanEval prompts are decoded as groups of c
(``group_prompts``: group g holds prompts g*c .. g*c + c - 1, taken modulo ``num_prompts``,
so a concurrency above ``num_prompts`` repeats prompts), every group ONE ``generate_batch``
call; one stored row per (config, group). Per config (``summarize_concurrency``): aggregate
tokens/s (every sequence's tokens over the groups' wall seconds), per-sequence latency (a
group's wall seconds: its sequences start together and the group ends with its last one;
and that per new token), tau over all rounds and outside loops (with the loop share), the
share of sequences equal to batched AR, and the speedup over batched AR at the same
concurrency. ``concurrency_table``: per (target, T, concurrency) the best fixed budget,
the speedups of DFlash, the best fixed DDTree and auto, and auto against the best fixed.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...common import RESULTS_DIR
from ...core.decode import generate_batch
from ..plumbing.costs import BATCH_BUDGETS, COST_DIR, DEFAULT_BATCHES, batch_cost_model
from ..plumbing.loops import is_looping, round_loop_flags
from ..plumbing.results import ResultsStore
from ..plumbing.summary import pooled
from ..plumbing.sweep import AXES, mode_name, normalise, run_rows, spec_of

C_AXES = AXES + ("concurrency",)


@dataclass(frozen=True)
class ConcurrencyGrid:
    """archs; concurrency levels; DDTree budgets at T = 0 (``budgets``) and at T > 0
    (``t1_budgets``), ``auto`` added to both; temperatures; block size; new tokens per
    sequence; num_prompts: HumanEval prompts 0..num_prompts-1, decoded at every concurrency;
    cost_batches x cost_budgets: the grid the batched cost model of ``auto`` is measured on
    (its largest budget is auto's per-sequence maximum)."""
    archs: tuple = ("gdn", "mla")
    concurrency: tuple = (1, 2, 4, 8, 16)
    budgets: tuple = (1, 2, 4, 8, 16, 32, 64, 128)
    t1_budgets: tuple = (1, 4, 16)
    temperatures: tuple = (0.0, 1.0)
    block_size: int = 8
    max_new_tokens: int = 64
    num_prompts: int = 8
    cost_batches: tuple = DEFAULT_BATCHES
    cost_budgets: tuple = BATCH_BUDGETS


# full: about 18 min of one thread for both targets, from thread-CPU times of sample groups of
# the shipped pairs (concurrency 1: ~11 s of T = 0 configs per prompt; concurrency 16, T = 0: ~55 s
# per group). 8 prompts x 64 new tokens; at T = 1 (tau ~1.2-1.4, ~55 rounds) the budgets stop
# at 16: one T = 1 group of 16 at budget 64 alone costs ~25 s.
# smoke: seconds, the notebook's and the tests' size
GRIDS = {"full": ConcurrencyGrid(),
         "smoke": ConcurrencyGrid(concurrency=(1, 2), budgets=(1, 4, 16), t1_budgets=(4,), max_new_tokens=12,
                                  num_prompts=2, cost_batches=(1, 2), cost_budgets=(1, 4, 16))}


def concurrency_store(smoke: bool = False, directory=None) -> ResultsStore:
    """The store "concurrency" (SMOKE: under data/results/smoke/)."""
    folder = directory or (RESULTS_DIR / "smoke" if smoke else RESULTS_DIR)
    return ResultsStore("concurrency", folder)


def concurrency_configs(grid: ConcurrencyGrid) -> list[dict]:
    """Every config of the grid (``sweep.normalise`` + concurrency), AR and DFlash first."""
    out = []
    for arch, temp, c in itertools.product(grid.archs, grid.temperatures, grid.concurrency):
        budgets = grid.budgets if temp == 0 else grid.t1_budgets
        methods = [("ar", 0), ("dflash", 0)] + [("ddtree", b) for b in (*budgets, "auto")]
        for method, budget in methods:
            cfg = normalise(dict(arch=arch, method=method, gdn_mode="wy", budget=budget, block_size=grid.block_size,
                                 temperature=float(temp), max_new_tokens=grid.max_new_tokens,
                                 accept_rule="rejection"))
            out.append({**cfg, "concurrency": int(c)})
    return out


def num_groups(concurrency: int, num_prompts: int) -> int:
    return math.ceil(num_prompts / concurrency)


def group_prompts(group: int, concurrency: int, num_prompts: int) -> list[int]:
    """Prompt ids of one group: concurrency consecutive ids from group * concurrency, modulo num_prompts."""
    return [(group * concurrency + k) % num_prompts for k in range(concurrency)]


def humaneval_prompt(pair, prompt_id: int) -> list[int]:
    """HumanEval prompt ``prompt_id`` in the pair's tokenizer."""
    return pair.prompt_ids(prompt_id)


# ----------------------------------------------------------------------------- running

def run_group(cfg: dict, group: int, pair, grid: ConcurrencyGrid, prompts=humaneval_prompt,
              cost_dir=COST_DIR) -> dict:
    """One ``generate_batch`` call of the group's prompts with ``pair``: the row's metrics (lists
    hold one entry per sequence)."""
    pids = group_prompts(group, cfg["concurrency"], grid.num_prompts)
    ids = [prompts(pair, p) for p in pids]
    mode = mode_name(cfg["gdn_mode"])
    kwargs = {}
    if cfg["budget"] == "auto":
        kwargs["cost_model"] = batch_cost_model(
            pair.target, pair.drafter, [prompts(pair, p) for p in range(grid.num_prompts)],
            block_size=cfg["block_size"], gdn_mode=mode, directory=cost_dir, batches=grid.cost_batches,
            budgets=grid.cost_budgets)
    gens = generate_batch(pair.target, pair.drafter, ids, spec_of(cfg, seed=group * cfg["concurrency"]), **kwargs)
    return _metrics(pids, ids, gens)


def _metrics(pids: list[int], ids: list, gens: list) -> dict:
    seconds = gens[0].timings["total"]  # the batch's wall time (shared by every Generation)
    acc = [a for g in gens for a in g.acceptance_lengths]
    return {"prompts": pids, "tokens": [g.tokens for g in gens],
            "acceptance_lengths": [g.acceptance_lengths for g in gens], "tree_sizes": [g.tree_sizes for g in gens],
            "round_in_loop": [round_loop_flags(i, g.tokens, g.acceptance_lengths) for i, g in zip(ids, gens)],
            "ends_in_loop": [is_looping(g.tokens) for g in gens], "timings": gens[0].timings,
            "seconds": seconds, "tokens_per_s": sum(len(g.tokens) for g in gens) / max(seconds, 1e-12),
            "tau": sum(acc) / max(1, len(acc)), "rounds": max(len(g.acceptance_lengths) for g in gens)}


def _rows(configs: list[dict], grid: ConcurrencyGrid) -> list[tuple]:
    """Every (config, group); per (arch, T, concurrency, group) every method in turn, so the
    configs compared with each other are timed side by side (``configs`` in
    ``concurrency_configs``' order)."""
    rows = []
    for _, block in itertools.groupby(configs, key=lambda c: (c["arch"], c["temperature"], c["concurrency"])):
        block = list(block)
        for g in range(num_groups(block[0]["concurrency"], grid.num_prompts)):
            rows += [(c, g) for c in block]
    return rows


def run_concurrency(grid: ConcurrencyGrid, store: ResultsStore, pairs: dict, *, prompts=humaneval_prompt,
                    cost_dir=None, progress: bool = True, runner=run_group) -> pd.DataFrame:
    """Run every (config, group) of ``grid`` not yet in ``store`` with ``pairs`` ({arch: Pair});
    each finished row is appended at once (an interrupted run keeps it, a rerun skips it).
    Returns the store's frame for these pairs, this grid's length and prompt count.
    cost_dir: where auto's batched cost models are stored (None: ``costs/`` beside the store,
    i.e. data/results/costs/ for the committed store). ``runner(cfg, group, pair, grid,
    prompts, cost_dir) -> metrics`` (tests count calls)."""
    cost_dir = cost_dir or store.path.parent / COST_DIR.name
    missing = sorted(set(grid.archs) - set(pairs))
    if missing:
        raise ValueError(f"pairs must hold a Pair (ddtree_lab.load_pair) for every arch of the grid; missing {missing}")
    run_rows(_rows(concurrency_configs(grid), grid), store, pairs,
             lambda cfg, g, pair: runner(cfg, g, pair, grid, prompts, cost_dir),
             desc=f"concurrency ({', '.join(grid.archs)})", progress=progress)
    return grid_frame(store, grid, pairs)


def grid_frame(store: ResultsStore, grid: ConcurrencyGrid, pairs: dict | None = None) -> pd.DataFrame:
    """The store's rows of ``grid``'s length and prompt count (and of ``pairs``' models, when given)."""
    frame = store.frame(models=None if pairs is None else {a: p.digests for a, p in pairs.items()})
    if frame.empty:
        return frame
    same_prompts = np.array([m["prompts"] == group_prompts(g, c, grid.num_prompts)
                             for m, g, c in zip(frame._metrics, frame.prompt, frame.concurrency)])
    return frame[(frame.max_new_tokens == grid.max_new_tokens) & frame.arch.isin(grid.archs) & same_prompts]


# ----------------------------------------------------------------------------- summary

def _row_stats(m: dict) -> dict:
    """Sums of one (config, group) row over its sequences: tokens, rounds, accepted lengths
    (all rounds and outside loops), draft nodes."""
    acc = [a for seq in m["acceptance_lengths"] for a in seq]
    out = [a for seq, flags in zip(m["acceptance_lengths"], m["round_in_loop"]) for a, f in zip(seq, flags) if not f]
    sizes = [s for seq in m["tree_sizes"] for s in seq]
    return {"_n_tokens": sum(len(t) for t in m["tokens"]), "_seconds": m["seconds"], "_acc_sum": float(sum(acc)),
            "_acc_n": len(acc), "_out_sum": float(sum(out)), "_out_n": len(out), "_size_sum": float(sum(sizes)),
            "_n_seq": len(m["tokens"]), "_ends_in_loop": float(sum(m["ends_in_loop"]))}


def _matches(frame: pd.DataFrame) -> list[float]:
    """Per row: the number of its sequences whose tokens equal batched AR's (same arch, T,
    length, concurrency and group); NaN without an AR row."""
    key = ["arch", "temperature", "max_new_tokens", "concurrency", "prompt"]
    ar = {tuple(k): m["tokens"] for k, m, meth in zip(frame[key].itertuples(index=False), frame._metrics, frame.method)
          if meth == "ar"}
    out = []
    for k, m in zip(frame[key].itertuples(index=False), frame._metrics):
        ref = ar.get(tuple(k))
        out.append(np.nan if ref is None else float(sum(a == b for a, b in zip(ref, m["tokens"]))))
    return out


def summarize_concurrency(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per config (C_AXES) from a concurrency frame (one row per config x group).

    n_groups, n_sequences; tokens_per_s (aggregate: every token over every group's seconds);
    latency_s (mean wall seconds of a group = of its slowest sequence); ms_per_token (latency
    per new token of a sequence); tau (accepted tokens per target forward), tau_outside_loops, loop_round_share (pooled
    over every sequence's rounds); loop_sequences (share ending in a loop); mean_tree_size;
    matches_ar (share of sequences equal to batched AR's); speedup (tokens/s over batched AR
    at the same arch, T, length and concurrency).
    """
    stats = pd.DataFrame([_row_stats(m) for m in frame._metrics], index=frame.index).assign(_match=_matches(frame))
    rows = pd.concat([frame[list(C_AXES) + ["prompt"]], stats], axis=1)
    out = rows.groupby(list(C_AXES), sort=False).agg(
        n_groups=("prompt", "nunique"), n_sequences=("_n_seq", "sum"), _n_tokens=("_n_tokens", "sum"),
        _seconds=("_seconds", "sum"), _acc_sum=("_acc_sum", "sum"), _acc_n=("_acc_n", "sum"),
        _out_sum=("_out_sum", "sum"), _out_n=("_out_n", "sum"), _size_sum=("_size_sum", "sum"),
        _match=("_match", "sum"), _loops=("_ends_in_loop", "sum")).reset_index()
    out = pooled(out, ["arch", "temperature", "max_new_tokens", "concurrency"])
    out["latency_s"] = out._seconds / out.n_groups
    out["ms_per_token"] = 1e3 * out.latency_s / out.max_new_tokens
    out["loop_sequences"] = out._loops / out.n_sequences
    out["mean_tree_size"] = out._size_sum / out._acc_n.where(out.method != "ar")
    out["matches_ar"] = out._match / out.n_sequences
    cols = list(C_AXES) + ["n_groups", "n_sequences", "tokens_per_s", "speedup", "latency_s", "ms_per_token",
                           "tau", "tau_outside_loops", "loop_round_share", "loop_sequences", "mean_tree_size",
                           "matches_ar"]
    order = {"ar": 0, "dflash": 1, "ddtree": 2}
    keys = out.assign(_m=out.method.map(order), _b=[math.inf if b == "auto" else float(b) for b in out.budget])
    return keys.sort_values(["arch", "temperature", "concurrency", "_m", "_b"])[cols].reset_index(drop=True)


def _table_row(g: pd.DataFrame) -> dict:
    """One (arch, T, concurrency) block of a summary -> its row of ``concurrency_table``."""
    fixed = g[(g.method == "ddtree") & (g.budget != "auto")]
    best = fixed.loc[fixed.tokens_per_s.idxmax()]
    pick = {m: g[g.method == m].iloc[0] if (g.method == m).any() else None for m in ("ar", "dflash")}
    auto = g[g.budget == "auto"].iloc[0] if (g.budget == "auto").any() else None
    nan = float("nan")
    return {"ar_tokens_per_s": pick["ar"].tokens_per_s if pick["ar"] is not None else nan,
            "dflash_speedup": pick["dflash"].speedup if pick["dflash"] is not None else nan,
            "best_budget": int(best.budget), "best_speedup": best.speedup, "best_tau": best.tau,
            "best_tau_outside_loops": best.tau_outside_loops, "best_loop_round_share": best.loop_round_share,
            "auto_speedup": auto.speedup if auto is not None else nan,
            "auto_vs_best": auto.tokens_per_s / best.tokens_per_s if auto is not None else nan,
            "auto_mean_tree_size": auto.mean_tree_size if auto is not None else nan}


def concurrency_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (arch, temperature, concurrency): batched AR tokens/s; DFlash speedup; the best fixed
    DDTree budget (by tokens/s), its speedup, tau (all rounds, outside loops) and loop share;
    auto's speedup, tokens/s over the best fixed budget's, and its mean tree size."""
    key = ["arch", "temperature", "max_new_tokens", "concurrency"]
    rows = [{**dict(zip(key, k)), **_table_row(g)} for k, g in summary.groupby(key, sort=True)
            if ((g.method == "ddtree") & (g.budget != "auto")).any()]
    return pd.DataFrame(rows)
