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
               *TAG_SUMS, "_ends_in_loop", "_entropy"]
    return pd.DataFrame(stats, index=frame.index, columns=columns)


# The rounds each tag split pools (``loops.round_tags``): not looping, copyable, neither (clean).
TAG_GROUPS = {"_out": lambda f, c: not f, "_copy": lambda f, c: c, "_clean": lambda f, c: not f and not c}
TAG_SUMS = [f"{g}_{s}" for g in TAG_GROUPS for s in ("sum", "n")]
# Beside every tau: the rounds outside loops, the loop and copy shares, tau by copying, the clean tau.
TAG_COLUMNS = ["tau_outside_loops", "loop_round_share", "copyable_share", "tau_copyable", "tau_not_copyable",
               "tau_clean"]


def tag_sums(acc: list, looping: list | None, copyable: list | None) -> dict:
    """Accepted-length sums and round counts of one generation's rounds per tag group
    (``TAG_SUMS``); NaN for a row stored without its round tags."""
    if looping is None or copyable is None:
        return dict.fromkeys(TAG_SUMS, np.nan)
    out = {}
    for group, keep in TAG_GROUPS.items():
        kept = [a for a, f, c in zip(acc, looping, copyable) if keep(f, c)]
        out |= {f"{group}_sum": float(sum(kept)), f"{group}_n": len(kept)}
    return out


def _loop_stats(m: dict) -> dict:
    """Per row: acceptance sums over all rounds and per tag group (``tag_sums``), whether the
    text ends in a loop, mean entropy."""
    acc = m["acceptance_lengths"]
    return {"_acc_sum": float(sum(acc)), "_acc_n": len(acc),
            **tag_sums(acc, m.get("round_looping"), m.get("round_copyable")),
            "_ends_in_loop": float(m["ends_in_loop"]) if "ends_in_loop" in m else np.nan,
            "_entropy": m.get("entropy", np.nan)}


def _sort_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Order rows arch, method (ar, lookup, official, dflash, ddtree), gdn_mode, block, T, length, budget ('auto' last)."""
    order = {"ar": 0, "lookup": 0.5, "official": 1, "dflash": 2, "ddtree": 3}
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


def tag_rates(out: pd.DataFrame) -> pd.DataFrame:
    """``out`` (per-config sums: ``_acc_sum``, ``_acc_n``, ``TAG_SUMS``) with tau and the
    ``TAG_COLUMNS``."""
    out = out.copy()
    rate = lambda s, n: s / n.where(n > 0)  # noqa: E731
    rounds = out["_acc_n"].clip(lower=1)
    out["tau"] = out["_acc_sum"] / rounds
    out["tau_outside_loops"] = rate(out["_out_sum"], out["_out_n"])
    out["loop_round_share"] = 1 - out["_out_n"] / rounds
    out["copyable_share"] = out["_copy_n"] / rounds
    out["tau_copyable"] = rate(out["_copy_sum"], out["_copy_n"])
    out["tau_not_copyable"] = rate(out["_acc_sum"] - out["_copy_sum"], out["_acc_n"] - out["_copy_n"])
    out["tau_clean"] = rate(out["_clean_sum"], out["_clean_n"])
    return out


def tag_columns(metrics) -> dict:
    """The ``TAG_COLUMNS`` pooled over stored rows' metrics (one generation each: a study's
    own table beside ``summarize``'s)."""
    sums = [{"_acc_sum": float(sum(m["acceptance_lengths"])), "_acc_n": len(m["acceptance_lengths"]),
             **tag_sums(m["acceptance_lengths"], m.get("round_looping"), m.get("round_copyable"))} for m in metrics]
    total = pd.DataFrame(sums, columns=["_acc_sum", "_acc_n", *TAG_SUMS]).sum(min_count=1).to_frame().T
    return tag_rates(total).iloc[0][TAG_COLUMNS].to_dict()


def pooled(out: pd.DataFrame, ref_key: list[str]) -> pd.DataFrame:
    """The pooled columns of a summary from its per-config sums (``_acc_sum`` / ``_acc_n``:
    accepted lengths over every round, ``TAG_SUMS`` per tag group, ``_n_tokens`` /
    ``_seconds``): tau, the ``TAG_COLUMNS`` (tau outside loops, the looping and copyable shares
    of rounds, tau in copyable rounds and in the others, tau in clean rounds: neither looping
    nor copyable), tokens_per_s, and speedup over the AR row of the same ``ref_key`` (NaN
    without one). Shared by ``summarize`` and the concurrency summary (one tau, one speedup
    everywhere)."""
    out = tag_rates(out)
    out["tokens_per_s"] = out["_n_tokens"] / out["_seconds"].clip(lower=1e-12)
    ar = out[out["method"] == "ar"].set_index(ref_key)["tokens_per_s"]
    ar_tps = [ar.get(tuple(k), np.nan) for k in out[ref_key].itertuples(index=False)]
    out["speedup"] = out["tokens_per_s"] / np.asarray(ar_tps, dtype=float)
    return out


def _sum_or_nan(values: pd.Series) -> float:
    """A sum that stays NaN when a value is (a row stored without a time: no tokens/s for its config)."""
    return values.sum(skipna=False)


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
    position, max_new_tokens when identical), mean_tree_size (draft nodes per round), the
    ``TAG_COLUMNS`` by the rounds' tags (``loops.round_tags``; ``pooled``): tau_outside_loops
    (over the rounds whose output was not looping), loop_round_share, copyable_share,
    tau_copyable, tau_not_copyable, tau_clean (the headline "clean" tau: rounds neither
    looping nor copyable); loop_prompts (share of prompts whose text ends in a loop), entropy
    (mean target entropy per new token, nats).
    """
    frame = with_axes(frame)
    check_one_run(frame)
    rows = pd.concat([frame, _row_stats(frame)], axis=1)
    out = rows.groupby(list(axes), sort=False, dropna=False).agg(
        n_prompts=("prompt", "nunique"), tau_prompt_mean=("tau", "mean"), _n_tokens=("_n_tokens", "sum"),
        _seconds=("_seconds", _sum_or_nan), _size_sum=("_size_sum", "sum"), _size_n=("_size_n", "sum"),
        matches_ar=("_match", "mean"), first_divergence=("_div", "mean"), _acc_sum=("_acc_sum", "sum"),
        _acc_n=("_acc_n", "sum"), **{c: (c, "sum") for c in TAG_SUMS},
        loop_prompts=("_ends_in_loop", "mean"), entropy=("_entropy", "mean")).reset_index()
    out = pooled(out, ["arch", "temperature", "max_new_tokens"])
    out["mean_tree_size"] = out["_size_sum"] / out["_size_n"].where(out["_size_n"] > 0)
    cols = list(axes) + ["n_prompts", "tau", "tokens_per_s", "speedup", "matches_ar",
                         "first_divergence", "mean_tree_size", "tau_prompt_mean", *TAG_COLUMNS,
                         "loop_prompts", "entropy"]
    return _sort_summary(out[cols])
