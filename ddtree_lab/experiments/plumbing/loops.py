"""Repetition loops: detect them, tag rounds by them, and split every metric by them.

A small target decoded greedily falls into loops, and a loop is trivially predictable, so
a measurement that mixes loops and text measures loops (docs/background.md section 8). The
definition used everywhere in the lab: a token sequence is *looping* when its last
``window`` tokens are periodic with a period of at most ``max_period``.
"""
from __future__ import annotations

from collections.abc import Sequence

WINDOW = 48
MAX_PERIOD = 24


def _check_loop_args(window: int, max_period: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise ValueError(f"window must be an int >= 2, got {window!r}")
    if isinstance(max_period, bool) or not isinstance(max_period, int) or not 1 <= max_period < window:
        raise ValueError(f"max_period must be an int in [1, window - 1 = {window - 1}], got {max_period!r}")


def loop_period(tokens: Sequence[int], window: int = WINDOW, max_period: int = MAX_PERIOD) -> int:
    """The smallest period p <= max_period of the last ``window`` tokens, or 0 if none
    (or if there are fewer than ``window`` tokens)."""
    _check_loop_args(window, max_period)
    tail = list(tokens)[-window:]
    if len(tail) < window:
        return 0
    for p in range(1, max_period + 1):
        if all(tail[i] == tail[i - p] for i in range(p, window)):
            return p
    return 0


def is_looping(tokens: Sequence[int], window: int = WINDOW, max_period: int = MAX_PERIOD) -> bool:
    """True when the last ``window`` tokens repeat with a period <= ``max_period``."""
    return loop_period(tokens, window, max_period) > 0


def round_loop_flags(prompt_ids: Sequence[int], tokens: Sequence[int], acceptance_lengths: Sequence[int],
                     window: int = WINDOW, max_period: int = MAX_PERIOD) -> list[bool]:
    """One flag per round: was the context (prompt + tokens committed so far) looping when
    the round started? Round r starts after sum(acceptance_lengths[:r]) new tokens."""
    context, flags, done = list(prompt_ids), [], 0
    for n in acceptance_lengths:
        flags.append(is_looping(context + list(tokens[:done]), window, max_period))
        done += n
    return flags


def loop_split(acceptance_lengths: Sequence[int], flags: Sequence[bool]) -> dict:
    """tau over all rounds, over rounds outside loops, and the share of rounds in loops.

    -> {"tau": float, "tau_outside_loops": float (nan if every round loops),
        "loop_round_share": float, "rounds": int, "rounds_outside_loops": int}
    """
    if len(acceptance_lengths) != len(flags):
        raise ValueError(f"flags must have one entry per round ({len(acceptance_lengths)}), got {len(flags)}")
    outside = [a for a, f in zip(acceptance_lengths, flags) if not f]
    n = len(acceptance_lengths)
    return {"tau": sum(acceptance_lengths) / n if n else float("nan"),
            "tau_outside_loops": sum(outside) / len(outside) if outside else float("nan"),
            "loop_round_share": (n - len(outside)) / n if n else float("nan"),
            "rounds": n, "rounds_outside_loops": len(outside)}


def distinct_ngram_share(tokens: Sequence[int], n: int = 4) -> float:
    """Distinct n-grams / all n-grams of ``tokens`` (1.0: no repetition; nan if too short)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else float("nan")
