"""Exactness and verify cost at the published layer widths (``core.full_size``; issue 12).

``exactness_rows``: per case (arch, budget, tree kind, prefix length) the max relative logit
error of every mode against the stock forward (``full_size.stock_tree_logits``), plus the
stock oracle's own agreement with the uncached stock forward on the deepest path.
``commit_rows``: rounds of verify + commit == a fresh prefill of the committed sequence.

``cost_rows``: verify ms per GDN mode and budget (naive = the lab's GDN math on the flattened
tree; stock = transformers' own forward of the flattened tree, stock kernels, no tree mask),
timed with a device sync, modes interleaved, median of ``repeats`` after a warm-up, and every
mode over stock as the median of the per-repeat paired ratio with its 95% interval
(``<mode>/stock``, ``_lo``, ``_hi``, ``_p``; ``spread``: an interval needs >= 6 repeats);
memory MEASURED: on the CPU the fork states held for commit and the peak live bytes inside one
``gated_delta_wy`` call (``verify_cost.LiveBytes``), on CUDA the peak allocation of a verify
over the cache's. Beside them the README's formula, so the two can be compared:

    fork states  = budget x GDN layers x 32 heads x 128 x 128 x 4 B      (README, as written)
    fork states  = (budget+1) x GDN layers x H x dk x dv x 4 B          (exact; H = 48 here)
    wy matrices  ~ (budget+1)^2 x H x c B    (c fitted: ``wy_bytes_per_node2_head``)
"""
from __future__ import annotations

import statistics

import pandas as pd
import torch
from matplotlib.figure import Figure

from ...common import ROOT
from ddtree_lab.core import adapter
from ddtree_lab.core.families.gdn import wy
from .full_size import relative_error, stock_path_logits, stock_tree_logits
from ddtree_lab.core.verify import commit
from ...core.verify import GDN_MODES, prefill, tree_logits, verify
from ..plumbing.measure import random_tree, timed, tree_of_kind
from .verify_cost import fork_state_bytes, stock_flat_timer, wy_kernel_peak_bytes
from ..plumbing.spread import format_ratio_columns, ratio_columns

README_HEADS, README_DK, README_DV = 32, 128, 128  # the README's fork-state formula
TREE_KINDS = ("deep", "bushy")


def gdn_layer_count(model) -> int:
    return len(wy.gdn_modules(model))


def make_tree(kind: str, vocab_size: int, budget: int, seed: int = 0):
    """deep: peaked draft logits (scale 10, few leaves); bushy: ``verify_cost.random_tree``."""
    if kind == "bushy":
        return random_tree(vocab_size, budget, seed)
    return tree_of_kind("deep", budget, vocab_size, torch.Generator().manual_seed(seed * 7919 + budget), scale=10.0)


def random_prefix(vocab_size: int, length: int, seed: int = 0) -> list[int]:
    return torch.randint(vocab_size, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


# ----------------------------------------------------------------------------- exactness

def modes_of(model) -> tuple:
    return GDN_MODES if wy.gdn_modules(model) else ("wy",)


def exactness_row(model, budget: int, kind: str, prefix_len: int, seed: int = 0) -> dict:
    """One case: {"rel_err_<mode>": ..., "oracle_rel_err": ...} against the stock forward."""
    V = model.config.vocab_size
    prefix, tree = random_prefix(V, prefix_len, seed), make_tree(kind, V, budget, seed)
    ref = stock_tree_logits(model, prefix, tree)
    deepest = tree.path_to(int(tree.depths.argmax()))
    row = {"budget": budget, "kind": kind, "prefix_len": prefix_len, "depth": int(tree.depths.max()),
           "oracle_rel_err": relative_error(stock_path_logits(model, prefix, tree, deepest[-1]), ref[deepest]),
           "logit_scale": ref.abs().max().item()}
    for mode in modes_of(model):
        row[f"rel_err_{mode}"] = relative_error(ref, tree_logits(model, prefix, tree, mode))
    return row


def commit_row(model, mode: str, rounds: int = 4, prefix_len: int = 60, budget: int = 32, seed: int = 0) -> dict:
    """Rounds of verify + commit (deepest path) vs a fresh prefill: max relative error over the
    committed attention rows and GDN conv / recurrent states."""
    V = model.config.vocab_size
    seq = random_prefix(V, prefix_len, seed)
    cache, _ = prefill(model, seq)
    for r in range(rounds):
        tree = make_tree("deep", V, budget, seed + 1 + r)
        out = verify(model, cache, tree, mode)
        path = tree.path_to(int(tree.depths.argmax()))
        commit(model, cache, out.pending, path)
        seq += tree.tokens[path].tolist()
    fresh, _ = prefill(model, seq)
    errs = [relative_error(ref[0], cache.kv[i][0][..., :len(seq), :]) for i, ref in fresh.kv.items()]
    errs += [relative_error(ref, cache.rec[i]) for i, ref in fresh.rec.items()]
    errs += [relative_error(ref, cache.conv[i]) for i, ref in fresh.conv.items()]
    return {"mode": mode, "rounds": rounds, "committed": len(seq), "max_rel_err": max(errs)}


# ----------------------------------------------------------------------------- cost

def time_verify(model, cache, tree, mode: str) -> float:
    """ms of one ``verify`` on a snapshot of ``cache`` (device-synchronised)."""
    work = cache.snapshot()
    return timed(lambda: verify(model, work, tree, mode))[0]


def cuda_peak_bytes(model, cache, tree, mode: str) -> int:
    """Peak CUDA allocation during one verify, above what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    work = cache.snapshot()
    verify(model, work, tree, mode)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def _memory(model, cache, tree) -> dict:
    """Measured fork states and WY matrices (CPU: LiveBytes), or CUDA peaks per mode."""
    if next(model.parameters()).device.type == "cuda":
        return {f"cuda_peak_{m}_bytes": cuda_peak_bytes(model, cache, tree, m) for m in modes_of(model)}
    forked = verify(model, cache.snapshot(), tree, "fork").pending
    return {"fork_state_bytes": fork_state_bytes(forked),
            "wy_nxn_bytes_per_layer": wy_kernel_peak_bytes(model, tree)}


def formula_columns(model, budget: int) -> dict:
    """The README's fork formula and the exact one, for this model's GDN layers."""
    L = gdn_layer_count(model)
    if not L:
        return {}
    m = next(iter(wy.gdn_modules(model).values()))
    item = 4  # the lab keeps GDN states in float32
    return {"fork_readme_formula_bytes": budget * L * README_HEADS * README_DK * README_DV * 4,
            "fork_exact_formula_bytes": (budget + 1) * L * m.num_v_heads * m.head_k_dim * m.head_v_dim * item,
            "gdn_layers": L, "gdn_value_heads": m.num_v_heads}


def cost_rows(model, budgets, prefix_len: int = 128, repeats: int = 3, seed: int = 0,
              measure_memory: bool = True) -> list[dict]:
    """One row per budget: ms per mode (median, min) and the memory columns."""
    V = model.config.vocab_size
    prefix = random_prefix(V, prefix_len, seed)
    cache, _ = prefill(model, prefix)
    stock = stock_flat_timer(model, prefix)
    modes, rows = modes_of(model) + ("stock",), []
    for b in budgets:
        tree = random_tree(V, b, seed)
        times = {m: [] for m in modes}
        for r in range(repeats + 1):  # repeat 0 warms up
            for m in modes[r % len(modes):] + modes[:r % len(modes)]:
                ms = stock(tree) if m == "stock" else time_verify(model, cache, tree, m)
                times[m] += [ms] if r else []
        row = {"budget": b, "depth": int(tree.depths.max()), "prefix_len": prefix_len,
               **{f"{m}_ms": statistics.median(times[m]) for m in modes},
               **{f"{m}_min_ms": min(times[m]) for m in modes}, **formula_columns(model, b),
               **{k: v for m in modes[:-1] for k, v in ratio_columns(f"{m}/stock", times[m], times["stock"]).items()}}
        if measure_memory:
            row.update(_memory(model, cache, tree))
        if "wy_nxn_bytes_per_layer" in row and "gdn_value_heads" in row:
            row["wy_bytes_per_node2_head"] = row["wy_nxn_bytes_per_layer"] / ((b + 1) ** 2 * row["gdn_value_heads"])
        rows.append(row)
        print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    return rows


def extrapolate_fork_bytes(table: pd.DataFrame, full_gdn_layers: int = 48) -> pd.Series:
    """Measured fork-state bytes per GDN layer scaled to the full model's GDN layers."""
    return table["fork_state_bytes"] / table["gdn_layers"] * full_gdn_layers


def plot_cost(table: pd.DataFrame, path, title: str) -> None:
    """Verify ms vs budget per mode (log-log) and, if measured, fork / WY bytes vs budget
    (a pyplot-free Figure: no backend chosen, nothing left open)."""
    has_mem = "fork_state_bytes" in table
    fig = Figure(figsize=(11 if has_mem else 5.5, 4))
    axes = fig.subplots(1, 2 if has_mem else 1, squeeze=False)
    ax = axes[0, 0]
    for m in GDN_MODES + ("stock",):
        if f"{m}_ms" in table:
            ax.plot(table["budget"], table[f"{m}_ms"], marker="o", label=m)
    ax.set(xscale="log", yscale="log", xlabel="budget (draft nodes)", ylabel="verify ms", title=title)
    ax.legend()
    if has_mem:
        ax = axes[0, 1]
        gib = 2 ** 30
        ax.plot(table["budget"], table["fork_state_bytes"] / gib, marker="o", label="fork states (measured)")
        ax.plot(table["budget"], table["fork_readme_formula_bytes"] / gib, ls="--", label="README formula")
        ax.plot(table["budget"], table["wy_nxn_bytes_per_layer"] * table["gdn_layers"] / gib, marker="s",
                label="WY matrices (measured peak x layers)")
        ax.set(xscale="log", yscale="log", xlabel="budget", ylabel="GiB (these GDN layers)",
               title="memory held by exact GDN verify")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ----------------------------------------------------------------------------- README tables

FULL_SIZE_DIR = "data/results/full_size"
README_SOURCES = tuple(f"{FULL_SIZE_DIR}/{f}" for f in ("gdn_cost.csv", "exactness.csv", "tp_qwen3.5-27b.csv",
                                                          "tp_kimi-k2.6.csv"))
QWEN35_27B_GDN_LAYERS = 48  # 64 layers, 3 of every 4 Gated DeltaNet (full_size.QWEN35_27B_LAYERS)


def _md(header: list, rows: list[list]) -> str:
    line = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"  # noqa: E731
    return "\n".join([line(header), line(["---"] * len(header))] + [line(r) for r in rows])


def cost_readme_table(cost: pd.DataFrame, budgets=(1, 16, 64, 256)) -> str:
    """Verify ms per mode and the fork / WY memory, measured vs the README's formula."""
    mib, gib = 2 ** 20, 2 ** 30
    rows = []
    for _, r in cost[cost["budget"].isin(budgets)].iterrows():
        per_layer = r["fork_state_bytes"] / r["gdn_layers"]
        over_stock = [format_ratio_columns(r, f"{m}/stock") for m in ("naive", "fork", "wy") if f"{m}/stock" in r]
        rows.append([int(r["budget"]), f"{r['naive_ms']:.0f}", f"{r['stock_ms']:.0f}", f"{r['fork_ms']:.0f}",
                     f"{r['wy_ms']:.0f}", *over_stock, f"{per_layer / mib:.0f} MiB",
                     f"{per_layer * QWEN35_27B_GDN_LAYERS / gib:.2f} GiB",
                     f"{r['fork_readme_formula_bytes'] / r['gdn_layers'] * QWEN35_27B_GDN_LAYERS / gib:.2f} GiB",
                     f"{r['wy_nxn_bytes_per_layer'] / mib:.1f} MiB"])
    ratios = [f"{m} / stock" for m in ("naive", "fork", "wy") if f"{m}/stock" in cost]
    return _md(["budget", "naive ms", "stock ms", "fork ms", "wy ms", *ratios, "fork states per GDN layer (measured)",
                "fork states x 48 GDN layers", "old formula (48 x 32 heads)", "WY peak per GDN layer (measured)"],
               rows)


def exactness_readme_table(exact: pd.DataFrame) -> str:
    """Max relative logit error per preset and mode over the sweep (and the stock oracle's own)."""
    rows = []
    for preset, t in exact.groupby("preset", sort=False):
        cells = [f"{t[c].max():.1e}" if c in t and t[c].notna().any() else "-"
                 for c in ("rel_err_fork", "rel_err_wy", "rel_err_naive", "oracle_rel_err")]
        rows.append([preset, f"{t['budget'].max()}", *cells])
    return _md(["preset", "max budget", "fork", "wy", "naive", "stock cached vs uncached"], rows)


def tp_readme_table(tp: dict[str, pd.DataFrame], budgets=(1, 16, 64)) -> str:
    """Collective share of a verify under tp_plan='auto' (2 ranks, gloo) and logits vs 1 process."""
    rows = [[name, int(r["budget"]), f"{r['verify_ms']:.0f}", f"{r['collective_ms']:.0f}",
             f"{100 * r['collective_share']:.0f}%", f"{r['rel_err_vs_single']:.1e}"]
            for name, t in tp.items() for _, r in t[t["budget"].isin(budgets)].iterrows()]
    return _md(["preset", "budget", "verify ms", "collectives ms", "share", "logits vs 1 process"], rows)


def render_readme(root=None) -> str:
    """The README's full-size tables, read from the stored files of ``README_SOURCES``."""
    root = root or ROOT
    cost, exact, tp_qwen, tp_kimi = (pd.read_csv(root / f) for f in README_SOURCES)
    return "\n\n".join([exactness_readme_table(exact), cost_readme_table(cost),
                         tp_readme_table({"qwen3.5-27b": tp_qwen, "kimi-k2.6": tp_kimi})])
