"""``ddtree-lab compare-drafters``: two or more drafters of one target, A/B on the same prompts.

Per prompt, AR runs once, then every drafter decodes with DFlash (linear, block 8) and
DDTree (budget 16), T = 0; the drafters' order rotates from prompt to prompt, so a slow
spell of the machine hits each alike (interleaved). Each run is timed as a whole
(``measure.timed``) and its output checked against AR (lossless).

The table (``compare_table``), per drafter and method: tau pooled over rounds, over all
rounds and over rounds outside repetition loops (``train.loops``), the share of rounds in
loops, the speed over AR (median over prompts of AR seconds / seconds, with the order-statistic
95% interval of ``plumbing.spread``) and, for every drafter after the first, its speed over
the first drafter's on the same prompts and method (paired the same way).
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ...core.decode import generate
from ...train.loops import loop_split, round_tags
from ..plumbing.measure import timed
from ..plumbing.spread import format_ratio_columns, ratio_columns

METHODS = (("dflash", None), ("ddtree", 16))
BLOCK = 8


def method_label(method: str, budget: int | None) -> str:
    return method if budget is None else f"{method}-{budget}"


def spread_prompts(count: int, total: int = 164) -> list[int]:
    """``count`` prompt indices spread evenly over [0, total) (12 of HumanEval: 0, 15, 30, ..., 163)."""
    if not 1 <= count <= total:
        raise ValueError(f"count must be in [1, {total}], got {count}")
    return sorted({int(round(x)) for x in np.linspace(0, total - 1, count)})


def decode_once(target, drafter, prompt_ids: Sequence[int], method: str, budget: int | None, *,
                block_size: int = BLOCK, max_new_tokens: int = 128, clock=time.perf_counter) -> dict:
    """One timed generation -> {tokens, acceptance_lengths, seconds, loop_flags, copy_flags (one per
    round: ``loops.round_tags``' looping and copyable)}."""
    spec = {"method": method, "max_new_tokens": max_new_tokens}
    if method != "ar":
        spec |= {"block_size": block_size, **({"budget": budget} if budget is not None else {})}
    seconds, g = timed(lambda: generate(target, drafter, list(prompt_ids), **spec), clock)
    tags = round_tags(prompt_ids, g.tokens, g.acceptance_lengths)
    return {"tokens": g.tokens, "acceptance_lengths": g.acceptance_lengths, "seconds": seconds,
            "loop_flags": tags["round_looping"], "copy_flags": tags["round_copyable"]}


def pooled_tau(runs: Sequence[dict]) -> dict:
    """``loop_split`` over every round of ``runs`` (``decode_once`` results) together."""
    every = lambda key: [x for r in runs for x in r[key]]  # noqa: E731
    return loop_split(every("acceptance_lengths"), every("loop_flags"), every("copy_flags"))


def compare_drafters(target, drafters: dict, prompts: dict, *, methods=METHODS, block_size: int = BLOCK,
                     max_new_tokens: int = 128, clock=time.perf_counter, progress: bool = True) -> pd.DataFrame:
    """Every drafter ({name: DFlashDrafter of ``target``}) on every prompt ({index: token ids}).

    -> one row per (prompt, drafter, method) plus one AR row per prompt: prompt, drafter
    ("-" for AR), method, seconds, tokens, acceptance_lengths, loop_flags, equals_ar.
    """
    if len(drafters) < 1 or not prompts:
        raise ValueError(f"drafters and prompts must be non-empty, got {len(drafters)} and {len(prompts)}")
    names, rows = list(drafters), []
    first = next(iter(drafters.values()))
    for turn, (index, ids) in enumerate(tqdm(prompts.items(), desc="compare drafters", disable=not progress)):
        ar = decode_once(target, first, ids, "ar", None, max_new_tokens=max_new_tokens, clock=clock)
        rows.append({"prompt": index, "drafter": "-", "method": "ar", **ar, "equals_ar": True})
        for name in names[turn % len(names):] + names[:turn % len(names)]:
            for method, budget in methods:
                run = decode_once(target, drafters[name], ids, method, budget, block_size=block_size,
                                  max_new_tokens=max_new_tokens, clock=clock)
                rows.append({"prompt": index, "drafter": name, "method": method_label(method, budget), **run,
                             "equals_ar": run["tokens"] == ar["tokens"]})
    return pd.DataFrame(rows)


def compare_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (drafter, method) of a ``compare_drafters`` frame: tau (all rounds, outside
    loops, clean: neither looping nor copyable), the looping and copyable shares of rounds,
    lossless count, speed over AR and over the first drafter."""
    ar = frame[frame.method == "ar"].set_index("prompt").seconds
    spec = frame[frame.method != "ar"]
    first = spec.drafter.iloc[0]
    out = []
    for (name, method), rows in spec.groupby(["drafter", "method"], sort=False):
        rows = rows.set_index("prompt")
        split = pooled_tau(rows.to_dict("records"))
        row = {"drafter": name, "method": method, "prompts": len(rows), "tau": split["tau"],
               "tau_outside_loops": split["tau_outside_loops"], "loop_round_share": split["loop_round_share"],
               "copyable_share": split["copyable_share"], "tau_clean": split["tau_clean"],
               "lossless": f"{int(rows.equals_ar.sum())}/{len(rows)}",
               **ratio_columns("speed_over_ar", ar[rows.index].values, rows.seconds.values)}
        if name != first:
            base = spec[(spec.drafter == first) & (spec.method == method)].set_index("prompt").seconds
            row |= ratio_columns(f"speed_over_{first}", base[rows.index].values, rows.seconds.values)
        out.append(row)
    return pd.DataFrame(out)


def compare_display(table: pd.DataFrame) -> pd.DataFrame:
    """``compare_table`` for reading: ratios as '1.42x [1.35, 1.50]', shares in percent."""
    first = table.drafter.iloc[0]
    return pd.DataFrame({
        "drafter": table.drafter, "method": table.method, "tau": table.tau.round(2),
        "tau outside loops": table.tau_outside_loops.round(2),
        "rounds in loops": (100 * table.loop_round_share).round(1).astype(str) + "%",
        "copyable rounds": (100 * table.copyable_share).round(1).astype(str) + "%",
        "clean tau": table.tau_clean.round(2),
        "lossless": table.lossless,
        "speed over AR": [format_ratio_columns(r, "speed_over_ar") for _, r in table.iterrows()],
        f"speed over {first}": ["-" if r.drafter == first else format_ratio_columns(r, f"speed_over_{first}")
                                for _, r in table.iterrows()]})
