"""Timing ratios with their spread: paired repeats, the median ratio, a 95% interval and a sign test.

Every timing ratio the README shows is measured as pairs (a_i, b_i) timed back to back in
the same repeat (configs interleaved, so machine noise hits both alike), and reported as

    median of r_i = a_i / b_i            the ratio
    [r_(k), r_(n+1-k)]                   the order-statistic interval of that median: k is the
                                         largest rank with 2 P(Binomial(n, 1/2) < k) <= 1 - level,
                                         so it covers the true median with probability >= level,
                                         whatever the distribution of r (no resampling: the
                                         same numbers give the same interval)
    p_sign                               two-sided sign test of "a is slower as often as it is
                                         faster" (ties dropped)

A ratio whose interval contains 1 is inside the noise and is labelled so (``within_noise``).
With fewer than 6 pairs no 95% interval exists (lo = hi = NaN); ``MIN_REPEATS`` (10) is what
the README's measurements use.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MIN_REPEATS = 10
LEVEL = 0.95


def _binom_cdf_half(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n if k >= 0 else 0.0


def median_interval_rank(n: int, level: float = LEVEL) -> int:
    """k (1-based) of the order-statistic interval [r_(k), r_(n+1-k)] of a median of n values,
    the largest k with coverage 1 - 2 P(Bin(n, 1/2) <= k - 1) >= level; 0 when none exists."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    k = 0
    while k + 1 <= (n + 1) // 2 and 2 * _binom_cdf_half(k, n) <= 1 - level:
        k += 1
    return k


def sign_test(ratios: Sequence[float], null: float = 1.0) -> float:
    """Two-sided sign-test p-value of median(ratios) == null (ties with ``null`` dropped; 1.0 if none left)."""
    r = np.asarray(ratios, dtype=float)
    above, below = int((r > null).sum()), int((r < null).sum())
    n = above + below
    return 1.0 if n == 0 else min(1.0, 2 * _binom_cdf_half(min(above, below), n))


def paired_ratio(num: Sequence[float], den: Sequence[float], level: float = LEVEL) -> dict:
    """Spread of num / den over paired repeats (num[i] and den[i] timed in the same repeat).

    -> {"n", "median", "lo", "hi" (NaN below 6 pairs), "p_sign", "within_noise" (the
    interval contains 1; None without an interval)}.
    """
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if num.shape != den.shape or num.ndim != 1 or not len(num):
        raise ValueError(f"num and den must be 1-D of one non-zero length, got {num.shape} and {den.shape}")
    r = np.sort(num / den)
    n, k = len(r), median_interval_rank(len(r), level)
    lo, hi = (float(r[k - 1]), float(r[n - k])) if k else (math.nan, math.nan)
    return {"n": n, "median": float(np.median(r)), "lo": lo, "hi": hi, "p_sign": sign_test(r),
            "within_noise": (lo <= 1.0 <= hi) if k else None}


def ratio_columns(name: str, num: Sequence[float], den: Sequence[float], level: float = LEVEL) -> dict:
    """Table columns of one paired ratio: name (median), name_lo, name_hi, name_p (sign test)."""
    s = paired_ratio(num, den, level)
    return {name: s["median"], f"{name}_lo": s["lo"], f"{name}_hi": s["hi"], f"{name}_p": s["p_sign"]}


def format_ratio(median: float, lo: float = math.nan, hi: float = math.nan, percent: bool = False,
                 digits: int = 2) -> str:
    """'1.42x [1.35, 1.50]', '0.99x [0.97, 1.02] noise' (the interval contains 1), '5.4% [5.0, 5.9]';
    without an interval (NaN) the median alone. percent: shares, never labelled noise."""
    scale, unit = (100.0, "%") if percent else (1.0, "x")
    digits = 1 if percent else digits
    text = f"{scale * median:.{digits}f}{unit}"
    if math.isnan(lo) or math.isnan(hi):
        return text
    text += f" [{scale * lo:.{digits}f}, {scale * hi:.{digits}f}]"
    shown_lo, shown_hi = float(f"{lo:.{digits}f}"), float(f"{hi:.{digits}f}")   # verdicts.decide's rule:
    return text + (" noise" if not percent and shown_lo <= 1.0 <= shown_hi else "")   # the ends as printed


def format_ratio_columns(row, name: str, percent: bool = False) -> str:
    """``format_ratio`` of a row (a Series or dict) holding name, name_lo and name_hi (the
    interval left out when the row has no such columns: an older stored file)."""
    return format_ratio(float(row[name]), float(row.get(f"{name}_lo", math.nan)),
                        float(row.get(f"{name}_hi", math.nan)), percent)


def pooled_ratio(num_sum, num_n, den_sum, den_n, level: float = LEVEL, draws: int = 4000,
                 seed: int = 0) -> dict:
    """A ratio of two pooled rates, (sum num_sum / sum num_n) / (sum den_sum / sum den_n), over
    prompts (array-likes [P], aligned by prompt: a prompt's two sides are a pair), with the
    percentile interval of that same pooled ratio over prompts drawn with replacement (``draws``
    resamples, a fixed ``seed``: the same numbers give the same interval). Tau ratios (accepted
    lengths over rounds), tokens/s ratios (tokens over seconds), continuation-rate ratios (nodes
    going on over nodes) are all this shape. -> {ratio, lo, hi, prompts} (lo = hi = NaN with
    fewer than 2 prompts)."""
    parts = [np.asarray(v, dtype=float) for v in (num_sum, num_n, den_sum, den_n)]
    if len({p.shape for p in parts}) != 1 or parts[0].ndim != 1:
        raise ValueError(f"the four arrays must be 1-D of one length, got {[p.shape for p in parts]}")
    a, n, b, m = parts
    ratio = (a.sum() / n.sum()) / (b.sum() / m.sum()) if n.sum() and m.sum() and b.sum() else math.nan
    if len(a) < 2:
        return {"ratio": float(ratio), "lo": math.nan, "hi": math.nan, "prompts": len(a)}
    rng = np.random.default_rng(seed)
    w = rng.multinomial(len(a), np.full(len(a), 1 / len(a)), size=draws)   # [draws, P] prompt multiplicities
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (w @ a / (w @ n)) / (w @ b / (w @ m))
    r = r[np.isfinite(r)]
    lo, hi = np.quantile(r, [(1 - level) / 2, (1 + level) / 2]) if len(r) else (math.nan, math.nan)
    return {"ratio": float(ratio), "lo": float(lo), "hi": float(hi), "prompts": len(a)}
