"""Who wins on each axis, and when the numbers cannot tell: pooled ratios with a 95% interval.

A conclusion names the winner on each axis (tau, tokens/s) and calls a difference inside its
interval a tie. Every headline number the lab prints is pooled over prompts (tau: accepted tokens
over rounds; tokens/s: tokens over seconds), so its interval is a percentile bootstrap of that
same pooled ratio over prompts, both sides resampled together (a prompt's two runs are a pair):

    ratio  = (sum_p a_p / sum_p n_p) / (sum_p b_p / sum_p m_p)        the number shown
    [lo, hi] = 2.5 / 97.5 percentiles of the ratio over prompts drawn with replacement

A fixed seed makes the same numbers give the same interval. ``decide`` says which side of a
threshold (1 for a winner, a goal's target) the interval lies on, or that it holds it, judged
on the interval AS PRINTED (``DIGITS`` decimals): '[1.00, 1.55]' holds 1 and is a tie, whatever
the unrounded end was, so a sentence never calls a win that its own printed bound contradicts.
It is the one rule: every generated sentence about a direction ('wins', 'falls', 'narrows',
'peaks', 'inflated', 'as rarely', 'beats') goes through ``decide`` (an interval against a
threshold), ``apart`` (two intervals) or ``versus`` (two point values with no interval, at the
precision printed), or states the interval it rests on.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .spread import pooled_ratio


DIGITS = 2   # the decimals an interval's ends are printed with ('[0.85, 1.15]'): the verdict reads those


def _printed(x: float, digits: int) -> float:
    """``x`` as it is printed with ``digits`` decimals (the value the reader sees)."""
    return float(f"{x:.{digits}f}")


def decide(lo: float, hi: float, threshold: float = 1.0, digits: int = DIGITS) -> str:
    """'above' (the interval, printed with ``digits`` decimals, lies above ``threshold``), 'below',
    or 'tie' (the printed interval holds it, or there is no interval: nothing is told apart).
    [1.00, 1.55] against 1 is a tie even when its unrounded low end is 1.004."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return "tie"
    lo, hi = _printed(lo, digits), _printed(hi, digits)
    return "above" if lo > threshold else "below" if hi < threshold else "tie"


def apart(a: dict, b: dict, digits: int = DIGITS) -> str:
    """Two intervals ({lo, hi} each) as printed: 'above' (a's lies wholly above b's), 'below',
    or 'tie' (they overlap, or either has none). What 'the gap narrows' or 'the best budget
    falls' must rest on: two ties, or two overlapping intervals, tell no movement apart."""
    if any(v is None or math.isnan(v) for v in (a["lo"], a["hi"], b["lo"], b["hi"])):
        return "tie"
    return ("above" if _printed(a["lo"], digits) > _printed(b["hi"], digits) else
            "below" if _printed(a["hi"], digits) < _printed(b["lo"], digits) else "tie")


def versus(a: float, b: float, digits: int = DIGITS) -> str:
    """Two point values with no interval (one generation's tau over all rounds and outside its
    loop): 'above', 'below' or 'tie' as printed with ``digits`` decimals. 9.71 vs 10.00 is
    'below', so 9.71 is never called inflated beside a 10.00."""
    pa, pb = _printed(a, digits), _printed(b, digits)
    return "above" if pa > pb else "below" if pa < pb else "tie"


def interval_text(r: dict, digits: int = 3, unit: str = "") -> str:
    """'1.141x [1.10, 1.18]': the ratio with ``digits`` (enough that no rounding decides a
    verdict) and its interval ('1.141x' alone without one)."""
    text = f"{r['ratio']:.{digits}f}{unit}"
    return text if math.isnan(r["lo"]) else f"{text} [{r['lo']:.{DIGITS}f}, {r['hi']:.{DIGITS}f}]"


def axis_verdict(axis: str, a: str, b: str, value_a: str, value_b: str, r: dict) -> str:
    """One axis of a comparison of ``a`` over ``b`` (r: ``pooled_ratio`` of a over b, or any
    {ratio, lo, hi}): 'tau: DDTree-64 wins (DDTree-64 6.16 vs DFlash 4.84; ratio 1.274x [1.20,
    1.35])', 'tokens/s: DFlash wins (...)', or 'tokens/s: a tie (...; the interval holds 1)'."""
    side = decide(r["lo"], r["hi"])
    head = {"above": f"{a} wins", "below": f"{b} wins", "tie": "a tie"}[side]
    note = "; the interval holds 1" if side == "tie" and not math.isnan(r["lo"]) else (
        "; no interval (too few prompts)" if math.isnan(r["lo"]) else "")
    return f"{axis}: {head} ({a} {value_a} vs {b} {value_b}; ratio {interval_text(r, unit='x')}{note})"


# ----------------------------------------------------------------------------- per-prompt sums of a results frame

def prompt_sums(frame: pd.DataFrame) -> pd.DataFrame:
    """Per stored row (one config x prompt) the sums every pooled number is made of: acc_sum,
    acc_n (accepted lengths over rounds: tau = acc_sum / acc_n), tokens, seconds (tokens/s =
    tokens / seconds), beside the row's own columns (``_metrics`` dropped)."""
    sums = pd.DataFrame([{"acc_sum": float(sum(m["acceptance_lengths"])), "acc_n": len(m["acceptance_lengths"]),
                          "tokens": len(m["tokens"]), "seconds": float(m["timings"]["total"])}
                         for m in frame["_metrics"]], index=frame.index)
    return pd.concat([frame.drop(columns=["_metrics"]), sums], axis=1)


def compare_configs(sums: pd.DataFrame, a: dict, b: dict) -> dict[str, dict]:
    """Config ``a`` over config ``b`` (each a {column: value} selection of ``prompt_sums`` rows),
    paired by prompt (prompts both ran): {"tau": pooled_ratio, "tokens_per_s": pooled_ratio}."""
    pick = lambda sel: sums.loc[np.logical_and.reduce([sums[k] == v for k, v in sel.items()])].set_index("prompt")  # noqa: E731
    ra, rb = pick(a), pick(b)
    shared = sorted(set(ra.index) & set(rb.index))
    ra, rb = ra.loc[shared], rb.loc[shared]
    return {"tau": pooled_ratio(ra.acc_sum, ra.acc_n, rb.acc_sum, rb.acc_n),
            "tokens_per_s": pooled_ratio(ra.tokens, ra.seconds, rb.tokens, rb.seconds)}
