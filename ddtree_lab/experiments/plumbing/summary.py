"""One row per config from a results frame: tau, tokens/s, speedup over AR (DDTree, arXiv
2604.12989, section 5 reports the same two numbers) and the T = 0 losslessness check
(``matches_ar``, ``first_divergence``). Analysis, not drawing: plots and widgets read it.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .sweep import AXES, with_axes


def first_divergence(reference: list[int], other: list[int]) -> int | None:
    """Index of the first token where ``other`` differs from ``reference`` (a length
    difference counts at the shorter length); None when identical."""
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    return None if len(reference) == len(other) else min(len(reference), len(other))


AR_KEY = ("arch", "temperature", "max_new_tokens")  # an output is compared with the AR row of its prompt and these


def ar_divergence(frame: pd.DataFrame, ar: pd.DataFrame | None = None, key: tuple = AR_KEY) -> list:
    """The lab's one "equals AR": per row of a results frame, the first new token where its
    output departs from the AR row of the same prompt and ``key`` columns (``first_divergence``:
    None when identical), NaN when there is no such AR row. ar: the frame holding the AR rows
    (default: ``frame``'s own, method "ar")."""
    ar = frame if ar is None else ar
    ar = ar[ar["method"] == "ar"]
    cols = list(key) + ["prompt"]
    tokens = {tuple(k): m["tokens"] for k, m in zip(ar[cols].itertuples(index=False), ar["_metrics"])}
    refs = (tokens.get(tuple(k)) for k in frame[cols].itertuples(index=False))
    return [np.nan if ref is None else first_divergence(ref, m["tokens"]) for ref, m in zip(refs, frame["_metrics"])]


def equals_ar(divergence) -> float:
    """1.0 / 0.0 / NaN (no AR row) from one ``ar_divergence`` entry."""
    return np.nan if isinstance(divergence, float) else float(divergence is None)


def _row_stats(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (config, prompt) row: tokens, seconds, tree-size sum/count, match with AR."""
    stats = []
    for div, m, mnt in zip(ar_divergence(frame), frame["_metrics"], frame["max_new_tokens"]):
        sizes = m.get("tree_sizes") or []
        stats.append({"_n_tokens": len(m["tokens"]), "_seconds": m["timings"]["total"],
                      "_size_sum": float(sum(sizes)), "_size_n": len(sizes), "_match": equals_ar(div),
                      "_div": mnt if div is None else div,  # identical: counts as diverging after the last token
                      **_loop_stats(m)})
    columns = ["_n_tokens", "_seconds", "_size_sum", "_size_n", "_match", "_div", "_acc_sum", "_acc_n",
               "_out_sum", "_out_n", "_ends_in_loop", "_entropy"]
    return pd.DataFrame(stats, index=frame.index, columns=columns)


def _loop_stats(m: dict) -> dict:
    """Per row: acceptance sums over all rounds and over rounds outside loops (rows stored
    before rounds were loop-tagged give NaN), whether the text ends in a loop, mean entropy."""
    acc, flags = m["acceptance_lengths"], m.get("round_in_loop")
    out = [a for a, f in zip(acc, flags or []) if not f]
    known = flags is not None
    return {"_acc_sum": float(sum(acc)), "_acc_n": len(acc),
            "_out_sum": float(sum(out)) if known else np.nan, "_out_n": len(out) if known else np.nan,
            "_ends_in_loop": float(m["ends_in_loop"]) if "ends_in_loop" in m else np.nan,
            "_entropy": m.get("entropy", np.nan)}


def _sort_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Order rows arch, method (ar, dflash, ddtree), gdn_mode, block, T, length, budget ('auto' last)."""
    order = {"ar": 0, "official": 1, "dflash": 2, "ddtree": 3}
    keys = summary.assign(_m=summary["method"].map(order),
                          _b=[math.inf if b == "auto" else float(b) for b in summary["budget"]])
    keys = keys.sort_values(["arch", "_m", "gdn_mode", "block_size", "temperature", "max_new_tokens", "_b"])
    return keys.drop(columns=["_m", "_b"]).reset_index(drop=True)


def check_one_run(frame: pd.DataFrame) -> None:
    """``ValueError`` if the rows a speedup divides (one arch, T and length: AR and every
    config beside it) come from more than one named run: their timings were not measured in
    one interleaved pass."""
    if "run" not in frame or frame.empty:
        return
    for key, g in frame.groupby(["arch", "temperature", "max_new_tokens"], dropna=False):
        runs = sorted(g["run"].astype(str).unique())
        if len(runs) > 1:
            raise ValueError(f"a speed curve mixes runs {runs} at (arch, T, length) = {key}: take the rows of "
                             f"one run (run_sweep(..., run=...) returns them)")


def pooled(out: pd.DataFrame, ref_key: list[str]) -> pd.DataFrame:
    """The pooled columns of a summary from its per-config sums (``_acc_sum`` / ``_acc_n``:
    accepted lengths over every round, ``_out_*`` over the rounds outside loops, ``_n_tokens``
    / ``_seconds``): tau, tau_outside_loops, loop_round_share, tokens_per_s, and speedup over
    the AR row of the same ``ref_key`` (NaN without one). Shared by ``summarize`` and the
    concurrency summary (one tau, one speedup everywhere)."""
    out = out.copy()
    out["tau"] = out["_acc_sum"] / out["_acc_n"].clip(lower=1)
    out["tau_outside_loops"] = out["_out_sum"] / out["_out_n"].where(out["_out_n"] > 0)
    out["loop_round_share"] = 1 - out["_out_n"] / out["_acc_n"].clip(lower=1)
    out["tokens_per_s"] = out["_n_tokens"] / out["_seconds"].clip(lower=1e-12)
    ar = out[out["method"] == "ar"].set_index(ref_key)["tokens_per_s"]
    ar_tps = [ar.get(tuple(k), np.nan) for k in out[ref_key].itertuples(index=False)]
    out["speedup"] = out["tokens_per_s"] / np.asarray(ar_tps, dtype=float)
    return out


def summarize(frame: pd.DataFrame, axes: tuple = AXES) -> pd.DataFrame:
    """One row per config (the ``axes`` columns, default AXES) from a results frame (one row
    per config x prompt).

    frame needs AXES, ``prompt``, ``tau`` and ``_metrics`` (tokens, tree_sizes, timings.total).
    Returns AXES + n_prompts, tau (accepted tokens per target forward, pooled over every
    round of every prompt: the lab's one tau, what speed follows), tau_prompt_mean (the mean
    of the per-prompt taus, a different aggregate under its own name), tokens_per_s (sum of tokens / sum of
    total seconds over prompts), speedup (tokens_per_s over the AR config with the same
    arch, temperature and max_new_tokens; NaN without one), matches_ar (fraction of prompts
    whose tokens equal AR's for that prompt), first_divergence (mean first differing
    position, max_new_tokens when identical), mean_tree_size (draft nodes per round),
    tau_outside_loops (pooled over the rounds whose
    context was not looping, ``loops.round_loop_flags``), loop_round_share (share of rounds
    in loops), loop_prompts (share of prompts whose text ends in a loop), entropy (mean
    target entropy per new token, nats).
    """
    frame = with_axes(frame)
    check_one_run(frame)
    rows = pd.concat([frame, _row_stats(frame)], axis=1)
    out = rows.groupby(list(axes), sort=False, dropna=False).agg(
        n_prompts=("prompt", "nunique"), tau_prompt_mean=("tau", "mean"), _n_tokens=("_n_tokens", "sum"),
        _seconds=("_seconds", "sum"), _size_sum=("_size_sum", "sum"), _size_n=("_size_n", "sum"),
        matches_ar=("_match", "mean"), first_divergence=("_div", "mean"), _acc_sum=("_acc_sum", "sum"),
        _acc_n=("_acc_n", "sum"), _out_sum=("_out_sum", "sum"), _out_n=("_out_n", "sum"),
        loop_prompts=("_ends_in_loop", "mean"), entropy=("_entropy", "mean")).reset_index()
    out = pooled(out, ["arch", "temperature", "max_new_tokens"])
    out["mean_tree_size"] = out["_size_sum"] / out["_size_n"].where(out["_size_n"] > 0)
    cols = list(axes) + ["n_prompts", "tau", "tokens_per_s", "speedup", "matches_ar",
                         "first_divergence", "mean_tree_size", "tau_prompt_mean", "tau_outside_loops",
                         "loop_round_share", "loop_prompts", "entropy"]
    return _sort_summary(out[cols])
