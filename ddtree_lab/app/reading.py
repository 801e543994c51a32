"""The numbers of a notebook's "Reading", rendered from what the notebook just measured.

A markdown cell cannot follow its data; these sentences can. Each function returns a
plain-text paragraph built from the same values the notebook prints and checks, so the
reading and the output above it always agree (``app/tests/test_reading.py``).
"""
from __future__ import annotations

import pandas as pd


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def calibration_reading(gaps: pd.DataFrame, ratios: dict, tol: float = 0.25) -> str:
    """Notebook 06: the sibling-conditioning gap and the surrogate's round prediction.
    gaps: ``calibration.surrogate_gap`` rows with an ``arch`` column; ratios: {arch:
    observed / predicted accepted tokens per round}."""
    lines = []
    for arch, g in gaps.groupby("arch", sort=False):
        g = g.set_index("group")
        r0, r1 = g.loc["rank0"], g.loc["rank1+"]
        shows = r1.observed < 0.5 * r1.predicted
        lines.append(f"{arch}: rank 0 predicted {r0.predicted:.2f}, accepted {r0.observed:.2f}; rank 1+ predicted "
                     f"{_pct(r1.predicted)}, accepted {_pct(r1.observed)} (the published gap "
                     f"{'shows' if shows else 'does not show'}).")
    for arch, r in ratios.items():
        within = 1 - tol <= r <= 1 + tol
        side = "under" if r > 1 else "over"
        lines.append(f"{arch}: verification accepts {r:.2f} x the surrogate's expected tokens per round: "
                     f"{'within' if within else 'outside'} {tol:.0%}, the surrogate {side}estimates.")
    return "\n".join(lines)


def bf16_reading(table: pd.DataFrame, rates: pd.Series) -> str:
    """Notebook 03: what bf16 did on this run. table: per-setting max_err / flips / nodes
    (index: setting); rates: share of nodes where tree == chain, tree == AR, chain == AR."""
    bf = table.loc["bfloat16"]
    exact = bf.max_err == 0
    first = ("bf16 tree and path forwards came out bit-identical on every node" if exact else
             f"bf16 tree and path forwards differ by up to {bf.max_err:.2e} in a logit")
    return (f"{first}; {int(bf.flips)} of {int(bf.nodes)} nodes flip their argmax. The bf16 tree agrees with "
            f"chain verification on {_pct(rates['tree_eq_chain'])} of the nodes and with token-by-token AR on "
            f"{_pct(rates['tree_eq_ar'])}.")
