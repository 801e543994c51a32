"""``ddtree-lab bench``: AR vs DFlash vs DDTree beside the copy baseline (prompt lookup), HumanEval prompts, T = 0, 0.3, 0.6 and 1.

One run interleaves every config per prompt (so machine noise hits them alike) and prints
tokens/s, tau, speedup over AR and the share of tree building in a round, for both targets
(GDN with naive, fork and wy verification), at fixed budgets and at ``auto``; at every
sampled temperature of ``SAMPLED_TEMPERATURES`` the exact modes at the budgets of
``SAMPLED_BUDGETS``. Every row also reports tau outside loops, the loop share and the target's
mean entropy (``summary.summarize``), and its speedup as the median of the per-prompt paired
ratio over AR with a 95% interval and a sign test (``spread``: speedup_paired, _lo, _hi, _p).
The table is saved to data/results/bench.csv and the goals are printed as PASS/MISS.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...core.decode import PHASES
from ddtree_lab.core.rules import ACCEPT_RULES
from ...common import RESULTS_DIR
from ..plumbing.results import ResultsStore, write_timing_table
from ..plumbing.spread import format_ratio_columns, ratio_columns
from ..plumbing.summary import summarize
from ..plumbing.sweep import AXES, EXACT_MODE, expand_grid, names_mode, run_sweep, with_axes
from .official import run_with_official

BUDGETS = (1, 4, 16, 32, 64, 128, 256)
SAMPLED_TEMPERATURES = (0.3, 0.6, 1.0)   # beside T = 0; 1.0 is the DDTree paper's second setting
SAMPLED_BUDGETS = (1, 4, 16, 64)         # sampling shortens acceptance: small trees tell the story


def bench_grid(archs=("gdn", "mla"), budgets=BUDGETS, block_size: int = 8, max_new_tokens: int = 128,
               sampled_budgets=SAMPLED_BUDGETS, temperatures=SAMPLED_TEMPERATURES) -> list[dict]:
    """T = 0: AR, DFlash, the reference loop ("official", ``dflash_generate``, at every T), the
    copy baseline ("lookup": transformers' prompt-lookup decoding, drafting as many tokens as
    DFlash, ``lookup.py``), DDTree at ``budgets`` + auto (GDN: naive, fork, wy; auto wy only);
    every T > 0 of ``temperatures``: AR, DFlash, DDTree (exact wy) at ``sampled_budgets``,
    under both acceptance rules (``core.rules.ACCEPT_RULES``)."""
    common = dict(max_new_tokens=[max_new_tokens], block_size=[block_size])
    temps = [float(t) for t in temperatures if t > 0]
    grid = []
    for arch in archs:
        modes = ["naive", "fork", "wy"] if names_mode(arch) else [EXACT_MODE]
        grid += expand_grid(arch=[arch], method=["ar", "dflash", "official"], budget=[0], gdn_mode=["wy"],
                            temperature=[0.0] + temps, accept_rule=list(ACCEPT_RULES), **common)
        grid += expand_grid(arch=[arch], method=["lookup"], budget=[0], gdn_mode=["wy"], temperature=[0.0], **common)
        grid += expand_grid(arch=[arch], method=["ddtree"], budget=list(budgets) + ["auto"],
                            gdn_mode=modes, temperature=[0.0], **common)
        grid += expand_grid(arch=[arch], method=["ddtree"], budget=list(sampled_budgets), gdn_mode=["wy"],
                            temperature=temps, accept_rule=list(ACCEPT_RULES), **common)
    return [g for g in grid if not (g["budget"] == "auto" and g["gdn_mode"] in ("naive", "fork"))]


def wall_rate(metrics: dict) -> float:
    """A row's tokens/s: its new tokens over its wall seconds, prefill included (NaN for a row
    stored without a time: ``lookup.lookup_reference``'s)."""
    total = metrics["timings"]["total"]
    return len(metrics["tokens"]) / max(1e-12, total) if total == total else float("nan")


def paired_speedups(frame: pd.DataFrame, over: str = "ar", name: str = "speedup_paired",
                    rate=wall_rate, over_rate=None) -> pd.DataFrame:
    """Per config (AXES): tokens/s of the config over ``over``'s (a method: AR, or the
    reference loop "official") on the same prompt (same arch, T, length, same run), as
    ``spread.ratio_columns``: name (the median), _lo, _hi (95% interval), _p (sign test);
    NaN where no row of ``over`` pairs. rate: a row's metrics -> its tokens/s (``wall_rate``;
    NaN: the row is left out of the pairing); over_rate: the same for ``over``'s rows (None:
    ``rate``)."""
    frame = with_axes(frame)
    rows = frame.assign(_rate=frame["_metrics"].map(rate), _over=frame["_metrics"].map(over_rate or rate))
    ref = ["arch", "temperature", "max_new_tokens", "prompt"]
    base = rows[rows["method"] == over].groupby(ref)["_over"].first()
    out = []
    for key, g in rows.groupby(list(AXES), sort=False, dropna=False):
        den = [base.get(tuple(k), float("nan")) for k in g[ref].itertuples(index=False)]
        pairs = [(n, d) for n, d in zip(g["_rate"], den) if d == d and n == n]
        cols = ratio_columns(name, *zip(*pairs)) if pairs else {}
        out.append({**dict(zip(AXES, key)), **cols})
    return pd.DataFrame(out, columns=list(AXES) + [f"{name}{s}" for s in ("", "_lo", "_hi", "_p")])


def tree_share(frame: pd.DataFrame) -> pd.Series:
    """Per row: seconds building trees over seconds of the speculative rounds."""
    return frame["_metrics"].map(lambda m: m["timings"]["tree"] / max(1e-12, sum(m["timings"][p] for p in PHASES)))


def bench_table(frame: pd.DataFrame) -> pd.DataFrame:
    frame = with_axes(frame).assign(tree_share=tree_share(frame))
    table = summarize(frame)
    keys = ["arch", "method", "gdn_mode", "budget", "temperature", "accept_rule"]
    share = frame.groupby(keys, dropna=False)["tree_share"].mean()
    return (table.join(share, on=keys).merge(paired_speedups(frame), on=list(AXES), how="left")
            .merge(paired_speedups(frame, "official", "vs_official"), on=list(AXES), how="left"))


def copy_table(table: pd.DataFrame, temperature: float = 0.0) -> pd.DataFrame:
    """Copying beside each method (a ``bench_table`` or ``summarize`` frame, one T, the exact
    mode): tau over all rounds, in copyable rounds and in the others, the copyable and looping
    shares of rounds, tau in clean rounds, and tau over the copy baseline's (method "lookup",
    same arch; NaN without it)."""
    t = table[(table.temperature == temperature) & (table.gdn_mode == EXACT_MODE)]
    t = t[t.budget.astype(str) != "auto"]
    lookup = t[t.method == "lookup"].set_index("arch").tau
    out = t[["arch", "method", "budget", "tau", "tau_copyable", "tau_not_copyable", "copyable_share",
             "loop_round_share", "tau_clean"]].copy()
    out["over_lookup"] = out.tau / out.arch.map(lookup)
    return out.reset_index(drop=True)


def goals(table: pd.DataFrame) -> list[str]:
    """The issue's goals (at T = 0, and tau at T = 0.3), PASS/MISS with the measured figure."""
    out = []
    for arch, t in table[table.temperature == 0].groupby("arch"):
        exact = t[(t.method == "ddtree") & (t.gdn_mode == EXACT_MODE)]
        fixed = exact[exact.budget != "auto"]
        best = fixed.loc[fixed.tokens_per_s.idxmax()]
        paired = f" (per prompt: {format_ratio_columns(best, 'speedup_paired')})" if "speedup_paired" in best else ""
        out.append(_goal(f"{arch}: DDTree best budget ({best.budget}) over AR, wall-clock", best.speedup, 2.0) + paired)
        dfl = t[t.method == "dflash"].iloc[0]
        b64 = fixed[fixed.budget == 64]
        if len(b64):
            out.append(_goal(f"{arch}: DDTree-64 / DFlash tau", b64.tau.iloc[0] / dfl.tau, 1.3))
            out.append(_goal(f"{arch}: DDTree-64 / DFlash wall-clock", b64.tokens_per_s.iloc[0] / dfl.tokens_per_s, 1.2))
        auto = exact[exact.budget == "auto"]
        if len(auto):
            out.append(_goal(f"{arch}: auto / best fixed tokens/s", auto.tokens_per_s.iloc[0] / best.tokens_per_s, 0.95))
        b256 = fixed[fixed.budget == 256]
        if len(b256):
            out.append(_goal(f"{arch}: tree-building share of a round at budget 256", b256.tree_share.iloc[0], 0.05,
                             below=True))
    return out + sampled_goals(table)


def sampled_goals(table: pd.DataFrame, temperature: float = 0.3) -> list[str]:
    """At T = 0.3, block 8 (issue 11): DFlash tau >= 3.0 and DDTree-64 tau >= 4.0, per arch."""
    out = []
    rows = table[(table.temperature == temperature) & (table.block_size == 8) & (table.accept_rule == "rejection")]
    for arch, t in rows.groupby("arch"):
        dfl = t[t.method == "dflash"]
        b64 = t[(t.method == "ddtree") & (t.gdn_mode == EXACT_MODE) & (t.budget.astype(str) == "64")]
        if len(dfl):
            out.append(_goal(f"{arch}: T = {temperature:g} DFlash tau", dfl.tau.iloc[0], 3.0))
        if len(b64):
            out.append(_goal(f"{arch}: T = {temperature:g} DDTree-64 tau", b64.tau.iloc[0], 4.0))
    return out


def _goal(name: str, value: float, target: float, below: bool = False) -> str:
    ok = value < target if below else value >= target
    return f"{'PASS' if ok else 'MISS'}  {name}: {value:.3f} (goal {'<' if below else '>='} {target})"


# the printed table (``bench_display``): the config columns, then what was measured; --wide: every column
CONFIG_COLUMNS = ["arch", "temperature", "accept_rule", "method", "gdn_mode", "budget"]
COMPACT_COLUMNS = CONFIG_COLUMNS + ["tau", "tokens_per_s", "speedup_paired", "matches_ar"]
WIDE_COLUMNS = CONFIG_COLUMNS + ["block_size", "max_new_tokens", "tau", "tokens_per_s", "speedup",
                                 "speedup_paired", "speedup_paired_lo", "speedup_paired_hi", "matches_ar", "tree_share",
                                 "tau_outside_loops", "loop_round_share", "copyable_share", "tau_clean", "entropy",
                                 "n_prompts"]
MATCHES_AR_NOTE = ("matches_ar: the share of prompts whose output equals AR's token for token, shown at T = 0 only; "
                   "at T > 0 AR's output is another sample, so the column is blank there: check_lossless "
                   "(ddtree_lab.check_lossless) tests a sampled method's distribution against AR's.")


def bench_display(table: pd.DataFrame, wide: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """The printed bench table (a ``bench_table`` frame) and its notes: at most 10 columns
    (``COMPACT_COLUMNS``: the config, tau, tokens/s, the per-prompt speedup over AR with its 95%
    interval, matches_ar), or with ``wide`` every column of ``WIDE_COLUMNS``. matches_ar is
    blank at T > 0 (``MATCHES_AR_NOTE``); the block size and the new tokens, one value each in a
    bench, are said in a note unless ``wide`` shows their columns."""
    out = table.copy()
    if "speedup_paired" in out:
        ratio = out.apply(lambda r: format_ratio_columns(r, "speedup_paired"), axis=1)
        out["speedup_paired"] = ratio if not wide else out["speedup_paired"]
    if "matches_ar" in out:
        out["matches_ar"] = [f"{m:.2f}" if t == 0 else "" for m, t in zip(out.matches_ar, out.temperature)]
    cols = [c for c in (WIDE_COLUMNS if wide else COMPACT_COLUMNS) if c in out]
    drafted = out[out.method != "ar"] if "method" in out else out   # AR's block size is 0: it drafts none
    notes = [] if wide else [f"{c}: {', '.join(map(str, sorted(set(drafted[c]))))}"
                             for c in ("block_size", "max_new_tokens") if c in out]
    if not wide and "speedup_paired" in out:
        notes.append("speedup_paired: the median over prompts of tokens/s over AR's on the same prompt "
                     "[95% interval]; --wide shows every column")
    return out[cols], notes + [MATCHES_AR_NOTE]


def run_bench(pairs: dict, num_prompts: int = 10, fresh: bool = False, directory=RESULTS_DIR,
              score_goals: bool = True, wide: bool = False, **grid_kwargs) -> pd.DataFrame:
    """The bench on ``pairs`` ({arch: Pair}); prints its table (``bench_display``: at most 10
    columns, every column with ``wide``) and, with ``score_goals`` (the shipped pairs: the goals
    are their issues'), PASS / MISS lines; saves ``directory``/bench.csv with every column
    (``directory``: data/results for the shipped pair, a folder of its own for any other pair, so
    the README never reads another pair's rows)."""
    store = ResultsStore("bench", directory)
    if fresh and store.path.is_file():
        store.path.unlink()
    frame = run_sweep(bench_grid(tuple(pairs), **grid_kwargs), list(range(num_prompts)), store, pairs,
                      runner=run_with_official, run="bench")
    table = bench_table(frame[frame.prompt < num_prompts])
    shown, notes = bench_display(table, wide)
    with pd.option_context("display.width", 250, "display.max_rows", 200, "display.precision", 3):
        print(shown.to_string(index=False))
        print("\n".join(notes))
        if wide:
            print(copy_table(table).to_string(index=False))
    for line in goals(table) if score_goals else []:
        print(line)
    write_timing_table(table, Path(directory) / "bench.csv")
    return table
