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

The ceiling (issue 29). Every row also holds the seconds of its models' work (``measure.
model_clock``, every method alike: both models' forwards, prefill included, and the drafter's
logits on the target's head); a config's ceiling is the paired median of its tokens per second
of that work alone over batched AR's tokens/s as it runs: the speedup it would have at no cost
of its own loop (trees, masks, caches, the GDN commit, Python). It separates the loop's cost
from what this machine's models allow: where even the ceiling stays below 1, no loop on these
models pays at that concurrency.

Intervals (issue 26 item 6). Every config is timed on at least ``min_pairs`` units, a unit
being one (repeat, group): a concurrency with fewer groups than that is repeated
(``num_repeats``: 1 repeat of 8 groups at c = 1, 6 of one group at c >= 8). Repeats are the
outer loop (repeat r is the named run "repeat-r"), so an interrupted run keeps whole repeats.
Within a unit every method is timed back to back, so a speedup is the median of the paired
per-unit ratios with its order-statistic 95% interval (``plumbing.spread``). The best fixed
budget is the one with the highest median speedup; it is called best only when the paired
ratio over every other budget lies above 1 outside the noise, otherwise the budgets it cannot
be told from are listed as tied (``tied_budgets``).
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
from ...train.loops import generation_tags
from ..plumbing.measure import model_clock, model_seconds
from ..plumbing.results import ResultsStore
from ..plumbing.spread import format_ratio_columns, paired_ratio, ratio_columns
from ..plumbing.summary import TAG_COLUMNS, TAG_SUMS, pooled, tag_sums
from ..plumbing.sweep import AXES, normalise, run_rows, spec_of

C_AXES = AXES + ("concurrency",)


@dataclass(frozen=True)
class ConcurrencyGrid:
    """archs; concurrency levels; DDTree budgets at T = 0 (``budgets``) and at T > 0
    (``t1_budgets``), ``auto`` added to both; temperatures; block size; new tokens per
    sequence; num_prompts: HumanEval prompts 0..num_prompts-1, decoded at every concurrency;
    cost_batches x cost_budgets: the grid the batched cost model of ``auto`` is measured on
    (its largest budget is auto's per-sequence maximum); min_pairs: timed (repeat, group)
    units per config at least (``num_repeats``; 6 is the fewest with a 95% interval)."""
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
    min_pairs: int = 6

    def __post_init__(self):
        if not isinstance(self.min_pairs, int) or isinstance(self.min_pairs, bool) or self.min_pairs < 1:
            raise ValueError(f"min_pairs must be an int >= 1, got {self.min_pairs!r}")


# full: 8 prompts x 64 new tokens, 6 timed units per config (repeats: 1, 2, 3, 6, 6 at
# concurrency 1, 2, 4, 8, 16); the decoding seconds of one repeat of the whole grid summed to
# ~4 min of one thread (stored rows of the last release), ~11 min with the repeats. At T = 1
# (tau ~1.2-1.4) the budgets stop at 16: one T = 1 group of 16 at budget 64 alone costs ~25 s.
# smoke: seconds, the notebook's and the tests' size (one unit: no interval)
GRIDS = {"full": ConcurrencyGrid(),
         "smoke": ConcurrencyGrid(concurrency=(1, 2), budgets=(1, 4, 16), t1_budgets=(4,), max_new_tokens=12,
                                  num_prompts=2, cost_batches=(1, 2), cost_budgets=(1, 4, 16), min_pairs=1)}


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


def num_repeats(concurrency: int, grid: ConcurrencyGrid) -> int:
    """Repeats of a concurrency's groups: enough for ``grid.min_pairs`` (repeat, group) units."""
    return math.ceil(grid.min_pairs / num_groups(concurrency, grid.num_prompts))


def repeat_run(repeat: int) -> str:
    """The stored run name of repeat ``repeat`` (0-based)."""
    return f"repeat-{repeat}"


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
    hold one entry per sequence); "forwards": seconds of the models' work (``measure.model_clock``,
    every method alike: the target's and the drafter's forward calls, prefill included, and the
    drafter's logits on the target's head)."""
    pids = group_prompts(group, cfg["concurrency"], grid.num_prompts)
    ids = [prompts(pair, p) for p in pids]
    mode = cfg["gdn_mode"]
    kwargs = {}
    if cfg["budget"] == "auto":
        kwargs["cost_model"] = batch_cost_model(
            pair.target, pair.drafter, [prompts(pair, p) for p in range(grid.num_prompts)],
            block_size=cfg["block_size"], gdn_mode=mode, directory=cost_dir, batches=grid.cost_batches,
            budgets=grid.cost_budgets)
    with model_clock(pair.target, pair.drafter.model) as clock:
        gens = generate_batch(pair.target, pair.drafter, ids, spec_of(cfg, seed=group * cfg["concurrency"]), **kwargs)
    return _metrics(pids, ids, gens) | {"forwards": {name: sum(calls) for name, calls in clock.calls.items()}}


def _metrics(pids: list[int], ids: list, gens: list) -> dict:
    """A group's row: per-sequence lists (tokens, acceptance lengths, tree sizes, the loop tags of
    ``loops.generation_tags``), the batch's timings and its pooled tau."""
    seconds = gens[0].timings["total"]  # the batch's wall time (shared by every Generation)
    acc = [a for g in gens for a in g.acceptance_lengths]
    tags = [generation_tags(i, g.tokens, g.acceptance_lengths) for i, g in zip(ids, gens)]
    return {"prompts": pids, "tokens": [g.tokens for g in gens],
            "acceptance_lengths": [g.acceptance_lengths for g in gens], "tree_sizes": [g.tree_sizes for g in gens],
            **{k: [t[k] for t in tags] for k in ("round_looping", "round_copyable", "ends_in_loop")},
            "timings": gens[0].timings,
            "seconds": seconds, "tokens_per_s": sum(len(g.tokens) for g in gens) / max(seconds, 1e-12),
            "tau": sum(acc) / max(1, len(acc)), "rounds": max(len(g.acceptance_lengths) for g in gens)}


def _rows(configs: list[dict], grid: ConcurrencyGrid, repeat: int) -> list[tuple]:
    """Every (config, group) of repeat ``repeat`` (the concurrencies repeated that often); per
    (arch, T, concurrency, group) every method in turn, so the configs compared with each other
    are timed side by side (``configs`` in ``concurrency_configs``' order)."""
    rows = []
    for _, block in itertools.groupby(configs, key=lambda c: (c["arch"], c["temperature"], c["concurrency"])):
        block = list(block)
        if repeat < num_repeats(block[0]["concurrency"], grid):
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
    configs, repeats = concurrency_configs(grid), max(num_repeats(c, grid) for c in grid.concurrency)
    for r in range(repeats):  # the outer loop: an interrupted run keeps whole repeats
        run_rows(_rows(configs, grid, r), store, pairs, lambda cfg, g, pair: runner(cfg, g, pair, grid, prompts, cost_dir),
                 repeat_run(r), desc=f"concurrency ({', '.join(grid.archs)}), repeat {r + 1}/{repeats}",
                 progress=progress)
    return grid_frame(store, grid, pairs)


def grid_frame(store: ResultsStore, grid: ConcurrencyGrid, pairs: dict | None = None) -> pd.DataFrame:
    """The store's rows of ``grid``'s length, prompt count and repeats (and of ``pairs``'
    models, when given)."""
    frame = store.frame(models=None if pairs is None else {a: p.digests for a, p in pairs.items()})
    if frame.empty:
        return frame
    same_prompts = np.array([m["prompts"] == group_prompts(g, c, grid.num_prompts)
                             for m, g, c in zip(frame._metrics, frame.prompt, frame.concurrency)])
    repeats = np.array([run in {repeat_run(r) for r in range(num_repeats(c, grid))}
                        for run, c in zip(frame.run, frame.concurrency)])
    return frame[(frame.max_new_tokens == grid.max_new_tokens) & frame.arch.isin(grid.archs) & same_prompts
                 & repeats].reset_index(drop=True)


# ----------------------------------------------------------------------------- summary

def _row_stats(m: dict) -> dict:
    """Sums of one (config, group) row over its sequences: tokens, rounds, accepted lengths
    (all rounds and per tag group, ``summary.tag_sums``), draft nodes."""
    flat = lambda key: [x for seq in m[key] for x in seq]  # noqa: E731
    acc, sizes = flat("acceptance_lengths"), flat("tree_sizes")
    return {"_n_tokens": sum(len(t) for t in m["tokens"]), "_seconds": m["seconds"], "_acc_sum": float(sum(acc)),
            "_acc_n": len(acc), **tag_sums(acc, flat("round_looping"), flat("round_copyable")),
            "_size_sum": float(sum(sizes)), "_n_seq": len(m["tokens"]), "_ends_in_loop": float(sum(m["ends_in_loop"]))}


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


UNIT = ["arch", "temperature", "max_new_tokens", "concurrency", "run", "prompt"]  # one timed (repeat, group)


def forwards_rate(m: dict) -> float:
    """A row's tokens over the seconds of its models' work (``measure.model_seconds`` of
    ``run_group``'s "forwards"): its tokens/s with the loop's own work left out; NaN for a row
    stored without."""
    return sum(len(t) for t in m["tokens"]) / model_seconds(m)


def _unit_rates(frame: pd.DataFrame) -> pd.DataFrame:
    """Per row: its unit (``UNIT``), tokens/s, tokens/s of its models' work alone (``forwards_rate``)
    and batched AR's tokens/s in the same unit (NaN without one)."""
    units = frame[list(C_AXES) + ["run", "prompt"]].copy()
    units["_tps"] = [sum(len(t) for t in m["tokens"]) / max(m["seconds"], 1e-12) for m in frame._metrics]
    units["_fwd_tps"] = [forwards_rate(m) for m in frame._metrics]
    ar = units[units.method == "ar"].set_index(UNIT)["_tps"]
    units["_ar_tps"] = [ar.get(tuple(k), np.nan) for k in units[UNIT].itertuples(index=False)]
    return units


def _paired_speedup(units: pd.DataFrame) -> dict:
    """speedup (median of the per-unit ratios over AR), its 95% interval and sign test; n_pairs;
    ceiling (the same of the forwards-only tokens/s over AR's wall-clock tokens/s: the speedup at
    no cost of the loop's own, NaN without forward timings)."""
    u = units.dropna(subset=["_ar_tps"])
    f = u.dropna(subset=["_fwd_tps"])
    return {**_ratio_or_nan("speedup", u._tps, u._ar_tps), "n_pairs": len(u),
            **_ratio_or_nan("ceiling", f._fwd_tps, f._ar_tps)}


def _ratio_or_nan(name: str, num: pd.Series, den: pd.Series) -> dict:
    """``spread.ratio_columns``, or its four columns NaN when there is no pair."""
    return ratio_columns(name, num, den) if len(num) else dict.fromkeys((name, f"{name}_lo", f"{name}_hi", f"{name}_p"),
                                                                         np.nan)


def summarize_concurrency(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per config (C_AXES) from a concurrency frame (one row per config x unit: a
    (repeat, group)).

    n_groups, n_sequences (per repeat); n_pairs (timed units); tokens_per_s (aggregate: every
    token over every unit's seconds); speedup, speedup_lo, speedup_hi, speedup_p (the median of
    the per-unit tokens/s ratios over batched AR timed in the same unit, its 95% interval and
    sign test); latency_s (mean wall seconds of a unit = of its slowest sequence); ms_per_token
    (latency per new token of a sequence); tau (accepted tokens per target forward) and the
    ``summary.TAG_COLUMNS`` (tau_outside_loops, loop_round_share, copyable_share, tau_copyable,
    tau_not_copyable, tau_clean; pooled over every sequence's rounds); loop_sequences
    (share ending in a loop); mean_tree_size; matches_ar (share of sequences equal to batched
    AR's); ceiling, ceiling_lo, ceiling_hi (the speedup of the models' work alone, ``_paired_speedup``);
    _units (the per-unit tokens/s, for ``concurrency_table``'s paired comparisons).
    """
    stats = pd.DataFrame([_row_stats(m) for m in frame._metrics], index=frame.index).assign(_match=_matches(frame))
    rows = pd.concat([frame[list(C_AXES) + ["prompt", "run"]], stats], axis=1)
    out = rows.groupby(list(C_AXES), sort=False).agg(
        n_groups=("prompt", "nunique"), _n_rows=("prompt", "size"), _n_seq=("_n_seq", "sum"),
        _n_tokens=("_n_tokens", "sum"), _seconds=("_seconds", "sum"), _acc_sum=("_acc_sum", "sum"),
        _acc_n=("_acc_n", "sum"), **{c: (c, "sum") for c in TAG_SUMS},
        _size_sum=("_size_sum", "sum"), _match=("_match", "sum"), _loops=("_ends_in_loop", "sum")).reset_index()
    out = pooled(out, ["arch", "temperature", "max_new_tokens", "concurrency"]).drop(columns="speedup")
    units = {k: g for k, g in _unit_rates(frame).groupby(list(C_AXES), sort=False)}
    keys = [tuple(k) for k in out[list(C_AXES)].itertuples(index=False)]
    paired = pd.DataFrame([_paired_speedup(units[k]) for k in keys], index=out.index)
    out = pd.concat([out, paired], axis=1)
    out["_units"] = [dict(zip(zip(units[k].run, units[k].prompt), units[k]._tps)) for k in keys]
    out["n_sequences"] = out._n_seq * out.n_groups / out._n_rows  # per repeat
    out["latency_s"] = out._seconds / out._n_rows
    out["ms_per_token"] = 1e3 * out.latency_s / out.max_new_tokens
    out["loop_sequences"] = out._loops / out._n_seq
    out["mean_tree_size"] = out._size_sum / out._acc_n.where(out.method != "ar")
    out["matches_ar"] = out._match / out._n_seq
    cols = list(C_AXES) + ["n_groups", "n_sequences", "n_pairs", "tokens_per_s", "speedup", "speedup_lo",
                           "speedup_hi", "speedup_p", "ceiling", "ceiling_lo", "ceiling_hi", "latency_s",
                           "ms_per_token", "tau", *TAG_COLUMNS, "loop_sequences", "mean_tree_size", "matches_ar",
                           "_units"]
    order = {"ar": 0, "dflash": 1, "ddtree": 2}
    ordered = out.assign(_m=out.method.map(order), _b=[math.inf if b == "auto" else float(b) for b in out.budget])
    return ordered.sort_values(["arch", "temperature", "concurrency", "_m", "_b"])[cols].reset_index(drop=True)


def paired_over(a: pd.Series, b: pd.Series) -> dict:
    """``paired_ratio`` of two summary rows' tokens/s over the units both were timed in."""
    shared = sorted(set(a._units) & set(b._units))
    return paired_ratio([a._units[u] for u in shared], [b._units[u] for u in shared])


def tied_with(best: pd.Series, others: pd.DataFrame) -> list:
    """The budgets of ``others`` that ``best`` does not beat outside the noise (the paired
    ratio's 95% interval reaches 1, or there is no interval), with best's own, sorted."""
    tied = [int(best.budget)] + [int(r.budget) for _, r in others.iterrows()
                                 if not paired_over(best, r)["lo"] > 1.0]
    return sorted(tied)


def _spread(row, name: str, source: str = "speedup") -> dict:
    """name, name_lo, name_hi: a summary row's paired ``source`` ratio ("speedup" or "ceiling")
    and its interval (NaN without a row)."""
    return {f"{name}{s}": math.nan if row is None else row[f"{source}{s}"] for s in ("", "_lo", "_hi")}


def _table_row(g: pd.DataFrame) -> dict:
    """One (arch, T, concurrency) block of a summary -> its row of ``concurrency_table``."""
    fixed = g[(g.method == "ddtree") & (g.budget != "auto")]
    best = fixed.loc[fixed.speedup.idxmax()]
    ar, dflash, auto = (g[sel].iloc[0] if sel.any() else None
                        for sel in (g.method == "ar", g.method == "dflash", g.budget == "auto"))
    none = {"median": math.nan, "lo": math.nan, "hi": math.nan}
    vs = paired_over(auto, best) if auto is not None else none
    edge = paired_over(best, dflash) if dflash is not None else none   # the best tree's tokens/s over DFlash's
    tied = tied_with(best, fixed.drop(index=best.name))
    top = fixed.loc[fixed.ceiling.idxmax()] if fixed.ceiling.notna().any() else None
    return {**_spread(top, "best_ceiling", "ceiling"),
            "best_ceiling_budget": math.nan if top is None else int(top.budget), "ar_tokens_per_s": ar.tokens_per_s if ar is not None else math.nan,
            **_spread(dflash, "dflash_speedup"), "best_budget": int(best.budget), "tied_budgets": tuple(tied),
            "best_clear": len(tied) == 1, **_spread(best, "best_speedup"), "best_tau": best.tau,
            "best_tau_outside_loops": best.tau_outside_loops, "best_loop_round_share": best.loop_round_share,
            **_spread(auto, "auto_speedup"), "auto_vs_best": vs["median"], "auto_vs_best_lo": vs["lo"],
            "auto_vs_best_hi": vs["hi"], "auto_mean_tree_size": auto.mean_tree_size if auto is not None else math.nan,
            "best_over_dflash": edge["median"], "best_over_dflash_lo": edge["lo"], "best_over_dflash_hi": edge["hi"]}


def tied_of(row) -> tuple:
    """A table row's budgets not told apart from its best (``tied_budgets``), or the best alone."""
    return tuple(getattr(row, "tied_budgets", ()) or (int(row.best_budget),))


def budget_label(row) -> str:
    """A table row's best budget as read: "16", or "8, 16 (tie)" when the best cannot be told
    from the others listed (``tied_budgets``)."""
    tied = tied_of(row)
    return str(int(row.best_budget)) if len(tied) == 1 else ", ".join(str(b) for b in tied) + " (tie)"


def concurrency_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (arch, temperature, concurrency): batched AR tokens/s; DFlash's speedup (with _lo /
    _hi, its 95% interval); the best fixed DDTree budget (highest median speedup), the budgets
    tied with it (``tied_budgets``; ``best_clear``: none), its speedup, tau (all rounds, outside
    loops) and loop share; auto's speedup, its paired tokens/s over the best fixed budget's
    (``auto_vs_best``, with its interval), and its mean tree size; the highest ceiling of a fixed
    budget (``best_ceiling``, with its interval, and ``best_ceiling_budget``); the best budget's
    paired tokens/s over DFlash's (``best_over_dflash``, with its interval: who wins, or a tie)."""
    key = ["arch", "temperature", "max_new_tokens", "concurrency"]
    rows = [{**dict(zip(key, k)), **_table_row(g)} for k, g in summary.groupby(key, sort=True)
            if ((g.method == "ddtree") & (g.budget != "auto")).any()]
    return pd.DataFrame(rows)


def ceiling_label(row) -> str:
    """'1.31x [1.20, 1.40] (16)': a table row's best ceiling and its budget; '-' without one."""
    if "best_ceiling" not in row or pd.isna(row["best_ceiling"]):
        return "-"
    return f"{format_ratio_columns(row, 'best_ceiling')} ({int(row['best_ceiling_budget'])})"


def concurrency_display(table: pd.DataFrame) -> pd.DataFrame:
    """``concurrency_table`` as read (the README's table and notebook 07's): target,
    concurrency, best budget (ties shown), batched AR tokens/s, speedups with their 95%
    intervals, auto over the best, the best ceiling of a fixed budget (``ceiling_label``), tau of
    the best budget (all rounds / outside loops, with the share of rounds in loops)."""
    return pd.DataFrame({
        "target": table.arch, "concurrency": table.concurrency.astype(int),
        "best budget": [budget_label(r) for r in table.itertuples()],
        "batched AR tokens/s": [f"{v:.0f}" for v in table.ar_tokens_per_s],
        "DFlash speedup": [format_ratio_columns(r, "dflash_speedup") for _, r in table.iterrows()],
        "best DDTree speedup": [format_ratio_columns(r, "best_speedup") for _, r in table.iterrows()],
        "auto speedup": [format_ratio_columns(r, "auto_speedup") for _, r in table.iterrows()],
        "auto / best": [format_ratio_columns(r, "auto_vs_best") for _, r in table.iterrows()],
        "DDTree ceiling (budget)": [ceiling_label(r) for _, r in table.iterrows()],
        "tau (best budget)": [f"{r.best_tau:.2f} / {r.best_tau_outside_loops:.2f} ({100 * r.best_loop_round_share:.0f}%)"
                              for r in table.itertuples()]}).reset_index(drop=True)
